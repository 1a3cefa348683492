//! Waiting for work: spinning, then sleeping on the completion channel.

use std::time::{Duration, Instant};

use mlx5::device::CompletionChannel;

use super::respond::{Given, Respond, Stored};
use super::Context;
use crate::error::{CallFailed, WaitError};
use crate::idle::{take_wake, Waker};
use crate::transport::Transport;

/// How long an idle [`Context::wait`] spins before it starts yielding the
/// CPU between polls: longer than a round trip that is on its way.
const POLITE_AFTER: Duration = Duration::from_micros(10);

/// Empty polls between two clock reads of a spinning [`Context::wait`].
const CLOCK_EVERY: u32 = 16;

impl<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport> Context<U, F, T> {
    /// [`poll`](Self::poll)s until there is work, a [`Waker`] fires or
    /// `timeout` passes; returns the completions handled (0: none came).
    ///
    /// With work (completions, or requests `recv()` has not taken yet) it
    /// returns after one poll, so a loop of `wait` and `recv` under load runs
    /// at the rate of a loop of `poll` and `recv`. Without work it follows
    /// the builder's [`IdlePolicy`](crate::IdlePolicy): it spins, and under
    /// [`IdlePolicy::SpinThenSleep`](crate::IdlePolicy::SpinThenSleep) it
    /// then arms both CQs, polls once more (a completion may have landed
    /// between the last empty poll and the arms), and sleeps on the context's
    /// completion channel until an event, a wake or the timeout. Spurious
    /// returns (an event left by an earlier arm) are possible and harmless:
    /// the caller's loop waits again.
    ///
    /// # Errors
    /// Arming a CQ or waiting on the channel failed (the device is broken);
    /// the context is still usable with [`poll`](Self::poll).
    pub fn wait(&mut self, timeout: Duration) -> Result<usize, WaitError> {
        self.wait_via(timeout, &mut Stored)
    }

    /// [`wait`](Self::wait), handing the responses to `on_response` as
    /// [`poll_with`](Self::poll_with) does.
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    #[inline]
    pub fn wait_with<G: FnMut(U, Result<&[u8], CallFailed>)>(
        &mut self,
        timeout: Duration,
        on_response: &mut G,
    ) -> Result<usize, WaitError> {
        self.wait_via(timeout, &mut Given(on_response))
    }

    fn wait_via<R: Respond<U, F>>(
        &mut self,
        timeout: Duration,
        resp: &mut R,
    ) -> Result<usize, WaitError> {
        let n = self.poll_via(resp);
        if n > 0 || !self.recvq.is_empty() || self.take_wake() {
            return Ok(n);
        }
        let t0 = Instant::now();
        let spin = self.spin.now().min(timeout);
        let mut polls = 0u32;
        loop {
            let n = self.poll_via(resp);
            if n > 0 {
                return Ok(n);
            }
            if self.take_wake() {
                return Ok(0);
            }
            // The clock is read every few empty polls: a read costs more
            // than an empty poll, and a spin lasts microseconds at least.
            polls = polls.wrapping_add(1);
            if polls % CLOCK_EVERY != 0 {
                std::hint::spin_loop();
                continue;
            }
            let spun = t0.elapsed();
            if spun >= spin {
                break;
            }
            if spun < POLITE_AFTER {
                std::hint::spin_loop();
            } else {
                // Spin politely: a thread this one woke may have been placed
                // on this CPU (the scheduler puts a wakee near its waker),
                // and it may be the peer whose answer this spin waits for.
                // Yielding lets it run now rather than at the end of this
                // time slice, milliseconds away.
                std::thread::yield_now();
            }
        }
        let left = timeout.saturating_sub(t0.elapsed());
        if self.chan.is_none() || left.is_zero() {
            return Ok(0);
        }
        T::arm_recv(&mut self.recv_cq)?;
        T::arm_send(&mut self.send_cq)?;
        let n = self.poll_via(resp);
        if n > 0 {
            return Ok(n);
        }
        self.sleeps += 1;
        let slept = Instant::now();
        let event = match &self.chan {
            Some(ch) => ch.wait(left)?,
            None => None,
        };
        let slept = slept.elapsed();
        take_wake(&self.woken);
        let n = self.poll_via(resp);
        if n > 0 {
            self.spin.woke_to_work(slept);
        } else if event.is_none() && slept >= left {
            self.spin.timed_out();
        }
        Ok(n)
    }

    /// Takes a pending wake, and the channel's copy of it, so that it does
    /// not also end the next sleep.
    #[inline]
    fn take_wake(&self) -> bool {
        let woken = take_wake(&self.woken);
        if woken {
            if let Some(ch) = &self.chan {
                ch.take_wake();
            }
        }
        woken
    }

    /// A handle that ends this context's [`wait`](Self::wait) from another
    /// thread.
    pub fn waker(&self) -> Waker {
        Waker::new(
            self.woken.clone(),
            self.chan.as_ref().map(CompletionChannel::waker),
        )
    }

    /// How many times [`wait`](Self::wait) has slept.
    pub fn sleeps(&self) -> u64 {
        self.sleeps
    }
}
