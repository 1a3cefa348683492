//! The liveness channel: a stream that stays open as long as both
//! communicators live (the setup TCP connection, or a socket pair between two
//! communicators of one process). Nothing is sent on it after setup; its end
//! of file means the peer process died or dropped its communicator.

use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;

#[derive(Debug)]
pub(crate) enum Liveness {
    /// None (setup without a channel, e.g. MPI): only QP errors tell.
    None,
    Tcp(TcpStream),
    Unix(UnixStream),
}

fn gone(r: io::Result<usize>) -> bool {
    match r {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        ),
    }
}

impl Liveness {
    /// A channel over `s` (made non-blocking).
    pub fn tcp(s: TcpStream) -> io::Result<Liveness> {
        s.set_nonblocking(true)?;
        Ok(Liveness::Tcp(s))
    }

    /// A channel over `s` (made non-blocking).
    pub fn unix(s: UnixStream) -> io::Result<Liveness> {
        s.set_nonblocking(true)?;
        Ok(Liveness::Unix(s))
    }

    /// Whether the peer's end closed (checked without blocking).
    pub fn peer_gone(&mut self) -> bool {
        let mut b = [0u8; 64];
        match self {
            Liveness::None => false,
            Liveness::Tcp(s) => gone(s.read(&mut b)),
            Liveness::Unix(s) => gone(s.read(&mut b)),
        }
    }

    /// Closes this end, so the peer learns.
    pub fn shutdown(&mut self) {
        match self {
            Liveness::None => {}
            Liveness::Tcp(s) => {
                let _ = s.shutdown(Shutdown::Both);
            }
            Liveness::Unix(s) => {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        *self = Liveness::None;
    }
}
