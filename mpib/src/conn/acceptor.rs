//! Reading many peers' setup records at once on one thread, so that no peer
//! can hold up another or pin a thread: the [`Acceptor`], setup-conn's over
//! mpib's setup line.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

pub use setup_conn::{AcceptorOptions, AcceptorStats, DropReason};

use super::record::Format;
use super::{Listener, PendingConnection};

/// Accepts TCP connections and reads their setup records concurrently, each
/// under one deadline, on the caller's thread.
///
/// One `poll(2)` waits on the listening socket and every connection whose
/// record has not arrived in full; each readable one is read without
/// blocking, in whole chunks, into its own buffer bounded by
/// [`MAX_SETUP_RECORD`](super::MAX_SETUP_RECORD). A peer that sends
/// nothing, trickles its bytes, or sends garbage costs one descriptor and at
/// most a few KiB until its deadline, and no thread; a peer whose record is
/// complete is handed out at once, whatever the others do. When more than
/// `max_pending` peers are waiting, or the process runs out of descriptors,
/// the *oldest* waiting peer is dropped (refusing new ones instead would let
/// whoever keeps the table full lock every honest peer out). Every peer
/// dropped or refused is told why in a refusal line. (The workings are
/// setup-conn's [`setup_conn::Acceptor`].)
#[derive(Debug)]
pub struct Acceptor {
    inner: setup_conn::Acceptor<Format>,
}

impl Acceptor {
    /// Takes over `listener` (made non-blocking, and given the longest
    /// accept queue the system allows instead of std's 128, so that a burst
    /// of connections waits in the kernel rather than being dropped).
    pub fn new(listener: Listener, opts: AcceptorOptions) -> io::Result<Acceptor> {
        Ok(Acceptor {
            inner: setup_conn::Acceptor::new(listener.tcp, Format, opts)?,
        })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Peers whose record is still being read.
    pub fn pending(&self) -> usize {
        self.inner.pending()
    }

    /// What has been done so far.
    pub fn stats(&self) -> AcceptorStats {
        self.inner.stats()
    }

    /// The last peer dropped without a usable record, and why (for a log
    /// line; the counts are in [`stats`](Self::stats)).
    pub fn last_drop(&self) -> Option<(SocketAddr, &DropReason)> {
        self.inner.last_drop()
    }

    /// Waits up to `timeout` for something to happen, then accepts new peers,
    /// reads what the waiting ones sent, drops those past their deadline, and
    /// appends every peer whose record is now complete to `ready`. Returns
    /// early when there is work; call it in a loop. Fails only if `poll(2)`
    /// itself fails.
    pub fn poll(
        &mut self,
        timeout: Duration,
        ready: &mut Vec<PendingConnection>,
    ) -> io::Result<()> {
        self.inner.poll(timeout, |a| {
            ready.push(PendingConnection {
                stream: a.stream,
                peer: a.peer,
                remote: a.record.info,
                private_data: a.record.private_data,
            })
        })
    }
}
