//! A toy record format and the helpers the acceptor's tests share.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use setup_conn::{Accepted, Acceptor, AcceptorOptions, SetupFormat};

/// A record is a line `rec:<name>`; a refusal is `refused:<why>`. Lines are
/// at most 4096 bytes.
#[derive(Debug, Clone, Copy)]
pub struct Toy;

impl SetupFormat for Toy {
    type Record = String;
    const MAX_LINE: usize = 4096;

    fn parse(&self, line: &[u8]) -> Result<String, String> {
        let s = std::str::from_utf8(line).map_err(|e| e.to_string())?;
        match s.strip_prefix("rec:") {
            Some(name) => Ok(name.to_owned()),
            None => Err(format!("not a record: {s}")),
        }
    }

    fn refusal(&self, reason: &str) -> String {
        format!("refused:{reason}")
    }
}

/// An acceptor of [`Toy`] records on a free port.
pub fn acceptor(deadline: Duration, max_pending: usize) -> (Acceptor<Toy>, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let opts = AcceptorOptions {
        deadline,
        max_pending,
    };
    (Acceptor::new(l, Toy, opts).unwrap(), addr)
}

/// Polls `acc` until `done` says so (at most `limit`); what was ready.
pub fn poll_until(
    acc: &mut Acceptor<Toy>,
    limit: Duration,
    mut done: impl FnMut(&Acceptor<Toy>, &[Accepted<String>]) -> bool,
) -> Vec<Accepted<String>> {
    let t = Instant::now();
    let mut ready = Vec::new();
    while !done(acc, &ready) {
        assert!(t.elapsed() < limit, "{:?}", acc.stats());
        acc.poll(Duration::from_millis(10), |a| ready.push(a))
            .unwrap();
    }
    ready
}

/// Everything `s` receives until its peer closes (at most 5 s).
pub fn read_to_close(s: &mut TcpStream) -> String {
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

/// The line the server sent before closing, if any, within `secs`.
pub fn answer_within(s: &TcpStream, secs: u64) -> String {
    s.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line
}

/// True when the server has neither answered nor closed `s` yet.
pub fn still_waiting(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let r = (&*s).read(&mut b);
    s.set_nonblocking(false).unwrap();
    matches!(r, Err(e) if e.kind() == ErrorKind::WouldBlock)
}

/// Connects and sends `line` with its newline.
pub fn send_line(addr: SocketAddr, line: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    s
}
