//! Joining a cluster: members started together all join (each waits its
//! turn while another membership change is committed), on a loaded
//! machine no member is marked failed for the time it takes to start, and
//! a member forgotten leaves its address to a new member at once.

use std::time::Duration;

use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_proto::ShardMap;
use test_support::FabricGuard;

mod support;

use support::{group_view, member_process, ServerProcess};

fn control(fabric: &str) -> ControlClient {
    let opts = ControlOptions {
        setup_timeout: Duration::from_secs(5),
        call_timeout: Duration::from_secs(5),
        ..ControlOptions::default()
    };
    ControlClient::new(&support::client_device(fabric), opts).unwrap()
}

/// Starts member 0, `settle` later `n` members joining it at once, and
/// waits until all are members that are up.
fn start_together(
    tag: &str,
    n: usize,
    settle: Duration,
) -> (FabricGuard, test_support::TempDir, Vec<ServerProcess>) {
    // Declared first, dropped last: after the servers, also on a panic.
    let guard = FabricGuard::unique("kvs-join", tag);
    let fabric = guard.name().to_string();
    let root = support::temp_dir(tag);
    let first = member_process(&fabric, &root.join("m0"), "127.0.0.1:0", 2, None);
    let at = first.addr;
    std::thread::sleep(settle);
    let joiners: Vec<_> = (1..=n)
        .map(|i| {
            let (fabric, dir) = (fabric.clone(), root.join(format!("m{i}")));
            std::thread::spawn(move || member_process(&fabric, &dir, "127.0.0.1:0", 2, Some(at)))
        })
        .collect();
    let mut procs = vec![first];
    for j in joiners {
        procs.push(j.join().expect("every member started together joins"));
    }
    let mut cc = control(&fabric);
    test_support::wait_until(
        "every member up in the group",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || {
            group_view(&mut cc, at).is_some_and(|g| {
                g.members.len() == n + 1 && g.members.iter().all(|m| m.state == "up")
            })
        },
    );
    (guard, root, procs)
}

#[test]
fn members_started_together_all_join() {
    let (_fabric, _root, procs) = start_together("together", 4, Duration::ZERO);
    let out: Vec<String> = procs.into_iter().map(ServerProcess::output).collect();
    for (i, o) in out.iter().enumerate().skip(1) {
        assert!(o.contains("joined cluster"), "member {i}: {o}");
    }
}

#[test]
fn no_member_is_marked_failed_for_joining_on_a_loaded_machine() {
    // Two spinning threads per core: the members start, connect and open
    // their logs slowly.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let load: Vec<_> = (0..2 * cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    // Member 0 has led for a while when they join (as when members are
    // started a second apart).
    let (_fabric, _root, procs) = start_together("loaded", 2, Duration::from_millis(1500));
    // A while more under load, as the members settle.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in load {
        let _ = t.join();
    }
    let out: Vec<String> = procs.into_iter().map(ServerProcess::output).collect();
    let marks: Vec<&str> = out
        .iter()
        .flat_map(|o| o.lines())
        .filter(|l| l.contains("is marked failed"))
        .collect();
    assert!(
        marks.is_empty(),
        "members marked failed while joining:\n{}\n---\n{}",
        marks.join("\n"),
        out.join("\n---\n")
    );
}

/// `req` to the member at `at`, then to the leader it names, asked again
/// while there is none or it says not yet (for 10 s).
fn to_leader(
    cc: &mut ControlClient,
    at: std::net::SocketAddr,
    req: &ControlRequest,
) -> ControlReply {
    let (mut to, t) = (at, std::time::Instant::now());
    loop {
        match cc.request(to, req).expect("the member answers") {
            ControlReply::Keeper { addr } => to = addr,
            r @ (ControlReply::NoLeader | ControlReply::NotYet { .. }) => {
                assert!(t.elapsed() < Duration::from_secs(10), "{req:?}: {r:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

#[test]
fn a_forgotten_members_address_takes_a_new_member_at_once() {
    // A member's data dir is lost: the operator forgets it and starts a
    // new member at its address as soon as `forget` answers.
    let (fabric, _root, mut procs) = start_together("forget", 2, Duration::ZERO);
    let (at, lost) = (procs[0].addr, procs[2].addr);
    let mut cc = control(fabric.name());
    let view = group_view(&mut cc, at).expect("member 0 answers");
    let old = view
        .members
        .iter()
        .find(|m| m.addr == lost)
        .expect("a member")
        .id;
    procs[2].kill9();
    let forget = ControlRequest::Forget {
        member: old,
        force: false,
    };
    assert_eq!(to_leader(&mut cc, at, &forget), ControlReply::Ok);
    let ControlReply::Map { map } = to_leader(&mut cc, at, &ControlRequest::Map) else {
        panic!("no map")
    };
    let join = ControlRequest::Join {
        addr: lost,
        workers: 2,
        slots: ShardMap::decode(&map).expect("a map").slots(),
        bulk_port: 0,
        zone: None,
    };
    match to_leader(&mut cc, at, &join) {
        ControlReply::Joined { member, .. } => assert!(member > old),
        r => panic!("a join at {lost} right after forget {old} answered: {r:?}"),
    }
    drop(procs);
}
