//! Java `SkewedLatestGenerator` (YCSB's `requestdistribution=latest`).

use std::sync::Arc;

use super::{AcknowledgedCounter, NumberGenerator, Zipfian};
use crate::rng::Rng;

/// Favours the most recently inserted records: `max − zipfian(max)` where
/// `max` is the basis counter's [`AcknowledgedCounter::last_value`] at each
/// draw, so `max` itself is the most popular value, `max − 1` the next, …
///
/// The zipfian is built over `max` items at construction (O(max), once; clone
/// the generator for other threads) and its ζ is extended as inserts are
/// acknowledged. As in Java, draws lie in `1..=max` (the zipfian draws
/// `0..max`), so value 0 is never returned once `max` ≥ 1. If nothing below
/// the counter's start is acknowledged (start 0, where Java's `max` is −1),
/// `max` is taken as 0.
#[derive(Debug, Clone)]
pub struct SkewedLatest {
    basis: Arc<AcknowledgedCounter>,
    zipfian: Zipfian,
    last: u64,
}

impl SkewedLatest {
    /// A generator skewed towards the latest values acknowledged on `basis`.
    pub fn new(basis: Arc<AcknowledgedCounter>) -> Self {
        let max = Self::current_max(&basis);
        SkewedLatest {
            zipfian: Zipfian::with_items(max),
            basis,
            last: max,
        }
    }

    fn current_max(basis: &AcknowledgedCounter) -> u64 {
        basis.acknowledged_below().saturating_sub(1)
    }
}

impl NumberGenerator for SkewedLatest {
    #[inline]
    fn next_value(&mut self, rng: &mut Rng) -> u64 {
        let max = Self::current_max(&self.basis);
        let back = self.zipfian.next_long(rng, max);
        self.last = max.saturating_sub(back);
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
    fn most_recent_insert_is_most_frequent() {
        let basis = Arc::new(AcknowledgedCounter::new(1000));
        let mut g = SkewedLatest::new(Arc::clone(&basis));
        let mut rng = Rng::new(4);
        let mut counts = vec![0u32; 1100];
        for _ in 0..50_000 {
            let v = g.next_value(&mut rng);
            assert!((1..=999).contains(&v), "{v}");
            counts[v as usize] += 1;
        }
        let argmax = (0..counts.len()).max_by_key(|&i| counts[i]).unwrap();
        assert_eq!(argmax, 999);
        assert!(counts[999] > counts[998] && counts[998] > counts[990]);

        // Insert and acknowledge 50 more: the newest becomes the hottest.
        for _ in 0..50 {
            let k = basis.fetch_next();
            basis.acknowledge(k);
        }
        counts.iter_mut().for_each(|c| *c = 0);
        for _ in 0..50_000 {
            let v = g.next_value(&mut rng);
            assert!(v <= 1049, "{v}");
            counts[v as usize] += 1;
        }
        let argmax = (0..counts.len()).max_by_key(|&i| counts[i]).unwrap();
        assert_eq!(argmax, 1049);
        // Roughly 1/ζ(1049) of the draws hit it.
        let p = f64::from(counts[1049]) / 50_000.0;
        let theory = 1.0 / crate::generator::zeta(1049, 0.99);
        assert!((p - theory).abs() < 0.01, "{p} vs {theory}");
    }

    #[test]
    fn unacknowledged_inserts_are_not_drawn() {
        let basis = Arc::new(AcknowledgedCounter::new(100));
        let mut g = SkewedLatest::new(Arc::clone(&basis));
        let mut rng = Rng::new(5);
        let a = basis.fetch_next();
        let b = basis.fetch_next();
        basis.acknowledge(b); // `a` still pending, so neither is visible.
        for _ in 0..10_000 {
            assert!(g.next_value(&mut rng) < a);
        }
        basis.acknowledge(a);
        let mut saw_b = false;
        for _ in 0..10_000 {
            let v = g.next_value(&mut rng);
            assert!(v <= b);
            saw_b |= v == b;
        }
        assert!(saw_b);
    }
}
