//! The member's lease, as its workers read it: until when the control group
//! lets this member serve its slots ([`kvs_control::Group::lease_expiry`]).
//! The control thread publishes it; a worker reads it once per loop turn (an
//! atomic load and a read of the clock, shared by every request of the
//! turn), so a worker stops serving at the lease's end even if the control
//! thread stalls.
//!
//! A worker that read the lease at a turn's start serves by it until the
//! turn ends, however long the turn takes (a thread the OS does not run
//! for a while). So when the member withdraws its own lease to hand its
//! slots over (a drain), the control thread must know that every turn that
//! began under the lease has ended before the group gives the slots to
//! another member: each worker marks its turns ([`Lease::enter`],
//! [`Lease::leave`]), and [`Lease::turns`] and [`Lease::passed`] tell the
//! control thread when the turns in progress at the withdrawal are over.
//!
//! A lease given back (after a drain, or once a restarted member's entry
//! is applied) counts only with the map that goes with it: the one in
//! which the group moved the member's slots away. Until a worker has
//! installed that map it would serve by an older one, and answer for
//! slots another member now owns; so the lease names the oldest map it may
//! be served by ([`Lease::require_map`]).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

/// The lease's end, shared by the control thread and the workers.
#[derive(Debug)]
pub(crate) struct Lease {
    /// What `until` counts from.
    epoch: Instant,
    /// Nanoseconds from `epoch` to the lease's end; 0: no lease.
    until: AtomicU64,
    /// Per worker: its turns, counted twice each (odd: in a turn, serving
    /// by the lease it read at the start; even: between turns).
    turns: Vec<AtomicU64>,
    /// The oldest map version a worker may serve by.
    min_map: AtomicU32,
    /// Fault injection (tests): serve as if the lease held, whatever the
    /// group says, to show what stops a deposed primary when the lease
    /// does not.
    kept: AtomicBool,
}

impl Lease {
    /// No lease yet, for `workers` workers.
    pub fn new(workers: usize) -> Lease {
        Lease {
            epoch: Instant::now(),
            until: AtomicU64::new(0),
            turns: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            min_map: AtomicU32::new(0),
            kept: AtomicBool::new(false),
        }
    }

    /// Publishes the lease's end (`None`: the member holds none).
    pub fn set(&self, until: Option<Instant>) {
        let ns = until.map_or(0, |t| {
            (t.saturating_duration_since(self.epoch).as_nanos() as u64).max(1)
        });
        // SeqCst: with the workers' SeqCst marks of their turns (`enter`),
        // either a worker's turn reads this value or `turns` sees the turn
        // (the store-load order Release/Acquire does not give).
        self.until.store(ns, Ordering::SeqCst);
    }

    /// From now on the lease holds only for workers serving by map
    /// `version` or a newer one. Called before the lease is given back.
    pub fn require_map(&self, version: u32) {
        self.min_map.fetch_max(version, Ordering::SeqCst);
    }

    /// Worker `w`, serving by map `map`, starts a turn at `now`: whether
    /// the lease holds, which the turn serves by until
    /// [`leave`](Self::leave).
    #[inline]
    pub fn enter(&self, w: usize, now: Instant, map: u32) -> bool {
        if let Some(t) = self.turns.get(w) {
            // SeqCst: ordered before the load of the lease below (see `set`).
            t.fetch_add(1, Ordering::SeqCst);
        }
        let until = self.until.load(Ordering::SeqCst);
        (until != 0
            && (now.saturating_duration_since(self.epoch).as_nanos() as u64) < until
            && map >= self.min_map.load(Ordering::SeqCst))
            || self.kept.load(Ordering::Relaxed)
    }

    /// Worker `w`'s turn is over, if it was in one (it serves nothing
    /// until it enters the next).
    #[inline]
    pub fn leave(&self, w: usize) {
        if let Some(t) = self.turns.get(w) {
            // Only worker `w` writes its count.
            if t.load(Ordering::Relaxed) % 2 == 1 {
                // Release: everything the turn served comes before.
                t.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// The workers' turn counts, read after the lease was withdrawn.
    pub fn turns(&self) -> Vec<u64> {
        self.turns
            .iter()
            .map(|t| t.load(Ordering::SeqCst))
            .collect()
    }

    /// Whether every turn in progress when `then` was read ([`turns`])
    /// has ended: a worker then between turns, or past that turn since.
    ///
    /// [`turns`]: Self::turns
    pub fn passed(&self, then: &[u64]) -> bool {
        self.turns
            .iter()
            .zip(then)
            .all(|(t, &was)| was % 2 == 0 || t.load(Ordering::Acquire) != was)
    }

    /// Whether the lease holds at `now`.
    #[inline]
    pub fn holds(&self, now: Instant) -> bool {
        let until = self.until.load(Ordering::Acquire);
        (until != 0 && (now.saturating_duration_since(self.epoch).as_nanos() as u64) < until)
            || self.kept.load(Ordering::Relaxed)
    }

    /// Fault injection: serve as if the lease held (`on`), or not.
    pub fn keep(&self, on: bool) {
        self.kept.store(on, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lease_holds_until_its_end_and_not_at_all_when_withdrawn() {
        let l = Lease::new(1);
        let now = Instant::now();
        assert!(!l.holds(now));
        l.set(Some(now + Duration::from_millis(100)));
        assert!(l.holds(now));
        assert!(l.holds(now + Duration::from_millis(99)));
        assert!(!l.holds(now + Duration::from_millis(100)));
        l.set(None);
        assert!(!l.holds(now));
        // A lease that ended before the epoch is no lease.
        l.set(Some(l.epoch));
        assert!(!l.holds(now));
    }

    #[test]
    fn a_withdrawal_waits_for_the_turns_that_began_under_the_lease() {
        let l = Lease::new(2);
        let now = Instant::now();
        l.set(Some(now + Duration::from_secs(10)));
        // Worker 0 is in a turn, serving by the lease; worker 1 is idle.
        assert!(l.enter(0, now, 1));
        l.set(None);
        let then = l.turns();
        assert!(!l.passed(&then), "worker 0's turn still serves");
        // Worker 1 starts a turn now: it reads the lease withdrawn.
        assert!(!l.enter(1, now, 1));
        assert!(!l.passed(&then));
        l.leave(0);
        l.leave(0);
        assert!(l.passed(&then));
        assert!(!l.enter(0, now, 1));
        // Given back with the map of version 5: not to a worker at 4.
        l.require_map(5);
        l.set(Some(now + Duration::from_secs(10)));
        assert!(!l.enter(0, now, 4));
        assert!(l.enter(1, now, 5));
    }
}
