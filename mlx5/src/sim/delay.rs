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
        if q.is_empty() {
            // Another thread released the last CQEs between our look at
            // `held` and the lock; it lowered the idle-work word for them.
            return 0;
        }
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
        // The word goes down once per emptying, under the lock that raised
        // it (a second lowering would leave it 0 while CQEs are held again
        // later, and nothing would ever write them).
        if left == 0 {
            self.idle_work.fetch_sub(1, Ordering::Relaxed);
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CQE for a CQ no fabric has (its write fails quietly).
    fn cqe() -> PendingCqe {
        PendingCqe {
            cqn: 0x00ab_cdef,
            cqe: [0; 64],
            pre: None,
            plain: false,
        }
    }

    #[test]
    fn a_release_that_finds_the_line_emptied_leaves_the_idle_word_alone() {
        let name = format!("delay-unit-{}", std::process::id());
        let fab = Fabric::open(&name).unwrap();
        let word = Arc::new(AtomicU32::new(0));
        let line = DelayLine::new(word.clone());
        let mut report = FlushReport::default();

        line.hold(10, cqe());
        assert_eq!(
            word.load(Ordering::Relaxed),
            1,
            "held: the NIC has idle work"
        );
        // Two pollers both saw a CQE held; the first writes it...
        assert_eq!(line.release(&fab, 10, &mut report), 0);
        assert_eq!(word.load(Ordering::Relaxed), 0);
        // ... and the second takes the lock on an empty line (its look at
        // `held` came before the first emptied it).
        line.len.store(1, Ordering::Release);
        assert_eq!(line.release(&fab, 10, &mut report), 0);
        assert_eq!(
            word.load(Ordering::Relaxed),
            0,
            "the emptying lowered the word once"
        );
        // The next CQE held raises it again, so pollers come to write it.
        line.hold(20, cqe());
        assert_eq!(word.load(Ordering::Relaxed), 1);
        assert_eq!(line.release(&fab, 20, &mut report), 0);
        assert_eq!(word.load(Ordering::Relaxed), 0);

        drop(fab);
        Fabric::remove_if_unused(&name);
    }
}
