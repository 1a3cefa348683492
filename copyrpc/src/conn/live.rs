//! Many connections' liveness channels, watched together.
//!
//! [`retain_live`](super::retain_live) reads every connection's TCP socket
//! each time: one system call per connection. A server with thousands of
//! clients per context spent a sixth of its thread on those reads, every
//! 100 ms, for connections that had nothing to say. A [`LiveSet`] registers
//! the sockets with one epoll instance instead: a check is one
//! `epoll_wait` plus a read of each socket that has something to report
//! (the peer closed it, reset it, or sent stray bytes), and an in-memory
//! sweep for endpoints this side closed, whose sockets it shuts down.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::Connection;
use crate::context::{Context, EndpointId};
use crate::error::CallFailed;
use crate::transport::Transport;

/// Readiness events taken per `epoll_wait`.
const EVENTS: usize = 256;

/// Connections whose liveness channels one epoll instance watches.
pub struct LiveSet {
    ep: OwnedFd,
    /// Connections by epoll token; `None`: a free token.
    conns: Vec<Option<Connection>>,
    free: Vec<usize>,
    len: usize,
    events: Vec<libc::epoll_event>,
}

impl std::fmt::Debug for LiveSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSet").field("len", &self.len).finish()
    }
}

impl LiveSet {
    /// An empty set (one epoll instance).
    pub fn new() -> io::Result<LiveSet> {
        // SAFETY: epoll_create1 takes no pointers; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(LiveSet {
            // SAFETY: `fd` is a new descriptor that nothing else owns.
            ep: unsafe { OwnedFd::from_raw_fd(fd) },
            conns: Vec::new(),
            free: Vec::new(),
            len: 0,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
        })
    }

    /// Connections in the set.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Watches `c`. A connection whose channel is already gone (its
    /// endpoint closed) is refused with `NotConnected`, and handed back.
    pub fn insert(&mut self, c: Connection) -> Result<(), (Connection, io::Error)> {
        let Some(fd) = c.stream.as_ref().map(AsRawFd::as_raw_fd) else {
            let e = io::Error::new(io::ErrorKind::NotConnected, "the connection is closed");
            return Err((c, e));
        };
        let token = self.free.pop().unwrap_or(self.conns.len());
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: token as u64,
        };
        // SAFETY: `ev` is a valid event for the call's duration; both
        // descriptors are open.
        if unsafe { libc::epoll_ctl(self.ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            let e = io::Error::last_os_error();
            if token < self.conns.len() {
                self.free.push(token);
            }
            return Err((c, e));
        }
        if token == self.conns.len() {
            self.conns.push(Some(c));
        } else {
            self.conns[token] = Some(c);
        }
        self.len += 1;
        Ok(())
    }

    /// Takes connection `token` out of the set (its socket leaves the
    /// epoll instance when it is dropped or shut down).
    fn take(&mut self, token: usize) -> Option<Connection> {
        let c = self.conns.get_mut(token)?.take()?;
        if let Some(s) = &c.stream {
            // SAFETY: both descriptors are open; DEL ignores the event.
            unsafe {
                libc::epoll_ctl(
                    self.ep.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    s.as_raw_fd(),
                    std::ptr::null_mut(),
                );
            }
        }
        self.free.push(token);
        self.len -= 1;
        Some(c)
    }

    /// Checks the set (every few milliseconds, not per message): each
    /// connection the peer closed or reset closes its endpoint
    /// ([`CloseReason::PeerGone`](crate::CloseReason::PeerGone)) and every
    /// endpoint closed here shuts its connection down; either way the
    /// endpoint is removed ([`Context::remove`]) and the connection leaves
    /// the set. Returns the endpoints removed.
    pub fn retain_live<U, F, T: Transport>(&mut self, ctx: &mut Context<U, F, T>) -> usize
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        let mut removed = 0;
        // A socket stays ready while it holds bytes: rounds are bounded, so
        // peers that keep sending cannot hold the check.
        for _ in 0..=self.len / EVENTS {
            // SAFETY: `events` holds `EVENTS` entries the kernel may fill.
            let n = unsafe {
                libc::epoll_wait(
                    self.ep.as_raw_fd(),
                    self.events.as_mut_ptr(),
                    EVENTS as libc::c_int,
                    0,
                )
            };
            if n <= 0 {
                break;
            }
            for i in 0..n as usize {
                let token = self.events[i].u64 as usize;
                removed += usize::from(self.check(token, ctx));
            }
            if (n as usize) < EVENTS {
                break;
            }
        }
        // Endpoints closed here produce no event: a sweep of the context's
        // state, which costs no system call for a connection that is open.
        for token in 0..self.conns.len() {
            let closed = self.conns[token]
                .as_ref()
                .is_some_and(|c| ctx.closed(c.ep).is_some());
            if closed {
                removed += usize::from(self.check(token, ctx));
            }
        }
        removed
    }

    /// Checks connection `token`; true when its endpoint was removed.
    fn check<U, F, T: Transport>(&mut self, token: usize, ctx: &mut Context<U, F, T>) -> bool
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        let alive = match self.conns.get_mut(token) {
            Some(Some(c)) => c.check(ctx),
            _ => return false,
        };
        if alive {
            return false;
        }
        if let Some(c) = self.take(token) {
            ctx.remove(c.endpoint());
        }
        true
    }

    /// Closes every endpoint of the set and shuts its connection down (a
    /// server that stops); the set is empty after.
    pub fn close_all<U, F, T: Transport>(&mut self, ctx: &mut Context<U, F, T>)
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        for token in 0..self.conns.len() {
            if let Some(mut c) = self.take(token) {
                ctx.close(c.endpoint());
                c.check(ctx);
            }
        }
    }

    /// The endpoints of the set's connections.
    pub fn endpoints(&self) -> impl Iterator<Item = EndpointId> + '_ {
        self.conns.iter().flatten().map(Connection::endpoint)
    }
}
