//! Several servers under one shard map: joining, map distribution, status,
//! and clients that bootstrap from any member.

use std::net::SocketAddr;

use kvs_client::{ControlClient, ControlOptions, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus};
use kvs_server::{Config, Server, StartError};
use mlx5::sim::fabric::Fabric;

mod support;

fn config(fabric: &str, workers: u16, join: Option<SocketAddr>) -> Config {
    Config {
        workers,
        slots: 256,
        join: join.map(|a| a.to_string()),
        ..support::test_config(fabric)
    }
}

fn control(fabric: &str) -> ControlClient {
    let dev = copyrpc::transport::DeviceSpec {
        name: "sim0",
        fabric: Some(fabric),
        software: "sim0",
    }
    .open()
    .unwrap();
    ControlClient::new(&dev, ControlOptions::default()).unwrap()
}

fn status(cc: &mut ControlClient, addr: SocketAddr) -> MemberStatus {
    match cc.request(addr, &ControlRequest::Status).unwrap() {
        ControlReply::Status(s) => s,
        other => panic!("{other:?}"),
    }
}

#[test]
fn servers_join_and_every_member_learns_the_map() {
    let fabric = format!("kvs-cluster-join-{}", std::process::id());
    let a = Server::start(config(&fabric, 2, None)).unwrap();
    assert_eq!((a.member(), a.map_version()), (0, 1));
    let b = Server::start(config(&fabric, 2, Some(a.addr()))).unwrap();
    assert_eq!((b.member(), b.map_version()), (1, 2));
    // Through a member that is not the keeper: sent on to the keeper.
    let c = Server::start(config(&fabric, 1, Some(b.addr()))).unwrap();
    assert_eq!((c.member(), c.map_version()), (2, 3));
    // The keeper pushes version 3 to member 1.
    let t = std::time::Instant::now();
    while b.map_version() != 3 {
        assert!(t.elapsed().as_secs() < 20, "member 1 never got version 3");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut cc = control(&fabric);
    for (s, member, workers) in [(&a, 0, 2), (&b, 1, 2), (&c, 2, 1)] {
        let st = status(&mut cc, s.addr());
        assert_eq!((st.member, st.map_version), (member, 3));
        assert_eq!(st.workers.len(), workers);
        // The first server owns every slot until slots move.
        let slots: u32 = st.workers.iter().map(|w| w.slots).sum();
        assert_eq!(slots, if member == 0 { 256 } else { 0 });
    }

    // Data goes to the owner.
    let mut client = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    assert_eq!(client.map().version(), 3);
    assert_eq!(client.map().members().len(), 3);
    for i in 0..200u32 {
        let k = format!("key{i}");
        let r = client.wait_for(|c, t| c.put(k.as_bytes(), b"v", t));
        assert_eq!(r, Ok(OwnedReply::Done));
    }
    let keys: u64 = status(&mut cc, a.addr())
        .workers
        .iter()
        .map(|w| w.keys)
        .sum();
    assert!(keys <= 200);

    // A member that restarts at its address is the same member, and the
    // map does not change.
    let b_addr = b.addr();
    b.shutdown();
    let b = Server::start(Config {
        listen: b_addr,
        ..config(&fabric, 2, Some(a.addr()))
    })
    .unwrap();
    assert_eq!((b.member(), b.map_version()), (1, 3));
    // ... but not with another worker count.
    let c_addr = c.addr();
    c.shutdown();
    let e = Server::start(Config {
        listen: c_addr,
        ..config(&fabric, 3, Some(a.addr()))
    })
    .unwrap_err();
    assert!(
        matches!(&e, StartError::Join(m) if m.contains("member 2 with 1 workers")),
        "{e}"
    );
    drop(client);
    drop(cc);
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_join_that_cannot_succeed_says_why() {
    let fabric = format!("kvs-cluster-nojoin-{}", std::process::id());
    // Nobody listens there.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = l.local_addr().unwrap();
    drop(l);
    let e = Server::start(config(&fabric, 1, Some(nobody))).unwrap_err();
    assert!(
        matches!(&e, StartError::Join(m) if m.contains(&nobody.to_string())),
        "{e}"
    );
    let e = Server::start(Config {
        join: Some("no-such-host.invalid:7000".into()),
        ..config(&fabric, 1, None)
    })
    .unwrap_err();
    assert!(
        matches!(&e, StartError::Join(m) if m.contains("no-such-host")),
        "{e}"
    );
    Fabric::remove_if_unused(&fabric);
}
