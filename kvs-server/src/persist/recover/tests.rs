use std::path::Path;

use test_support::TempDir;

use super::*;
use crate::config::{Config, Durability};
use crate::persist::{open, WorkerLog};
use kvs_proto::control::RecoveryProgress;

const SLOTS: u32 = 16;

fn config(data_dir: &Path) -> Config {
    Config {
        data_dir: Some(data_dir.to_path_buf()),
        durability: Durability::Always,
        // Snapshots only when a test asks, as fast as they go (the tests
        // step the turns themselves).
        auto_snapshot_percentage: 0,
        snapshot_rate: 0,
        ..Config::default()
    }
}

/// A worker's store and log, as the worker opens them.
fn start(data_dir: &Path) -> (Store, WorkerLog) {
    open(&config(data_dir), SLOTS, 0, &counters())
        .unwrap()
        .unwrap()
}

/// A turn's end, as the worker's loop makes it.
fn turn(s: &mut Store, l: &mut WorkerLog) {
    l.commit(s);
    l.tend(s);
}

/// Turns until `n` snapshots are in place (the snapshot's thread writes
/// between them).
fn turns_until(s: &mut Store, l: &mut WorkerLog, n: u64) {
    let t = std::time::Instant::now();
    while l.status().snapshots < n {
        assert!(t.elapsed() < Duration::from_secs(30), "no snapshot {n}");
        turn(s, l);
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A worker's store and log in `dir` after one turn of writes and a
/// snapshot of them in place.
fn snapshotted(dir: &Path) -> (Store, WorkerLog) {
    let (mut s, mut l) = start(dir);
    writes(&mut s, 1);
    turn(&mut s, &mut l);
    l.request_snapshot(1);
    turns_until(&mut s, &mut l, 1);
    (s, l)
}

/// Every record and slot state of `s`, in order.
fn dump(s: &Store) -> Vec<(u32, Vec<u8>, Vec<u8>, bool)> {
    let mut v: Vec<_> = (0..s.slots())
        .flat_map(|slot| {
            s.slot_records(slot)
                .map(move |(k, v)| (slot, k.to_vec(), v.to_vec(), s.importing(slot)))
        })
        .collect();
    v.sort();
    // The ordered index holds the same keys (a recovery builds it whole).
    let mut by_key: Vec<_> = v
        .iter()
        .map(|(_, k, v, _)| (k.clone(), v.clone()))
        .collect();
    by_key.sort();
    let scanned: Vec<_> = s.scan(b"").map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    assert_eq!(scanned, by_key, "the scan and the slots disagree");
    v
}

/// The files of `data_dir` copied into a fresh dir: what a crash at this
/// moment leaves (every write was flushed under `always`). The snapshot's
/// threads may rename, write or remove files meanwhile, and a copy taken
/// across such a step is no state a crash leaves: the copy is taken again
/// until the files' names and sizes are the same after it as before.
fn crash_copy(data_dir: &Path) -> TempDir {
    let from = files::dir(data_dir);
    let listing = || {
        let mut l: Vec<(std::ffi::OsString, u64)> = std::fs::read_dir(&from)
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                Some((e.file_name(), e.metadata().ok()?.len()))
            })
            .collect();
        l.sort();
        l
    };
    for _ in 0..1000 {
        let d = TempDir::new("kvs-server", "crash-copy");
        let to = files::dir(d.path());
        std::fs::create_dir_all(&to).unwrap();
        let before = listing();
        let copied = before
            .iter()
            .all(|(name, _)| std::fs::copy(from.join(name), to.join(name)).is_ok());
        if copied && listing() == before {
            return d;
        }
    }
    panic!("the files of {} never stood still", from.display());
}

fn counters() -> RecoveryCounters {
    RecoveryCounters::default()
}

/// The bytes of worker 0's files in `dir`.
fn file_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("worker-0."))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

fn recovered(data_dir: &Path) -> Store {
    recover(&files::dir(data_dir), SLOTS, 0, &counters())
        .unwrap()
        .store
}

/// Writes that touch every slot, `round` making them differ.
fn writes(s: &mut Store, round: u32) {
    for slot in 0..SLOTS {
        for i in 0..4 {
            let key = format!("k{slot}-{i}");
            let value = vec![b'a' + (round % 26) as u8; 2000 + (round as usize * 7 + i) % 500];
            s.put(slot, key.as_bytes(), &value).unwrap();
        }
        if round % 3 == 0 {
            s.delete(slot, format!("k{slot}-1").as_bytes());
        }
        if round % 5 == 0 {
            s.patch(slot, format!("k{slot}-2").as_bytes(), 3, b"PATCH");
        }
    }
}

