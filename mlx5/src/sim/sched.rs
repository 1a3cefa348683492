//! The NIC of one process in one fabric: when work runs.
//!
//! - [`ExecMode::Inline`]: a doorbell executes the QP's new WQEs before it
//!   returns; work stalled on RNR or an unreachable peer is retried when the
//!   process polls an empty CQ (or calls `progress`).
//! - [`ExecMode::Deferred`]: a doorbell only queues the QP. Work runs one WQE at
//!   a time when the process polls an empty CQ (or calls `progress`), in an
//!   order a seeded generator picks (per-QP order is kept), on a logical clock,
//!   with faults from a seeded [`FaultPlan`]. Source memory is read when the WQE
//!   runs, as DMA would. The same seed and the same calls give the same run,
//!   byte for byte.
//!
//! No hidden thread runs anything: progress happens in the application's own
//! calls.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use super::cqe_out::{self, CqeBatch, FlushReport};
use super::delay::DelayLine;
use super::engine;
use super::exec::{monotonic_ns, Clock, Exec, Faults};
use super::fabric::{Fabric, FabricError};
use super::registry::qp_state;
use crate::doorbell::DeviceNotify;
use crate::types::{ExecMode, FaultPlan, SchedStats};

struct Deferred {
    rng: u64,
    plan: FaultPlan,
    pending: Vec<u32>,
    clock_ns: u64,
    stats: SchedStats,
    /// CQEs of the steps taken so far, written together at the end of a
    /// burst of steps.
    cqes: CqeBatch,
}

impl Deferred {
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn roll(&mut self, per_mille: u16) -> bool {
        per_mille > 0 && (self.next() % 1000) < u64::from(per_mille)
    }
}

/// The NIC of this process in one fabric.
pub struct Nic {
    fab: Arc<Fabric>,
    mode: ExecMode,
    stalled: Mutex<Vec<u32>>,
    /// Work an idle poll should look at: in inline mode the stalled QPs, plus
    /// one while the delay line holds CQEs; in deferred mode at least 1, since
    /// every idle poll steps the scheduler. CQ rings read it before calling
    /// `cq_idle`.
    n_stalled: Arc<AtomicU32>,
    /// CQEs the link model holds back.
    delay: DelayLine,
    deferred: Option<Mutex<Deferred>>,
    timing: AtomicBool,
    busy_ns: AtomicU64,
    /// Tests turn the fast path off to compare it with the general path.
    #[cfg(test)]
    fast_path: AtomicBool,
    /// WQEs the fast path executed.
    #[cfg(test)]
    fast_wqes: AtomicU64,
}

impl std::fmt::Debug for Nic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nic").field("mode", &self.mode).finish()
    }
}

/// Steps a poll of an empty CQ may take in deferred mode.
pub(crate) const IDLE_STEPS: usize = 8;
/// Steps `progress` takes at most in deferred mode (and a wait for a
/// completion event, before the wall clock has a say).
pub(crate) const PROGRESS_STEPS: usize = 100_000;

/// This process's NIC on each fabric it has open, while some context uses it.
/// Weak: the NIC holds its fabric, so when the last context closes, the NIC
/// and then the fabric are dropped and the fabric's mappings released.
static NICS: Mutex<Vec<Weak<Nic>>> = Mutex::new(Vec::new());

impl Nic {
    /// This process's NIC on `fab`, created in `mode` when no context holds
    /// one. With `mode` `None`, whatever mode it has (inline if new); with
    /// `Some`, an error if it already runs in another mode.
    pub(crate) fn attach(
        fab: &Arc<Fabric>,
        mode: Option<ExecMode>,
    ) -> Result<Arc<Nic>, FabricError> {
        let mut nics = NICS.lock().unwrap_or_else(|e| e.into_inner());
        nics.retain(|w| w.strong_count() > 0);
        let live = nics.iter().filter_map(Weak::upgrade);
        let nic = match live.into_iter().find(|n| Arc::ptr_eq(&n.fab, fab)) {
            Some(n) => n,
            None => {
                let n = Arc::new(Nic::new(fab.clone(), mode.unwrap_or(ExecMode::Inline)));
                nics.push(Arc::downgrade(&n));
                n
            }
        };
        match mode {
            Some(m) if m != nic.mode() => Err(FabricError::ModeConflict(fab.name().to_owned())),
            _ => Ok(nic),
        }
    }

