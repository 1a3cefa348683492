//! Every member killed at once: three member processes keeping two copies
//! of every slot, `durability = "always"`, loaded by clients that record
//! their history; `kill -9` of all three in one go, in the middle of the
//! load, and all three started again from their data dirs. With no copy
//! left in any memory, every acknowledged write must come back from the
//! members' logs: every preloaded record reads back, the history passes
//! (no acknowledged write lost, no stale read), every slot has its two
//! copies again, and the members and a new client agree on one map.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kvs_client::{ControlClient, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, GroupView};
use kvs_proto::MemberId;
use mlx5::sim::fabric::Fabric;

#[path = "support/history.rs"]
mod history;
#[path = "support/load.rs"]
mod load;
mod support;

use history::History;
use support::{group_view, member_status, ServerProcess};

fn member(fabric: &str, dir: &Path, listen: &str, join: Option<SocketAddr>) -> ServerProcess {
    support::member_process_with(
        fabric,
        dir,
        listen,
        2,
        join,
        &["--replicas", "2", "--durability", "always"],
    )
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) -> Duration {
    test_support::wait_until(what, most, Duration::from_millis(10), done)
}

/// Preloaded records: `p{i}`, some overwritten and some deleted after.
fn preloaded(i: u32) -> (String, Option<Vec<u8>>) {
    let k = format!("p{i}");
    match i % 10 {
        0 => (k, None),
        3 => (k, Some(format!("{i} again").into_bytes())),
        _ => (k, Some(format!("{i}:{}", "y".repeat(100)).into_bytes())),
    }
}

/// Whether every member answers, all under one leader and one map, each
/// holding its lease, every slot with its two copies ready.
fn healthy(cc: &mut ControlClient, addrs: &[SocketAddr]) -> Option<(MemberId, u32)> {
    let mut seen = None;
    for &a in addrs {
        let s = member_status(cc, a)?;
        let g: &GroupView = s.group.as_ref()?;
        let ok = g.lease
            && g.applied == g.commit
            && g.under_replicated_slots == 0
            && g.members.iter().all(|m| m.state == "up");
        let this = (g.leader?, s.map_version);
        if !ok || seen.is_some_and(|v| v != this) {
            return None;
        }
        seen = Some(this);
    }
    seen
}

#[test]
fn every_member_killed_at_once_loses_no_acknowledged_write() {
    let fabric = format!("kvs-kill-all-{}", std::process::id());
    let root = support::temp_dir("kill-all");
    let dirs: Vec<PathBuf> = (0..3).map(|m| root.join(format!("m{m}"))).collect();
    let a = member(&fabric, &dirs[0], "127.0.0.1:0", None);
    let b = member(&fabric, &dirs[1], "127.0.0.1:0", Some(a.addr));
    let c = member(&fabric, &dirs[2], "127.0.0.1:0", Some(a.addr));
    let addrs = [a.addr, b.addr, c.addr];
    let mut procs = [Some(a), Some(b), Some(c)];
    let mut cc = support::control_client(&fabric);
    wait("three members", Duration::from_secs(20), || {
        group_view(&mut cc, addrs[0]).is_some_and(|g| g.members.len() == 3)
    });
    let r = cc.request(addrs[0], &ControlRequest::Rebalance).unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
    wait(
        "the rebalance, every copy ready",
        Duration::from_secs(90),
        || healthy(&mut cc, &addrs).is_some(),
    );

    // Records written, overwritten and deleted, all acknowledged.
    let mut c = support::connect(addrs[0], &fabric, Default::default()).unwrap();
    for i in 0..2000 {
        let k = format!("p{i}");
        let v = format!("{i}:{}", "y".repeat(100)).into_bytes();
        assert_eq!(
            c.wait_for(|c, t| c.put(k.as_bytes(), &v, t)),
            Ok(OwnedReply::Done)
        );
    }
    for i in 0..2000 {
        let (k, v) = preloaded(i);
        let r = match (i % 10, v) {
            (0, _) => c.wait_for(|c, t| c.delete(k.as_bytes(), t)),
            (3, Some(v)) => c.wait_for(|c, t| c.put(k.as_bytes(), &v, t)),
            _ => continue,
        };
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }
    drop(c);

    // Load recorded in a history, and every member killed in its midst.
    let h = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = (0..2)
        .map(|t| {
            let via = addrs[t as usize + 1];
            load::load(h.clone(), via, fabric.clone(), t * 100, 100, stop.clone())
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    for p in procs.iter().flatten() {
        // SAFETY: kill(2) with pids this process spawned and has not reaped.
        unsafe {
            libc::kill(p.child.id() as libc::pid_t, libc::SIGKILL);
        }
    }
    for p in &mut procs {
        p.take().unwrap().kill9();
    }
    stop.store(true, Ordering::Release);
    for l in loads {
        l.join().unwrap();
    }

    // All three again, from their data dirs, at their addresses.
    for m in [2, 0, 1] {
        let at = addrs[m].to_string();
        procs[m] = Some(member(&fabric, &dirs[m], &at, None));
    }
    let t = std::time::Instant::now();
    while healthy(&mut cc, &addrs).is_none() {
        if t.elapsed() > Duration::from_secs(90) {
            let out: Vec<String> = procs.iter().flatten().map(ServerProcess::printed).collect();
            let g = group_view(&mut cc, addrs[0]);
            panic!(
                "not healthy within 90 s of the restarts: {g:#?}\n{}",
                out.join("\n---\n")
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let healed = t.elapsed();
    let (leader, version) = healthy(&mut cc, &addrs).expect("a healthy cluster");
    let out: Vec<String> = procs.iter().flatten().map(ServerProcess::printed).collect();
    for (m, o) in out.iter().enumerate() {
        assert!(
            o.contains("recovered from"),
            "member {m} replayed no log:\n{o}"
        );
    }

    // A new client: the map the members serve by, and every record.
    let mut c = support::connect(addrs[1], &fabric, Default::default()).unwrap();
    wait("the client's map", Duration::from_secs(10), || {
        c.map().version() >= version
    });
    let map = c.map().clone();
    assert_eq!(map.version(), version);
    for s in 0..map.slots() {
        let owner = map.owner_of_slot(s).member;
        let backups = map.backups(s);
        assert!(
            backups.len() == 1 && backups[0].ready && backups[0].owner.member != owner,
            "slot {s}: owner {owner}, backups {backups:?}"
        );
    }
    for i in (0..2000).filter(|i| preloaded(*i).1.is_none()) {
        let k = format!("p{i}");
        let got = c.wait_for(|c, t| c.get(k.as_bytes(), t));
        assert_eq!(got, Ok(OwnedReply::NotFound), "{k} was deleted");
    }
    let present = (0..2000).filter_map(|i| match preloaded(i) {
        (k, Some(v)) => Some((k, v)),
        (_, None) => None,
    });
    let s = load::read_back(&mut c, &h, 200, present);
    assert!(s.writes_ok > 50, "too little load before the kill: {s:?}");
    eprintln!(
        "kill_all: healthy {healed:?} after the restarts (leader {leader}, map {version}); \
         history: {s:?}"
    );
    drop(c);
    for p in &mut procs {
        drop(p.take());
    }
    Fabric::remove_if_unused(&fabric);
}
