//! Requests: handles, and the fixed pools behind them. Nothing here allocates
//! after the communicator is built.
//!
//! - Send requests come from a pool of `send_requests` entries (a free list);
//!   a send request is done when every active rail's signaling WRITE_WITH_IMM
//!   completed.
//! - Receive requests are the receiver's FIFO slots themselves: position `p`
//!   uses slot `p % depth`, which is free again once its last request was
//!   tested done.

use std::ops::Deref;
use std::time::Instant;

use crate::cts::MAX_BUFFERS;

/// A handle on an outstanding `isend` or `irecv`; give it to
/// [`Comm::test`](crate::Comm::test) until that reports it done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    pub(crate) comm: u32,
    pub(crate) kind: Kind,
    pub(crate) index: u16,
    pub(crate) gen: u32,
}

impl Request {
    /// Whether this is a receive.
    pub fn is_recv(&self) -> bool {
        self.kind == Kind::Recv
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Send,
    Recv,
}

/// The sizes of a completed request, one per buffer: the bytes received
/// (receives) or sent (sends).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    n: u8,
    v: [u32; MAX_BUFFERS],
}

impl Sizes {
    pub(crate) fn new(v: [u32; MAX_BUFFERS], n: usize) -> Sizes {
        Sizes {
            n: n.min(MAX_BUFFERS) as u8,
            v,
        }
    }
    /// The sizes as a slice.
    pub fn as_slice(&self) -> &[u32] {
        &self.v[..usize::from(self.n)]
    }
    /// Sum of the sizes.
    pub fn total(&self) -> u64 {
        self.as_slice().iter().map(|&s| u64::from(s)).sum()
    }
}

impl Deref for Sizes {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Sizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// A send request in the pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendReq {
    pub gen: u32,
    pub active: bool,
    pub nreqs: u8,
    pub sizes: [u32; MAX_BUFFERS],
    /// Rails whose signaling WR has not completed yet.
    pub pending: u8,
    /// Bytes posted per rail (telemetry).
    pub rail_bytes: [u64; 2],
    pub posted_at: Option<Instant>,
}

impl SendReq {
    const FREE: SendReq = SendReq {
        gen: 0,
        active: false,
        nreqs: 0,
        sizes: [0; MAX_BUFFERS],
        pending: 0,
        rail_bytes: [0; 2],
        posted_at: None,
    };
}

/// The fixed pool of send requests.
#[derive(Debug)]
pub(crate) struct SendPool {
    reqs: Vec<SendReq>,
    free: Vec<u16>,
}

impl SendPool {
    pub fn new(n: usize) -> SendPool {
        SendPool {
            reqs: vec![SendReq::FREE; n],
            free: (0..n as u16).rev().collect(),
        }
    }
    /// Takes a free entry (marked active, fresh generation).
    pub fn take(&mut self) -> Option<(u16, &mut SendReq)> {
        let i = self.free.pop()?;
        let r = &mut self.reqs[usize::from(i)];
        r.gen = r.gen.wrapping_add(1);
        r.active = true;
        r.pending = 0;
        r.rail_bytes = [0; 2];
        Some((i, r))
    }
    /// Puts an entry back (an entry taken but never posted, or a finished one).
    pub fn release(&mut self, i: u16) {
        if let Some(r) = self.reqs.get_mut(usize::from(i)) {
            if r.active {
                r.active = false;
                self.free.push(i);
            }
        }
    }
    pub fn get_mut(&mut self, i: u16) -> Option<&mut SendReq> {
        self.reqs.get_mut(usize::from(i))
    }
    /// Entries in use.
    pub fn in_use(&self) -> usize {
        self.reqs.len() - self.free.len()
    }
}

/// The state of one receiver FIFO slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// No receive: an immediate for it is a protocol violation.
    Idle,
    /// CTS posted, waiting for the immediates.
    Active,
    /// Every expected immediate arrived; sizes known; not tested yet.
    Done,
}

/// A receive request: one FIFO slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvSlot {
    pub gen: u32,
    pub state: SlotState,
    pub nreqs: u8,
    /// Bytes posted per buffer.
    pub posted: [u32; MAX_BUFFERS],
    /// Rails expected to signal (learned from the first immediate; 0: none yet).
    pub expected: u8,
    /// Rails that signaled.
    pub seen: u8,
    /// The first immediate (later ones must agree on mask and size).
    pub first_imm: u32,
    /// Received sizes, once done.
    pub sizes: [u32; MAX_BUFFERS],
    /// The tag this receive appended for an eager message (its FIFO
    /// position), while it is in the list.
    pub tm_tag: Option<mlx5::tm::TagHandle>,
    /// The transfer's tag (an eager message's `app_ctx` must equal it).
    pub tag: u32,
    /// The one buffer of a single-buffer receive: (address, bytes), and
    /// its lkey on each rail, for an eager message.
    pub buf: (u64, u64),
    pub lkeys: [u32; 2],
    /// The receive's FIFO position.
    pub pos: u64,
}

impl RecvSlot {
    pub const IDLE: RecvSlot = RecvSlot {
        gen: 0,
        state: SlotState::Idle,
        nreqs: 0,
        posted: [0; MAX_BUFFERS],
        expected: 0,
        seen: 0,
        first_imm: 0,
        sizes: [0; MAX_BUFFERS],
        tm_tag: None,
        tag: 0,
        buf: (0, 0),
        lkeys: [0; 2],
        pos: 0,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_hands_out_each_entry_once_and_bumps_generations() {
        let mut p = SendPool::new(3);
        let a = p.take().map(|(i, r)| (i, r.gen)).unwrap();
        let b = p.take().map(|(i, r)| (i, r.gen)).unwrap();
        let c = p.take().map(|(i, r)| (i, r.gen)).unwrap();
        assert!(p.take().is_none());
        assert_eq!(p.in_use(), 3);
        assert_ne!(a.0, b.0);
        assert_ne!(b.0, c.0);
        p.release(b.0);
        p.release(b.0); // twice: no double entry on the free list
        assert_eq!(p.in_use(), 2);
        let d = p.take().map(|(i, r)| (i, r.gen)).unwrap();
        assert_eq!(d.0, b.0);
        assert_eq!(d.1, b.1 + 1);
        assert!(p.take().is_none());
    }

    #[test]
    fn sizes() {
        let s = Sizes::new([1, 2, 3, 0, 0, 0, 0, 0], 3);
        assert_eq!(&*s, &[1, 2, 3]);
        assert_eq!(s.total(), 6);
        assert_eq!(format!("{s:?}"), "[1, 2, 3]");
    }
}
