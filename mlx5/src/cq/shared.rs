//! A CQ shared by many queues, dispatching completions by QPN.

use super::{Completion, CqRing};
use crate::fastmap::FastMap;

/// A CQ shared by many QPs. Each QP registers a value `E` under its QPN (an
/// index into the caller's table, a queue's completion state, …); polling
/// looks the QPN of every completion up in a direct-indexed [`FastMap`] and
/// hands the callback that value.
pub struct DispatchCq<E> {
    ring: CqRing,
    map: FastMap<E>,
    unknown: u64,
}

impl<E> std::fmt::Debug for DispatchCq<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchCq")
            .field("ring", &self.ring)
            .field("queues", &self.map.len())
            .field("unknown", &self.unknown)
            .finish()
    }
}

impl<E> DispatchCq<E> {
    /// Wraps a ring.
    pub fn new(ring: CqRing) -> Self {
        Self {
            ring,
            map: FastMap::new(),
            unknown: 0,
        }
    }

    /// Registers `e` for completions of QP `qpn`; returns the value it replaces.
    pub fn register(&mut self, qpn: u32, e: E) -> Option<E> {
        self.map.insert(qpn, e)
    }

    /// Removes QP `qpn`'s registration.
    pub fn unregister(&mut self, qpn: u32) -> Option<E> {
        self.map.remove(qpn)
    }

    /// The value registered for `qpn`.
    pub fn get_mut(&mut self, qpn: u32) -> Option<&mut E> {
        self.map.get_mut(qpn)
    }

    /// Completions whose QPN had no registration (dropped).
    pub fn unknown_completions(&self) -> u64 {
        self.unknown
    }

    /// The ring.
    pub fn ring(&self) -> &CqRing {
        &self.ring
    }

    /// The ring, mutably.
    pub fn ring_mut(&mut self) -> &mut CqRing {
        &mut self.ring
    }

    /// Polls up to `max` completions, calling `f` with the registered value and
    /// the completion; writes the CQ doorbell record once at the end. A
    /// completion for an unregistered QPN is counted and dropped.
    #[inline]
    pub fn poll<F: FnMut(&mut E, &Completion<'_>)>(&mut self, max: usize, mut f: F) -> usize {
        let mut n = 0;
        while n < max {
            let Some(c) = self.ring.poll_one() else { break };
            match self.map.get_mut(c.qpn()) {
                Some(e) => f(e, &c),
                None => self.unknown += 1,
            }
            n += 1;
        }
        if n != 0 {
            self.ring.update_ci();
        }
        n
    }
}