/// Two puts, then a delete and a put, in two turns; the store they make.
fn four_changes(data_dir: &Path) -> Store {
    let (mut s, mut l) = start(data_dir);
    s.put(1, b"a", b"1").unwrap();
    s.put(2, b"b", b"2").unwrap();
    turn(&mut s, &mut l);
    s.delete(1, b"a");
    s.put(3, b"c", b"3").unwrap();
    turn(&mut s, &mut l);
    s
}

#[test]
fn a_store_comes_back_from_its_log() {
    let d = TempDir::new("kvs-server", "recover");
    let s = four_changes(d.path());
    let o = recover(&files::dir(d.path()), SLOTS, 0, &counters()).unwrap();
    assert_eq!((o.found.changes, o.found.torn_bytes), (4, 0));
    assert_eq!(o.store.get(1, b"a"), None);
    assert_eq!(o.store.get(2, b"b"), Some(&b"2"[..]));
    assert_eq!(o.store.get(3, b"c"), Some(&b"3"[..]));
    assert_eq!(dump(&o.store), dump(&s));
}

#[test]
fn a_log_cut_anywhere_gives_the_changes_before_the_cut() {
    let d = TempDir::new("kvs-server", "recover-cut");
    four_changes(d.path());
    let p = files::log_path(&files::dir(d.path()), 0, 0);
    let bytes = std::fs::read(&p).unwrap();
    let mut last = 0;
    for cut in 8..=bytes.len() {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let o = recover(&files::dir(d.path()), SLOTS, 0, &counters()).unwrap();
        assert!(o.found.changes >= last, "cut at {cut}");
        last = o.found.changes;
        assert_eq!(o.log_bytes + o.found.torn_bytes, cut as u64);
        // The changes come back in order: b's put before c's.
        if o.store.get(3, b"c").is_some() {
            assert!(o.store.get(2, b"b").is_some() && o.store.get(1, b"a").is_none());
        }
    }
    assert_eq!(last, 4);
}

/// A crash after the next log was made ready for a snapshot and before
/// the snapshot began: the old log may be torn (its last write never
/// flushed) with the new log empty after it. The tear is the end of the
/// writes; a later log holding records makes it damage.
#[test]
fn a_torn_log_before_an_empty_one_ends_the_writes() {
    let d = TempDir::new("kvs-server", "recover-torn-before-empty");
    let s = four_changes(d.path());
    let dir = files::dir(d.path());
    let p0 = files::log_path(&dir, 0, 0);
    let whole = std::fs::read(&p0).unwrap();
    // Half a record's header: a write the crash cut short.
    let mut torn = whole.clone();
    torn.extend_from_slice(&[9, 0, 0]);
    std::fs::write(&p0, &torn).unwrap();
    let p1 = files::log_path(&dir, 0, 1);
    Log::open(&p1, FORMAT).unwrap();
    let o = recover(&dir, SLOTS, 0, &counters()).unwrap();
    assert_eq!((o.found.changes, o.found.torn_bytes), (4, 3));
    assert_eq!((o.gen, o.writer.end()), (1, EMPTY));
    assert_eq!(dump(&o.store), dump(&s));
    drop(o);
    assert_eq!(std::fs::read(&p0).unwrap(), whole, "the tear is cut off");
    // A later log with records: the tear lost writes before them.
    std::fs::write(&p0, &torn).unwrap();
    let mut w = Log::open(&p1, FORMAT)
        .unwrap()
        .replay(&mut |_: u8, _: &[u8], _: u64| Ok(()))
        .unwrap()
        .append()
        .unwrap();
    let mut b = kvs_wal::Batch::new(FORMAT);
    let c = Change::Put {
        slot: 1,
        key: b"z",
        value: b"26",
    };
    b.push_with(c.kind(), |out| c.encode(out)).unwrap();
    w.adopt(&mut b);
    w.commit().unwrap();
    drop(w);
    let e = recover(&dir, SLOTS, 0, &counters())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("worker-0.0.log") && e.contains(&format!("byte {}", whole.len())),
        "{e}"
    );
}

