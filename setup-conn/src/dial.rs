//! The connecting side's TCP connection, by a deadline.

use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Instant;

/// A TCP connection (with `TCP_NODELAY`) to the first of `addr`'s addresses
/// that answers before `deadline`. Running out of time, at an address or
/// between them, fails with [`io::ErrorKind::TimedOut`]; an address that
/// resolves to nothing with [`io::ErrorKind::InvalidInput`].
pub fn connect_by(addr: impl ToSocketAddrs, deadline: Instant) -> io::Result<TcpStream> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => last = Some(timed_out()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "no TCP connection by the deadline")
}
