//! Completion channels of the software device: where the events of armed CQs
//! arrive, and where a process sleeps until one does.
//!
//! A channel is a slot of the fabric's registry whose `seq` word is a futex in
//! shared memory: the NIC that raises a CQ's event (in whichever process runs
//! the work) bumps it and wakes the waiters (`FUTEX_WAKE` without the private
//! flag, so the wake crosses processes). Each CQ counts its events in its own
//! registry entry; the channel hands them out one at a time, so none is lost
//! and none is made up.
//!
//! The software device has no thread of its own: a waiter lets its own NIC
//! progress while it waits (retries of stalled work, CQEs the link model held,
//! and in deferred mode the scheduler's steps), so that waiting never stops
//! the work it waits for.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::fabric::{Fabric, FabricError};
use super::registry::{self, LIVE};
use super::sched::{Nic, IDLE_STEPS, PROGRESS_STEPS};
use super::sync::{futex_wait, futex_wake};

/// Longest sleep while this process's NIC has work waiting (stalled QPs,
/// held CQEs): it only progresses in this process's calls.
const SLICE: Duration = Duration::from_millis(1);

/// A CQ of a channel, as the channel sees it.
struct ChanCq {
    cqn: u32,
    slot: usize,
    /// The CQ's events handed out so far (the device counts its events in
    /// the registry).
    taken: u32,
    /// Events handed out, shared with the CQ's ring: the arm sequence number.
    delivered: Arc<AtomicU32>,
}

struct ChanInner {
    fab: Arc<Fabric>,
    nic: Arc<Nic>,
    slot: usize,
    cqs: Mutex<ChanCqs>,
    /// Set by [`SimWaker::wake`], cleared by the wait it ends.
    woken: AtomicBool,
}

#[derive(Default)]
struct ChanCqs {
    list: Vec<ChanCq>,
    /// Where the next scan starts (round robin between CQs).
    next: usize,
}

impl Drop for ChanInner {
    fn drop(&mut self) {
        self.fab.reg().chans[self.slot]
            .state
            .store(registry::FREE, Ordering::Release);
    }
}

/// A completion channel of the software device.
#[derive(Clone)]
pub struct SimChannel {
    inner: Arc<ChanInner>,
}

impl std::fmt::Debug for SimChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimChannel")
            .field("slot", &self.inner.slot)
            .finish_non_exhaustive()
    }
}

impl SimChannel {
    /// A new channel in `fab`, whose waiters progress `nic`.
    pub(crate) fn new(fab: &Arc<Fabric>, nic: &Arc<Nic>) -> Result<SimChannel, FabricError> {
        let r = fab.reg();
        let slot = r
            .claim_chan()
            .ok_or_else(|| FabricError::Full(fab.name().into(), "completion channel"))?;
        let e = &r.chans[slot];
        e.owner.store(fab.token(), Ordering::Relaxed);
        e.state.store(LIVE, Ordering::Release);
        Ok(SimChannel {
            inner: Arc::new(ChanInner {
                fab: fab.clone(),
                nic: nic.clone(),
                slot,
                cqs: Mutex::default(),
                woken: AtomicBool::new(false),
            }),
        })
    }

    /// The fabric the channel lives in.
    pub(crate) fn fabric(&self) -> &Arc<Fabric> {
        &self.inner.fab
    }

    /// What a CQ entry's `chan` field holds for this channel.
    pub(crate) fn tag(&self) -> u32 {
        self.inner.slot as u32 + 1
    }

    /// Takes CQ `cqn` (registry slot `slot`, with no events raised yet) into
    /// the channel; returns its delivered-events counter for the CQ's ring.
    pub(crate) fn attach(&self, cqn: u32, slot: usize) -> Arc<AtomicU32> {
        let delivered = Arc::new(AtomicU32::new(0));
        let mut cqs = self.inner.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.list.push(ChanCq {
            cqn,
            slot,
            taken: 0,
            delivered: delivered.clone(),
        });
        delivered
    }

    /// Lets the channel forget CQ `cqn` (destroyed).
    pub(crate) fn detach(&self, cqn: u32) {
        let mut cqs = self.inner.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.list.retain(|c| c.cqn != cqn);
    }

    fn seq(&self) -> &AtomicU32 {
        &self.inner.fab.reg().chans[self.inner.slot].seq
    }

