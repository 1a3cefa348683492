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

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use mlx5::device::Context;

use crate::comm::{Comm, Config, PendingComm};
use crate::error::SetupError;
use crate::info::{CommInfo, COMM_INFO_VERSION};
use crate::liveness::Liveness;

/// Most bytes of private data a side may attach to its setup record (which
/// service a communicator is for, a protocol version, ...).
pub const MAX_PRIVATE_DATA: usize = 256;

/// How long a peer may take to send its setup record.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest setup line accepted (the peer is untrusted).
const MAX_LINE: u64 = 16 * 1024;

/// The setup line: the communicator record and the sender's private data.
#[derive(serde::Serialize, serde::Deserialize)]
struct SetupRecord {
    #[serde(flatten)]
    info: CommInfo,
    #[serde(default)]
    private_data: Vec<u8>,
}

fn check_private_data(p: &[u8]) -> Result<(), SetupError> {
    if p.len() > MAX_PRIVATE_DATA {
        return Err(SetupError::Config(format!(
            "private data of {} bytes (at most {MAX_PRIVATE_DATA})",
            p.len()
        )));
    }
    Ok(())
}

fn write_record(
    stream: &TcpStream,
    info: &CommInfo,
    private_data: &[u8],
) -> Result<(), SetupError> {
    check_private_data(private_data)?;
    let rec = SetupRecord {
        info: info.clone(),
        private_data: private_data.to_vec(),
    };
    let mut line =
        serde_json::to_string(&rec).map_err(|e| SetupError::Peer(format!("encoding: {e}")))?;
    line.push('\n');
    let mut w = stream;
    w.write_all(line.as_bytes())?;
    Ok(())
}

/// Reads the peer's setup line (bounded; nothing after the newline is
/// consumed).
fn read_record(stream: &TcpStream) -> Result<SetupRecord, SetupError> {
    stream.set_read_timeout(Some(SETUP_TIMEOUT))?;
    let mut line = Vec::new();
    let mut r = stream.take(MAX_LINE);
    let mut b = [0u8; 1];
    loop {
        match r.read(&mut b)? {
            0 => return Err(SetupError::Peer("no complete setup record".into())),
            _ if b[0] == b'\n' => break,
            _ => line.push(b[0]),
        }
    }
    let rec: SetupRecord =
        serde_json::from_slice(&line).map_err(|e| SetupError::Peer(e.to_string()))?;
    if rec.info.version != COMM_INFO_VERSION {
        return Err(SetupError::Peer(format!(
            "version {} (this side speaks {COMM_INFO_VERSION})",
            rec.info.version
        )));
    }
    if rec.private_data.len() > MAX_PRIVATE_DATA {
        return Err(SetupError::Peer(format!(
            "private data of {} bytes (at most {MAX_PRIVATE_DATA})",
            rec.private_data.len()
        )));
    }
    Ok(rec)
}

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
    pub fn accept_pending(&self) -> Result<PendingConnection, SetupError> {
        let (stream, peer) = self.tcp.accept()?;
        PendingConnection::read(stream, peer)
    }

    /// Makes [`accept_tcp`](Self::accept_tcp) return `WouldBlock` instead of
    /// waiting.
    pub fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        self.tcp.set_nonblocking(on)
    }

    /// The next peer's TCP connection alone: a server reads each setup
    /// record on a thread of its own ([`PendingConnection::read`]), so a
    /// peer that connects and sends nothing holds up nobody else.
    pub fn accept_tcp(&self) -> std::io::Result<(TcpStream, SocketAddr)> {
        self.tcp.accept()
    }
}

/// A peer that connected and sent its setup record, not yet given a
/// communicator. Dropping it refuses the peer.
#[derive(Debug)]
pub struct PendingConnection {
    stream: TcpStream,
    peer: SocketAddr,
    remote: CommInfo,
    private_data: Vec<u8>,
}

impl PendingConnection {
    /// Reads the setup record a peer sends on `stream` (accepted with
    /// [`Listener::accept_tcp`]), waiting at most 30 s for it.
    pub fn read(stream: TcpStream, peer: SocketAddr) -> Result<PendingConnection, SetupError> {
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        let rec = read_record(&stream)?;
        Ok(PendingConnection {
            stream,
            peer,
            remote: rec.info,
            private_data: rec.private_data,
        })
    }

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

    /// Builds a communicator on `devices`, connects it to the peer and
    /// answers with this side's record and `private_data` (at most
    /// [`MAX_PRIVATE_DATA`] bytes).
    pub fn establish(
        self,
        devices: &[Context],
        cfg: &Config,
        private_data: &[u8],
    ) -> Result<Comm, SetupError> {
        check_private_data(private_data)?;
        let pending = PendingComm::new(devices, cfg)?;
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
/// bytes); also returns the private data the listener answered with.
pub fn connect_with(
    addr: impl ToSocketAddrs,
    devices: &[Context],
    cfg: &Config,
    private_data: &[u8],
) -> Result<(Comm, Vec<u8>), SetupError> {
    check_private_data(private_data)?;
    let pending = PendingComm::new(devices, cfg)?;
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    write_record(&stream, pending.info(), private_data)?;
    let rec = read_record(&stream)?;
    stream.set_read_timeout(None)?;
    let comm = pending.connect_with(&rec.info, Liveness::tcp(stream)?)?;
    Ok((comm, rec.private_data))
}
