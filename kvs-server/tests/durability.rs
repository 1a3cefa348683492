//! The records on disk (`durability`): a member killed with `kill -9` and
//! started again from its data dir serves every write it acknowledged,
//! puts, partial updates and deletes alike, whether they are in its logs
//! or in the snapshots that let the logs shrink; a log damaged in the
//! middle stops the start with a message naming the file and the byte.
//!
//! `kill -9` leaves what the process wrote in the kernel's page cache, so
//! these tests show the log and its replay, not the flush to disk: a power
//! cut is what tells `always` (flushed before the answer) from `everysec`
//! (flushed once a second). kvs-wal's tests cut logs at every byte, which
//! is what a power cut can leave.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use kvs_client::{Client, ControlClient, ControlOptions, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, DiskStatus};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{answer, client_of as client, ServerProcess};

const WITHIN: Duration = Duration::from_secs(10);

/// A member of its own cluster with `durability`, its data in `dir`.
fn member(fabric: &str, dir: &Path, durability: &str) -> ServerProcess {
    support::member_process_with(
        fabric,
        dir,
        "127.0.0.1:0",
        2,
        None,
        &["--durability", durability],
    )
}

/// Writes, updates and deletes keys through `c`; what each key holds
/// after the answered writes (`None`: deleted).
fn write_history(c: &mut Client<u64>) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut want = BTreeMap::new();
    for i in 0..400u32 {
        let k = format!("key{i:04}");
        let v = format!("value {i} {}", "x".repeat((i % 7) as usize * 50)).into_bytes();
        answer(c, |c| c.put(k.as_bytes(), &v, 1)).unwrap();
        want.insert(k, Some(v));
    }
    for i in (0..400u32).step_by(3) {
        let k = format!("key{i:04}");
        answer(c, |c| c.update_range(k.as_bytes(), 0, b"UPDATED", 1)).unwrap();
        let v = want.get_mut(&k).unwrap().as_mut().unwrap();
        v[..7].copy_from_slice(b"UPDATED");
    }
    for i in (0..400u32).step_by(5) {
        let k = format!("key{i:04}");
        answer(c, |c| c.delete(k.as_bytes(), 1)).unwrap();
        want.insert(k, None);
    }
    for i in (0..400u32).step_by(10) {
        let k = format!("key{i:04}");
        let v = format!("written again {i}").into_bytes();
        answer(c, |c| c.put(k.as_bytes(), &v, 1)).unwrap();
        want.insert(k, Some(v));
    }
    want
}

/// Reads every key of `want` through `c` and compares.
fn check(c: &mut Client<u64>, want: &BTreeMap<String, Option<Vec<u8>>>) {
    for (k, v) in want {
        let got = answer(c, |c| c.get(k.as_bytes(), 1));
        match (v, got) {
            (Some(v), Ok(OwnedReply::Value(g))) => assert_eq!(&g, v, "{k}"),
            (None, Ok(OwnedReply::NotFound)) => {}
            (v, got) => panic!("{k}: wanted {v:?}, got {got:?}"),
        }
    }
}