    /// The next event raised and not yet handed out, if any: the CQ's number.
    fn take(&self) -> Option<u32> {
        let r = self.inner.fab.reg();
        let mut cqs = self.inner.cqs.lock().unwrap_or_else(|e| e.into_inner());
        let n = cqs.list.len();
        let start = cqs.next;
        for k in 0..n {
            let i = (start + k) % n;
            let c = &mut cqs.list[i];
            let e = &r.cqs[c.slot];
            if e.state.load(Ordering::Acquire) != LIVE || e.cqn.load(Ordering::Relaxed) != c.cqn {
                continue;
            }
            if e.events.load(Ordering::Acquire) != c.taken {
                c.taken = c.taken.wrapping_add(1);
                c.delivered.fetch_add(1, Ordering::Release);
                let cqn = c.cqn;
                cqs.next = (i + 1) % n;
                return Some(cqn);
            }
        }
        None
    }

    /// A handle that ends this channel's wait early, from any thread.
    pub fn waker(&self) -> SimWaker {
        SimWaker {
            inner: self.inner.clone(),
        }
    }

    /// Takes a wake that no wait has taken yet: whether there was one.
    pub fn take_wake(&self) -> bool {
        self.inner.woken.swap(false, Ordering::AcqRel)
    }

    /// Waits up to `timeout` for the next completion event of one of the
    /// channel's CQs and returns that CQ's number; `None` when none came
    /// before the timeout or a [`SimWaker::wake`] (a wake that came before
    /// the wait ends it at once).
    /// Each arm of a CQ gives one event, handed out once. While it waits it
    /// lets this process's NIC progress. In inline mode, stalled work is
    /// retried and held CQEs written, sleeping at most a millisecond at a time
    /// while there is such work. In deferred mode, the scheduler takes its
    /// steps until an event comes or nothing is pending, whatever the timeout
    /// (up to the step budget of `progress`): the logical clock, not the wall
    /// clock, decides what happens, so a seeded run stays the same run. Only
    /// then does it sleep on the futex, for an event another process's NIC
    /// may raise.
    pub fn wait(&self, timeout: Duration) -> Option<u32> {
        let t0 = Instant::now();
        let nic = &self.inner.nic;
        let deferred = nic.is_deferred();
        let mut steps = 0usize;
        loop {
            // Read before looking: an event raised after this read changes
            // the word, and the sleep below returns at once.
            let seq = self.seq().load(Ordering::Acquire);
            if let Some(cqn) = self.take() {
                return Some(cqn);
            }
            if self.inner.woken.swap(false, Ordering::AcqRel) {
                return None;
            }
            let left = if deferred || nic.has_idle_work() {
                nic.idle_step()
            } else {
                0
            };
            if let Some(cqn) = self.take() {
                return Some(cqn);
            }
            if deferred && left > 0 && steps < PROGRESS_STEPS {
                steps += IDLE_STEPS;
                continue;
            }
            let elapsed = t0.elapsed();
            if elapsed >= timeout {
                return None;
            }
            let remaining = timeout - elapsed;
            // With nothing this process could run, only another process's
            // NIC can raise an event: sleep until it does. Otherwise (stalled
            // work, held CQEs, deferred work past its step budget, such as a
            // QP that waits forever on RNR) sleep in slices and step again.
            let sleep = if left == 0 {
                remaining
            } else {
                remaining.min(SLICE)
            };
            futex_wait(self.seq(), seq, sleep);
        }
    }
}

/// Ends a wait on a software-device channel from another thread
/// ([`SimChannel::waker`]).
#[derive(Clone)]
pub struct SimWaker {
    inner: Arc<ChanInner>,
}

impl std::fmt::Debug for SimWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimWaker")
            .field("slot", &self.inner.slot)
            .finish_non_exhaustive()
    }
}

impl SimWaker {
    /// Ends the channel's current wait, or the next one if none is under
    /// way. Wakes do not pile up: several before a wait end that one wait.
    pub fn wake(&self) {
        // The flag first: a waiter that reads the new word below (or is woken
        // by it) then finds the flag set.
        self.inner.woken.store(true, Ordering::Release);
        let seq = &self.inner.fab.reg().chans[self.inner.slot].seq;
        seq.fetch_add(1, Ordering::Release);
        futex_wake(seq);
    }
}
