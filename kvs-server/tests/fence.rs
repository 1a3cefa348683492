//! The fence: a primary cut off from the control group cannot get a write
//! acknowledged once the group has promoted its backup, even if it goes on
//! serving (here it is made to keep its lease, as a clock gone wrong would:
//! the backup's refusal is then all that stops it). The promoted backup
//! keeps the last acknowledged value.

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::time::Duration;

use kvs_client::{ClientOptions, ControlClient, ControlOptions, KvError, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

mod support;
use support::group_view as view;

fn config(fabric: &str, join: Option<SocketAddr>) -> Config {
    Config {
        slots: 256,
        replicas: 2,
        join: join.map(|a| a.to_string()),
        ..support::test_config(fabric)
    }
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) -> Duration {
    test_support::wait_until(what, most, Duration::from_millis(5), done)
}

#[test]
fn a_deposed_primary_gets_no_write_acknowledged() {
    let fabric = format!("kvs-fence-{}", std::process::id());
    let a = Server::start(config(&fabric, None)).unwrap();
    let b = Server::start(config(&fabric, Some(a.addr()))).unwrap();
    let c = Server::start(config(&fabric, Some(a.addr()))).unwrap();
    let mut cc =
        ControlClient::new(&support::client_device(&fabric), ControlOptions::default()).unwrap();
    wait("three voters", Duration::from_secs(10), || {
        view(&mut cc, a.addr()).is_some_and(|g| g.members.iter().all(|m| m.voter))
    });
    let r = cc.request(a.addr(), &ControlRequest::Rebalance).unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
    wait("every slot on two members", Duration::from_secs(30), || {
        view(&mut cc, a.addr()).is_some_and(|g| g.under_replicated_slots == 0)
            && support::member_status(&mut cc, a.addr())
                .and_then(|s| s.migration)
                .is_some_and(|m| m.finished)
            && [&a, &b, &c]
                .iter()
                .all(|s| s.map_version() == a.map_version())
    });
    // A key of member 2's, written once and acknowledged.
    let mut ca = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    let key = (0..)
        .map(|i| format!("fence{i}"))
        .find(|k| ca.map().owner(k.as_bytes()).member == MemberId(2))
        .unwrap();
    let slot = kvs_proto::shard::slot_of(key.as_bytes(), ca.map().slots());
    let heir = ca.map().backups(slot)[0].owner.member;
    let r = ca.wait_for(|cl, t| cl.put(key.as_bytes(), b"acknowledged", t));
    assert_eq!(r, Ok(OwnedReply::Done));
    drop(ca);
    // A client that reaches member 2 (and keeps its map).
    let opts = ClientOptions {
        timeout: Duration::from_secs(2),
        ..ClientOptions::default()
    };
    let mut cp = support::connect(c.addr(), &fabric, opts).unwrap();
    assert_eq!(cp.map().owner(key.as_bytes()).member, MemberId(2));

    // Member 2 is cut off from the group, and keeps serving regardless.
    c.inject(true, true);
    wait("member 2 failed over", Duration::from_secs(10), || {
        view(&mut cc, a.addr()).is_some_and(|g| g.members[2].state == "failed")
    });
    let mut ca = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    assert_eq!(ca.map().owner(key.as_bytes()).member, heir);
    wait("the heir serving the slot", Duration::from_secs(10), || {
        ca.wait_for(|cl, t| cl.get(key.as_bytes(), t))
            == Ok(OwnedReply::Value(b"acknowledged".to_vec()))
    });

    // The deposed primary takes the write and applies it, but its backup,
    // now the slot's primary, refuses it: not acknowledged.
    let r = cp.wait_for(|cl, t| cl.put(key.as_bytes(), b"deposed", t));
    match r {
        Err(KvError::Unavailable(m)) => assert!(m.contains("did not apply"), "{m}"),
        Err(KvError::Timeout(_)) => {}
        other => panic!("a deposed primary's write: {other:?}"),
    }
    let got = ca.wait_for(|cl, t| cl.get(key.as_bytes(), t));
    assert_eq!(got, Ok(OwnedReply::Value(b"acknowledged".to_vec())));

    // Healed, member 2 follows the group again and serves by its map.
    c.inject(false, false);
    wait("member 2 up again", Duration::from_secs(20), || {
        view(&mut cc, a.addr()).is_some_and(|g| g.members[2].state == "up")
    });
    let got = ca.wait_for(|cl, t| cl.get(key.as_bytes(), t));
    assert_eq!(got, Ok(OwnedReply::Value(b"acknowledged".to_vec())));
    drop((cp, ca, cc));
    c.shutdown();
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}
