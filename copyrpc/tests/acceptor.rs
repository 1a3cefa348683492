//! The concurrent setup reader (`conn::Acceptor`): peers that send nothing,
//! send slowly or send garbage never hold up a good one; deadlines, the cap
//! on waiting peers, the record's size bound, and refusals the peer can read.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use copyrpc::conn::{connect_with, Acceptor, AcceptorOptions, AcceptorStats, ConnError, Listener};
use copyrpc::ContextBuilder;
use mlx5::device::Context as Device;
use mlx5::sim::fabric::Fabric;

/// An acceptor on its own thread: every peer whose private data is `ok` gets
/// an endpoint (answered with `hi`), every other one is refused with
/// "not ok". Publishes how many peers wait and the counters.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waiting: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<AcceptorStats>>,
}

impl Server {
    fn start(fabric: &str, opts: AcceptorOptions) -> Server {
        let listener = Listener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut acc = Acceptor::new(listener, opts).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let waiting = Arc::new(AtomicU64::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let (s, w, a, f) = (
            stop.clone(),
            waiting.clone(),
            accepted.clone(),
            fabric.to_owned(),
        );
        let thread = thread::spawn(move || {
            let dev = Device::open_in(&f, "sim1").unwrap();
            let mut ctx = ContextBuilder::new()
                .ring_size(1 << 12)
                .build(&dev, |_: u64, _| {})
                .unwrap();
            let mut ready = Vec::new();
            let mut conns = Vec::new();
            while !s.load(Ordering::Acquire) {
                acc.poll(Duration::from_millis(20), &mut ready).unwrap();
                for p in ready.drain(..) {
                    if p.private_data() == b"ok" {
                        conns.push(p.establish(&mut ctx, b"hi").unwrap());
                    } else {
                        p.refuse("not ok");
                    }
                }
                w.store(acc.pending() as u64, Ordering::Release);
                a.store(acc.stats().accepted, Ordering::Release);
            }
            acc.stats()
        });
        Server {
            addr,
            stop,
            waiting,
            accepted,
            thread: Some(thread),
        }
    }

    /// Waits (up to 60 s) until `f` holds.
    fn wait_until(&self, what: &str, f: impl Fn(&Server) -> bool) {
        let t = Instant::now();
        while !f(self) {
            assert!(t.elapsed() < Duration::from_secs(60), "never: {what}");
            thread::sleep(Duration::from_millis(5));
        }
    }

    fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Acquire)
    }

    fn stop(mut self) -> AcceptorStats {
        self.stop.store(true, Ordering::Release);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Sets up one endpoint with private data `ok`; returns how long it took.
fn good_client(fabric: &str, addr: SocketAddr) -> Duration {
    let dev = Device::open_in(fabric, "sim0").unwrap();
    let mut ctx = ContextBuilder::new()
        .ring_size(1 << 12)
        .build(&dev, |_: u64, _| {})
        .unwrap();
    let t = Instant::now();
    let c = connect_with(addr, &mut ctx, b"ok").unwrap();
    let took = t.elapsed();
    assert_eq!(c.peer_private_data(), b"hi");
    took
}

/// The line the server sent before closing, if any, within `secs`.
fn answer_within(s: &TcpStream, secs: u64) -> String {
    s.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line
}

/// True when the server has neither answered nor closed `s` yet.
fn still_waiting(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let r = (&*s).read(&mut b);
    s.set_nonblocking(false).unwrap();
    matches!(r, Err(e) if e.kind() == ErrorKind::WouldBlock)
}

#[test]
fn idle_slow_and_garbage_peers_do_not_delay_a_good_one() {
    let fabric = format!("acc-mix-{}", std::process::id());
    let server = Server::start(
        &fabric,
        AcceptorOptions {
            deadline: Duration::from_secs(60),
            max_pending: 1000,
        },
    );
    let addr = server.addr;
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let mut slow: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut garbage: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Slow peers send the start of a plausible record, a byte at a time;
    // garbage peers send binary junk with no end of line.
    for s in &mut slow {
        s.write_all(b"{").unwrap();
    }
    for (i, s) in garbage.iter_mut().enumerate() {
        let junk: Vec<u8> = (0..1500)
            .map(|j| ((i * 31 + j * 7) % 255) as u8 + 1)
            .collect();
        let junk: Vec<u8> = junk.into_iter().filter(|&b| b != b'\n').collect();
        s.write_all(&junk).unwrap();
    }
    server.wait_until("every peer accepted", |s| {
        s.accepted.load(Ordering::Acquire) >= 240
    });
    server.wait_until("idle, slow and garbage peers waiting", |s| {
        s.waiting() >= 240
    });
    for s in &mut slow {
        s.write_all(b"\"").unwrap();
    }
    let took = good_client(&fabric, addr);
    // Before the acceptor, the first idle peer held every later one for its
    // 30-second read timeout.
    assert!(took < Duration::from_secs(10), "setup took {took:?}");
    assert!(
        server.waiting() >= 240,
        "the others still wait: {}",
        server.waiting()
    );
    // Garbage past the record's size bound is refused, saying why.
    for s in &mut garbage {
        let junk = vec![b'x'; 3000];
        s.write_all(&junk).unwrap();
    }
    for s in &garbage {
        let a = answer_within(s, 30);
        assert!(a.contains("no end of line within 4096 bytes"), "{a}");
    }
    assert!(idle.iter().all(still_waiting));
    assert!(slow.iter().all(still_waiting));
    let stats = server.stop();
    assert_eq!(stats.ready, 1);
    assert_eq!(stats.malformed, 20);
    assert_eq!((stats.timed_out, stats.evicted), (0, 0));
    drop((idle, slow));
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_peer_past_its_deadline_is_dropped_with_a_reason() {
    let fabric = format!("acc-deadline-{}", std::process::id());
    let deadline = Duration::from_millis(300);
    let server = Server::start(
        &fabric,
        AcceptorOptions {
            deadline,
            max_pending: 16,
        },
    );
    let t = Instant::now();
    let idle = TcpStream::connect(server.addr).unwrap();
    let mut slow = TcpStream::connect(server.addr).unwrap();
    // One byte every 50 ms keeps it busy but never completes a record.
    let writer = thread::spawn(move || {
        for _ in 0..200 {
            if slow.write_all(b" ").is_err() {
                return true;
            }
            thread::sleep(Duration::from_millis(50));
        }
        false
    });
    let a = answer_within(&idle, 30);
    assert!(a.contains("no complete setup record within"), "{a}");
    assert!(t.elapsed() >= deadline, "dropped after {:?}", t.elapsed());
    assert!(
        writer.join().unwrap(),
        "the slow peer's connection was closed"
    );
    good_client(&fabric, server.addr);
    let stats = server.stop();
    assert_eq!((stats.timed_out, stats.ready), (2, 1));
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn the_oldest_waiting_peer_makes_room_when_the_cap_is_reached() {
    let fabric = format!("acc-cap-{}", std::process::id());
    let server = Server::start(
        &fabric,
        AcceptorOptions {
            deadline: Duration::from_secs(60),
            max_pending: 3,
        },
    );
    let mut peers = Vec::new();
    for k in 1..=5u64 {
        peers.push(TcpStream::connect(server.addr).unwrap());
        // One at a time, so they are accepted in this order.
        server.wait_until("accepted", |s| s.accepted.load(Ordering::Acquire) >= k);
    }
    for p in &peers[..2] {
        let a = answer_within(p, 30);
        assert!(a.contains("too many connections waiting"), "{a}");
    }
    assert!(peers[2..].iter().all(still_waiting));
    assert_eq!(server.waiting(), 3);
    // A good peer still gets through (if its record was not there the
    // moment it was accepted, the oldest waiting peer made room for it).
    good_client(&fabric, server.addr);
    assert!(peers[3..].iter().all(still_waiting));
    let stats = server.stop();
    assert_eq!((stats.ready, stats.accepted), (1, 6));
    assert!((2..=3).contains(&stats.evicted), "{stats:?}");
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn bytes_after_the_record_and_refusals_reach_the_peer() {
    let fabric = format!("acc-refuse-{}", std::process::id());
    let server = Server::start(&fabric, AcceptorOptions::default());
    // A line and more before any answer: not a peer that waits its turn.
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.write_all(b"{}\nmore").unwrap();
    let a = answer_within(&s, 30);
    assert!(a.contains("bytes after the setup record"), "{a}");
    // A well-formed record the server does not want: the connecting side
    // fails with the server's reason.
    let dev = Device::open_in(&fabric, "sim0").unwrap();
    let mut ctx = ContextBuilder::new()
        .ring_size(1 << 12)
        .build(&dev, |_: u64, _| {})
        .unwrap();
    match connect_with(server.addr, &mut ctx, b"no") {
        Err(ConnError::Refused(why)) => assert_eq!(why, "not ok"),
        other => panic!("{other:?}"),
    }
    assert_eq!(ctx.endpoints(), 0, "the refused setup left no endpoint");
    let stats = server.stop();
    assert_eq!((stats.malformed, stats.ready), (1, 1));
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}
