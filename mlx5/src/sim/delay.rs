//! CQEs held back by the link model until the bytes they report could have
//! crossed the wire.
//!
//! One delay line per NIC (process and fabric). A held CQE is written once the
//! NIC's clock reaches its time, on an idle poll or a `progress` call. Within
//! a CQ, CQEs are written in the order they were produced: a CQE for a CQ
//! that already has CQEs held here waits behind them, even if it could be
//! written at once (an error or flush CQE behind a held success, say).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::cqe_out::{self, CqeBatch, FlushReport, PendingCqe};
use super::fabric::Fabric;

/// A CQE and when it may be written.
struct Held {
    due: u64,
    cqe: PendingCqe,
}

/// CQEs held back, in production order.
pub(crate) struct DelayLine {
    q: Mutex<VecDeque<Held>>,
    /// CQEs in `q` (read without the lock).
    len: AtomicU32,
    /// The NIC's idle-work word: raised while CQEs are held, so that pollers
    /// of empty CQs call into the NIC, which writes what has come due.
    idle_work: Arc<AtomicU32>,
    /// CQEs ever held.
    #[cfg(test)]
    total: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for DelayLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayLine")
            .field("held", &self.held())
            .finish()
    }
}

impl DelayLine {
    /// An empty line that raises `idle_work` while it holds CQEs.
    pub(crate) fn new(idle_work: Arc<AtomicU32>) -> Self {
        DelayLine {
            q: Mutex::new(VecDeque::new()),
            len: AtomicU32::new(0),
            idle_work,
            #[cfg(test)]
            total: Default::default(),
        }
    }

    /// CQEs held.
    #[inline]
    pub(crate) fn held(&self) -> usize {
        self.len.load(Ordering::Acquire) as usize
    }

    /// The time of the last CQE held for CQ `cqn`, if any: a CQE for that CQ
    /// must not be written before it.
    pub(crate) fn last_due(&self, cqn: u32) -> Option<u64> {
        if self.held() == 0 {
            return None;
        }
        let q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().rev().find(|h| h.cqe.cqn == cqn).map(|h| h.due)
    }

    /// Holds `cqe` until `due` (or later, behind CQEs already held for its
    /// CQ).
    pub(crate) fn hold(&self, due: u64, cqe: PendingCqe) {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let behind = q
            .iter()
            .rev()
            .find(|h| h.cqe.cqn == cqe.cqn)
            .map_or(0, |h| h.due);
        if q.is_empty() {
            self.idle_work.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(Held {
            due: due.max(behind),
            cqe,
        });
        self.len.store(q.len() as u32, Ordering::Release);
        #[cfg(test)]
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    /// CQEs ever held.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The earliest time a held CQE comes due.
    pub(crate) fn next_due(&self) -> Option<u64> {
        let q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().map(|h| h.due).min()
    }

    /// Writes every held CQE due at `now`, in production order; returns how
    /// many are still held. CQs found full are added to `report`.
    pub(crate) fn release(&self, fab: &Fabric, now: u64, report: &mut FlushReport) -> usize {
        if self.held() == 0 {
            return 0;
        }
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let mut batch = CqeBatch::new(false);
        // Per CQ, dues only grow along the queue, so an entry that is due has
        // no earlier entry of its CQ still held.
        q.retain(|h| {
            if h.due > now {
                return true;
            }
            cqe_out::push(fab, &mut batch, h.cqe, report);
            false
        });
        cqe_out::flush(fab, &mut batch, report);
        let left = q.len();
        self.len.store(left as u32, Ordering::Release);
        if left == 0 {
            self.idle_work.fetch_sub(1, Ordering::Relaxed);
        }
        left
    }
}
