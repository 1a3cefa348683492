//! The member's lease, as its workers read it: until when the control group
//! lets this member serve its slots ([`kvs_control::Group::lease_expiry`]).
//! The control thread publishes it; a worker reads it once per loop turn (an
//! atomic load and a read of the clock, shared by every request of the
//! turn), so a worker stops serving at the lease's end even if the control
//! thread stalls.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The lease's end, shared by the control thread and the workers.
#[derive(Debug)]
pub(crate) struct Lease {
    /// What `until` counts from.
    epoch: Instant,
    /// Nanoseconds from `epoch` to the lease's end; 0: no lease.
    until: AtomicU64,
    /// Fault injection (tests): serve as if the lease held, whatever the
    /// group says, to show what stops a deposed primary when the lease
    /// does not.
    kept: AtomicBool,
}

impl Lease {
    /// No lease yet.
    pub fn new() -> Lease {
        Lease {
            epoch: Instant::now(),
            until: AtomicU64::new(0),
            kept: AtomicBool::new(false),
        }
    }

    /// Publishes the lease's end (`None`: the member holds none).
    pub fn set(&self, until: Option<Instant>) {
        let ns = until.map_or(0, |t| {
            (t.saturating_duration_since(self.epoch).as_nanos() as u64).max(1)
        });
        // Release: pairs with the workers' acquire, though nothing else is
        // published with it; the order of two updates is all that matters.
        self.until.store(ns, Ordering::Release);
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
        let l = Lease::new();
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
}
