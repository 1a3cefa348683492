//! Connection setup over TCP, and the TCP connection as the liveness channel.
//!
//! Each side sends its [`EndpointInfo`] as one JSON line (versioned), reads the
//! peer's, and connects its endpoint. The TCP connection then stays open: when
//! it closes (the peer process died, or the peer closed its endpoint), the
//! endpoint is closed and its pending calls fail; when the local endpoint
//! closes, the connection is shut down so the peer learns it.
//!
//! A setup line is at most [`MAX_SETUP_RECORD`] bytes. A side that will not
//! connect answers with a refusal line instead of its record (`{"version":
//! 1, "refused": "why"}`), which the other side reports as
//! [`ConnError::Refused`]. A server reads its peers' records with an
//! [`Acceptor`], which reads all of them at once under a deadline each, so a
//! peer that sends nothing or sends slowly holds up nobody else.
//!
//! [`connect`] blocks for the TCP connection and the listener's answer. A
//! thread serving a context that cannot wait [`dial`]s instead: a helper
//! thread does the TCP part, and [`Dial::poll`] connects the endpoint once
//! it is done.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::context::{Context, EndpointId};
use crate::error::{CallFailed, CloseReason, SetupError};
use crate::info::EndpointInfo;
use crate::transport::Transport;

mod acceptor;
mod dial;
mod live;
mod record;

pub use acceptor::{Acceptor, AcceptorOptions, AcceptorStats, DropReason};
pub use dial::{dial, Dial};
pub use live::LiveSet;
pub use record::SETUP_TIMEOUT;
use record::{check_private_data, read_record, write_record, write_refusal, SetupRecord};

/// Errors of connection setup.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// TCP failed.
    #[error("tcp: {0}")]
    Io(#[from] io::Error),
    /// The peer's endpoint record was not understood.
    #[error("bad endpoint record from the peer: {0}")]
    Record(String),
    /// The context refused.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The peer answered with a refusal instead of its record (its reason,
    /// with control characters replaced).
    #[error("refused by the peer: {0}")]
    Refused(String),
    /// The peer did not complete connection setup in time (its TCP
    /// connection, or its whole setup record).
    #[error("the peer did not complete connection setup within {0:?}")]
    Timeout(Duration),
}

/// Most bytes of private data a side may attach to its setup record (as RDMA
/// CM's `private_data`: which service or worker a connection is for, a
/// protocol version, …).
pub const MAX_PRIVATE_DATA: usize = 256;

/// Most bytes of a setup line, its newline included. A reader stops there:
/// a peer cannot make it buffer more.
pub const MAX_SETUP_RECORD: usize = 4096;

/// Accepts connections and sets up an endpoint for each.
#[derive(Debug)]
pub struct Listener {
    tcp: TcpListener,
}

impl Listener {
    /// Listens on `addr` (`127.0.0.1:0` picks a free port).
    pub fn bind(addr: impl ToSocketAddrs) -> Result<Listener, ConnError> {
        Ok(Listener {
            tcp: TcpListener::bind(addr)?,
        })
    }

    /// Another handle on the same listening socket (for accepting from several
    /// threads).
    pub fn tcp_clone(&self) -> Listener {
        Listener {
            tcp: self.tcp.try_clone().expect("clone a listening socket"),
        }
    }

