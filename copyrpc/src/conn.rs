//! Connection setup over TCP, and the TCP connection as the liveness channel.
//!
//! Each side sends its [`EndpointInfo`] as one JSON line (versioned), reads the
//! peer's, and connects its endpoint. The TCP connection then stays open: when
//! it closes (the peer process died, or the peer closed its endpoint), the
//! endpoint is closed and its pending calls fail; when the local endpoint
//! closes, the connection is shut down so the peer learns it.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::context::{Context, EndpointId};
use crate::endpoint::{EndpointInfo, ENDPOINT_INFO_VERSION};
use crate::error::{CallFailed, SetupError};

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
}

fn exchange<U, F>(stream: &TcpStream, ctx: &mut Context<U, F>) -> Result<EndpointId, ConnError>
where
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    let (ep, info) = ctx.create_endpoint()?;
    let mut line = serde_json::to_string(&info).map_err(|e| ConnError::Record(e.to_string()))?;
    line.push('\n');
    {
        let mut w = stream;
        w.write_all(line.as_bytes())?;
    }
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut peer = String::new();
    // One line, at most 4 KiB: the peer is untrusted.
    let n = BufReader::new(stream.take(4096)).read_line(&mut peer)?;
    if n == 0 || !peer.ends_with('\n') {
        ctx.close(ep);
        return Err(ConnError::Record("no complete record".into()));
    }
    let remote: EndpointInfo = match serde_json::from_str(peer.trim_end()) {
        Ok(r) => r,
        Err(e) => {
            ctx.close(ep);
            return Err(ConnError::Record(e.to_string()));
        }
    };
    if remote.version != ENDPOINT_INFO_VERSION {
        ctx.close(ep);
        return Err(ConnError::Record(format!(
            "version {} (this side speaks {ENDPOINT_INFO_VERSION})",
            remote.version
        )));
    }
    if let Err(e) = ctx.connect(ep, &remote) {
        ctx.close(ep);
        return Err(e.into());
    }
    stream.set_read_timeout(None)?;
    stream.set_nonblocking(true)?;
    Ok(ep)
}

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
    pub fn accept<U, F>(&self, ctx: &mut Context<U, F>) -> Result<Connection, ConnError>
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        let (stream, _) = self.tcp.accept()?;
        stream.set_nodelay(true)?;
        let ep = exchange(&stream, ctx)?;
        Ok(Connection {
            stream: Some(stream),
            ep,
        })
    }
}

/// Connects to a [`Listener`]; returns the endpoint and its liveness channel.
pub fn connect<U, F>(
    addr: impl ToSocketAddrs,
    ctx: &mut Context<U, F>,
) -> Result<Connection, ConnError>
where
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let ep = exchange(&stream, ctx)?;
    Ok(Connection {
        stream: Some(stream),
        ep,
    })
}

/// An endpoint's TCP connection, kept open as its liveness channel.
#[derive(Debug)]
pub struct Connection {
    stream: Option<TcpStream>,
    ep: EndpointId,
}

impl Connection {
    /// The endpoint.
    pub fn endpoint(&self) -> EndpointId {
        self.ep
    }

    /// Checks the channel without blocking (call it every few milliseconds, not
    /// per message): a closed connection closes the endpoint (its pending calls
    /// fail); a locally closed endpoint shuts the connection down. Returns
    /// whether the endpoint is still open.
    pub fn check<U, F>(&mut self, ctx: &mut Context<U, F>) -> bool
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
        ctx.close(self.ep);
        self.stream = None;
        false
    }
}