    fn new(fab: Arc<Fabric>, mode: ExecMode) -> Nic {
        let deferred = match mode {
            ExecMode::Inline => None,
            ExecMode::Deferred { seed, faults } => Some(Mutex::new(Deferred {
                rng: seed ^ 0x9e37_79b9_7f4a_7c15 | 1,
                plan: faults,
                pending: Vec::new(),
                clock_ns: 0,
                stats: SchedStats::default(),
                cqes: CqeBatch::new(true),
            })),
        };
        let n_stalled = Arc::new(AtomicU32::new(u32::from(mode != ExecMode::Inline)));
        Nic {
            fab,
            mode,
            stalled: Mutex::new(Vec::new()),
            delay: DelayLine::new(n_stalled.clone()),
            n_stalled,
            deferred,
            timing: AtomicBool::new(false),
            busy_ns: AtomicU64::new(0),
            #[cfg(test)]
            fast_path: AtomicBool::new(true),
            #[cfg(test)]
            fast_wqes: AtomicU64::new(0),
        }
    }

    /// Turns the engine's fast path on or off.
    #[cfg(test)]
    pub(crate) fn set_fast_path(&self, on: bool) {
        self.fast_path.store(on, Ordering::Relaxed);
    }

    /// CQEs the link model has held back.
    #[cfg(test)]
    pub(crate) fn held_cqes(&self) -> u64 {
        self.delay.total()
    }

    /// WQEs the fast path has executed.
    #[cfg(test)]
    pub(crate) fn fast_path_wqes(&self) -> u64 {
        self.fast_wqes.load(Ordering::Relaxed)
    }

    /// Runs `qpn`'s send queue in `x` (see [`engine::run_sq`]).
    #[inline]
    fn run_sq(&self, x: &mut Exec<'_>, qpn: u32, max: usize) -> engine::RunResult {
        #[cfg(test)]
        {
            x.fast_path = self.fast_path.load(Ordering::Relaxed);
        }
        let r = engine::run_sq(x, qpn, max);
        #[cfg(test)]
        self.fast_wqes
            .fetch_add(std::mem::take(&mut x.fast_wqes), Ordering::Relaxed);
        r
    }

    /// Flushes a QP's queues after a verb moved it to ERR.
    pub(crate) fn flush_qp(&self, qpn: u32) -> usize {
        let mut cqes = CqeBatch::new(false);
        let mut x = Exec::new(&self.fab, Clock::real(), &mut cqes, &self.delay);
        engine::flush_qp(&mut x, qpn)
    }

    /// Starts or stops accounting the time the NIC spends executing doorbells
    /// (for benchmarks that separate the simulator's work from the
    /// application's).
    pub fn set_timing(&self, on: bool) {
        self.timing.store(on, Ordering::Relaxed);
    }

