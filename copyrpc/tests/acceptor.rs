//! The concurrent setup reader (`conn::Acceptor`) over copyrpc's setup
//! line, end to end: a good peer gets its endpoint beside idle ones, garbage
//! is refused at copyrpc's 4096-byte bound, and a refused peer fails with
//! the reason and keeps no endpoint. Deadlines, the cap on waiting peers,
//! refusals and running out of descriptors are setup-conn's, tested there.

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
/// "not ok". Publishes how many peers wait.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waiting: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<AcceptorStats>>,
}

impl Server {
    fn start(fabric: &str, opts: AcceptorOptions) -> Server {
        let listener = Listener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut acc = Acceptor::new(listener, opts).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let waiting = Arc::new(AtomicU64::new(0));
        let (s, w, f) = (stop.clone(), waiting.clone(), fabric.to_owned());
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
            }
            acc.stats()
        });
        Server {
            addr,
            stop,
            waiting,
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
fn a_good_peer_gets_its_endpoint_beside_idle_and_garbage_ones() {
    let fabric = format!("acc-good-{}", std::process::id());
    let server = Server::start(&fabric, AcceptorOptions::default());
    let addr = server.addr;
    let idle: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(&[b'x'; 1000]).unwrap();
    server.wait_until("idle and garbage peers waiting", |s| s.waiting() >= 6);
    let took = good_client(&fabric, addr);
    assert!(took < Duration::from_secs(10), "setup took {took:?}");
    // Garbage past the record's size bound is refused, saying why.
    garbage.write_all(&[b'x'; 4000]).unwrap();
    let a = answer_within(&garbage, 30);
    assert!(a.contains("no end of line within 4096 bytes"), "{a}");
    assert!(a.starts_with("{\"version\":"), "a refusal line: {a}");
    assert!(idle.iter().all(still_waiting));
    let stats = server.stop();
    assert_eq!((stats.ready, stats.malformed), (1, 1));
    drop(idle);
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_refused_peer_fails_with_the_reason_and_keeps_no_endpoint() {
    let fabric = format!("acc-refuse-{}", std::process::id());
    let server = Server::start(&fabric, AcceptorOptions::default());
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
    assert_eq!((stats.malformed, stats.ready), (0, 1));
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}