fn killed_and_restarted(durability: &str) {
    let fabric = format!("kvs-durable-{durability}-{}", std::process::id());
    let dir = support::temp_dir(&format!("durable-{durability}"));
    let mut m = member(&fabric, dir.path(), durability);
    let want = {
        let mut c = client(&m, &fabric);
        write_history(&mut c)
    };
    m.kill9();
    let again = member(&fabric, dir.path(), durability);
    let mut c = client(&again, &fabric);
    check(&mut c, &want);
    let out = again.output();
    assert!(out.contains("recovered from"), "{out}");
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn every_acknowledged_write_survives_a_kill_under_always() {
    killed_and_restarted("always");
}

#[test]
fn every_acknowledged_write_survives_a_kill_under_everysec() {
    killed_and_restarted("everysec");
}

#[test]
fn without_durability_a_killed_member_restarts_empty() {
    // What the two tests above would see without the log: the test can
    // tell a store that came back from one that did not.
    let fabric = format!("kvs-durable-none-{}", std::process::id());
    let dir = support::temp_dir("durable-none");
    let mut m = member(&fabric, dir.path(), "none");
    {
        let mut c = client(&m, &fabric);
        answer(&mut c, |c| c.put(b"k", b"v", 1)).unwrap();
    }
    m.kill9();
    let again = member(&fabric, dir.path(), "none");
    let mut c = client(&again, &fabric);
    assert!(matches!(
        answer(&mut c, |c| c.get(b"k", 1)),
        Ok(OwnedReply::NotFound)
    ));
    drop(again);
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_log_damaged_in_the_middle_stops_the_start_naming_file_and_byte() {
    let fabric = format!("kvs-durable-damage-{}", std::process::id());
    let dir = support::temp_dir("durable-damage");
    let mut m = member(&fabric, dir.path(), "always");
    {
        let mut c = client(&m, &fabric);
        for i in 0..50u32 {
            let k = format!("k{i}");
            answer(&mut c, |c| c.put(k.as_bytes(), b"some value", 1)).unwrap();
        }
    }
    m.kill9();
    // Flip a byte in the first record's payload of a worker's log that
    // holds records.
    let logs = dir.path().join("data");
    let (path, mut bytes) = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .find(|(_, b)| b.len() > 100)
        .expect("a log with records");
    bytes[8 + 8 + 4] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    let (status, out) = support::run_server(&[
        "--listen",
        "127.0.0.1:0",
        "--device",
        "sim1",
        "--fabric",
        &fabric,
        "--workers",
        "2",
        "--stats-interval",
        "0",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--durability",
        "always",
    ]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&name) && out.contains("damaged at byte 8"),
        "{out}"
    );
    Fabric::remove_if_unused(&fabric);
}

fn control(fabric: &str) -> ControlClient {
    ControlClient::new(&support::client_device(fabric), ControlOptions::default()).unwrap()
}

/// The disk figures of the member at `s`, its workers' summed (and the
/// last snapshot request every worker's snapshots answered); `None`
/// before it answers.
fn disk(cc: &mut ControlClient, s: &ServerProcess) -> Option<(DiskStatus, bool)> {
    let st = support::member_status(cc, s.addr)?;
    let mut sum = DiskStatus {
        answered: u64::MAX,
        ..DiskStatus::default()
    };
    let mut running = false;
    for w in &st.workers {
        let d = w.disk.expect("a member with durability reports its disk");
        sum.log_bytes += d.log_bytes;
        sum.snapshot_bytes += d.snapshot_bytes;
        sum.snapshots += d.snapshots;
        sum.answered = sum.answered.min(d.answered);
        running |= d.snapshotting.is_some();
    }
    Some((sum, running))
}

#[test]
fn snapshots_bound_the_logs_and_a_restart_reads_snapshot_and_logs() {
    let fabric = format!("kvs-durable-snap-{}", std::process::id());
    let dir = support::temp_dir("durable-snap");
    let flags = [
        "--durability",
        "always",
        "--auto-snapshot-min-size",
        "64K",
        "--auto-snapshot-percentage",
        "100",
    ];
    let mut m = support::member_process_with(&fabric, dir.path(), "127.0.0.1:0", 2, None, &flags);
    let mut cc = control(&fabric);
    let mut c = client(&m, &fabric);
    // Five rounds of the history: about 1 MB of changes, each key's last
    // value what the last round left.
    let mut want = BTreeMap::new();
    for _ in 0..5 {
        want = write_history(&mut c);
    }
    // The automatic snapshots kept the logs near their threshold (64 KiB
    // per worker, or the snapshot's size) rather than the whole history.
    let t = Instant::now();
    let (auto, _) = loop {
        let d = disk(&mut cc, &m);
        if let Some((d, false)) = d.filter(|(d, _)| d.snapshots >= 2) {
            break (d, false);
        }
        assert!(t.elapsed() < WITHIN, "no automatic snapshot: {d:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(auto.snapshot_bytes > 0, "{auto:?}");
    // `kvs-admin snapshot`: every worker takes one more, which answers
    // the request.
    let ask = match cc.request(m.addr, &ControlRequest::Snapshot) {
        Ok(ControlReply::SnapshotAsked { ask }) => ask,
        other => panic!("snapshot: {other:?}"),
    };
    let t = Instant::now();
    let asked = loop {
        let d = disk(&mut cc, &m);
        if let Some((d, false)) = d.filter(|(d, _)| d.answered >= ask) {
            assert!(d.snapshots >= auto.snapshots + 2, "{d:?}");
            break d;
        }
        assert!(
            t.elapsed() < WITHIN,
            "the snapshot asked for did not finish: {d:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        asked.log_bytes < 64 << 10,
        "a fresh snapshot leaves little log: {asked:?}"
    );
    // A few writes after it: they are in the logs only.
    for i in 0..20u32 {
        let k = format!("key{i:04}");
        let v = format!("after the snapshot {i}").into_bytes();
        answer(&mut c, |c| c.put(k.as_bytes(), &v, 1)).unwrap();
        want.insert(k, Some(v));
    }
    drop(c);
    m.kill9();
    let again = support::member_process_with(&fabric, dir.path(), "127.0.0.1:0", 2, None, &flags);
    let mut c = client(&again, &fabric);
    check(&mut c, &want);
    drop(c);
    let out = again.output();
    assert!(
        out.contains("from snapshot") && !out.contains("from snapshot 0 "),
        "{out}"
    );
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_snapshot_is_refused_without_durability() {
    let fabric = format!("kvs-durable-nosnap-{}", std::process::id());
    let dir = support::temp_dir("durable-nosnap");
    let m = member(&fabric, dir.path(), "none");
    let mut cc = control(&fabric);
    let t = Instant::now();
    let reply = loop {
        match cc.request(m.addr, &ControlRequest::Snapshot) {
            Ok(r) => break r,
            Err(e) if t.elapsed() > WITHIN => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    match reply {
        ControlReply::Error { message } => assert!(message.contains("durability"), "{message}"),
        other => panic!("{other:?}"),
    }
    drop(m);
    Fabric::remove_if_unused(&fabric);
}
