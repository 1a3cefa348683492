//! When to try connecting a member again: the decisions, over the time
//! passed in (no I/O; the client carries them out).
//!
//! The client connects to a member when a request first needs it (its
//! slots, a redirect to it, a scan). An attempt that fails holds the member
//! off: until [`FIRST_RETRY`] after the failure, doubling with each failure
//! in a row to [`MAX_RETRY`], its requests fail at once with the last
//! failure's reason instead of trying again, so a dead member costs one
//! bounded connection attempt now and then, never one per request. A
//! success starts the count over.

use std::time::{Duration, Instant};

/// How long a member is not tried again after its first failure in a row.
pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest a member is not tried again (the hold doubles from
/// [`FIRST_RETRY`] up to this).
pub(crate) const MAX_RETRY: Duration = Duration::from_secs(5);

/// A member's connection attempts so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reach {
    /// Failed attempts in a row.
    failures: u32,
    /// The last failure, if the last attempt failed: when the member may be
    /// tried again, and why it failed.
    last: Option<(Instant, String)>,
}

/// Why a member is not tried now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held<'a> {
    /// The last attempt's error.
    pub(crate) why: &'a str,
    /// Failed attempts in a row.
    pub(crate) failures: u32,
    /// How long until it may be tried again.
    pub(crate) left: Duration,
}

impl Reach {
    /// How long a member is held off after `failures` failures in a row
    /// (at least one): [`FIRST_RETRY`], doubling, at most [`MAX_RETRY`].
    pub(crate) fn hold(failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
    }

    /// Whether the last attempt failed (the member is down, or was).
    pub(crate) fn failing(&self) -> bool {
        self.failures > 0
    }

    /// Whether the member may be tried at `now`; else why not.
    pub(crate) fn may_try(&self, now: Instant) -> Result<(), Held<'_>> {
        match &self.last {
            Some((until, why)) if now < *until => Err(Held {
                why,
                failures: self.failures,
                left: until.saturating_duration_since(now),
            }),
            _ => Ok(()),
        }
    }

    /// An attempt that ended at `now` failed (`why`): returns how long the
    /// member is held off.
    pub(crate) fn failed(&mut self, now: Instant, why: String) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let hold = Reach::hold(self.failures);
        self.last = Some((now + hold, why));
        hold
    }

    /// An attempt succeeded: the next failure is held off from the start.
    pub(crate) fn connected(&mut self) {
        self.failures = 0;
        self.last = None;
    }

    /// Failed attempts in a row.
    #[cfg(test)]
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_never_tried_is_tried_at_once() {
        let r = Reach::default();
        assert_eq!(r.may_try(Instant::now()), Ok(()));
        assert_eq!(r.failures(), 0);
    }

    #[test]
    fn a_failed_member_is_held_off_then_tried_again() {
        let mut r = Reach::default();
        let t = Instant::now();
        assert_eq!(r.failed(t, "connection refused".into()), FIRST_RETRY);
        // Within the hold: not tried, with the reason and the time left.
        let h = r.may_try(t).unwrap_err();
        assert_eq!(
            h,
            Held {
                why: "connection refused",
                failures: 1,
                left: FIRST_RETRY
            }
        );
        let almost = t + FIRST_RETRY - Duration::from_millis(1);
        assert_eq!(
            r.may_try(almost).unwrap_err().left,
            Duration::from_millis(1)
        );
        // Once it is over: tried.
        assert_eq!(r.may_try(t + FIRST_RETRY), Ok(()));
        assert_eq!(r.may_try(t + 10 * MAX_RETRY), Ok(()));
    }

    #[test]
    fn the_hold_doubles_with_each_failure_in_a_row_to_a_cap() {
        let mut r = Reach::default();
        let mut t = Instant::now();
        let mut holds = Vec::new();
        for i in 0..40 {
            let h = r.failed(t, format!("attempt {i}"));
            holds.push(h);
            // Held off for exactly that long, with the latest reason.
            let held = r.may_try(t).unwrap_err();
            assert_eq!((held.why, held.left), (&*format!("attempt {i}"), h));
            assert!(r.may_try(t + h - Duration::from_nanos(1)).is_err());
            assert_eq!(r.may_try(t + h), Ok(()));
            t += h;
        }
        assert_eq!(holds[0], Duration::from_millis(100));
        assert_eq!(holds[1], Duration::from_millis(200));
        assert_eq!(holds[2], Duration::from_millis(400));
        assert_eq!(holds[5], Duration::from_millis(3200));
        assert_eq!(holds[6], MAX_RETRY);
        assert!(holds[6..].iter().all(|&h| h == MAX_RETRY));
        assert_eq!(r.failures(), 40);
        // No overflow however many.
        assert_eq!(Reach::hold(u32::MAX), MAX_RETRY);
        assert_eq!(Reach::hold(0), FIRST_RETRY);
    }

    #[test]
    fn a_success_starts_the_count_over() {
        let mut r = Reach::default();
        let t = Instant::now();
        for _ in 0..5 {
            r.failed(t, "down".into());
        }
        r.connected();
        assert_eq!(r.failures(), 0);
        assert_eq!(r.may_try(t), Ok(()));
        // The connection dies and the member fails again: the first hold.
        assert_eq!(r.failed(t, "down again".into()), FIRST_RETRY);
    }
}
