//! A full disk under `durability = "always"`: a member whose log's disk
//! fills refuses writes with DISK_FULL (a PUT, a DELETE), says so in its
//! status, and goes on serving reads; once there is room it takes writes
//! again, and a `kill -9` and restart brings back every write it
//! acknowledged.
//!
//! The disk is a 40 MiB tmpfs mounted for the test, which takes root:
//! ignored by `cargo test`, run by `.ci/run` (as root) with
//! `cargo test -p kvs-server --test full_disk -- --ignored`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kvs_client::{Client, ClientOptions, ControlClient, ControlOptions, KvError, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{answer, client_with, ServerProcess};

/// A tmpfs mounted at a directory until dropped.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(at: &Path, size: &str) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .expect("run mount");
        assert!(ok.success(), "mount a tmpfs at {}", at.display());
        Mount(at.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn member(fabric: &str, dir: &Path) -> ServerProcess {
    support::member_process_with(
        fabric,
        dir,
        "127.0.0.1:0",
        1,
        None,
        // No automatic snapshot: the disk is the log's alone.
        &["--durability", "always", "--auto-snapshot-percentage", "0"],
    )
}

/// A client that reads the test's 60 KiB values.
fn client(s: &ServerProcess, fabric: &str) -> Client<u64> {
    let opts = ClientOptions {
        value_allowance: 64 << 10,
        ..ClientOptions::default()
    };
    client_with(s, fabric, opts)
}

/// Whether the member at `s` says its disk is full.
fn says_full(s: &ServerProcess, fabric: &str) -> bool {
    let mut cc: ControlClient =
        ControlClient::new(&support::client_device(fabric), ControlOptions::default()).unwrap();
    match cc.request(s.addr, &ControlRequest::Status) {
        Ok(ControlReply::Status(st)) => st.workers[0].disk.expect("a disk").disk_full,
        other => panic!("status: {other:?}"),
    }
}

#[test]
#[ignore = "needs root to mount a tmpfs; .ci/run runs it"]
fn a_full_disk_refuses_writes_serves_reads_and_loses_nothing() {
    // SAFETY: geteuid has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test mounts a tmpfs: run it as root (.ci/run does)"
    );
    let fabric = format!("kvs-full-disk-{}", std::process::id());
    let tmp = support::temp_dir("full-disk");
    let mount = Mount::tmpfs(&tmp.path().join("disk"), "40m");
    let filler = mount.0.join("filler");
    std::fs::write(&filler, vec![7u8; 8 << 20]).unwrap();
    let dir = mount.0.join("member");
    let mut m = member(&fabric, &dir);
    let mut c = client(&m, &fabric);

    // Values of 64 KiB until the disk is full: far fewer than 40 MiB's.
    let value = |i: u32| vec![b'a' + (i % 26) as u8; 60 << 10];
    let mut acked = Vec::new();
    let refusal = loop {
        let i = acked.len() as u32;
        assert!(i < 1000, "the disk never filled");
        let k = format!("key{i}");
        match answer(&mut c, |c| c.put(k.as_bytes(), &value(i), 1)) {
            Ok(_) => acked.push(k),
            Err(KvError::DiskFull(m)) => break m,
            Err(e) => panic!("put {i}: {e}"),
        }
    };
    assert!(refusal.contains("disk full at worker-0."), "{refusal}");
    assert!(
        acked.len() > 100,
        "{} writes before the disk filled",
        acked.len()
    );
    assert!(says_full(&m, &fabric));
    // Reads go on; writes of every kind are refused.
    for (i, k) in acked.iter().enumerate().step_by(37) {
        match answer(&mut c, |c| c.get(k.as_bytes(), 1)) {
            Ok(OwnedReply::Value(v)) => assert_eq!(v, value(i as u32), "{k}"),
            other => panic!("get {k}: {other:?}"),
        }
    }
    assert!(matches!(
        answer(&mut c, |c| c.delete(acked[0].as_bytes(), 1)),
        Err(KvError::DiskFull(_))
    ));

    // Room again: writes are taken within a few seconds.
    std::fs::remove_file(&filler).unwrap();
    let t = Instant::now();
    loop {
        let i = acked.len() as u32;
        let k = format!("key{i}");
        match answer(&mut c, |c| c.put(k.as_bytes(), &value(i), 1)) {
            Ok(_) => {
                acked.push(k);
                break;
            }
            Err(KvError::DiskFull(_)) if t.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("after room was made: {e}"),
        }
    }
    assert!(!says_full(&m, &fabric));

    // Every acknowledged write survives a kill.
    drop(c);
    m.kill9();
    let again = member(&fabric, &dir);
    let mut c = client(&again, &fabric);
    for (i, k) in acked.iter().enumerate() {
        match answer(&mut c, |c| c.get(k.as_bytes(), 1)) {
            Ok(OwnedReply::Value(v)) => assert_eq!(v, value(i as u32), "{k}"),
            other => panic!("after the restart, get {k}: {other:?}"),
        }
    }
    drop(c);
    drop(again);
    drop(mount);
    Fabric::remove_if_unused(&fabric);
}