#[test]
fn damage_in_the_middle_names_the_file_and_byte() {
    let d = TempDir::new("kvs-server", "recover-damage");
    let (mut s, mut l) = start(d.path());
    s.put(1, b"a", b"1").unwrap();
    s.put(2, b"b", b"2").unwrap();
    turn(&mut s, &mut l);
    drop(l);
    let p = files::log_path(&files::dir(d.path()), 0, 0);
    let mut bytes = std::fs::read(&p).unwrap();
    // The first record's payload (after the magic and its header).
    bytes[8 + 8 + 2] ^= 0xff;
    std::fs::write(&p, &bytes).unwrap();
    let e = recover(&files::dir(d.path()), SLOTS, 0, &counters())
        .unwrap_err()
        .to_string();
    assert!(e.contains("worker-0.0.log") && e.contains("byte 8"), "{e}");
}

#[test]
fn a_change_to_a_slot_the_store_lacks_is_damage() {
    let d = TempDir::new("kvs-server", "recover-slots");
    let (mut s, mut l) = start(d.path());
    s.put(3, b"c", b"3").unwrap();
    turn(&mut s, &mut l);
    drop(l);
    // Slot 3 does not exist in a store of 2 slots.
    let e = recover(&files::dir(d.path()), 2, 0, &counters())
        .unwrap_err()
        .to_string();
    assert!(e.contains("slot"), "{e}");
}

/// A snapshot taken while every slot keeps changing; after each turn the
/// files a crash would leave are recovered and must give the store as it
/// was at that turn's end.
#[test]
fn a_crash_at_any_turn_of_a_snapshot_recovers_the_store_of_that_turn() {
    let d = TempDir::new("kvs-server", "recover-snapshot");
    let (mut s, mut l) = start(d.path());
    s.begin_import(5);
    s.delete(5, b"tombstone");
    s.begin_copy(6);
    writes(&mut s, 0);
    turn(&mut s, &mut l);
    assert!(l.request_snapshot(1));
    let mut round = 1;
    let mut checked = 0;
    while round < 200 {
        writes(&mut s, round);
        turn(&mut s, &mut l);
        let copy = crash_copy(d.path());
        assert_eq!(dump(&recovered(copy.path())), dump(&s), "round {round}");
        checked += 1;
        round += 1;
        if l.status().snapshots == 1 {
            break;
        }
        if l.snapshot.is_none() && l.next.is_none() {
            panic!("the snapshot ended without being put in place");
        }
    }
    assert_eq!(l.status().snapshots, 1, "the snapshot finished");
    assert!(checked > 3, "the snapshot took several turns: {checked}");
    // The logs before it are gone; the store comes back from the snapshot
    // and the snapshot's log, its tombstones and import states too.
    let dir = files::dir(d.path());
    let gens: Vec<u64> = files::logs(&dir, 0)
        .unwrap()
        .into_iter()
        .map(|x| x.0)
        .collect();
    assert_eq!(gens, [1]);
    for _ in 0..3 {
        writes(&mut s, round);
        round += 1;
        turn(&mut s, &mut l);
    }
    let o = recover(&dir, SLOTS, 0, &counters()).unwrap();
    assert_eq!(o.snap_gen, 1);
    assert!(o.found.snapshot_changes > 0);
    assert_eq!(dump(&o.store), dump(&s));
    assert!(o.store.importing(5) && o.store.deleted_in_import(5, b"tombstone"));
    assert!(!o.store.importing(6) && o.store.deleted_in_import(6, b"k6-1"));
}

#[test]
fn a_second_snapshot_replaces_the_first_and_the_logs_shrink() {
    let d = TempDir::new("kvs-server", "recover-two");
    let (mut s, mut l) = start(d.path());
    for round in 0..30 {
        writes(&mut s, round);
        turn(&mut s, &mut l);
    }
    let before = l.status().log_bytes;
    for n in 1..=2 {
        assert!(l.request_snapshot(1));
        turns_until(&mut s, &mut l, n);
    }
    let st = l.status();
    assert!(st.log_bytes < before / 4, "{} of {before}", st.log_bytes);
    assert!(st.snapshot_bytes > 0);
    let dir = files::dir(d.path());
    let gens: Vec<u64> = files::logs(&dir, 0)
        .unwrap()
        .into_iter()
        .map(|x| x.0)
        .collect();
    assert_eq!(gens, [2]);
    drop(l);
    let o = recover(&dir, SLOTS, 0, &counters()).unwrap();
    assert_eq!((o.snap_gen, o.gen), (2, 2));
    assert_eq!(dump(&o.store), dump(&s));
}