    /// Nanoseconds spent executing doorbells while timing was on.
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns.load(Ordering::Relaxed)
    }

    /// The mode.
    pub fn mode(&self) -> ExecMode {
        self.mode
    }

    /// Deferred-mode statistics (zero in inline mode).
    pub fn stats(&self) -> SchedStats {
        self.deferred
            .as_ref()
            .map(|d| {
                let d = d.lock().unwrap_or_else(|e| e.into_inner());
                SchedStats {
                    clock_ns: d.clock_ns,
                    ..d.stats
                }
            })
            .unwrap_or_default()
    }

    fn run_inline(&self, qpn: u32) {
        // The run's CQEs, written when it ends (or when the batch fills).
        let mut cqes = CqeBatch::new(false);
        let mut x = Exec::new(&self.fab, Clock::real(), &mut cqes, &self.delay);
        let r = self.run_sq(&mut x, qpn, usize::MAX);
        if r.stalled.is_some() {
            let mut s = self.stalled.lock().unwrap_or_else(|e| e.into_inner());
            if !s.contains(&qpn) {
                s.push(qpn);
                self.n_stalled.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn progress_inline(&self) -> usize {
        if self.n_stalled.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let list = {
            let mut s = self.stalled.lock().unwrap_or_else(|e| e.into_inner());
            self.n_stalled.fetch_sub(s.len() as u32, Ordering::Relaxed);
            std::mem::take(&mut *s)
        };
        for qpn in list {
            self.run_inline(qpn);
        }
        if self.delay.held() != 0 {
            self.release(monotonic_ns());
        }
        self.n_stalled.load(Ordering::Relaxed) as usize
    }

    /// Writes the held CQEs due at `now`; returns how many are still held.
    fn release(&self, now: u64) -> usize {
        let mut report = FlushReport::default();
        let left = self.delay.release(&self.fab, now, &mut report);
        for cqn in report.overrun {
            engine::fail_qps_of_cq(&self.fab, cqn);
        }
        left
    }

    /// Takes up to `budget` scheduler steps; returns the QPs still pending.
    /// CQEs of the steps are written together at the end.
    fn steps(&self, d: &Mutex<Deferred>, budget: usize) -> usize {
        let mut d = d.lock().unwrap_or_else(|e| e.into_inner());
        self.steps_held(&mut d, budget);
        let mut report = FlushReport::default();
        cqe_out::flush_now(&self.fab, &mut d.cqes, &mut report);
        for cqn in report.overrun {
            // A completion could not be delivered: this process's QPs that
            // complete into that CQ cannot go on.
            engine::fail_qps_of_cq(&self.fab, cqn);
        }
        // CQEs the link model held that have come due on the logical clock.
        let held = self.release(d.clock_ns);
        d.pending.len() + held
    }

    fn steps_held(&self, d: &mut Deferred, budget: usize) {
        for _ in 0..budget {
            if d.pending.is_empty() {
                // Nothing to run: time passes until the next held CQE is
                // due (written when the burst of steps ends).
                if let Some(due) = self.delay.next_due() {
                    d.clock_ns = d.clock_ns.max(due);
                }
                break;
            }
            d.clock_ns += 1000;
            d.stats.steps += 1;
            let plan = d.plan;
            if d.roll(plan.delay) {
                d.stats.delays += 1;
                continue;
            }
            let i = (d.next() % d.pending.len() as u64) as usize;
            let qpn = d.pending[i];
            let (rnr, acc, peer, nocomp) = (
                d.roll(plan.rnr),
                d.roll(plan.access),
                d.roll(plan.peer_loss),
                d.roll(plan.no_compress),
            );
            d.stats.rnr += u64::from(rnr);
            d.stats.access += u64::from(acc);
            d.stats.peer_loss += u64::from(peer);
            d.stats.no_compress += u64::from(nocomp);
            let clock = Clock::Logical(d.clock_ns);
            let mut x = Exec::new(&self.fab, clock, &mut d.cqes, &self.delay);
            x.faults = Faults::armed(rnr, acc, peer, nocomp);
            let r = self.run_sq(&mut x, qpn, 1);
            d.stats.executed += r.executed as u64;
            if r.executed == 0 && r.stalled.is_none() {
                d.pending.swap_remove(i);
            }
        }
    }

    /// Whether the NIC runs work later, in a seeded order (deferred mode).
    pub(crate) fn is_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// Whether an idle poll would find work for the NIC: stalled QPs or held
    /// CQEs (inline mode), always in deferred mode.
    pub(crate) fn has_idle_work(&self) -> bool {
        self.n_stalled.load(Ordering::Relaxed) != 0
    }

    /// What a waiter for completion events does between checks: an idle
    /// poll's worth of work (deferred mode: a few scheduler steps). Returns
    /// the QPs and held CQEs still waiting.
    pub(crate) fn idle_step(&self) -> usize {
        match &self.deferred {
            None => self.progress_inline(),
            Some(d) => self.steps(d, IDLE_STEPS),
        }
    }

    /// Runs stalled or queued work. Inline mode: retries stalled QPs once.
    /// Deferred mode: steps until nothing is pending (or a large step budget is
    /// used up, e.g. a QP waiting forever on RNR). Returns the QPs still waiting.
    pub fn progress(&self) -> usize {
        match &self.deferred {
            None => self.progress_inline(),
            Some(d) => self.steps(d, PROGRESS_STEPS),
        }
    }
}

impl DeviceNotify for Nic {
    fn sq_doorbell(&self, qpn: u32) {
        match &self.deferred {
            None if self.timing.load(Ordering::Relaxed) => {
                let t = Instant::now();
                self.run_inline(qpn);
                self.busy_ns
                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            None => self.run_inline(qpn),
            Some(d) => {
                let mut d = d.lock().unwrap_or_else(|e| e.into_inner());
                if !d.pending.contains(&qpn) {
                    d.pending.push(qpn);
                }
            }
        }
    }
    fn rq_doorbell(&self, qn: u32) {
        // Receives posted to a QP in ERR are flushed at once.
        if let Some((_, e)) = engine::qp_by_num(&self.fab, qn) {
            if e.qp_state.load(Ordering::Acquire) == qp_state::ERR {
                self.flush_qp(qn);
            }
        }
        if self.deferred.is_none() {
            self.progress_inline();
        }
    }
    fn idle_work(&self) -> Option<Arc<AtomicU32>> {
        Some(self.n_stalled.clone())
    }
    fn cq_arm(&self, cqn: u32) {
        cqe_out::arm(&self.fab, cqn);
    }
    fn cq_idle(&self, _cqn: u32) {
        match &self.deferred {
            None => {
                self.progress_inline();
            }
            Some(d) => {
                self.steps(d, IDLE_STEPS);
            }
        }
    }
}
