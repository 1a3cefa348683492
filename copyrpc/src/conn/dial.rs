//! Connection setup without blocking the context's thread: the TCP
//! connection and the record exchange run on a short-lived helper thread,
//! and the context's thread polls for the outcome.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

use super::{check_private_data, exchange, finish, open, ConnError, Connection, SetupRecord};
use crate::context::{Context, EndpointId};
use crate::error::CallFailed;
use crate::transport::Transport;

/// What the helper thread hands back: the stream and the peer's record.
type Outcome = Result<(TcpStream, SetupRecord), ConnError>;

/// Starts connecting to a [`Listener`](super::Listener) at `addr` without
/// waiting on it: creates the endpoint in `ctx` now, and leaves the TCP
/// connection and the record exchange (with `private_data`, at most
/// [`MAX_PRIVATE_DATA`](super::MAX_PRIVATE_DATA) bytes) to a helper thread.
/// [`Dial::poll`] finishes the setup; the whole of it gets `timeout`, as in
/// [`connect_within`](super::connect_within).
pub fn dial<U, F, T: Transport>(
    addr: SocketAddr,
    ctx: &mut Context<U, F, T>,
    private_data: &[u8],
    timeout: Duration,
) -> Result<Dial, ConnError>
where
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    check_private_data(private_data)?;
    let started = Instant::now();
    let (ep, info) = ctx.create_endpoint()?;
    let (tx, rx) = mpsc::channel();
    let private_data = private_data.to_vec();
    let spawned = thread::Builder::new()
        .name("copyrpc-dial".into())
        .spawn(move || {
            let r = open(addr, started, timeout).and_then(|stream| {
                let rec = exchange(&stream, info, &private_data, started, timeout)?;
                Ok((stream, rec))
            });
            // A dial abandoned or dropped no longer listens: nothing to tell.
            let _ = tx.send(r);
        });
    if let Err(e) = spawned {
        ctx.remove(ep);
        return Err(e.into());
    }
    Ok(Dial {
        ep,
        peer: addr,
        outcome: Some(rx),
    })
}

/// A connection being set up by [`dial`]. Poll it from the context's thread
/// until it yields the [`Connection`]; dropping it instead of
/// [`abandon`](Dial::abandon)ing it leaves its endpoint in the context.
#[derive(Debug)]
pub struct Dial {
    ep: EndpointId,
    peer: SocketAddr,
    /// The helper thread's outcome; `None` once taken.
    outcome: Option<Receiver<Outcome>>,
}

impl Dial {
    /// The endpoint being connected (in the context `dial` was given).
    pub fn endpoint(&self) -> EndpointId {
        self.ep
    }

    /// The listener's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// `None` while the helper thread is still at work; then connects the
    /// endpoint (in the context `dial` was given) and returns the
    /// connection, or the setup's error with the endpoint removed. A dial
    /// that already returned its outcome returns an error and touches
    /// nothing.
    pub fn poll<U, F, T: Transport>(
        &mut self,
        ctx: &mut Context<U, F, T>,
    ) -> Option<Result<Connection, ConnError>>
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        let Some(rx) = &self.outcome else {
            return Some(Err(io::Error::other("the dial already finished").into()));
        };
        let setup = match rx.try_recv() {
            Ok(r) => r,
            Err(TryRecvError::Empty) => return None,
            Err(TryRecvError::Disconnected) => {
                Err(io::Error::other("the dial's helper thread died").into())
            }
        };
        self.outcome = None;
        Some(finish(ctx, self.ep, setup))
    }

    /// Gives the setup up: removes the endpoint (unless `poll` already
    /// returned the outcome). The helper thread ends on its own, by the
    /// timeout at the latest, and drops its TCP connection.
    pub fn abandon<U, F, T: Transport>(self, ctx: &mut Context<U, F, T>)
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        if self.outcome.is_some() {
            ctx.remove(self.ep);
        }
    }
}
