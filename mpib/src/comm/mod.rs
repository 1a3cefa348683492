//! The communicator: `isend`, `irecv`, `test`.
//!
//! | module | holds |
//! |---|---|
//! | this one | [`Comm`], its counters, closing, `progress` |
//! | `setup` | [`Config`], [`PendingComm`], [`pair`] |
//! | `send` | `isend`: the split, the fast and record paths, send completions |
//! | `recv` | `irecv`, `test`: CTS entries, immediates, mask learning, SRQ refill |

mod eager;
mod recv;
mod send;
mod setup;

use mlx5::device::Context;
use mlx5::wr::{CqId, PostError, Wc};

use crate::buffer::{Buffer, Span};
use crate::cts::MAX_BUFFERS;
use crate::error::{CloseReason, Error};
use crate::liveness::Liveness;
use crate::policy::{RailMeter, SplitPolicy, Telemetry};
use crate::rail::Rail;
use crate::regcache::{RegCache, RegStats, Region};
use crate::request::{RecvSlot, SendPool};

use setup::Resolved;
pub use setup::{pair, Config, PendingComm, MAX_EAGER, SUGGESTED_EAGER_MAX};

/// Most bytes one buffer of a transfer may have (the records carry 32-bit
/// sizes; one work request moves at most 2 GiB).
pub const MAX_SIZE: u64 = 1 << 31;
/// Most rails.
pub const MAX_RAILS: usize = 2;

/// `wr_id` bit of CTS writes (the rest: the slot); data signals carry the
/// send request index << 8 | rail.
const CTS_WR: u64 = 1 << 63;
/// Completions polled per call of `poll_cq`.
const POLL_BATCH: usize = 64;
/// The liveness channel is read every this many progress calls.
const LIVENESS_EVERY: u32 = 64;

/// Counters of one communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Sends posted.
    pub sends: u64,
    /// Receives posted (CTS entries written).
    pub recvs: u64,
    /// Sends that carried their size in the immediate, data and signal in
    /// one WR per active rail.
    pub fast_path: u64,
    /// Sends that wrote a completion record.
    pub record_path: u64,
    /// Payload bytes sent per rail.
    pub rail_bytes: [u64; 2],
    /// WRITE_WITH_IMMs sent per rail.
    pub signals: [u64; 2],
    /// Plain data WRITEs sent per rail.
    pub data_writes: [u64; 2],
    /// CTS entries written per rail, and how many of them were signaled.
    pub cts: [u64; 2],
    /// See `cts`.
    pub cts_signaled: [u64; 2],
    /// Receives posted on each rail's SRQ so far.
    pub srq_posted: [u64; 2],
    /// Receives consumed (immediates polled) on each rail.
    pub srq_consumed: [u64; 2],
    /// Fewest receives left on each rail's SRQ after an immediate was polled
    /// (never 0 while the water marks keep ahead of the peer).
    pub srq_min_outstanding: [u32; 2],
    /// Sends that went eagerly over tag matching (no CTS).
    pub eager_sends: u64,
    /// Receives an eager message completed.
    pub eager_recvs: u64,
    /// Eager messages that came before their tag could match (parked in a
    /// bounce buffer, or matched in software).
    pub unexpected: u64,
}

/// A dual-rail (or single-rail) communicator with one peer. See the crate
/// documentation for the protocol and the call order.
pub struct Comm {
    id: u32,
    rails: Vec<Rail>,
    cfg: Config,
    res: Resolved,
    rail_mask: u8,
    policy: Box<dyn SplitPolicy>,
    meters: [RailMeter; 2],
    send_pos: u64,
    sends: SendPool,
    recv_pos: u64,
    slots: Vec<RecvSlot>,
    wcs: Vec<Wc>,
    /// The eager threshold both sides use (0: no tag matching).
    eager: u64,
    /// Eager messages that came before their receive.
    parked: Vec<eager::Parked>,
    tm_wcs: Vec<mlx5::wr::TmWc>,
    regs: RegCache,
    liveness: Liveness,
    closed: Option<CloseReason>,
    calls: u32,
    stats: Stats,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rails", &self.rails)
            .field("policy", &self.policy)
            .field("closed", &self.closed)
            .finish()
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.close();
    }
}

/// Checks the buffers of a send or receive.
fn check_spans(bufs: &[Span]) -> Result<(), Error> {
    if bufs.is_empty() || bufs.len() > MAX_BUFFERS {
        return Err(Error::Invalid("1 to 8 buffers"));
    }
    if bufs.iter().any(|b| b.len > MAX_SIZE) {
        return Err(Error::Invalid("a buffer larger than MAX_SIZE"));
    }
    Ok(())
}

