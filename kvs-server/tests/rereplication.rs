//! Copies to new backups go over the bulk port while writes go on. One
//! member holds every slot with one copy and ~10 MB of records; `set
//! replicas 2` gives each slot a backup on one of the two other members,
//! each copied from a snapshot pulled over mpib while clients overwrite,
//! patch (UPDATE_RANGE) and delete the records being copied. Then the
//! primary is killed (`kill -9`): the backups take over, and every record
//! reads back as the last acknowledged write left it, and the recorded
//! history of the load on other keys passes its check.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, GroupView};
use mlx5::sim::fabric::Fabric;

#[path = "support/history.rs"]
mod history;
#[path = "support/load.rs"]
mod load;
mod support;

use history::History;
use load::{load, read_back};
use support::{group_view, ServerProcess};

const RECORDS: u32 = 20_000;
const VALUE: usize = 500;

fn member(fabric: &str, dir: &Path, join: Option<SocketAddr>) -> ServerProcess {
    let cfg = "member_timeout_ms = 500\n";
    support::member_process_configured(fabric, dir, "127.0.0.1:0", join, cfg, &["--replicas", "1"])
}

fn record(i: u32) -> (String, Vec<u8>) {
    let v = format!("{i}:{}", "r".repeat(VALUE));
    (format!("r{i}"), v.into_bytes())
}

/// What a record should read as once the mutations are over.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Value(Vec<u8>),
    Gone,
    /// Applied or not (the answer was lost): one of the two.
    Either(Option<Vec<u8>>, Option<Vec<u8>>),
}

/// Overwrites, patches, or deletes and puts back, records `first..end` (a
/// third each), round after round, until `stop`; what each should read as.
fn mutate(
    via: SocketAddr,
    fabric: String,
    first: u32,
    end: u32,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<HashMap<u32, Expect>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c = support::connect(via, &fabric, Default::default()).unwrap();
        let mut round = 0u32;
        while !stop.load(Ordering::Acquire) {
            round += 1;
            for i in first..end {
                let (k, mut v) = record(i);
                let mut m = out.lock().unwrap();
                let before = match m.get(&i) {
                    Some(Expect::Value(b)) => Some(b.clone()),
                    Some(Expect::Gone) => None,
                    Some(Expect::Either(..)) => continue,
                    None => Some(v.clone()),
                };
                let (r, after) = match (i % 3, &before) {
                    (0, _) | (2, None) => {
                        v[..4].copy_from_slice(format!("{:04}", round % 10_000).as_bytes());
                        (c.wait_for(|c, t| c.put(k.as_bytes(), &v, t)), Some(v))
                    }
                    (1, Some(b)) => {
                        let patch = format!("P{:03}", round % 1000);
                        let mut after = b.clone();
                        after[8..12].copy_from_slice(patch.as_bytes());
                        let r =
                            c.wait_for(|c, t| c.update_range(k.as_bytes(), 8, patch.as_bytes(), t));
                        (r, Some(after))
                    }
                    _ => (c.wait_for(|c, t| c.delete(k.as_bytes(), t)), None),
                };
                let e = match (r, after) {
                    (Ok(OwnedReply::Done), Some(a)) => Expect::Value(a),
                    (Ok(OwnedReply::Done), None) => Expect::Gone,
                    (_, a) => Expect::Either(before, a),
                };
                m.insert(i, e);
            }
        }
    })
}

fn view(cc: &mut ControlClient, at: &[SocketAddr]) -> Option<GroupView> {
    at.iter().find_map(|&a| group_view(cc, a))
}

