//! A member cut off from the control group stops serving its slots within
//! its lease, before the group marks it failed, and serves again once the
//! partition heals. Kernel-bypass traffic passes no firewall, so the
//! partition is made where it flows: the member's software device takes its
//! port down, and every RDMA operation to or from it fails (the control
//! group's messages included).

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, ControlOptions, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

mod support;

/// A member on its own device `simN` (so that its port alone can go down).
fn config(fabric: &str, device: &str, join: Option<SocketAddr>) -> Config {
    Config {
        device: device.into(),
        slots: 256,
        member_timeout_ms: 1000,
        join: join.map(|a| a.to_string()),
        ..support::test_config(fabric)
    }
}

use support::group_view as view;

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) -> Duration {
    test_support::wait_until(what, most, Duration::from_millis(5), done)
}

#[test]
fn a_member_cut_off_stops_serving_within_its_lease_and_serves_again_after() {
    let fabric = format!("kvs-partition-{}", std::process::id());
    let a = Server::start(config(&fabric, "sim1", None)).unwrap();
    let b = Server::start(config(&fabric, "sim4", Some(a.addr()))).unwrap();
    let c = Server::start(config(&fabric, "sim5", Some(a.addr()))).unwrap();
    let opts = ControlOptions {
        setup_timeout: Duration::from_secs(2),
        call_timeout: Duration::from_secs(2),
        ..ControlOptions::default()
    };
    let mut cc = ControlClient::new(&support::client_device(&fabric), opts).unwrap();
    // Three voters, every member serving.
    wait("three voters", Duration::from_secs(10), || {
        view(&mut cc, a.addr()).is_some_and(|g| g.members.iter().all(|m| m.voter))
            && [&a, &b, &c].iter().all(|s| s.leased())
    });
    // Member 2 owns a quarter of the slots, and keys in them.
    match cc
        .request(
            a.addr(),
            &ControlRequest::Migrate {
                first: 0,
                end: 64,
                to: MemberId(2),
            },
        )
        .unwrap()
    {
        ControlReply::Started(_) => {}
        other => panic!("{other:?}"),
    }
    wait("the migration", Duration::from_secs(30), || {
        view(&mut cc, a.addr()).is_some()
            && match cc.request(a.addr(), &ControlRequest::Status) {
                Ok(ControlReply::Status(s)) => s.migration.is_some_and(|m| m.finished),
                _ => false,
            }
    });
    let mut client = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    let map = client.map().clone();
    let keys: Vec<String> = (0..200).map(|i| format!("key{i}")).collect();
    for k in &keys {
        let r = client.wait_for(|cl, t| cl.put(k.as_bytes(), k.as_bytes(), t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }
    let on_c: Vec<&String> = keys
        .iter()
        .filter(|k| map.owner(k.as_bytes()).member == MemberId(2))
        .collect();
    assert!(!on_c.is_empty());

    // Member 2's port goes down.
    let f = Fabric::open(&fabric).unwrap();
    f.set_port_down(5, true).unwrap();
    let cut = Instant::now();
    let lease = Duration::from_millis(400);
    let unleased = wait("member 2 losing its lease", Duration::from_secs(5), || {
        !c.leased()
    });
    let failed = wait(
        "the group marking member 2 failed",
        Duration::from_secs(10),
        || view(&mut cc, a.addr()).is_some_and(|g| g.members[2].state == "failed"),
    ) + unleased;
    assert!(
        unleased < failed,
        "member 2 served for {unleased:?} after the cut, and was marked failed after {failed:?}"
    );
    assert!(
        unleased <= lease + Duration::from_millis(300),
        "member 2 kept its lease for {unleased:?} after the cut (lease {lease:?})"
    );
    // The rest of the cluster goes on: members 0 and 1 serve, and their
    // keys read back through a new client.
    assert!(a.leased() && b.leased());
    drop(client);
    let mut client = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    for k in keys
        .iter()
        .filter(|k| map.owner(k.as_bytes()).member != MemberId(2))
    {
        let r = client.wait_for(|cl, t| cl.get(k.as_bytes(), t));
        assert_eq!(r, Ok(OwnedReply::Value(k.as_bytes().to_vec())), "{k}");
    }

    // Healed: member 2 hears from the leader again, is marked up, serves,
    // and still holds its records (it never died).
    f.set_port_down(5, false).unwrap();
    let healed = wait("member 2 serving again", Duration::from_secs(20), || {
        c.leased() && view(&mut cc, a.addr()).is_some_and(|g| g.members[2].state == "up")
    });
    drop(client);
    let mut client = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    for k in &on_c {
        let r = client.wait_for(|cl, t| cl.get(k.as_bytes(), t));
        assert_eq!(r, Ok(OwnedReply::Value(k.as_bytes().to_vec())), "{k}");
    }
    eprintln!(
        "partition: lease lost {unleased:?} after the cut, marked failed after {failed:?}, \
         serving again {healed:?} after the heal (cut at {:?} ago)",
        cut.elapsed()
    );
    drop((client, cc, f));
    c.shutdown();
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}
