//! A thread's panic ends the server process, non-zero and saying so: a
//! server with a dead worker would keep its lease with that worker's slots
//! served by nobody, and one with a dead control thread would never rejoin;
//! systemd restarts neither, since the process lives on. The panics are
//! made by `KVS_DEBUG_PANIC`, which only debug builds (the tests') read.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use mlx5::sim::fabric::Fabric;

mod support;
use support::ServerProcess;

/// Runs a kvs-server whose `thread` panics; its exit status (`None`: still
/// running after 20 s, then killed) and what it printed.
fn panicking(thread: &str) -> (Option<std::process::ExitStatus>, String) {
    let fabric = format!("kvs-crash-{thread}-{}", std::process::id());
    let mut cmd = ServerProcess::command_on(&fabric, &[]);
    cmd.env("KVS_DEBUG_PANIC", thread)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start kvs-server");
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut out);
    let _ = child.stderr.take().unwrap().read_to_string(&mut out);
    Fabric::remove_if_unused(&fabric);
    (status, out)
}

#[test]
fn a_workers_panic_ends_the_process() {
    let (status, out) = panicking("worker");
    let status = status.unwrap_or_else(|| panic!("still running, half alive: {out}"));
    assert!(!status.success(), "{status:?}: {out}");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}: {out}");
    assert!(
        out.contains("KVS_DEBUG_PANIC=worker")
            && out.contains("thread kvs-worker-0 panicked; stopping the process"),
        "{out}"
    );
}

#[test]
fn the_control_threads_panic_ends_the_process() {
    let (status, out) = panicking("control");
    let status = status.unwrap_or_else(|| panic!("still running, half alive: {out}"));
    assert!(!status.success(), "{status:?}: {out}");
    assert!(
        out.contains("thread kvs-control panicked; stopping the process"),
        "{out}"
    );
}