impl Comm {
    /// Number of rails.
    pub fn nrails(&self) -> usize {
        self.rails.len()
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The device of rail `r`.
    pub fn device(&self, r: usize) -> Option<&Context> {
        self.rails.get(r).map(|x| x.dom.context())
    }

    /// Replaces the split policy.
    pub fn set_policy(&mut self, p: Box<dyn SplitPolicy>) {
        self.policy = p;
    }

    /// The per-rail telemetry the split policy sees.
    pub fn telemetry(&self) -> Telemetry {
        Telemetry {
            rails: [self.meters[0].t, self.meters[1].t],
        }
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// What the registration cache did.
    pub fn reg_stats(&self) -> RegStats {
        self.regs.stats()
    }

    /// Why the communicator closed, if it did.
    pub fn closed(&self) -> Option<&CloseReason> {
        self.closed.as_ref()
    }

    /// Allocates `len` zeroed bytes registered on every rail.
    pub fn alloc_buffer(&self, len: usize) -> Result<Buffer, Error> {
        let pds: Vec<_> = self.rails.iter().map(|r| r.dom.pd()).collect();
        Buffer::alloc(&pds, len)
    }

    /// Registers `len` bytes of this process at `ptr` on every rail (or takes
    /// a reference on a live registration that covers them).
    ///
    /// # Safety
    /// The pages around the range must stay valid, and may be written by the
    /// NIC whenever a receive names them, until the region is given back to
    /// [`deregister`](Self::deregister) or the communicator is dropped.
    pub unsafe fn register(&mut self, ptr: *const u8, len: usize) -> Result<Region, Error> {
        let pds: Vec<_> = self.rails.iter().map(|r| r.dom.pd()).collect();
        // SAFETY: the caller's guarantee, forwarded.
        unsafe { self.regs.register(&pds, ptr as u64, len as u64) }
    }

    /// Gives a region back (the last reference drops the registration).
    pub fn deregister(&mut self, r: Region) -> Result<(), Error> {
        self.regs.deregister(r)
    }

    /// Closes the communicator (its QPs stop; the peer sees the liveness
    /// channel close). Later calls fail with [`CloseReason::Local`].
    pub fn close(&mut self) {
        self.shut(CloseReason::Local);
    }

    fn shut(&mut self, why: CloseReason) {
        if self.closed.is_some() {
            return;
        }
        self.closed = Some(why);
        for r in &self.rails {
            r.shut();
        }
        self.liveness.shutdown();
    }

    /// Closes with `why` and returns the error that says so.
    fn fail<T>(&mut self, why: impl Into<CloseReason>) -> Result<T, Error> {
        self.shut(why.into());
        Err(self.closed_err())
    }

    fn closed_err(&self) -> Error {
        Error::Closed(self.closed.clone().unwrap_or(CloseReason::Local))
    }

    fn usable(&self) -> Result<(), Error> {
        match self.closed {
            None => Ok(()),
            Some(_) => Err(self.closed_err()),
        }
    }

    /// Polls the CQ `cq` picks on every rail, in batches, and hands each
    /// completion to `on` until the communicator closes. A failed poll closes
    /// it.
    fn drain(&mut self, cq: fn(&Rail) -> CqId, on: impl FnMut(&mut Comm, usize, &Wc)) {
        let mut wcs = std::mem::take(&mut self.wcs);
        self.drain_each(
            &mut wcs,
            |rail, out| Some(rail.dom.poll_cq(cq(rail), POLL_BATCH, out)),
            on,
        );
        self.wcs = wcs;
    }

    /// Polls every rail with `poll` (`None`: nothing to poll on that rail)
    /// until a poll returns less than a batch, handing each item to `on`,
    /// in `buf`; a poll that fails closes the communicator.
    fn drain_each<T>(
        &mut self,
        buf: &mut Vec<T>,
        poll: impl Fn(&mut Rail, &mut Vec<T>) -> Option<Result<usize, PostError>>,
        mut on: impl FnMut(&mut Comm, usize, &T),
    ) {
        for r in 0..self.rails.len() {
            loop {
                buf.clear();
                let n = match poll(&mut self.rails[r], buf) {
                    None => break,
                    Some(Ok(n)) => n,
                    Some(Err(e)) => {
                        self.shut(CloseReason::Post {
                            rail: r,
                            why: e.to_string(),
                        });
                        break;
                    }
                };
                for item in buf.iter() {
                    if self.closed.is_some() {
                        break;
                    }
                    on(self, r, item);
                }
                if n < POLL_BATCH || self.closed.is_some() {
                    break;
                }
            }
        }
        buf.clear();
    }

    /// Polls every rail's completions, refills the SRQs and reads the
    /// liveness channel now and then. `test` does this; call it directly to
    /// make progress without a request at hand.
    pub fn progress(&mut self) {
        if self.closed.is_some() {
            return;
        }
        self.calls = self.calls.wrapping_add(1);
        self.poll_recvs();
        self.poll_eager();
        self.poll_sends();
        self.refill();
        if self.calls % LIVENESS_EVERY == 0 && self.closed.is_none() && self.liveness.peer_gone() {
            self.shut(CloseReason::PeerGone);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_communicator_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<super::Comm>();
        send::<super::PendingComm>();
        send::<crate::Buffer>();
    }
}