#[test]
fn a_snapshot_cut_anywhere_stops_the_start_naming_it() {
    let d = TempDir::new("kvs-server", "recover-snap-cut");
    let (s, l) = snapshotted(d.path());
    drop(l);
    let p = files::snapshot_path(&files::dir(d.path()), 0);
    let bytes = std::fs::read(&p).unwrap();
    // Every byte of its last two records (the last slot's copies and the
    // end), and a few whole-record cuts before.
    let last = bytes.len();
    for cut in (last - 2100..last).chain([8, 20, last / 2]) {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = recover(&files::dir(d.path()), SLOTS, 0, &counters())
            .unwrap_err()
            .to_string();
        assert!(e.contains("worker-0.snap"), "cut at {cut}: {e}");
    }
    std::fs::write(&p, &bytes).unwrap();
    assert_eq!(dump(&recovered(d.path())), dump(&s));
}

#[test]
fn a_snapshot_whose_log_is_missing_is_refused() {
    let d = TempDir::new("kvs-server", "recover-missing");
    let (_, l) = snapshotted(d.path());
    drop(l);
    let dir = files::dir(d.path());
    std::fs::remove_file(files::log_path(&dir, 0, 1)).unwrap();
    let e = recover(&dir, SLOTS, 0, &counters())
        .unwrap_err()
        .to_string();
    assert!(e.contains("worker-0.1.log") && e.contains("missing"), "{e}");
}

#[test]
fn a_change_before_its_slots_mark_is_not_replayed_on_the_snapshot() {
    // A partial update that fitted the value it was made to, and then a
    // shorter value: replayed on the snapshot's copy (the short value) the
    // update would not fit. It precedes the slot's mark, so it is skipped.
    let d = TempDir::new("kvs-server", "recover-skip");
    let (mut s, mut l) = start(d.path());
    s.put(0, b"k", b"0123456789").unwrap();
    turn(&mut s, &mut l);
    l.request_snapshot(1);
    turn(&mut s, &mut l);
    assert_eq!(s.patch(0, b"k", 8, b"xx"), crate::store::Patch::Done);
    s.put(0, b"k", b"abc").unwrap();
    turns_until(&mut s, &mut l, 1);
    drop(l);
    let o = recover(&files::dir(d.path()), SLOTS, 0, &counters()).unwrap();
    assert_eq!(o.store.get(0, b"k"), Some(&b"abc"[..]));
    assert_eq!(o.found.changes, 0, "both changes are the snapshot's");
}

