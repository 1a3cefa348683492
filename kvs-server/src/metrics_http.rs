//! The metrics endpoint: `GET /metrics` over HTTP/1.1 on `metrics_listen`,
//! answered in the Prometheus text format.
//!
//! Its own thread (`kvs-metrics`) accepts; each connection is served on a
//! short-lived thread of its own, at most [`MAX_CONNECTIONS`] at once (one
//! more is closed at once), and each has [`DEADLINE`] to send its request
//! head (at most [`MAX_HEAD`] bytes, parsed by `httparse`) and take the
//! answer. So a client that connects and sends nothing, sends slowly, or
//! never reads holds one of those slots for a few seconds at most and delays
//! no other scraper; the workers never see the endpoint at all (a scrape
//! reads their last published snapshots).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::metrics::{Exposition, CONTENT_TYPE};

/// Connections served at once.
const MAX_CONNECTIONS: usize = 8;
/// A connection's time to send its request head and take the answer.
const DEADLINE: Duration = Duration::from_secs(5);
/// The longest request head read.
const MAX_HEAD: usize = 8192;
/// How often the accepting thread, waiting for a connection, looks at the
/// stop flag.
const TICK: Duration = Duration::from_millis(100);

/// Binds the endpoint's socket (so a taken port fails the start).
pub(crate) fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serves `GET /metrics` on `listener` until `stop` is set.
pub(crate) fn spawn(
    listener: TcpListener,
    exposition: Arc<Exposition>,
    stop: Arc<AtomicBool>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("kvs-metrics".into())
        .spawn(move || accept(listener, exposition, stop))
}

fn accept(listener: TcpListener, exposition: Arc<Exposition>, stop: Arc<AtomicBool>) {
    let active = Arc::new(AtomicUsize::new(0));
    let mut failed = false;
    while !stop.load(Ordering::Acquire) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_readable(&listener, TICK);
                continue;
            }
            Err(e) => {
                // Out of descriptors, say: wait and go on.
                if !failed {
                    tracing::warn!("metrics endpoint: accept: {e}");
                }
                failed = true;
                std::thread::sleep(TICK);
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            continue; // dropped: closed
        }
        let (exp, act) = (exposition.clone(), active.clone());
        let spawned = std::thread::Builder::new()
            .name("kvs-metrics-conn".into())
            .spawn(move || {
                // Whatever the client did, its connection just closes.
                let _ = serve(stream, &exp);
                act.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Sleeps until `l` has a connection to accept, or `timeout` passes (an
/// idle endpoint costs ten wake-ups a second, and a scraper no wait).
fn wait_readable(l: &TcpListener, timeout: Duration) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: l.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call; an error (EINTR) just ends the
    // wait early, and the caller tries accept again.
    unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
}

/// Reads one request head and answers it; the connection then closes.
fn serve(mut s: TcpStream, exposition: &Arc<Exposition>) -> io::Result<()> {
    let deadline = Instant::now() + DEADLINE;
    s.set_nonblocking(false)?;
    let mut buf = vec![0u8; MAX_HEAD];
    let mut n = 0;
    let (code, body, head_only) = loop {
        s.set_read_timeout(Some(left(deadline)?))?;
        let got = s.read(&mut buf[n..])?;
        if got == 0 {
            return Ok(());
        }
        n += got;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..n]) {
            Ok(httparse::Status::Complete(_)) => {
                let method = req.method.unwrap_or("");
                let path = req.path.unwrap_or("");
                let path = path.split('?').next().unwrap_or(path);
                break match (method, path) {
                    ("GET" | "HEAD", "/metrics") => match exposition.encode() {
                        Ok(text) => (200, text, method == "HEAD"),
                        Err(_) => (500, "encoding failed\n".into(), false),
                    },
                    ("GET" | "HEAD", _) => (404, "not found: try /metrics\n".into(), false),
                    _ => (405, "only GET and HEAD\n".into(), false),
                };
            }
            Ok(httparse::Status::Partial) if n == buf.len() => {
                break (431, "request head too large\n".into(), false)
            }
            Ok(httparse::Status::Partial) => continue,
            Err(_) => break (400, "malformed request\n".into(), false),
        }
    };
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Internal Server Error",
    };
    let content_type = if code == 200 {
        CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    let mut answer = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        body.len()
    );
    if code == 405 {
        answer.push_str("Allow: GET, HEAD\r\n");
    }
    answer.push_str("\r\n");
    if !head_only {
        answer.push_str(&body);
    }
    write_by(&mut s, answer.as_bytes(), deadline)?;
    let _ = s.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// Time left until `deadline`, or a timeout error.
fn left(deadline: Instant) -> io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// Writes all of `b` before `deadline` (a client that reads slowly is cut
/// off there).
fn write_by(s: &mut TcpStream, mut b: &[u8], deadline: Instant) -> io::Result<()> {
    while !b.is_empty() {
        s.set_write_timeout(Some(left(deadline)?))?;
        match s.write(b) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
