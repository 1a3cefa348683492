//! One execution of device work: everything the engine needs besides the
//! fabric's shared memory, passed down explicitly.
//!
//! The scheduler ([`super::sched`]) makes an [`Exec`] for each run of a send
//! queue (inline mode) or each step (deferred mode): the fabric, the NIC's
//! clock, the faults armed for this step, and the batch that CQEs go into. The
//! engine reads and changes only what it is handed, so a run depends on
//! nothing but its arguments and shared memory.

use std::cell::Cell;
use std::time::Instant;

use super::cqe_out::{self, CqeBatch, FlushReport, LockedCq, PendingCqe};
use super::fabric::Fabric;

/// The context of one run of device work.
pub(crate) struct Exec<'a> {
    /// The fabric whose shared memory the work reads and writes.
    pub(crate) fab: &'a Fabric,
    /// The NIC's clock.
    pub(crate) clock: Clock<'a>,
    /// Faults armed for this step (deferred mode; none in inline mode).
    pub(crate) faults: Faults,
    /// Where CQEs go before they are written.
    pub(crate) cqes: &'a mut CqeBatch,
    /// Whether the fast path may take WQEs (tests turn it off to compare it
    /// with the general path).
    #[cfg(test)]
    pub(crate) fast_path: bool,
    /// WQEs the fast path executed.
    #[cfg(test)]
    pub(crate) fast_wqes: u64,
}

impl std::fmt::Debug for Exec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exec")
            .field("clock", &self.clock)
            .field("faults", &self.faults)
            .finish()
    }
}

impl<'a> Exec<'a> {
    /// A context with no faults armed and the fast path on.
    pub(crate) fn new(fab: &'a Fabric, clock: Clock<'a>, cqes: &'a mut CqeBatch) -> Self {
        Exec {
            fab,
            clock,
            faults: Faults::default(),
            cqes,
            #[cfg(test)]
            fast_path: true,
            #[cfg(test)]
            fast_wqes: 0,
        }
    }

    /// Whether the fast path may take WQEs (always, outside tests).
    #[inline(always)]
    pub(crate) fn fast_path_on(&self) -> bool {
        #[cfg(test)]
        return self.fast_path;
        #[cfg(not(test))]
        true
    }

    /// Queues a 64-byte CQE for CQ `cqn`, or writes it at once (see
    /// [`cqe_out::push_cqe`]).
    #[inline]
    pub(crate) fn push_cqe(&mut self, cqn: u32, cqe: &[u8; 64], report: &mut FlushReport) {
        let plain = !self.faults.compression_allowed();
        cqe_out::push_cqe(self.fab, self.cqes, cqn, cqe, plain, report);
    }

    /// Queues a CQE with its scatter-to-CQE half (see [`cqe_out::push`]).
    pub(crate) fn push(&mut self, mut c: PendingCqe, report: &mut FlushReport) {
        c.plain |= !self.faults.compression_allowed();
        cqe_out::push(self.fab, self.cqes, c, report);
    }

    /// Writes the queued CQEs unless the batch is held.
    #[inline]
    pub(crate) fn flush(&mut self, report: &mut FlushReport) {
        cqe_out::flush(self.fab, self.cqes, report);
    }

    /// Locks CQ `cqn` for one CQE written straight into it (see
    /// [`cqe_out::lock_for_one`]).
    #[inline]
    pub(crate) fn lock_for_one(&self, cqn: u32) -> Option<LockedCq<'a>> {
        cqe_out::lock_for_one(self.fab, self.cqes, cqn)
    }
}

/// The NIC's clock during one run of a send queue.
#[derive(Debug)]
pub(crate) enum Clock<'a> {
    /// Deferred mode: the scheduler's logical time (ns).
    Logical(u64),
    /// Inline mode: real time since the NIC's origin, read at most once per run
    /// and only when a retry timer needs it (a clock read per doorbell was a
    /// seventh of the simulated NIC's time).
    Real(&'a Instant, Cell<Option<u64>>),
}

impl<'a> Clock<'a> {
    /// Real time since `origin`, read lazily.
    pub(crate) fn real(origin: &'a Instant) -> Self {
        Clock::Real(origin, Cell::new(None))
    }

    /// Now, in ns.
    pub(crate) fn ns(&self) -> u64 {
        match self {
            Clock::Logical(t) => *t,
            Clock::Real(origin, c) => c.get().unwrap_or_else(|| {
                let t = origin.elapsed().as_nanos() as u64;
                c.set(Some(t));
                t
            }),
        }
    }

    /// A cheap timestamp (ns) for the peer-liveness check: in inline mode the
    /// kernel's coarse clock, which the vDSO reads without the time-stamp
    /// counter (a tick's resolution is plenty for a millisecond period).
    pub(crate) fn peer_stamp(&self) -> u64 {
        match self {
            Clock::Logical(t) => *t,
            Clock::Real(..) => coarse_ns(),
        }
    }
}

/// `CLOCK_MONOTONIC_COARSE` in ns.
fn coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant
    // every Linux kernel since 2.6.32 knows.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Faults armed for the WQE the deferred scheduler runs now, in one byte so
/// that the fast path asks "anything armed?" once. Each of RNR, access and
/// peer loss is taken by the first check that meets it; compression off holds
/// for every CQE the step produces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Faults(u8);

impl Faults {
    const RNR: u8 = 1;
    const ACCESS: u8 = 2;
    const PEER: u8 = 4;
    const NO_COMPRESS: u8 = 8;

    /// The faults a step rolled.
    pub(crate) fn armed(rnr: bool, access: bool, peer_loss: bool, no_compress: bool) -> Self {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        Faults(
            bit(rnr, Self::RNR)
                | bit(access, Self::ACCESS)
                | bit(peer_loss, Self::PEER)
                | bit(no_compress, Self::NO_COMPRESS),
        )
    }

    fn take(&mut self, bit: u8) -> bool {
        let armed = self.0 & bit != 0;
        self.0 &= !bit;
        armed
    }

    /// Takes the armed RNR fault, if any (where the responder takes a receive).
    pub(crate) fn take_rnr(&mut self) -> bool {
        self.take(Self::RNR)
    }

    /// Takes the armed access fault, if any (where the responder checks the
    /// rkey).
    pub(crate) fn take_access(&mut self) -> bool {
        self.take(Self::ACCESS)
    }

    /// Takes the armed peer-loss fault, if any (where the requester reaches
    /// the responder).
    pub(crate) fn take_peer(&mut self) -> bool {
        self.take(Self::PEER)
    }

    /// Whether an RNR, access or peer-loss fault is armed.
    #[inline]
    pub(crate) fn any_failure(self) -> bool {
        self.0 & (Self::RNR | Self::ACCESS | Self::PEER) != 0
    }

    /// Whether CQEs produced now may be compressed.
    #[inline]
    pub(crate) fn compression_allowed(self) -> bool {
        self.0 & Self::NO_COMPRESS == 0
    }
}

#[cfg(test)]
mod tests {
    use super::Faults;

    #[test]
    fn each_fault_is_taken_once_and_compression_stays_off() {
        let mut f = Faults::armed(true, true, true, true);
        assert!(f.any_failure());
        assert!(f.take_rnr() && !f.take_rnr());
        assert!(f.take_access() && !f.take_access());
        assert!(f.any_failure());
        assert!(f.take_peer() && !f.take_peer());
        assert!(!f.any_failure());
        assert!(!f.compression_allowed());
        let none = Faults::default();
        assert!(!none.any_failure() && none.compression_allowed());
    }
}
