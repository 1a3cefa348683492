//! Completion channels: where the events of armed CQs arrive
//! ([`CompletionChannel`], [`CqEvent`]), and the handle that ends a wait
//! from another thread ([`ChannelWaker`]).

use std::time::Duration;

#[cfg(feature = "sim")]
use super::seam::mixed;
use super::seam::{backend, backend_parts};
use crate::hw::{HwChannel, HwWaker};
#[cfg(feature = "sim")]
use crate::sim::channel::{SimChannel, SimWaker};
use crate::types::error::DeviceError;

// Without the `sim` feature the `Sim*` type is never resolved: the
// function that names it is configured out first.
backend_parts!(CompletionChannel, SimChannel, HwChannel);

/// A completion event: an armed CQ of the channel raised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqEvent {
    /// The CQ's number ([`Cq::cqn`](super::Cq::cqn)).
    pub cqn: u32,
}

/// Where the completion events of armed CQs arrive (`ibv_comp_channel`), and
/// where a thread sleeps until one does.
///
/// Each arm of a CQ raises at most one event, and each event is handed out
/// once. The way to sleep on a CQ without missing a completion is poll, arm,
/// poll again, then wait (see [`CqRing::arm`](crate::cq::CqRing::arm)).
#[derive(Clone, Debug)]
pub enum CompletionChannel {
    /// The software device: a futex in the fabric's shared memory, so a NIC
    /// in any process of the fabric wakes the waiter.
    #[cfg(feature = "sim")]
    Sim(SimChannel),
    /// An RDMA device: `ibv_create_comp_channel`'s file descriptor.
    Hw(HwChannel),
}

impl CompletionChannel {
    /// Waits up to `timeout` for the next completion event of one of the
    /// channel's CQs; `None` when none came. `Duration::ZERO` only looks.
    ///
    /// On the software device the wait also lets this process's simulated
    /// NIC progress (it has no thread of its own): stalled work is retried,
    /// held CQEs are written, and in deferred mode the scheduler takes its
    /// steps, so a seeded run stays deterministic and a wait never blocks on
    /// work only this process would run. On an RDMA device it is `poll(2)` on
    /// the channel's descriptor, then `ibv_get_cq_event` and
    /// `ibv_ack_cq_events`.
    ///
    /// A [`ChannelWaker::wake`] from another thread ends the wait early
    /// (with `None`), as `ucp_worker_signal` does for UCX; a wake that came
    /// while nobody waited ends the next wait at once, so none is lost.
    pub fn wait(&self, timeout: Duration) -> Result<Option<CqEvent>, DeviceError> {
        let cqn = backend!(self, Sim(c) => c.wait(timeout), Hw(c) => c.wait(timeout)?);
        Ok(cqn.map(|cqn| CqEvent { cqn }))
    }

    /// Takes a wake that no wait has taken yet: whether there was one. For a
    /// thread that learnt of the wake by other means and will not wait for
    /// it.
    pub fn take_wake(&self) -> bool {
        backend!(self, c => c.take_wake())
    }

    /// A handle that ends this channel's wait early, from any thread (a
    /// thread that hands work to the waiter by other means than the CQs).
    pub fn waker(&self) -> ChannelWaker {
        backend!(self,
            Sim(c) => ChannelWaker::Sim(c.waker()),
            Hw(c) => ChannelWaker::Hw(c.waker()),
        )
    }
}

/// Ends a [`CompletionChannel::wait`] from another thread.
#[derive(Clone, Debug)]
pub enum ChannelWaker {
    /// The software device: a flag and the channel's futex word.
    #[cfg(feature = "sim")]
    Sim(SimWaker),
    /// An RDMA device: an eventfd the wait polls beside the channel.
    Hw(HwWaker),
}

impl ChannelWaker {
    /// Ends the channel's current wait, or the next one if none is under
    /// way. Wakes do not pile up: several before a wait end that one wait.
    pub fn wake(&self) {
        backend!(self, w => w.wake())
    }
}
