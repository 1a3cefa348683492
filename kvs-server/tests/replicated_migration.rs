//! Migrations with replicas: each chunk is copied to its target as one
//! more backup while its primary serves on, then handed over, so no slot
//! ever has fewer ready copies than `replicas` asks for. Two members keep
//! two copies of every slot; a third joins and a rebalance under load
//! (recorded in a history) moves slots to it while the group's
//! `under_replicated_slots` is watched: it must stay 0 from start to end,
//! and at the end every member backs up about as many slots as the others.
//! Then the new member is killed (`kill -9`): the slots it took fail over
//! to their backups, and no acknowledged write is lost, no read is stale.

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest};
use mlx5::sim::fabric::Fabric;

#[path = "support/history.rs"]
mod history;
#[path = "support/load.rs"]
mod load;
mod support;

use history::History;
use load::{load, read_back};
use support::{group_view, member_status, ServerProcess};

fn member(fabric: &str, dir: &Path, join: Option<SocketAddr>) -> ServerProcess {
    support::member_process_with(fabric, dir, "127.0.0.1:0", 2, join, &["--replicas", "2"])
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) -> Duration {
    test_support::wait_until(what, most, Duration::from_millis(5), done)
}

fn preloaded(i: u32) -> (String, Vec<u8>) {
    (
        format!("p{i}"),
        format!("{i}:{}", "m".repeat(300)).into_bytes(),
    )
}

#[test]
fn a_rebalance_keeps_every_slot_replicated_and_its_target_may_die() {
    let fabric = format!("kvs-repl-mig-{}", std::process::id());
    let root = support::temp_dir("repl-mig");
    let a = member(&fabric, &root.join("a"), None);
    let b = member(&fabric, &root.join("b"), Some(a.addr));
    let mut cc = support::control_client(&fabric);
    let synced = |cc: &mut ControlClient, n: usize| {
        group_view(cc, a.addr).is_some_and(|g| {
            g.members.len() == n
                && g.members.iter().all(|m| m.state == "up")
                && g.under_replicated_slots == 0
        })
    };
    wait("member 1's copies ready", Duration::from_secs(60), || {
        synced(&mut cc, 2)
    });
    let preload = 3000;
    let mut loader = support::connect(a.addr, &fabric, Default::default()).unwrap();
    for i in 0..preload {
        let (k, v) = preloaded(i);
        let r = loader.wait_for(|c, t| c.put(k.as_bytes(), &v, t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }

    let h = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = (0..2)
        .map(|t| {
            load(
                h.clone(),
                a.addr,
                fabric.clone(),
                t * 100,
                100,
                stop.clone(),
            )
        })
        .collect();
    let mut c = member(&fabric, &root.join("c"), Some(a.addr));
    wait("member 2 joined", Duration::from_secs(30), || {
        synced(&mut cc, 3)
    });
    std::thread::sleep(Duration::from_millis(300));

    let r = cc.request(a.addr, &ControlRequest::Rebalance).unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
    let t = Instant::now();
    let (mut most_short, mut looks) = (0u32, 0u32);
    let status = loop {
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "the rebalance did not end"
        );
        if let Some(g) = group_view(&mut cc, a.addr) {
            most_short = most_short.max(g.under_replicated_slots);
            looks += 1;
        }
        match member_status(&mut cc, a.addr).and_then(|s| s.migration) {
            Some(m) if m.finished => break m,
            _ => std::thread::sleep(Duration::from_millis(2)),
        }
    };
    let took = t.elapsed();
    assert_eq!(status.error, None, "{status:?}");
    // The copies to the target count as the migration's records.
    assert!(status.records > 0 && status.bytes > 0, "{status:?}");
    assert!(looks > 10, "the group was looked at {looks} times only");
    assert_eq!(
        most_short,
        0,
        "slots had fewer than two ready copies during the rebalance\n--- a\n{}\n--- b\n{}\n--- c\n{}",
        a.printed(),
        b.printed(),
        c.printed()
    );
    let map = support::connect(a.addr, &fabric, Default::default())
        .unwrap()
        .map()
        .clone();
    let third = map.slots() / 3;
    let on_c = map.slots_of(MemberId(2));
    assert!(
        on_c + 2 >= third && on_c <= third + 2,
        "{on_c} of {}",
        map.slots()
    );
    for s in 0..map.slots() {
        let bs = map.backups(s);
        assert!(bs.len() == 1 && bs[0].ready, "slot {s}: {bs:?}");
    }
    // The backups are spread too: member 2 backs up its share.
    let backed: Vec<u32> = (0..3).map(|m| map.backup_slots_of(MemberId(m))).collect();
    let (lo, hi) = (*backed.iter().min().unwrap(), *backed.iter().max().unwrap());
    assert!(
        hi - lo <= map.slots() / 16,
        "slots backed up per member: {backed:?}"
    );

    // The new primary dies: its slots fail over to their backups.
    std::thread::sleep(Duration::from_millis(300));
    c.kill9();
    let live = [a.addr, b.addr];
    wait("member 2 failed over", Duration::from_secs(15), || {
        live.iter()
            .find_map(|&x| group_view(&mut cc, x))
            .is_some_and(|g| g.members[2].state == "failed")
    });
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::Release);
    for l in loads {
        l.join().unwrap();
    }
    let mut reader = support::connect(a.addr, &fabric, Default::default()).unwrap();
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        read_back(&mut reader, &h, 200, (0..preload).map(preloaded))
    }));
    let s = checked.unwrap_or_else(|e| {
        // What the members said, to tell a lost record from a slot left
        // without a ready backup.
        let m = reader.map();
        let orphans: Vec<u32> = (0..m.slots())
            .filter(|&x| m.owner_of_slot(x).member == MemberId(2))
            .collect();
        eprintln!(
            "slots still on member 2: {orphans:?}\n--- a\n{}\n--- b\n{}\n--- c\n{}",
            a.printed(),
            b.printed(),
            c.printed()
        );
        std::panic::resume_unwind(e)
    });
    assert!(s.writes_ok > 200 && s.reads_ok > 200, "{s:?}");
    eprintln!(
        "replicated migration: {} slots moved in {took:?} ({} records, {} bytes copied), slots \
         backed up per member {backed:?}, under-replicated slots seen: {most_short} in {looks} \
         looks; history: {s:?}",
        status.slots_done, status.records, status.bytes
    );
    drop((a, b, c));
    Fabric::remove_if_unused(&fabric);
}
