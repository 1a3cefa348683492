//! Java `SequentialGenerator`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::NumberGenerator;
use crate::rng::Rng;

/// Cycles through `start..=end` in order: `start + n % (end − start + 1)` for
/// the n-th draw.
///
/// Java shares one generator (one atomic counter) between all client threads,
/// so together they sweep the range once before repeating. Clones of a
/// `Sequential` share the counter for the same reason; use
/// [`Sequential::new`] for an independent sequence.
///
/// Unlike Java, whose `lastValue()` returns the internal counter + 1,
/// `last_value` is the value this clone drew last (`start` before any draw).
#[derive(Debug, Clone)]
pub struct Sequential {
    counter: Arc<AtomicU64>,
    start: u64,
    /// `end − start + 1`; 0 stands for the whole `u64` range.
    interval: u64,
    last: u64,
}

impl Sequential {
    /// A new sequence over `start..=end` (bounds swapped if reversed).
    pub fn new(start: u64, end: u64) -> Self {
        let (start, end) = if start <= end {
            (start, end)
        } else {
            (end, start)
        };
        Sequential {
            counter: Arc::new(AtomicU64::new(0)),
            start,
            interval: (end - start).wrapping_add(1),
            last: start,
        }
    }
}

impl NumberGenerator for Sequential {
    #[inline]
    fn next_value(&mut self, _rng: &mut Rng) -> u64 {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let offset = if self.interval == 0 {
            n
        } else {
            n % self.interval
        };
        self.last = self.start.wrapping_add(offset);
        self.last
    }

    fn last_value(&self) -> u64 {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_cycles_and_clones_share() {
        let mut rng = Rng::new(0);
        let mut a = Sequential::new(5, 7);
        let mut b = a.clone();
        let got: Vec<u64> = (0..4).map(|_| a.next_value(&mut rng)).collect();
        assert_eq!(got, [5, 6, 7, 5]);
        assert_eq!(a.last_value(), 5);
        assert_eq!(b.next_value(&mut rng), 6);
        let mut fresh = Sequential::new(5, 7);
        assert_eq!(fresh.next_value(&mut rng), 5);
    }
}
