//! Connection setup nobody can block: 1000 idle connections, 50 that send a
//! byte a second and 50 that send garbage are held open against a server,
//! and a good client still connects and gets its answer within a second.
//!
//! The only test in this file, so no other test of this crate competes for
//! the machine while it measures.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvs_client::{Client, ClientOptions, OwnedReply};
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

/// Raises this process's descriptor limit to its hard limit; returns the
/// limit now in force.
fn raise_fd_limit() -> libc::rlim_t {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit for getrlimit to fill and setrlimit to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        let want = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
            return want.rlim_cur;
        }
    }
    r.rlim_cur
}

/// True while the server has neither answered nor closed `s`.
fn held(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let r = (&*s).read(&mut b);
    s.set_nonblocking(false).unwrap();
    matches!(r, Err(e) if e.kind() == ErrorKind::WouldBlock)
}

#[test]
fn idle_slow_and_garbage_connections_never_delay_a_good_client() {
    // Every bad connection costs two descriptors here (both ends live in
    // this process), plus the server's and clients' own.
    let limit = raise_fd_limit();
    let (mut idle_n, slow_n, garbage_n) = (1000usize, 50usize, 50usize);
    let need = 2 * (idle_n + slow_n + garbage_n) as u64 + 256;
    if limit < need {
        idle_n = ((limit.saturating_sub(256) / 2) as usize).saturating_sub(slow_n + garbage_n);
        eprintln!("descriptor limit {limit}: {idle_n} idle connections instead of 1000");
        assert!(
            idle_n >= 100,
            "descriptor limit {limit} is too low for this test"
        );
    }
    let fabric = format!("kvs-setup-{}", std::process::id());
    let server = Server::start(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric.clone()),
        workers: 1,
        ring_size: 1 << 16,
        max_value: 2048,
        stats_interval_s: 0,
        // Long enough that every bad connection is still held when the
        // good client comes, however slow the machine.
        setup_timeout_ms: 120_000,
        max_pending_setups: 4096,
        ..Config::default()
    })
    .unwrap();
    let addr = server.addr();
    // A server that stops accepting fills its backlog: then connecting
    // fails here, after 30 s, instead of hanging for minutes.
    let connect = |n: usize| -> Vec<TcpStream> {
        (0..n)
            .map(|i| {
                TcpStream::connect_timeout(&addr, Duration::from_secs(30))
                    .unwrap_or_else(|e| panic!("connection {i}: {e} (backlog full?)"))
            })
            .collect()
    };
    let idle = connect(idle_n);
    let mut slow = connect(slow_n);
    let mut garbage = connect(garbage_n);
    // Half the garbage is HTTP (refused at its first end of line), half is
    // binary junk with no end of line, sent on and on.
    for s in &mut garbage[..garbage_n / 2] {
        s.write_all(b"GET / HTTP/1.1\r\nHost: kvs\r\n\r\n").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let stop = stop.clone();
        let mut junk: Vec<TcpStream> = garbage.drain(garbage_n / 2..).collect();
        std::thread::spawn(move || {
            let record = br#"{"version":1,"qpn":7,"psn":1,"lid":0,"gid":[0,0,0,0]"#;
            let mut sent = 0;
            while !stop.load(Ordering::Acquire) {
                // Slow connections: one byte of a plausible record a second.
                for s in &mut slow {
                    let _ = s.write_all(&record[sent % record.len()..][..1]);
                }
                sent += 1;
                // Junk: 32 bytes a second each, never a newline.
                for (i, s) in junk.iter_mut().enumerate() {
                    let b: Vec<u8> = (0..32)
                        .map(|j| (0x80 + (i * 13 + j * 7 + sent) % 120) as u8)
                        .collect();
                    let _ = s.write_all(&b);
                }
                for _ in 0..10 {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            (slow, junk)
        })
    };
    // The acceptor has taken every connection; the idle, slow and junk ones
    // wait for their records.
    let waiting = (idle_n + slow_n + garbage_n - garbage_n / 2) as u64;
    let t = Instant::now();
    loop {
        let s = server.setup_stats();
        if s.reader.accepted >= (idle_n + slow_n + garbage_n) as u64 && s.pending >= waiting {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "never accepted all: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The good client: connect, put, get.
    let dev = copyrpc::transport::DeviceSpec {
        name: "sim0",
        fabric: Some(&fabric),
        software: "sim0",
    }
    .open()
    .unwrap();
    let t = Instant::now();
    let mut c: Client<u64> = Client::connect(
        addr,
        &dev,
        ClientOptions {
            ring_size: 1 << 16,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    c.wait_for(|c, t| c.put(b"k", b"v", t)).unwrap();
    let r = c.wait_for(|c, t| c.get(b"k", t)).unwrap();
    let took = t.elapsed();
    assert_eq!(r, OwnedReply::Value(b"v".to_vec()));
    eprintln!("the good client's connect, put and get took {took:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // The bad connections were all still there while it did.
    let s = server.setup_stats();
    assert!(s.pending >= waiting, "{s:?}");
    assert!(idle.iter().all(held), "every idle connection is still held");
    stop.store(true, Ordering::Release);
    let (slow, junk) = feeder.join().unwrap();
    assert!(slow.iter().all(held) && junk.iter().all(held));
    // The HTTP ones were refused as bad records, and nothing else was.
    assert_eq!(s.reader.malformed, (garbage_n / 2) as u64, "{s:?}");
    assert_eq!((s.reader.timed_out, s.reader.evicted), (0, 0), "{s:?}");
    drop(c);
    drop((idle, slow, junk, garbage));
    server.shutdown();
    Fabric::remove_if_unused(&fabric);
}
