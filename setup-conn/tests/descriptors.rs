//! Out of descriptors (accept(2) fails with EMFILE): the oldest waiting peer
//! makes room for the next; with nobody waiting, the listener rests instead
//! of spinning. Alone in its test binary: it lowers the process's open-file
//! limit.

mod support;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::*;

/// The open-file limit that leaves exactly `k` descriptors free: the
/// lowest free numbers are taken, the limit set just above them, and they
/// are freed again (every lower number is in use).
fn room_for(k: usize) -> u64 {
    // SAFETY: dup(2) of standard input and close(2) of the descriptors it
    // returned, which nothing else owns.
    unsafe {
        let fds: Vec<i32> = (0..=k).map(|_| libc::dup(0)).collect();
        assert!(fds.iter().all(|&fd| fd >= 0));
        for &fd in &fds {
            libc::close(fd);
        }
        // The (k+1)-th lowest free number is the first one not allowed.
        fds[k] as u64
    }
}

/// Sets the soft open-file limit; returns the old one.
fn set_soft_limit(n: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write one rlimit struct
    // that lives on this stack frame.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        let old = r.rlim_cur;
        r.rlim_cur = n;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        old
    }
}

#[test]
fn out_of_descriptors_the_oldest_make_room_or_the_listener_rests() {
    let (mut acc, addr) = acceptor(Duration::from_secs(30), 1024);
    // Five peers queue with no descriptor left to accept them.
    let idle: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let old = set_soft_limit(room_for(0));
    let mut ready = Vec::new();
    acc.poll(Duration::from_millis(100), |a| ready.push(a))
        .unwrap();
    assert_eq!(acc.stats().accepted, 0);
    // Nobody to drop: the listener sits out the next poll instead of
    // returning at once for a socket it cannot accept.
    let t = Instant::now();
    acc.poll(Duration::from_secs(5), |a| ready.push(a)).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(20),
        "{:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(ready.is_empty());
    // A good peer queues behind them; with room for three, each peer
    // accepted past that evicts the oldest waiting one, and the good one
    // gets through.
    set_soft_limit(old);
    let good = send_line(addr, "rec:good");
    set_soft_limit(room_for(3));
    let ready = poll_until(&mut acc, Duration::from_secs(10), |_, r| !r.is_empty());
    assert_eq!(ready[0].record, "good");
    let st = acc.stats();
    assert_eq!((st.accepted, st.ready), (6, 1), "{st:?}");
    // Three to make room; Linux's accept(2) fails with EMFILE before it
    // looks at the queue, so the call after the good peer's may evict one
    // more.
    assert!((3..=5).contains(&st.evicted), "{st:?}");
    set_soft_limit(old);
    drop((idle, good, ready));
}
