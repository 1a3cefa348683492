//! The bulk port under idle connections: hundreds of peers that connect to
//! a member's bulk port and send nothing take no thread each (the server
//! runs in this process, so its threads are this process's), and a
//! migration from that member goes through while they wait.
//!
//! One test in this file: other tests running at the same time would start
//! threads of their own and spoil the count.

use kvs_proto::MemberId;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, ControlOptions, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus};
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

mod support;

/// Idle connections opened to the bulk port.
const IDLE: usize = 300;

/// A member of 256 slots and two workers. Setup records get a minute, so
/// that the idle connections still wait when the migration is over.
fn config(fabric: &str, join: Option<SocketAddr>) -> Config {
    Config {
        workers: 2,
        slots: 256,
        join: join.map(|a| a.to_string()),
        setup_timeout_ms: 60_000,
        ..support::test_config(fabric)
    }
}

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Connections to local TCP port `port` that a process has accepted:
/// established, with a socket inode (one still in the accept queue has
/// none).
fn accepted(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && f.get(3) == Some(&"01") && f.get(9) != Some(&"0") {
                n += 1;
            }
        }
    }
    n
}

fn status(cc: &mut ControlClient, addr: SocketAddr) -> MemberStatus {
    match cc.request(addr, &ControlRequest::Status).unwrap() {
        ControlReply::Status(s) => s,
        other => panic!("{other:?}"),
    }
}

fn value(i: u32) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat((i % 300) as usize)).into_bytes()
}

#[test]
fn idle_connections_to_the_bulk_port_take_no_thread_and_do_not_stop_a_migration() {
    let fabric = format!("kvs-bulk-port-{}", std::process::id());
    let a = Server::start(config(&fabric, None)).unwrap();
    let b = Server::start(config(&fabric, Some(a.addr()))).unwrap();
    let mut c = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    let n = 2000u32;
    for i in 0..n {
        let k = format!("key{i}");
        assert_eq!(
            c.wait_for(|c, t| c.put(k.as_bytes(), &value(i), t)),
            Ok(OwnedReply::Done)
        );
    }
    // Member 0's bulk port, as the map publishes it.
    let member = &c.map().members()[0];
    let bulk = SocketAddr::new(member.addr.ip(), member.bulk_port);
    let mut cc =
        ControlClient::new(&support::client_device(&fabric), ControlOptions::default()).unwrap();

    let threads_before = threads();
    let idle: Vec<TcpStream> = (0..IDLE)
        .map(|_| TcpStream::connect(bulk).unwrap())
        .collect();
    // Wait until the server has taken them all out of the accept queue.
    let t = Instant::now();
    while accepted(bulk.port()) < IDLE {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the bulk port accepted {} of {IDLE} connections",
            accepted(bulk.port())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Give a server that starts a thread per connection time to show it.
    std::thread::sleep(Duration::from_millis(500));
    let grown = threads().saturating_sub(threads_before);
    assert!(
        grown < 10,
        "{grown} more threads with {IDLE} idle bulk connections"
    );

    // Everything to member 1, over that bulk port, while they wait.
    let r = cc
        .request(
            a.addr(),
            &ControlRequest::Migrate {
                first: 0,
                end: 256,
                to: MemberId(1),
            },
        )
        .unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
    let t = Instant::now();
    let m = loop {
        if let Some(m) = status(&mut cc, a.addr()).migration.filter(|m| m.finished) {
            break m;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the migration did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!((m.error, m.slots_done), (None, 256));
    // Every record is at member 1.
    let mut c = support::connect(b.addr(), &fabric, Default::default()).unwrap();
    for i in 0..n {
        let k = format!("key{i}");
        assert_eq!(
            c.wait_for(|c, t| c.get(k.as_bytes(), t)),
            Ok(OwnedReply::Value(value(i))),
            "{k}"
        );
    }
    let keys: u64 = status(&mut cc, b.addr())
        .workers
        .iter()
        .map(|w| w.keys)
        .sum();
    assert_eq!(keys, u64::from(n));
    // The idle connections still wait (within their deadline and the cap):
    // nobody was dropped to make room for the transfers.
    for s in &idle {
        s.set_nonblocking(true).unwrap();
        let e = s.peek(&mut [0u8; 1]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    }
    drop((idle, c, cc));
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}
