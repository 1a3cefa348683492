//! The setup acceptor: one thread reads every peer's setup record, under one
//! deadline for the whole record and a cap on how many wait; a trickling
//! peer is dropped at its deadline, the oldest waiting peers make room for
//! new ones, garbage is refused with a reason, and a good setup is accepted
//! at once however many idle peers wait.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use mlx5::device::ExecMode;
use mpib::conn::{connect_with, Acceptor, AcceptorOptions, DropReason, Listener};
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
fn a_trickling_peer_is_dropped_at_its_deadline() {
    let deadline = Duration::from_millis(400);
    let (mut acc, addr) = acceptor(deadline, 16);
    // A byte every 20 ms, never a newline: each read is quick, the record
    // never completes.
    let peer = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if s.write_all(b" ").is_err() {
                return t.elapsed();
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("still connected after 10 s");
    });
    let t = Instant::now();
    let ready = poll_until(&mut acc, Duration::from_secs(10), |a, _| {
        a.stats().timed_out == 1
    });
    let dropped_after = t.elapsed();
    assert!(ready.is_empty());
    assert!(dropped_after >= deadline, "{dropped_after:?}");
    assert!(
        dropped_after < deadline + Duration::from_secs(1),
        "{dropped_after:?}"
    );
    assert_eq!(acc.pending(), 0);
    let (_, why) = acc.last_drop().unwrap();
    assert_eq!(why, &DropReason::Deadline(deadline));
    // The peer learns soon after: its writes fail.
    let seen = peer.join().unwrap();
    assert!(seen < deadline + Duration::from_secs(2), "{seen:?}");
}

#[test]
fn pending_setups_beyond_the_cap_drop_the_oldest() {
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 4);
    let mut peers = Vec::new();
    for i in 0..10 {
        peers.push(TcpStream::connect(addr).unwrap());
        // One at a time, so that they wait in the order they came.
        poll_until(&mut acc, Duration::from_secs(5), |a, _| {
            a.stats().accepted == i + 1
        });
    }
    assert_eq!(acc.pending(), 4);
    let st = acc.stats();
    assert_eq!((st.accepted, st.evicted, st.timed_out), (10, 6, 0));
    // The six oldest were told why and closed; the four newest still wait.
    for s in &mut peers[..6] {
        let got = read_to_close(s);
        assert!(
            got.contains("\"refused\"") && got.contains("too many"),
            "{got}"
        );
    }
    for s in &mut peers[6..] {
        s.set_nonblocking(true).unwrap();
        let e = s.read(&mut [0u8; 16]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
    }
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
    assert!(got.contains("bad setup record"), "{got}");
    drop(writer.join().unwrap());
}

#[test]
fn a_good_setup_after_many_idle_ones_is_accepted_promptly() {
    let fabric = unique_name("mpib", "acceptor");
    let _g = FabricGuard(fabric.clone());
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 1024);
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    poll_until(&mut acc, Duration::from_secs(10), |a, _| a.pending() == 300);
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
    // The 300 idle peers, 30 s from their deadline, held up nothing.
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(acc.pending(), 300);
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
