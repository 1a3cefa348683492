//! A member paused (SIGSTOP) past the failure timeout, whose slots failed
//! over meanwhile, serves no stale read when it resumes. A client keeps a
//! GET of key k in flight to k's owner every 5 ms; the owner is paused; a
//! second client writes k through another member (acknowledged by the
//! promoted backup); the owner resumes and processes everything that
//! queued for it while stopped, heartbeats sent seconds ago included. No
//! GET invoked after the write was acknowledged may return the old value:
//! the history is checked by the nemesis's linearizability check.
//!
//! A lease renewed by messages processed late, rather than sent lately,
//! failed this test: GETs submitted just after the resume read the old
//! value.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kvs_client::{ClientOptions, OwnedReply, Reply};

#[path = "nemesis/check.rs"]
mod check;
#[path = "nemesis/cluster.rs"]
mod cluster;
#[path = "nemesis/history.rs"]
mod history;
#[path = "nemesis/proxy.rs"]
mod proxy;
mod support;

use history::{decode, encode, Clock, Entry, Op, Ret};

/// One round against the owner of `key`: the history it recorded.
fn round(c: &mut cluster::Cluster, clock: &Clock, key: &str, process: &mut u32) -> Vec<Entry> {
    let fabric = c.fabric.clone();
    let opts = ClientOptions {
        timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    };
    let mut reader = support::connect(c.members[0].addr, &fabric, opts.clone()).unwrap();
    let owner = (reader.map().owner(key.as_bytes()).member).index();
    let other = (owner + 1) % c.members.len();
    let mut h = Vec::new();
    let next = |p: &mut u32| {
        *p += 1;
        *p
    };
    // The old value, acknowledged.
    let old = u64::from(next(process));
    let t = clock.now();
    let r = reader.wait_for(|cl, tag| cl.put(key.as_bytes(), &encode(old), tag));
    assert_eq!(r, Ok(OwnedReply::Done));
    h.push(entry(
        next(process),
        Op::Write(old),
        t,
        Some((clock.now(), Ret::Written)),
    ));
    // GETs every 5 ms, each its own process; the writer at 3 s; the
    // owner paused from 0.5 s to 4.5 s; GETs until 5.5 s.
    // At most 8 GETs open at once, each under a process of its own that
    // is reused once its GET is answered (a failed GET did nothing and is
    // not recorded).
    let mut open: HashMap<u64, Entry> = HashMap::new();
    let mut free: Vec<u32> = (0..8).map(|_| next(process)).collect();
    let start = Instant::now();
    let (mut paused, mut resumed, mut written) = (false, false, false);
    let mut last_get = Instant::now() - Duration::from_secs(1);
    while start.elapsed() < Duration::from_millis(5500) {
        let e = start.elapsed();
        if !paused && e >= Duration::from_millis(500) {
            c.pause(owner, true);
            paused = true;
        }
        if !written && e >= Duration::from_millis(3000) {
            let new = u64::from(next(process));
            let mut w = support::connect(c.members[other].addr, &fabric, opts.clone()).unwrap();
            let t = clock.now();
            let r = w.wait_for(|cl, tag| cl.put(key.as_bytes(), &encode(new), tag));
            let done = match r {
                Ok(OwnedReply::Done) => Some((clock.now(), Ret::Written)),
                _ => None,
            };
            h.push(entry(next(process), Op::Write(new), t, done));
            written = true;
        }
        if !resumed && e >= Duration::from_millis(4500) {
            c.pause(owner, false);
            resumed = true;
        }
        if last_get.elapsed() >= Duration::from_millis(5) {
            if let Some(p) = free.pop() {
                let t = clock.now();
                match reader.get(key.as_bytes(), u64::from(p)) {
                    Ok(()) => {
                        open.insert(u64::from(p), entry(p, Op::Read, t, None));
                    }
                    Err(_) => free.push(p),
                }
            }
            last_get = Instant::now();
        }
        reader.poll(|tag, r| {
            if let Some(mut e) = open.remove(&tag) {
                free.push(e.process);
                match r {
                    Ok(Reply::Value(v)) => {
                        e.done = Some((clock.now(), Ret::Read(decode(v))));
                        h.push(e);
                    }
                    Ok(Reply::NotFound) => {
                        e.done = Some((clock.now(), Ret::Read(None)));
                        h.push(e);
                    }
                    // A failed read did nothing.
                    _ => {}
                }
            }
        });
        std::thread::sleep(Duration::from_millis(1));
    }
    // What is still open is a read: it did nothing anyone saw.
    h
}

/// The reads invoked after the last write was acknowledged that returned
/// another value, one per line (at most 10).
fn stale(h: &[Entry]) -> String {
    let Some((acked, v)) = h.iter().rev().find_map(|e| match (e.op, e.done) {
        (Op::Write(v), Some((t, _))) => Some((t, v)),
        _ => None,
    }) else {
        return "the last write was not acknowledged".into();
    };
    let bad: Vec<String> = h
        .iter()
        .filter(|e| e.op == Op::Read && e.invoked > acked)
        .filter_map(|e| match e.done {
            Some((t, Ret::Read(r))) if r != Some(v) => Some(format!(
                "  a read invoked {:.1} ms after the write of {v} was acknowledged \
                 returned {r:?} ({:.1} ms later)",
                (e.invoked - acked) as f64 / 1e6,
                (t - e.invoked) as f64 / 1e6
            )),
            _ => None,
        })
        .collect();
    format!(
        "{} stale reads:\n{}",
        bad.len(),
        bad[..bad.len().min(10)].join("\n")
    )
}

fn entry(process: u32, op: Op, invoked: u64, done: Option<(u64, Ret)>) -> Entry {
    Entry {
        key: 0,
        process,
        op,
        invoked,
        done,
    }
}

#[test]
fn a_member_resumed_after_its_slots_failed_over_serves_no_stale_read() {
    let mut c = cluster::Cluster::start("paused-owner", 3, 2, "none").unwrap();
    let clock = Clock::start();
    let mut process = 0;
    let mut failures = Vec::new();
    for r in 0..3 {
        let key = format!("paused-owner-{r}");
        let h = round(&mut c, &clock, &key, &mut process);
        let reads = h.iter().filter(|e| e.op == Op::Read).count();
        // A history that is not linearizable can take the checker's
        // search exponentially long: one it does not finish in 30 s fails.
        let report = check::check(&h, 1, Duration::from_secs(30));
        if !report.anomalies.is_empty() || !report.unchecked.is_empty() {
            failures.push(format!(
                "round {r} ({reads} reads, checker finished: {}):\n{}",
                report.unchecked.is_empty(),
                stale(&h)
            ));
        }
        c.wait_healthy(Duration::from_secs(60)).unwrap();
    }
    assert!(
        failures.is_empty(),
        "stale reads after the owner resumed:\n{}\n{}",
        failures.join("\n"),
        c.tails(20)
    );
}
