//! One execution of device work: everything the engine needs besides the
//! fabric's shared memory, passed down explicitly.
//!
//! The scheduler ([`super::sched`]) makes an [`Exec`] for each run of a send
//! queue (inline mode) or each step (deferred mode): the fabric, the NIC's
//! clock, the faults armed for this step, and the batch that CQEs go into. The
//! engine reads and changes only what it is handed, so a run depends on
//! nothing but its arguments and shared memory.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use super::cqe_out::{self, CqeBatch, FlushReport, LockedCq, PendingCqe};
use super::delay::DelayLine;
use super::fabric::Fabric;

/// The context of one run of device work.
pub(crate) struct Exec<'a> {
    /// The fabric whose shared memory the work reads and writes.
    pub(crate) fab: &'a Fabric,
    /// The NIC's clock.
    pub(crate) clock: Clock,
    /// Faults armed for this step (deferred mode; none in inline mode).
    pub(crate) faults: Faults,
    /// Where CQEs go before they are written.
    pub(crate) cqes: &'a mut CqeBatch,
    /// Where CQEs wait that the link model holds back.
    delay: &'a DelayLine,
    /// Some port of the fabric has a link model (read once per run: while
    /// none has, the model costs nothing).
    pub(crate) links: bool,
    /// Some port of the fabric is down or some path cut one way (read once
    /// per run, like `links`).
    pub(crate) paths_down: bool,
    /// The delay line may hold CQEs, so every CQE checks whether its CQ has
    /// some held there.
    delaying: bool,
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
    #[inline]
    pub(crate) fn new(
        fab: &'a Fabric,
        clock: Clock,
        cqes: &'a mut CqeBatch,
        delay: &'a DelayLine,
    ) -> Self {
        let header = &fab.reg().header;
        Exec {
            fab,
            clock,
            faults: Faults::default(),
            cqes,
            delay,
            links: header.modeled_ports.load(Ordering::Relaxed) != 0,
            paths_down: super::link::any_broken(fab.reg()),
            delaying: delay.held() != 0,
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
        self.push_cqe_at(cqn, cqe, None, report);
    }

    /// [`push_cqe`](Self::push_cqe) of a CQE that the link model reveals no
    /// earlier than `reveal` on the NIC's clock.
    #[inline]
    pub(crate) fn push_cqe_at(
        &mut self,
        cqn: u32,
        cqe: &[u8; 64],
        reveal: Option<u64>,
        report: &mut FlushReport,
    ) {
        let plain = !self.faults.compression_allowed();
        if (reveal.is_some() || self.delaying) && self.held_back(cqn, reveal) {
            let c = PendingCqe {
                cqn,
                cqe: *cqe,
                pre: None,
                plain,
            };
            self.hold(reveal, c);
            return;
        }
        cqe_out::push_cqe(self.fab, self.cqes, cqn, cqe, plain, report);
    }

    /// Queues a CQE with its scatter-to-CQE half (see [`cqe_out::push`]),
    /// revealed no earlier than `reveal`.
    pub(crate) fn push(
        &mut self,
        mut c: PendingCqe,
        reveal: Option<u64>,
        report: &mut FlushReport,
    ) {
        c.plain |= !self.faults.compression_allowed();
        if (reveal.is_some() || self.delaying) && self.held_back(c.cqn, reveal) {
            self.hold(reveal, c);
            return;
        }
        cqe_out::push(self.fab, self.cqes, c, report);
    }

    /// Whether a CQE for `cqn` revealed at `reveal` must wait: its time has
    /// not come, or CQEs of its CQ are held before it.
    #[cold]
    fn held_back(&self, cqn: u32, reveal: Option<u64>) -> bool {
        reveal.is_some_and(|t| t > self.clock.ns())
            || (self.delaying && self.delay.last_due(cqn).is_some())
    }

    #[cold]
    fn hold(&mut self, reveal: Option<u64>, c: PendingCqe) {
        self.delay.hold(reveal.unwrap_or(0), c);
        self.delaying = true;
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
pub(crate) enum Clock {
    /// Deferred mode: the scheduler's logical time (ns).
    Logical(u64),
    /// Inline mode: `CLOCK_MONOTONIC`, the same for every process of the host
    /// (ports are shared), read at most once per run and only when a retry
    /// timer or the link model needs it (a clock read per doorbell was a
    /// seventh of the simulated NIC's time).
    Real(Cell<Option<u64>>),
}

impl Clock {
    /// Real time, read lazily.
    pub(crate) fn real() -> Self {
        Clock::Real(Cell::new(None))
    }

    /// Now, in ns.
    pub(crate) fn ns(&self) -> u64 {
        match self {
            Clock::Logical(t) => *t,
            Clock::Real(c) => c.get().unwrap_or_else(|| {
                let t = monotonic_ns();
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
            Clock::Real(_) => clock_ns(libc::CLOCK_MONOTONIC_COARSE),
        }
    }
}

/// `CLOCK_MONOTONIC` in ns: the link model's time base in inline mode.
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// A clock's time in ns.
fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; both clock ids are constants
    // every Linux kernel since 2.6.32 knows.
    unsafe { libc::clock_gettime(id, &mut ts) };
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
