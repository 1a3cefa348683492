//! One setup line: read in chunks and never past its newline, stopped at
//! its bound, a closed peer seen; read blocking under one deadline however
//! the peer spreads its bytes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use setup_conn::{read_line, Fill, LineError, LineReader};

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

#[test]
fn a_line_is_read_in_chunks_and_nothing_after_it() {
    let (mut c, s) = pair();
    s.set_nonblocking(true).unwrap();
    let mut r = LineReader::new(4096);
    assert_eq!(r.fill(&s).unwrap(), Fill::Waiting);
    c.write_all(b"{\"a\":").unwrap();
    c.flush().unwrap();
    let t = Instant::now();
    while r.line().len() < 5 {
        assert!(matches!(r.fill(&s).unwrap(), Fill::More | Fill::Waiting));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
    c.write_all(b"1}\nAFTER").unwrap();
    let t = Instant::now();
    loop {
        match r.fill(&s).unwrap() {
            Fill::Line => break,
            Fill::More | Fill::Waiting => assert!(t.elapsed() < Duration::from_secs(5)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(r.line(), b"{\"a\":1}");
    assert!(r.trailing(), "AFTER came with the line");
    // The bytes after the newline are still in the socket.
    s.set_nonblocking(false).unwrap();
    let mut rest = [0u8; 5];
    (&s).read_exact(&mut rest).unwrap();
    assert_eq!(&rest, b"AFTER");
}

#[test]
fn a_line_without_end_stops_at_the_bound_and_a_closed_peer_is_seen() {
    let max = 16 * 1024;
    let (mut c, s) = pair();
    let w = std::thread::spawn(move || {
        // Fails once the reader has closed: that is fine.
        let _ = c.write_all(&vec![b'x'; max + 100]);
    });
    let mut r = LineReader::new(max);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let f = loop {
        match r.fill(&s).unwrap() {
            Fill::More | Fill::Waiting => continue,
            f => break f,
        }
    };
    assert_eq!(f, Fill::TooLong);
    assert_eq!(r.line().len(), max);
    drop(s);
    w.join().unwrap();
    let (c, s) = pair();
    drop(c);
    assert_eq!(LineReader::new(max).fill(&s).unwrap(), Fill::Closed);
}

#[test]
fn a_blocking_read_returns_the_line_and_leaves_the_rest() {
    let (mut c, s) = pair();
    c.write_all(b"one\ntwo\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    assert_eq!(read_line(&s, 64, deadline).unwrap(), b"one");
    assert_eq!(read_line(&s, 64, deadline).unwrap(), b"two");
    drop(c);
    assert!(matches!(
        read_line(&s, 64, deadline),
        Err(LineError::Closed)
    ));
    let (mut c, s) = pair();
    c.write_all(&[b'x'; 100]).unwrap();
    let e = read_line(&s, 64, deadline).unwrap_err();
    assert!(matches!(e, LineError::TooLong(64)), "{e:?}");
    assert_eq!(e.to_string(), "no end of line within 64 bytes");
}

#[test]
fn a_trickled_line_times_out_at_one_deadline() {
    let (mut c, s) = pair();
    let w = std::thread::spawn(move || {
        for _ in 0..100 {
            if c.write_all(b" ").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let t = Instant::now();
    let e = read_line(&s, 4096, t + Duration::from_millis(300)).unwrap_err();
    assert!(matches!(e, LineError::Timeout), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    drop(s);
    w.join().unwrap();
}
