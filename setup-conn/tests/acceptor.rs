//! The acceptor, over a toy record format: peers that send nothing, trickle
//! their bytes or send garbage never hold up a good one; one deadline for a
//! whole record; the oldest waiting peers make room at the cap; malformed,
//! endless and over-long records refused with a reason the peer reads; a
//! peer that hangs up counted without a refusal; SOMAXCONN's accept queue.

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use setup_conn::{refuse, DropReason};
use support::*;

#[test]
fn idle_slow_and_garbage_peers_do_not_delay_a_good_one() {
    let (mut acc, addr) = acceptor(Duration::from_secs(60), 1000);
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let mut slow: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut garbage: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Slow peers send the start of a plausible record, a byte at a time;
    // garbage peers send binary junk with no end of line.
    for s in &mut slow {
        s.write_all(b"r").unwrap();
    }
    for (i, s) in garbage.iter_mut().enumerate() {
        let junk: Vec<u8> = (0..1500)
            .map(|j| ((i * 31 + j * 7) % 255) as u8 + 1)
            .filter(|&b| b != b'\n')
            .collect();
        s.write_all(&junk).unwrap();
    }
    poll_until(&mut acc, Duration::from_secs(30), |a, _| a.pending() == 240);
    for s in &mut slow {
        s.write_all(b"e").unwrap();
    }
    let t = Instant::now();
    let good = send_line(addr, "rec:good");
    let mut ready = poll_until(&mut acc, Duration::from_secs(10), |_, r| !r.is_empty());
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(acc.pending(), 240, "the others still wait");
    let a = ready.pop().unwrap();
    assert_eq!(a.record, "good");
    assert_eq!(a.peer, good.local_addr().unwrap());
    (&a.stream).write_all(b"hi\n").unwrap();
    assert_eq!(answer_within(&good, 5), "hi\n");
    // Garbage past the record's size bound is refused, saying why.
    for s in &mut garbage {
        s.write_all(&[b'x'; 3000]).unwrap();
    }
    poll_until(&mut acc, Duration::from_secs(30), |a, _| {
        a.stats().malformed == 20
    });
    for s in &garbage {
        let a = answer_within(s, 30);
        assert!(
            a.starts_with("refused:bad setup record: no end of line within 4096 bytes"),
            "{a}"
        );
    }
    assert!(idle.iter().all(still_waiting));
    assert!(slow.iter().all(still_waiting));
    let st = acc.stats();
    assert_eq!((st.accepted, st.ready, st.malformed), (241, 1, 20));
    assert_eq!((st.timed_out, st.evicted, st.hung_up), (0, 0, 0));
}

#[test]
fn idle_and_trickling_peers_are_dropped_at_one_deadline_with_a_reason() {
    let deadline = Duration::from_millis(400);
    let (mut acc, addr) = acceptor(deadline, 16);
    let idle = TcpStream::connect(addr).unwrap();
    // A byte every 20 ms, never a newline: each read is quick, the record
    // never completes.
    let trickler = thread::spawn(move || {
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
        a.stats().timed_out == 2
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
    let a = answer_within(&idle, 5);
    assert!(
        a.starts_with("refused:no complete setup record within 400ms"),
        "{a}"
    );
    // The trickling peer learns soon after: its writes fail.
    let seen = trickler.join().unwrap();
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
    assert_eq!(acc.last_drop().unwrap().1, &DropReason::Evicted);
    // The six oldest were told why and closed; the four newest still wait.
    for s in &mut peers[..6] {
        let got = read_to_close(s);
        assert!(
            got.starts_with("refused:too many connections waiting"),
            "{got}"
        );
    }
    assert!(peers[6..].iter().all(still_waiting));
    // A good peer still gets through (the oldest waiting peer makes room).
    let _good = send_line(addr, "rec:good");
    let ready = poll_until(&mut acc, Duration::from_secs(5), |_, r| !r.is_empty());
    assert_eq!(ready[0].record, "good");
    assert!(peers[7..].iter().all(still_waiting));
    assert_eq!(acc.stats().ready, 1);
}

#[test]
fn malformed_endless_and_overfull_records_are_refused_with_a_reason() {
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 16);
    let mut garbage = send_line(addr, "GET / HTTP/1.1");
    // A line and more before any answer: not a peer that waits its turn.
    let mut chatty = TcpStream::connect(addr).unwrap();
    chatty.write_all(b"rec:a\nmore").unwrap();
    let mut endless = TcpStream::connect(addr).unwrap();
    let writer = thread::spawn(move || {
        // Fails once the acceptor gave up: that is the point.
        let _ = endless.write_all(&[b'x'; 4096 * 4]);
        endless
    });
    let ready = poll_until(&mut acc, Duration::from_secs(10), |a, _| {
        a.stats().malformed == 3
    });
    assert!(ready.is_empty());
    assert_eq!(acc.pending(), 0);
    let got = read_to_close(&mut garbage);
    assert_eq!(
        got,
        "refused:bad setup record: not a record: GET / HTTP/1.1\n"
    );
    let got = read_to_close(&mut chatty);
    assert_eq!(
        got,
        "refused:bad setup record: bytes after the setup record\n"
    );
    drop(writer.join().unwrap());
}

#[test]
fn a_reason_quoting_the_peer_is_made_printable_and_a_refusal_reaches_it() {
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 16);
    let mut evil = send_line(addr, "\u{1b}[2Jhi");
    let mut unwanted = send_line(addr, "rec:who");
    let mut ready = poll_until(&mut acc, Duration::from_secs(10), |a, r| {
        a.stats().malformed == 1 && !r.is_empty()
    });
    assert_eq!(
        read_to_close(&mut evil),
        "refused:bad setup record: not a record: ?[2Jhi\n"
    );
    // The caller refuses a record it does not want; the reason is cut.
    let a = ready.pop().unwrap();
    refuse(&a.stream, acc.format(), &"é".repeat(400));
    drop(a);
    let got = read_to_close(&mut unwanted);
    assert_eq!(got, format!("refused:{}\n", "é".repeat(256)));
}

#[test]
fn a_peer_that_hangs_up_is_counted_and_not_answered() {
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 16);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"rec:half").unwrap();
    poll_until(&mut acc, Duration::from_secs(5), |a, _| a.pending() == 1);
    s.shutdown(std::net::Shutdown::Write).unwrap();
    poll_until(&mut acc, Duration::from_secs(5), |a, _| {
        a.stats().hung_up == 1
    });
    assert_eq!(acc.pending(), 0);
    assert_eq!(acc.last_drop().unwrap().1, &DropReason::HungUp);
    assert_eq!(acc.stats().dropped(), 1);
    // Closed without a refusal line.
    assert_eq!(read_to_close(&mut s), "");
}

#[test]
fn a_burst_beyond_std_s_accept_queue_waits_in_the_kernel() {
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 1024);
    // std listens with a queue of 128; the acceptor asks for SOMAXCONN.
    // Nobody accepts while 400 peers connect: with 128, the rest would
    // have their SYNs dropped and not connect within the second.
    let peers: Vec<TcpStream> = (0..400)
        .map(|i| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(1))
                .unwrap_or_else(|e| panic!("peer {i}: {e}"))
        })
        .collect();
    poll_until(&mut acc, Duration::from_secs(10), |a, _| a.pending() == 400);
    assert!(peers.iter().all(still_waiting));
}
