//! A client that loses a member answers every request that was in flight
//! to it: none is dropped, none waits for its deadline.
//!
//! The client learns that a member is gone from the first call that fails
//! on one of its connections; it then removes the member's other
//! connections, which fails the calls still waiting there. Those failures
//! used to be dropped when the first one was followed from the client's
//! inbox (they arrived while the inbox was being emptied), and otherwise
//! reached the caller as "closed by this side" rather than being sent
//! again by the next map: a request that never came back, and failed with
//! `Timeout` after 5 s; or a YCSB driver that took the error for a lost
//! connection and stopped. Under a control leader's `kill -9` on a busy
//! machine, the first of these was what `ycsb-driver`'s failover test saw.
//!
//! Made deterministic here: member 1 is paused (SIGSTOP), so a GET sent
//! to its worker 1 is never answered (nor does its liveness channel close);
//! then the path from the client's device to member 1's is cut, so a GET
//! sent to its worker 0 fails at once. Both must come back, well before
//! their deadline, with the error of a member that cannot be reached.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use kvs_client::{ClientOptions, ControlClient, ControlOptions, KvError, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_proto::{MemberId, Owner};
use mlx5::sim::fabric::Fabric;
use test_support::FabricGuard;

mod support;

use support::ServerProcess;

/// Member 1's software device (`sim4`): its own, so the path to it alone
/// can be cut.
const MEMBER_1_DEV: u32 = 4;
/// The clients' device (`sim0`).
const CLIENT_DEV: u32 = 0;
/// The client's request deadline: what a dropped request would wait for.
const DEADLINE: Duration = Duration::from_secs(4);
/// How soon the requests must come back (a backoff and a map fetch).
const ANSWERED_WITHIN: Duration = Duration::from_secs(2);

/// A member process on device `device` of `fabric`, with two workers and
/// its data dir `dir`; it founds the cluster, or joins `join`.
fn member(fabric: &str, device: &str, dir: &Path, join: Option<SocketAddr>) -> ServerProcess {
    let dir = dir.to_str().expect("a UTF-8 path");
    let join = join.map(|a| a.to_string());
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--device",
        device,
        "--fabric",
        fabric,
        "--workers",
        "2",
        "--stats-interval",
        "0",
        "--data-dir",
        dir,
    ];
    match &join {
        Some(j) => args.extend(["--join", j]),
        None => args.push("--bootstrap"),
    }
    ServerProcess::start(&args)
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) -> Duration {
    test_support::wait_until(what, most, Duration::from_millis(10), done)
}

/// A key whose slot `owner` owns under `map`.
fn key_of(map: &kvs_proto::ShardMap, owner: Owner) -> String {
    (0..)
        .map(|i| format!("key{i}"))
        .find(|k| map.owner(k.as_bytes()) == owner)
        .expect("a key of every worker")
}

#[test]
fn requests_in_flight_to_a_lost_member_are_answered_not_dropped() {
    let fabric = FabricGuard::unique("kvs-lost-member", "calls");
    let dirs = [
        support::temp_dir("lost-member-0"),
        support::temp_dir("lost-member-1"),
    ];
    let a = member(fabric.name(), "sim1", &dirs[0], None);
    let b = member(fabric.name(), "sim4", &dirs[1], Some(a.addr));
    let opts = ControlOptions {
        setup_timeout: Duration::from_secs(5),
        call_timeout: Duration::from_secs(5),
        ..ControlOptions::default()
    };
    let mut cc = ControlClient::new(&support::client_device(fabric.name()), opts).unwrap();
    // Member 1 joined; half the slots move to it.
    wait("member 1 in the group", Duration::from_secs(30), || {
        support::group_view(&mut cc, a.addr).is_some_and(|g| g.members.len() == 2)
    });
    let slots = match cc.request(a.addr, &ControlRequest::Map).unwrap() {
        ControlReply::Map { map } => kvs_client::ShardMap::decode(&map).unwrap().slots(),
        other => panic!("{other:?}"),
    };
    let t = Instant::now();
    loop {
        let req = ControlRequest::Migrate {
            first: 0,
            end: slots / 2,
            to: MemberId(1),
        };
        match cc.request(a.addr, &req) {
            Ok(ControlReply::Started(_)) => break,
            // The group is still settling after the join.
            Ok(ControlReply::NoLeader | ControlReply::Keeper { .. }) | Err(_) => {}
            Ok(other) => panic!("{other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no migration");
        std::thread::sleep(Duration::from_millis(20));
    }
    wait("the migration", Duration::from_secs(60), || {
        support::member_status(&mut cc, a.addr)
            .and_then(|s| s.migration)
            .is_some_and(|m| {
                assert_eq!(m.error, None);
                m.finished
            })
    });

    let copts = ClientOptions {
        timeout: DEADLINE,
        ..ClientOptions::default()
    };
    let mut c = support::connect(a.addr, fabric.name(), copts).unwrap();
    let map = c.map().clone();
    let on = |worker| Owner {
        member: MemberId(1),
        worker,
    };
    let (k0, k1) = (key_of(&map, on(0)), key_of(&map, on(1)));
    // Connected to both of member 1's workers, with keys there.
    for k in [&k0, &k1] {
        let r = c.wait_for(|c, t| c.put(k.as_bytes(), b"v", t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }

    // Member 1 stops answering: a GET to its worker 1 is delivered and
    // waits there.
    b.pause(true);
    let mut answers: Vec<(u64, Result<OwnedReply, KvError>, Duration)> = Vec::new();
    let sent = Instant::now();
    c.get(k1.as_bytes(), 1).unwrap();
    for _ in 0..10 {
        c.poll(|t, r| answers.push((t, r.map(OwnedReply::from), sent.elapsed())));
    }
    assert!(answers.is_empty(), "a paused member answered: {answers:?}");
    // The way to member 1 breaks: a GET to its worker 0 fails, and tells
    // the client member 1 is lost.
    Fabric::open(fabric.name())
        .unwrap()
        .set_path_down(CLIENT_DEV, MEMBER_1_DEV, true)
        .unwrap();
    let sent = Instant::now();
    c.get(k0.as_bytes(), 0).unwrap();
    while answers.len() < 2 && sent.elapsed() < DEADLINE + Duration::from_secs(2) {
        c.wait(Duration::from_millis(10), |t, r| {
            answers.push((t, r.map(OwnedReply::from), sent.elapsed()))
        })
        .unwrap();
    }
    b.pause(false);
    answers.sort_by_key(|(t, ..)| *t);
    eprintln!("answers: {answers:?}");
    assert_eq!(
        answers.iter().map(|(t, ..)| *t).collect::<Vec<_>>(),
        [0, 1],
        "both requests come back: {answers:?}"
    );
    for (tag, r, after) in &answers {
        // Not dropped (a Timeout), nor failed as if the client had lost
        // its connection to the cluster: member 1 cannot be reached, and
        // its slots have no backup to move to.
        assert!(
            matches!(
                r,
                Err(KvError::Unreachable {
                    member: MemberId(1),
                    ..
                })
            ),
            "request {tag}: {r:?} after {after:?}"
        );
        assert!(*after < ANSWERED_WITHIN, "request {tag}: after {after:?}");
    }
    drop(c);
    drop(cc);
    drop(b);
    drop(a);
}