    /// The address listened on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Waits for the next peer; returns its endpoint and liveness channel.
    pub fn accept<U, F, T: Transport>(
        &self,
        ctx: &mut Context<U, F, T>,
    ) -> Result<Connection, ConnError>
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        self.accept_pending()?.establish(ctx, &[])
    }

    /// Waits for the next peer and reads its setup record, without touching a
    /// context: for an acceptor thread that hands connections to the threads
    /// owning the contexts (a [`PendingConnection`] is `Send`). In
    /// non-blocking mode, `WouldBlock` when no peer is waiting.
    ///
    /// The record is read blocking (up to [`SETUP_TIMEOUT`] in all), so one
    /// slow peer holds up the next: a server facing untrusted peers uses an
    /// [`Acceptor`] instead. A malformed record is answered with a refusal.
    pub fn accept_pending(&self) -> Result<PendingConnection, ConnError> {
        let (stream, peer) = self.tcp.accept()?;
        let started = Instant::now();
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        let rec = match read_record(&stream, started, SETUP_TIMEOUT) {
            Ok(r) => r,
            Err(ConnError::Record(why)) => {
                write_refusal(&stream, &format!("bad setup record: {why}"));
                return Err(ConnError::Record(why));
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

    /// Makes `accept_pending` return `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.tcp.set_nonblocking(on)
    }
}

/// A peer that connected and sent its setup record, not yet given an
/// endpoint. Dropping it refuses the peer (its setup fails).
#[derive(Debug)]
pub struct PendingConnection {
    stream: TcpStream,
    peer: SocketAddr,
    remote: EndpointInfo,
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

    /// This side's TCP address of the connection: the address the peer
    /// reached us at (useful behind a listener on `0.0.0.0`).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// Refuses the peer: answers with a refusal line carrying `reason` (cut
    /// to 512 bytes; the peer's setup fails with [`ConnError::Refused`]) and
    /// closes the connection. Never waits on the peer.
    pub fn refuse(self, reason: &str) {
        write_refusal(&self.stream, reason);
    }

    /// Creates an endpoint in `ctx`, connects it to the peer, and answers with
    /// this side's record and `private_data` (at most [`MAX_PRIVATE_DATA`]
    /// bytes). Never waits on the peer: the answer goes into the connection's
    /// empty send buffer, and a peer that left fails the setup. A setup that
    /// fails (the context refuses the peer's parameters, …) is answered with
    /// a refusal saying why.
    pub fn establish<U, F, T: Transport>(
        self,
        ctx: &mut Context<U, F, T>,
        private_data: &[u8],
    ) -> Result<Connection, ConnError>
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        let (ep, info) = match ctx.create_endpoint() {
            Ok(e) => e,
            Err(e) => {
                write_refusal(&self.stream, &format!("endpoint setup failed: {e}"));
                return Err(e.into());
            }
        };
        let r = ctx
            .connect(ep, &self.remote)
            .map_err(ConnError::from)
            .and_then(|()| {
                self.stream.set_read_timeout(None)?;
                self.stream.set_nonblocking(true)?;
                Ok(())
            })
            .and_then(|()| write_record(&self.stream, info, private_data));
        if let Err(e) = r {
            ctx.remove(ep);
            // The peer learns why (a record half sent is cut short by the
            // refusal's line and fails to parse on its side all the same).
            write_refusal(&self.stream, &format!("endpoint setup failed: {e}"));
            return Err(e);
        }
        Ok(Connection {
            stream: Some(self.stream),
            ep,
            peer_private_data: self.private_data,
        })
    }
}

/// Connects to a [`Listener`]; returns the endpoint and its liveness channel.
pub fn connect<U, F, T: Transport>(
    addr: impl ToSocketAddrs,
    ctx: &mut Context<U, F, T>,
) -> Result<Connection, ConnError>
where
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    connect_with(addr, ctx, &[])
}

/// [`connect`], attaching `private_data` (at most [`MAX_PRIVATE_DATA`] bytes)
/// for the listener to read; the listener's answer is
/// [`Connection::peer_private_data`]. A listener that refuses the connection
/// (its refusal line) fails it with [`ConnError::Refused`]. The whole setup
/// gets [`SETUP_TIMEOUT`] ([`connect_within`] chooses).
pub fn connect_with<U, F, T: Transport>(
    addr: impl ToSocketAddrs,
    ctx: &mut Context<U, F, T>,
    private_data: &[u8],
) -> Result<Connection, ConnError>
where
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    connect_within(addr, ctx, private_data, SETUP_TIMEOUT)
}

/// [`connect_with`], failing with [`ConnError::Timeout`] when the TCP
/// connection and the listener's setup record together take longer than
/// `timeout` (a host that does not answer, a listener that accepts and says
/// nothing or dribbles its record).
pub fn connect_within<U, F, T: Transport>(
    addr: impl ToSocketAddrs,
    ctx: &mut Context<U, F, T>,
    private_data: &[u8],
    timeout: Duration,
) -> Result<Connection, ConnError>
where
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    // Refused before anything reaches the listener.
    check_private_data(private_data)?;
    let started = Instant::now();
    let stream = open(addr, started, timeout)?;
    let (ep, info) = ctx.create_endpoint()?;
    let rec = exchange(&stream, info, private_data, started, timeout);
    finish(ctx, ep, rec.map(|rec| (stream, rec)))
}

