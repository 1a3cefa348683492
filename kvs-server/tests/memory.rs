//! `max_memory`: PUTs until the cap get a clear out-of-memory error, after
//! which reads, overwrites that fit, patches and deletes still work; and the
//! real process's resident memory stays within the cap plus a stated
//! overhead.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kvs_client::{Client, ClientOptions, KvError, OwnedReply, Reply, SubmitError};
use kvs_server::store::memory;
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{connect, test_config, ServerProcess};

fn key(i: u32) -> Vec<u8> {
    format!("user{i:010}").into_bytes()
}

fn value(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// PUTs `len`-byte values under keys 0, 1, … (pipelined) until 64 answers in
/// a row are out-of-memory errors, so every worker's share is full. Returns
/// the keys stored and the first out-of-memory message.
fn fill(c: &mut Client<u64>, len: usize) -> (Vec<u32>, String) {
    let mut stored = Vec::new();
    let mut refused: Option<String> = None;
    let mut streak = 0u32;
    let mut next = 0u32;
    let t = Instant::now();
    while streak < 64 {
        assert!(t.elapsed() < Duration::from_secs(120), "never full");
        for _ in 0..256 {
            match c.put(&key(next), &value(next, len), u64::from(next)) {
                Ok(()) => next += 1,
                Err(SubmitError::Busy(_)) => break,
                Err(e) => panic!("{e}"),
            }
        }
        c.poll(|i, r| match r {
            Ok(Reply::Done) => {
                stored.push(i as u32);
                streak = 0;
            }
            Err(KvError::OutOfMemory(m)) => {
                refused.get_or_insert(m);
                streak += 1;
            }
            other => panic!("key {i}: {other:?}"),
        });
    }
    // Answers still on the wire.
    while c.in_flight() > 0 {
        c.poll(|i, r| {
            if let Ok(Reply::Done) = r {
                stored.push(i as u32)
            }
        });
    }
    stored.sort_unstable();
    (stored, refused.expect("refused"))
}

#[test]
fn puts_until_the_cap_are_refused_and_reads_deletes_and_overwrites_go_on() {
    let fabric = format!("kvs-mem-{}", std::process::id());
    let max_memory = 2u64 << 20;
    let server = Server::start(Config {
        ring_size: 1 << 18,
        max_memory,
        ..test_config(&fabric)
    })
    .unwrap();
    let mut c = connect(
        server.addr(),
        &fabric,
        ClientOptions {
            ring_size: 1 << 18,
            value_allowance: 2048,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let len = 1000;
    let (stored, msg) = fill(&mut c, len);
    assert!(
        msg.starts_with(&format!("max_memory {max_memory} bytes reached (worker ")),
        "{msg}"
    );
    let e = KvError::OutOfMemory(msg).to_string();
    assert!(e.starts_with("out of memory: max_memory"), "{e}");
    // What the records cost is all the cap allowed: each worker's share is
    // full to within one record.
    let rec = memory::record_cost(key(0).len(), len) as u64;
    let share = max_memory / 2;
    assert!(stored.len() as u64 * rec <= max_memory);
    let t = Instant::now();
    loop {
        let used: Vec<u64> = server
            .stats()
            .iter()
            .map(|s| s.memory_used.load(std::sync::atomic::Ordering::Relaxed))
            .collect();
        if used.iter().all(|&u| u <= share && u > share - rec) {
            assert_eq!(used.iter().sum::<u64>(), stored.len() as u64 * rec);
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{used:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every stored key reads back; a refused one was not stored.
    for &i in &stored {
        let r = c.wait_for(|c, t| c.get(&key(i), t)).unwrap();
        assert_eq!(r, OwnedReply::Value(value(i, len)), "key {i}");
    }
    let missing = (0..).find(|i| stored.binary_search(i).is_err()).unwrap();
    let r = c.wait_for(|c, t| c.get(&key(missing), t)).unwrap();
    assert_eq!(r, OwnedReply::NotFound);
    // At the cap: overwrites that fit, patches, deletes, and a PUT where a
    // delete made room.
    let (a, b) = (stored[0], stored[1]);
    let put = |c: &mut Client<u64>, k: u32, v: &[u8]| c.wait_for(|c, t| c.put(&key(k), v, t));
    assert_eq!(put(&mut c, a, &[9; 1000]), Ok(OwnedReply::Done));
    assert_eq!(put(&mut c, a, &[8; 700]), Ok(OwnedReply::Done));
    let r = c.wait_for(|c, t| c.update_range(&key(b), 10, b"patched", t));
    assert_eq!(r, Ok(OwnedReply::Done));
    assert!(matches!(
        put(&mut c, a, &[7; 2000]),
        Err(KvError::OutOfMemory(_))
    ));
    assert_eq!(
        c.wait_for(|c, t| c.get(&key(a), t)),
        Ok(OwnedReply::Value(vec![8; 700]))
    );
    assert_eq!(
        c.wait_for(|c, t| c.delete(&key(b), t)),
        Ok(OwnedReply::Done)
    );
    assert_eq!(put(&mut c, b, &value(b, len)), Ok(OwnedReply::Done));
    drop(c);
    server.shutdown();
    Fabric::remove_if_unused(&fabric);
}

/// Resident memory of process `pid`, in bytes: (VmRSS, RssAnon, RssShmem).
fn rss(pid: u32) -> (u64, u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        let line = s
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"));
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap();
        kb * 1024
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssShmem:"))
}

/// The real kvs-server process, capped at 64 MiB and filled until it
/// refuses: its anonymous resident memory (the heap, where the records
/// live) grows by no more than the cap plus 1/8 of it (allocator slack: the
/// hash table's old copy while it doubles, free chunks malloc keeps) over
/// the idle process's. Shared memory (RssShmem: the software device's rings
/// and queues, which the client's traffic touches page by page) is not the
/// records', and is bounded by the rings' sizes instead.
#[test]
fn the_process_stays_within_the_cap() {
    let fabric = format!("kvs-mem-rss-{}", std::process::id());
    let max_memory: u64 = 64 << 20;
    let ring: u64 = 1 << 20;
    let server =
        ServerProcess::start_on(&fabric, &["--stats-interval", "1", "--max-memory", "64M"]);
    let pid = server.child.id();
    let mut c = connect(
        server.addr,
        &fabric,
        ClientOptions {
            ring_size: ring,
            ..ClientOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {}", server.printed()));
    let idle = rss(pid);
    let len = 1000;
    let (stored, msg) = fill(&mut c, len);
    assert!(
        msg.starts_with("max_memory 67108864 bytes reached"),
        "{msg}"
    );
    let full = rss(pid);
    let rec = memory::record_cost(key(0).len(), len) as u64;
    assert!(stored.len() as u64 * rec <= max_memory);
    assert!(stored.len() as u64 * rec > max_memory - 2 * rec);
    eprintln!(
        "idle: VmRSS {} KiB (anon {}, shmem {}); full ({} records): VmRSS {} KiB (anon {}, \
         shmem {}); cap {} KiB",
        idle.0 >> 10,
        idle.1 >> 10,
        idle.2 >> 10,
        stored.len(),
        full.0 >> 10,
        full.1 >> 10,
        full.2 >> 10,
        max_memory >> 10
    );
    let slack = max_memory / 8;
    assert!(
        full.1 <= idle.1 + max_memory + slack,
        "anonymous RSS {} > idle {} + cap {max_memory} + {slack}",
        full.1,
        idle.1
    );
    // And the charge is no wild overestimate: the records did take most of it.
    assert!(full.1 - idle.1 >= max_memory / 4 * 3, "{full:?} {idle:?}");
    // Two workers' receive rings and what they send back, touched by the load.
    assert!(
        full.2 <= idle.2 + 4 * ring + (8 << 20),
        "shared RSS {} (idle {})",
        full.2,
        idle.2
    );
    // Still serving reads.
    let mut seen = HashMap::new();
    for &i in stored.iter().step_by(97) {
        let r = c.wait_for(|c, t| c.get(&key(i), t)).unwrap();
        assert_eq!(r, OwnedReply::Value(value(i, len)), "key {i}");
        seen.insert(i, ());
    }
    assert!(seen.len() > 100);
    // The stats line shows the usage against the cap.
    let t = Instant::now();
    while !server.printed().contains("of 64.0 MiB (") {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{}",
            server.printed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(c);
    let out = server.output();
    assert!(out.contains("keys, "), "{out}");
    Fabric::remove_if_unused(&fabric);
}