#[test]
fn a_copy_over_the_bulk_port_keeps_the_writes_made_during_it() {
    let fabric = format!("kvs-rerepl-{}", std::process::id());
    let root = support::temp_dir("rerepl");
    let dirs: Vec<_> = (0..3).map(|m| root.join(format!("m{m}"))).collect();
    let a = member(&fabric, &dirs[0], None);
    let b = member(&fabric, &dirs[1], Some(a.addr));
    let c = member(&fabric, &dirs[2], Some(a.addr));
    let addrs = [a.addr, b.addr, c.addr];
    let mut procs = [Some(a), Some(b), Some(c)];
    let mut cc = support::control_client(&fabric);
    test_support::wait_until(
        "three members",
        Duration::from_secs(20),
        Duration::from_millis(5),
        || view(&mut cc, &addrs).is_some_and(|g| g.members.len() == 3),
    );
    let mut loader = support::connect(addrs[0], &fabric, Default::default()).unwrap();
    for i in 0..RECORDS {
        let (k, v) = record(i);
        assert_eq!(
            loader.wait_for(|c, t| c.put(k.as_bytes(), &v, t)),
            Ok(OwnedReply::Done)
        );
    }

    // Writes during the copies: recorded load on other keys, and the
    // mutations of some of the records being copied.
    let h = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let expect = Arc::new(Mutex::new(HashMap::new()));
    let mut threads = vec![load(
        h.clone(),
        addrs[0],
        fabric.clone(),
        0,
        200,
        stop.clone(),
    )];
    threads.push(mutate(
        addrs[0],
        fabric.clone(),
        0,
        RECORDS / 60,
        stop.clone(),
        expect.clone(),
    ));
    std::thread::sleep(Duration::from_millis(200));
    // To the leader, wherever it is.
    let mut to = addrs[0];
    loop {
        match cc.request(to, &ControlRequest::SetReplicas { replicas: 2 }) {
            Ok(ControlReply::Ok) => break,
            Ok(ControlReply::Keeper { addr }) => to = addr,
            other => panic!("set replicas: {other:?}"),
        }
    }
    let t = Instant::now();
    let mut copies_seen = 0usize;
    test_support::wait_until(
        "every slot's second copy",
        Duration::from_secs(60),
        Duration::from_millis(5),
        || {
            for &m in &addrs[1..] {
                if let Some(s) = support::member_status(&mut cc, m) {
                    copies_seen = copies_seen.max(s.copies.len());
                }
            }
            view(&mut cc, &addrs).is_some_and(|g| g.replicas == 2 && g.under_replicated_slots == 0)
        },
    );
    let copied = t.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Release);
    for t in threads {
        t.join().unwrap();
    }

    // The primary of every slot dies; its backups take over.
    procs[0].as_mut().unwrap().kill9();
    let live = [addrs[1], addrs[2]];
    test_support::wait_until(
        "member 0 failed over",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || view(&mut cc, &live).is_some_and(|g| g.members[0].state == "failed"),
    );
    let mut reader = support::connect(addrs[1], &fabric, Default::default()).unwrap();
    let expect = expect.lock().unwrap();
    for i in 0..RECORDS {
        let (k, v) = record(i);
        let got = match reader.wait_for(|c, t| c.get(k.as_bytes(), t)) {
            Ok(OwnedReply::Value(v)) => Some(v),
            Ok(OwnedReply::NotFound) => None,
            other => panic!("{k}: {other:?}"),
        };
        match expect.get(&i) {
            None if got.as_ref() != Some(&v) => {
                let m = reader.map().clone();
                let slot = kvs_proto::shard::slot_of(k.as_bytes(), m.slots());
                let out: Vec<String> = procs.iter().flatten().map(ServerProcess::printed).collect();
                panic!(
                    "{k} (slot {slot}: {:?} {:?}, map {}): {got:?}, untouched\n{}",
                    m.owner_of_slot(slot),
                    m.backups(slot),
                    m.version(),
                    out.join("\n---\n")
                );
            }
            None => {}
            Some(Expect::Value(e)) => assert_eq!(got.as_ref(), Some(e), "{k}: acknowledged"),
            Some(Expect::Gone) => assert_eq!(got, None, "{k}: deleted"),
            Some(Expect::Either(b, a)) => assert!(
                got == *b || got == *a,
                "{k}: {got:?} is neither {b:?} nor {a:?}"
            ),
        }
    }
    let s = read_back(&mut reader, &h, 200, std::iter::empty());
    assert!(s.writes_ok > 100, "{s:?}");
    eprintln!(
        "rereplication: {} MB copied to two backups in {copied:?} (copies seen in status: \
         {copies_seen}); history {s:?}",
        (RECORDS as usize * (VALUE + 8)) >> 20
    );
    for p in &mut procs {
        drop(p.take());
    }
    Fabric::remove_if_unused(&fabric);
}