/// The connecting side's TCP connection, opened by `timeout` after `started`.
fn open(
    addr: impl ToSocketAddrs,
    started: Instant,
    timeout: Duration,
) -> Result<TcpStream, ConnError> {
    setup_conn::connect_by(addr, started + timeout).map_err(|e| match e.kind() {
        io::ErrorKind::TimedOut => ConnError::Timeout(timeout),
        _ => e.into(),
    })
}

/// The connecting side's half of setup over TCP: writes this side's record,
/// then reads the listener's by `timeout` after `started`. Blocks: the
/// caller's thread ([`connect_within`]) or a dial's helper thread ([`dial`]).
fn exchange(
    stream: &TcpStream,
    info: EndpointInfo,
    private_data: &[u8],
    started: Instant,
    timeout: Duration,
) -> Result<SetupRecord, ConnError> {
    write_record(stream, info, private_data)?;
    read_record(stream, started, timeout)
}

/// Connects `ep` to the peer's record and keeps the stream as its liveness
/// channel; any failure (`setup`'s, or here) removes `ep`.
fn finish<U, F, T: Transport>(
    ctx: &mut Context<U, F, T>,
    ep: EndpointId,
    setup: Result<(TcpStream, SetupRecord), ConnError>,
) -> Result<Connection, ConnError>
where
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    let r = setup.and_then(|(stream, rec)| {
        ctx.connect(ep, &rec.info)?;
        stream.set_read_timeout(None)?;
        stream.set_nonblocking(true)?;
        Ok(Connection {
            stream: Some(stream),
            ep,
            peer_private_data: rec.private_data,
        })
    });
    if r.is_err() {
        ctx.remove(ep);
    }
    r
}

/// An endpoint's TCP connection, kept open as its liveness channel.
#[derive(Debug)]
pub struct Connection {
    stream: Option<TcpStream>,
    ep: EndpointId,
    peer_private_data: Vec<u8>,
}

impl Connection {
    /// The endpoint.
    pub fn endpoint(&self) -> EndpointId {
        self.ep
    }

    /// The private data the peer attached to its setup record.
    pub fn peer_private_data(&self) -> &[u8] {
        &self.peer_private_data
    }

    /// Checks the channel without blocking (call it every few milliseconds, not
    /// per message): a closed connection closes the endpoint with
    /// [`CloseReason::PeerGone`] (its pending calls fail); a locally closed
    /// endpoint shuts the connection down. Returns whether the endpoint is
    /// still open.
    pub fn check<U, F, T: Transport>(&mut self, ctx: &mut Context<U, F, T>) -> bool
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        let Some(s) = &self.stream else { return false };
        if ctx.closed(self.ep).is_some() {
            let _ = s.shutdown(std::net::Shutdown::Both);
            self.stream = None;
            return false;
        }
        let mut b = [0u8; 64];
        match (&*s).read(&mut b) {
            // EOF: the peer is gone or closed its endpoint.
            Ok(0) => {}
            // Nothing is ever sent after setup; bytes are ignored.
            Ok(_) => return true,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                return true
            }
            Err(_) => {}
        }
        ctx.close_as(self.ep, CloseReason::PeerGone);
        self.stream = None;
        false
    }
}

/// Checks every connection ([`Connection::check`]) and removes the endpoints
/// of those that closed ([`Context::remove`]: QP and rings freed, slot
/// reused), dropping them from `conns`. For servers, every few milliseconds.
/// One read per connection: with many connections, a [`LiveSet`] costs a
/// system call per connection that has something to report instead.
pub fn retain_live<U, F, T: Transport>(conns: &mut Vec<Connection>, ctx: &mut Context<U, F, T>)
where
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    conns.retain_mut(|c| {
        let alive = c.check(ctx);
        if !alive {
            ctx.remove(c.endpoint());
        }
        alive
    });
}
