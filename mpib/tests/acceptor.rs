//! The setup acceptor over mpib's setup line, end to end: a good setup is
//! accepted at once beside idle peers and gets its communicator, an endless
//! record is refused at mpib's 16 KiB bound, a malformed one with a reason,
//! and a refused peer learns why. Deadlines, the cap on waiting peers and
//! running out of descriptors are setup-conn's, tested there.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use mlx5::device::ExecMode;
use mpib::conn::{connect_with, Acceptor, AcceptorOptions, Listener};
use mpib::{Config, SetupError};
use support::*;

fn acceptor(deadline: Duration, max_pending: usize) -> (Acceptor, SocketAddr) {
    let l = Listener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let acc = Acceptor::new(
        l,
        AcceptorOptions {
            deadline,
            max_pending,
        },
    )
    .unwrap();
    (acc, addr)
}

/// Polls `acc` until `done` says so (at most `limit`); what was ready.
fn poll_until(
    acc: &mut Acceptor,
    limit: Duration,
    mut done: impl FnMut(&Acceptor, &[mpib::conn::PendingConnection]) -> bool,
) -> Vec<mpib::conn::PendingConnection> {
    let t = Instant::now();
    let mut ready = Vec::new();
    while !done(acc, &ready) {
        assert!(t.elapsed() < limit, "{:?}", acc.stats());
        acc.poll(Duration::from_millis(10), &mut ready).unwrap();
    }
    ready
}

/// Everything `s` receives until its peer closes (at most 5 s).
fn read_to_close(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 512];
    loop {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&b[..n]),
            // A reset after the refusal line: what arrived is enough.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("{e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_malformed_or_endless_record_is_refused_with_a_reason() {
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 16);
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut endless = TcpStream::connect(addr).unwrap();
    let writer = thread::spawn(move || {
        // Fails once the acceptor gave up: that is the point.
        let _ = endless.write_all(&vec![b'x'; mpib::conn::MAX_SETUP_RECORD * 4]);
        endless
    });
    let ready = poll_until(&mut acc, Duration::from_secs(10), |a, _| {
        a.stats().malformed == 2
    });
    assert!(ready.is_empty());
    assert_eq!(acc.pending(), 0);
    let got = read_to_close(&mut garbage);
    let head = format!(
        "{{\"version\":{},\"refused\":\"bad setup record: ",
        mpib::COMM_INFO_VERSION
    );
    assert!(got.starts_with(&head), "{got}");
    let mut endless = writer.join().unwrap();
    let got = read_to_close(&mut endless);
    assert!(got.contains("no end of line within 16384 bytes"), "{got}");
}

#[test]
fn a_good_setup_after_many_idle_ones_is_accepted_promptly() {
    let fabric = unique_name("mpib", "acceptor");
    let _g = FabricGuard(fabric.clone());
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 1024);
    let idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    poll_until(&mut acc, Duration::from_secs(10), |a, _| a.pending() == 20);
    let f2 = fabric.clone();
    let client = thread::spawn(move || {
        let devs = open(&f2, ExecMode::Inline, 2);
        let t = Instant::now();
        let (comm, answer) = connect_with(addr, &devs, &Config::default(), b"hello").unwrap();
        (t.elapsed(), answer, comm, devs)
    });
    let devs = open(&fabric, ExecMode::Inline, 4);
    let t = Instant::now();
    let mut ready = poll_until(&mut acc, Duration::from_secs(10), |_, r| !r.is_empty());
    // The idle peers, 30 s from their deadline, held up nothing.
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(acc.pending(), 20);
    let p = ready.pop().unwrap();
    assert_eq!(p.private_data(), b"hello");
    let comm = p
        .establish(&devs[2..], &Config::default(), b"welcome")
        .unwrap();
    let (took, answer, client_comm, _client_devs) = client.join().unwrap();
    assert_eq!(answer, b"welcome");
    assert!(took < Duration::from_secs(5), "{took:?}");
    drop((comm, client_comm));
    drop(idle);
}

#[test]
fn a_refused_peer_learns_why() {
    let fabric = unique_name("mpib", "refused");
    let _g = FabricGuard(fabric.clone());
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 16);
    let f2 = fabric.clone();
    let client = thread::spawn(move || {
        let devs = open(&f2, ExecMode::Inline, 2);
        connect_with(addr, &devs, &Config::default(), b"who").map(|_| ())
    });
    let mut ready = poll_until(&mut acc, Duration::from_secs(10), |_, r| !r.is_empty());
    ready.pop().unwrap().refuse("no open ticket");
    match client.join().unwrap() {
        Err(SetupError::Peer(m)) => assert!(m.contains("no open ticket"), "{m}"),
        other => panic!("{other:?}"),
    }
}