#[test]
fn a_snapshot_asked_for_that_fails_is_tried_again() {
    let d = TempDir::new("kvs-server", "recover-retry");
    let (mut s, mut l) = start(d.path());
    writes(&mut s, 1);
    turn(&mut s, &mut l);
    // Its file cannot be made: a directory where it is to be written.
    let blocker = files::dir(d.path()).join("worker-0.snap.partial");
    std::fs::create_dir(&blocker).unwrap();
    assert!(l.request_snapshot(1));
    turn(&mut s, &mut l);
    for _ in 0..1000 {
        if l.snapshot.is_none() && l.next.is_none() {
            break;
        }
        turn(&mut s, &mut l);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(l.snapshot.is_none() && l.status().snapshots == 0);
    assert!(
        l.requested && l.not_before.is_some(),
        "asked for again, later"
    );
    // The way is clear, and the retry's time has come.
    std::fs::remove_dir(&blocker).unwrap();
    l.not_before = Some(std::time::Instant::now());
    turns_until(&mut s, &mut l, 1);
    assert!(!l.requested);
    drop(l);
    assert_eq!(dump(&recovered(d.path())), dump(&s));
}

#[test]
fn a_log_from_before_snapshots_is_generation_zero() {
    let d = TempDir::new("kvs-server", "recover-unnumbered");
    let (mut s, mut l) = start(d.path());
    writes(&mut s, 1);
    turn(&mut s, &mut l);
    drop(l);
    let dir = files::dir(d.path());
    std::fs::rename(files::log_path(&dir, 0, 0), dir.join("worker-0.log")).unwrap();
    assert_eq!(dump(&recovered(d.path())), dump(&s));
    assert!(!dir.join("worker-0.log").exists());
}

#[test]
fn the_progress_ends_at_the_snapshot_and_logs_read_whole() {
    let d = TempDir::new("kvs-server", "recover-progress");
    let (mut s, mut l) = snapshotted(d.path());
    writes(&mut s, 2);
    turn(&mut s, &mut l);
    drop(l);
    let dir = files::dir(d.path());
    let bytes = file_bytes(&dir);
    let c = counters();
    let o = recover(&dir, SLOTS, 0, &c).unwrap();
    assert_eq!(o.snap_gen, 1);
    assert_eq!(o.found.bytes, bytes);
    assert_eq!(
        c.progress(),
        RecoveryProgress {
            read: bytes,
            total: bytes
        }
    );
    assert_eq!(o.snapshot_bytes + o.log_bytes, bytes);
}

#[test]
fn a_log_the_snapshot_holds_is_not_counted_and_a_fresh_one_is() {
    let d = TempDir::new("kvs-server", "recover-progress-skip");
    let (_, l) = snapshotted(d.path());
    drop(l);
    let dir = files::dir(d.path());
    let read = file_bytes(&dir);
    // A log from before the snapshot, left by a crash before its removal.
    std::fs::write(files::log_path(&dir, 0, 0), vec![7u8; 5000]).unwrap();
    let c = counters();
    let o = recover(&dir, SLOTS, 0, &c).unwrap();
    assert!(!files::log_path(&dir, 0, 0).exists());
    assert_eq!(o.found.bytes, read);
    assert_eq!(c.progress(), RecoveryProgress { read, total: read });
    // An empty dir: the fresh log it gets is all there is.
    let e = TempDir::new("kvs-server", "recover-progress-fresh");
    let dir = files::dir(e.path());
    let c = counters();
    let o = recover(&dir, SLOTS, 0, &c).unwrap();
    let fresh = file_bytes(&dir);
    assert!(fresh > 0);
    assert_eq!(o.found.bytes, fresh);
    assert_eq!(
        c.progress(),
        RecoveryProgress {
            read: fresh,
            total: fresh
        }
    );
}

#[test]
fn the_progress_seen_while_it_reads_only_grows_and_stays_within_the_total() {
    let d = TempDir::new("kvs-server", "recover-progress-watch");
    let (mut s, mut l) = start(d.path());
    // Several MiB of log: several of the replay's chunks.
    for round in 0..40 {
        writes(&mut s, round);
        turn(&mut s, &mut l);
    }
    drop(l);
    let dir = files::dir(d.path());
    let bytes = file_bytes(&dir);
    assert!(bytes > 4 << 20, "{bytes}");
    let c = counters();
    let done = std::sync::atomic::AtomicBool::new(false);
    let seen = std::thread::scope(|scope| {
        let watch = scope.spawn(|| {
            let mut seen = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                seen.push(c.progress());
                std::thread::yield_now();
            }
            seen
        });
        recover(&dir, SLOTS, 0, &c).unwrap();
        done.store(true, std::sync::atomic::Ordering::Release);
        watch.join().unwrap()
    });
    for p in &seen {
        assert!(p.read <= p.total && p.total <= bytes, "{p:?} of {bytes}");
    }
    for w in seen.windows(2) {
        assert!(w[0].read <= w[1].read, "{:?} then {:?}", w[0], w[1]);
    }
    assert_eq!(
        c.progress(),
        RecoveryProgress {
            read: bytes,
            total: bytes
        }
    );
}

#[test]
fn a_snapshot_answers_the_requests_that_came_before_its_end() {
    let d = TempDir::new("kvs-server", "snapshot-asks");
    let (mut s, mut l) = start(d.path());
    writes(&mut s, 1);
    turn(&mut s, &mut l);
    assert!(l.request_snapshot(1));
    turn(&mut s, &mut l);
    assert!(!l.request_snapshot(2), "one is under way: it answers 2 too");
    turns_until(&mut s, &mut l, 1);
    assert_eq!(l.status().answered, 2);
    // An automatic snapshot in place before a request answers none after.
    assert!(l.request_snapshot(3));
    assert_eq!(l.status().answered, 2, "not before the next is in place");
    turns_until(&mut s, &mut l, 2);
    assert_eq!(l.status().answered, 3);
}
