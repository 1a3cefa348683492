//! A CQ fed by one completion source, with the source and the callback as type
//! parameters.

use super::{Completion, CqError, CqRing};

/// A queue whose completions a CQ reports: a send queue, an RQ, an SRQ. Turns a
/// completion into the user entries it retires (a send queue with an
/// [`OrderedDense`](crate::wqe_table::OrderedDense) table retires every WQE
/// since the previous completion).
pub trait CompletionSource {
    /// What a retired WQE yields.
    type Entry;

    /// Retires the WQEs that `c` completes, calling `f` for each entry with
    /// `Some(c)` for the WQE the CQE names and `None` for the unsignaled ones
    /// before it. Returns the number of entries retired.
    fn complete<F: FnMut(Self::Entry, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        f: F,
    ) -> usize;
}

/// A CQ with exactly one completion source `Q` and one callback `F`; `poll`
/// compiles to a loop with the owner check, the source's retirement and the
/// callback inlined: no QPN lookup, no indirect call.
pub struct MonoCq<Q, F> {
    ring: CqRing,
    source: Q,
    callback: F,
}

impl<Q, F> std::fmt::Debug for MonoCq<Q, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonoCq").field("ring", &self.ring).finish()
    }
}

impl<Q, F> MonoCq<Q, F> {
    /// Binds a ring to its source and callback (`()` for a CQ polled only
    /// with [`poll_with`](Self::poll_with)).
    pub fn new(ring: CqRing, source: Q, callback: F) -> Self {
        Self {
            ring,
            source,
            callback,
        }
    }

    /// The completion source (to post to it).
    #[inline(always)]
    pub fn source(&self) -> &Q {
        &self.source
    }

    /// The completion source, mutably.
    #[inline(always)]
    pub fn source_mut(&mut self) -> &mut Q {
        &mut self.source
    }

    /// The ring.
    pub fn ring(&self) -> &CqRing {
        &self.ring
    }

    /// Polls up to `max` CQEs, handing each with the source to `f` instead
    /// of the stored callback, and writes the CQ doorbell record once.
    /// Returns the number of CQEs polled. For an owner whose work per
    /// completion borrows state beside the CQ (a stored callback cannot):
    /// `f` is inlined into the loop as the stored one is, and retires what
    /// the completion names from the source itself.
    #[inline]
    pub fn poll_with(&mut self, max: usize, mut f: impl FnMut(&mut Q, &Completion<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(c) = self.ring.poll_one() else { break };
            f(&mut self.source, &c);
            n += 1;
        }
        if n != 0 {
            self.ring.update_ci();
        }
        n
    }

    /// Arms the CQ for one completion event ([`CqRing::arm`]: poll, arm,
    /// poll again, then wait on the CQ's channel).
    pub fn arm(&mut self, solicited_only: bool) -> Result<(), CqError> {
        self.ring.arm(solicited_only)
    }
}

impl<Q, F> MonoCq<Q, F>
where
    Q: CompletionSource,
    F: FnMut(Q::Entry, Option<&Completion<'_>>),
{
    /// Polls up to `max` CQEs, retiring their entries from the source into the
    /// callback, and writes the CQ doorbell record once. Returns the number of
    /// CQEs polled.
    #[inline]
    pub fn poll(&mut self, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(c) = self.ring.poll_one() else { break };
            self.source.complete(&c, &mut self.callback);
            n += 1;
        }
        if n != 0 {
            self.ring.update_ci();
        }
        n
    }
}
