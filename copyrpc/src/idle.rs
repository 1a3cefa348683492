//! What a context does when it has no work: the idle policy, and the waker
//! other threads use to end a [`Context::wait`](crate::Context::wait).
//!
//! A context that spins on its CQs answers in the least time and burns a
//! core while idle. [`IdlePolicy::SpinThenSleep`] spins for a while, then
//! arms both CQs and sleeps on the context's completion channel until a
//! completion event, a [`Waker::wake`] or the timeout — the sleep of
//! `ibv_get_cq_event`, as verbs servers and UCX's `ucp_worker_wait` do it.
//!
//! The spin adapts. A sleep costs a wake-up, tens of microseconds on a
//! loaded or virtualized host, and two peers that both fall asleep before
//! the other's answer comes pay it on every exchange, at a fraction of the
//! spinning rate. So when work ends a sleep within twice the spin that
//! preceded it (spinning a little longer would have caught it), the spin
//! doubles, up to `max_spin`; a sleep that lasted longer, or ran to its
//! timeout, sets it back to `spin`. Under load the spin soon covers the gaps
//! between messages and the context stops sleeping; idle, it sleeps after
//! `spin`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mlx5::device::ChannelWaker;

/// How [`Context::wait`](crate::Context::wait) spends time without work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdlePolicy {
    /// Poll without a pause until work, a wake or the timeout: the least
    /// latency, and a core burnt while idle. The context's CQs are created
    /// without a completion channel.
    Spin,
    /// Poll for `spin` (adapted up to `max_spin`, see the module docs), then
    /// arm the CQs and sleep until a completion event, a wake or the
    /// timeout. Waking costs a system call on the side that raises the
    /// event and a scheduler wake-up on the sleeper.
    SpinThenSleep {
        /// The spin of an idle context.
        spin: Duration,
        /// The longest spin the adaptation reaches.
        max_spin: Duration,
    },
}

impl IdlePolicy {
    /// Spin `spin`, adapted up to the default maximum (1 ms), then sleep.
    pub fn sleep_after(spin: Duration) -> IdlePolicy {
        IdlePolicy::SpinThenSleep {
            spin,
            max_spin: DEFAULT_MAX_SPIN.max(spin),
        }
    }
}

impl Default for IdlePolicy {
    /// Spin 50 µs (adapted up to 1 ms), then sleep: many round trips of
    /// spinning, so a client waiting on an answer rarely sleeps.
    fn default() -> Self {
        IdlePolicy::sleep_after(DEFAULT_SPIN)
    }
}

/// The default spin before sleeping.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// The default longest adapted spin.
pub const DEFAULT_MAX_SPIN: Duration = Duration::from_millis(1);

/// The spin of the next idle stretch, adapted after every sleep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpinBudget {
    base: Duration,
    max: Duration,
    now: Duration,
}

impl SpinBudget {
    pub(crate) fn new(p: IdlePolicy) -> SpinBudget {
        let (base, max) = match p {
            IdlePolicy::Spin => (Duration::MAX, Duration::MAX),
            IdlePolicy::SpinThenSleep { spin, max_spin } => (spin, max_spin.max(spin)),
        };
        SpinBudget {
            base,
            max,
            now: base,
        }
    }

    /// How long to spin now.
    #[inline]
    pub(crate) fn now(&self) -> Duration {
        self.now
    }

    /// A sleep of `slept` ended with work: had the spin been twice as long,
    /// it would have caught it, so it doubles; otherwise it goes back to the
    /// base.
    pub(crate) fn woke_to_work(&mut self, slept: Duration) {
        self.now = if slept < self.now.saturating_mul(2) {
            self.now.saturating_mul(2).min(self.max)
        } else {
            self.base
        };
    }

    /// A sleep ran to its timeout: the context is idle.
    pub(crate) fn timed_out(&mut self) {
        self.now = self.base;
    }
}

/// Ends a context's [`wait`](crate::Context::wait) from another thread: for
/// work handed to the context's thread by other means than its CQs (a new
/// connection, a stop request). A wake that comes while the context is not
/// waiting ends its next wait at once, so none is lost; wakes do not pile up.
#[derive(Clone, Debug)]
pub struct Waker {
    flag: Arc<AtomicBool>,
    chan: Option<ChannelWaker>,
}

impl Waker {
    pub(crate) fn new(flag: Arc<AtomicBool>, chan: Option<ChannelWaker>) -> Waker {
        Waker { flag, chan }
    }

    /// Ends the context's current or next wait.
    pub fn wake(&self) {
        // The flag first: a spinning wait sees it, and a sleeping one that
        // the channel wakes finds it set.
        self.flag.store(true, Ordering::Release);
        if let Some(c) = &self.chan {
            c.wake();
        }
    }
}

/// Takes a pending wake: whether there was one. Costs a load when there is
/// none.
#[inline]
pub(crate) fn take_wake(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed) && flag.swap(false, Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spin_doubles_when_work_ends_a_sleep_soon_and_resets_otherwise() {
        let us = Duration::from_micros;
        let mut b = SpinBudget::new(IdlePolicy::SpinThenSleep {
            spin: us(50),
            max_spin: us(300),
        });
        assert_eq!(b.now(), us(50));
        b.woke_to_work(us(99));
        assert_eq!(b.now(), us(100));
        b.woke_to_work(us(10));
        assert_eq!(b.now(), us(200));
        b.woke_to_work(us(10));
        assert_eq!(b.now(), us(300), "capped at max_spin");
        b.woke_to_work(us(10));
        assert_eq!(b.now(), us(300));
        // Work that came long after: back to the base.
        b.woke_to_work(us(600));
        assert_eq!(b.now(), us(50));
        b.woke_to_work(us(99));
        b.timed_out();
        assert_eq!(b.now(), us(50));
        // The sleep_after default keeps max >= spin.
        assert_eq!(
            IdlePolicy::sleep_after(Duration::from_millis(5)),
            IdlePolicy::SpinThenSleep {
                spin: Duration::from_millis(5),
                max_spin: Duration::from_millis(5)
            }
        );
    }
}
