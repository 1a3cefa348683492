//! Communicator setup over TCP, and the TCP connection as the liveness
//! channel.
//!
//! Each side creates its communicator's resources, sends its [`CommInfo`] as
//! one JSON line (versioned, with optional private data), reads the peer's,
//! and connects. The TCP connection then stays open inside the
//! communicator: when it closes (the peer process died, or dropped or closed
//! its communicator), the communicator closes with
//! [`CloseReason::PeerGone`](crate::CloseReason::PeerGone) and `test` says
//! so; when the local communicator closes, the connection is shut down so the
//! peer learns.
//!
//! A setup line is at most [`MAX_SETUP_RECORD`] bytes; it is read in whole
//! chunks, and nothing after its newline is consumed. A side that will not
//! connect answers with a refusal line instead of its record
//! (`{"version": 1, "refused": "why"}`), which the other side reports as a
//! [`SetupError::Peer`] naming the reason. A server facing untrusted peers
//! reads their records with an [`Acceptor`]: all at once on one thread,
//! under one deadline each and a cap on how many wait, so a peer that sends
//! nothing or trickles its bytes holds up nobody else and costs no thread.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Instant;

use mlx5::device::Context;

use crate::comm::{Comm, Config, PendingComm};
use crate::error::SetupError;
use crate::info::CommInfo;
use crate::liveness::Liveness;

mod acceptor;
mod record;

pub use acceptor::{Acceptor, AcceptorOptions, AcceptorStats, DropReason};
pub use record::SETUP_TIMEOUT;
use record::{check_private_data, read_record, write_record, write_refusal};

/// Most bytes of private data a side may attach to its setup record (which
/// service a communicator is for, a protocol version, ...).
pub const MAX_PRIVATE_DATA: usize = 256;

/// Most bytes of a setup line, its newline included. A reader stops there:
/// a peer cannot make it buffer more.
pub const MAX_SETUP_RECORD: usize = 16 * 1024;

/// Accepts peers and builds a communicator for each.
#[derive(Debug)]
pub struct Listener {
    tcp: TcpListener,
}

impl Listener {
    /// Listens on `addr` (`127.0.0.1:0` picks a free port).
    pub fn bind(addr: impl ToSocketAddrs) -> Result<Listener, SetupError> {
        Ok(Listener {
            tcp: TcpListener::bind(addr)?,
        })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> Result<SocketAddr, SetupError> {
        Ok(self.tcp.local_addr()?)
    }

    /// Waits for the next peer and connects a communicator on `devices` to it.
    pub fn accept(&self, devices: &[Context], cfg: &Config) -> Result<Comm, SetupError> {
        self.accept_pending()?.establish(devices, cfg, &[])
    }

    /// Waits for the next peer and reads its setup record, without creating
    /// anything yet (to look at its private data first).
    ///
    /// The record is read blocking (up to [`SETUP_TIMEOUT`] in all), so one
    /// slow peer holds up the next: a server facing untrusted peers uses an
    /// [`Acceptor`] instead. A malformed record is answered with a refusal.
    pub fn accept_pending(&self) -> Result<PendingConnection, SetupError> {
        let (stream, peer) = self.tcp.accept()?;
        let started = Instant::now();
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        let rec = match read_record(&stream, started, SETUP_TIMEOUT) {
            Ok(r) => r,
            Err(SetupError::Peer(why)) => {
                write_refusal(&stream, &format!("bad setup record: {why}"));
                return Err(SetupError::Peer(why));
            }
            Err(e) => return Err(e),
        };
        Ok(PendingConnection {
            stream,
            peer,
            remote: rec.info,
            private_data: rec.private_data,
        })
    }

    /// Makes [`accept_pending`](Self::accept_pending) fail with `WouldBlock`
    /// instead of waiting when no peer is there.
    pub fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        self.tcp.set_nonblocking(on)
    }
}

/// A peer that connected and sent its setup record, not yet given a
/// communicator. Dropping it closes the connection (the peer's setup fails);
/// [`refuse`](Self::refuse) tells it why.
#[derive(Debug)]
pub struct PendingConnection {
    stream: TcpStream,
    peer: SocketAddr,
    remote: CommInfo,
    private_data: Vec<u8>,
}

impl PendingConnection {
    /// The private data the peer attached.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The peer's TCP address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The peer's communicator record.
    pub fn peer_info(&self) -> &CommInfo {
        &self.remote
    }

    /// Refuses the peer: answers with a refusal line carrying `reason` (cut
    /// to 512 bytes; the peer's setup fails with a [`SetupError::Peer`]
    /// naming it) and closes the connection. Never waits on the peer.
    pub fn refuse(self, reason: &str) {
        write_refusal(&self.stream, reason);
    }

    /// Builds a communicator on `devices`, connects it to the peer and
    /// answers with this side's record and `private_data` (at most
    /// [`MAX_PRIVATE_DATA`] bytes). Never waits on the peer: the answer goes
    /// into the connection's empty send buffer. A communicator that cannot be
    /// built, or a peer record that does not fit this side's, is answered
    /// with a refusal saying why.
    pub fn establish(
        self,
        devices: &[Context],
        cfg: &Config,
        private_data: &[u8],
    ) -> Result<Comm, SetupError> {
        check_private_data(private_data)?;
        let pending = PendingComm::new(devices, cfg)
            .and_then(|p| match p.info().check_peer(&self.remote) {
                Ok(()) => Ok(p),
                Err(why) => Err(SetupError::Peer(why)),
            })
            .inspect_err(|e| write_refusal(&self.stream, &format!("setup failed: {e}")))?;
        write_record(&self.stream, pending.info(), private_data)?;
        self.stream.set_read_timeout(None)?;
        pending.connect_with(&self.remote, Liveness::tcp(self.stream)?)
    }
}

/// Connects to a [`Listener`] with a communicator on `devices`.
pub fn connect(
    addr: impl ToSocketAddrs,
    devices: &[Context],
    cfg: &Config,
) -> Result<Comm, SetupError> {
    Ok(connect_with(addr, devices, cfg, &[])?.0)
}

/// [`connect`], attaching `private_data` (at most [`MAX_PRIVATE_DATA`]
/// bytes); also returns the private data the listener answered with. The
/// TCP connection must be made within [`SETUP_TIMEOUT`], and the listener's
/// record must arrive within [`SETUP_TIMEOUT`] of it; a refusal fails the
/// setup with the listener's reason.
pub fn connect_with(
    addr: impl ToSocketAddrs,
    devices: &[Context],
    cfg: &Config,
    private_data: &[u8],
) -> Result<(Comm, Vec<u8>), SetupError> {
    check_private_data(private_data)?;
    let pending = PendingComm::new(devices, cfg)?;
    // The TCP connection gets its own SETUP_TIMEOUT (not the system's
    // minutes of SYN retries); the record, SETUP_TIMEOUT from then.
    let stream = setup_conn::connect_by(addr, Instant::now() + SETUP_TIMEOUT)?;
    let started = Instant::now();
    write_record(&stream, pending.info(), private_data)?;
    let rec = read_record(&stream, started, SETUP_TIMEOUT)?;
    stream.set_read_timeout(None)?;
    let comm = pending.connect_with(&rec.info, Liveness::tcp(stream)?)?;
    Ok((comm, rec.private_data))
}
