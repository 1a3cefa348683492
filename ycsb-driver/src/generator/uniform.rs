//! Java `UniformLongGenerator`.

use super::NumberGenerator;
use crate::rng::Rng;

/// Uniformly distributed integers in `lb..=ub` (both bounds possible).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uniform {
    lb: u64,
    ub: u64,
    /// `ub - lb + 1`, or 0 when that is 2^64 (the whole `u64` range).
    interval: u64,
    last: u64,
}

impl Uniform {
    /// Integers in `lb..=ub`; the bounds are swapped if `lb > ub`.
    /// `last_value` is `lb` until the first draw.
    pub fn new(lb: u64, ub: u64) -> Self {
        let (lb, ub) = if lb <= ub { (lb, ub) } else { (ub, lb) };
        Uniform {
            lb,
            ub,
            interval: (ub - lb).wrapping_add(1),
            last: lb,
        }
    }

    /// The lower bound (inclusive).
    pub fn lower_bound(&self) -> u64 {
        self.lb
    }

    /// The upper bound (inclusive).
    pub fn upper_bound(&self) -> u64 {
        self.ub
    }
}

impl NumberGenerator for Uniform {
    #[inline]
    fn next_value(&mut self, rng: &mut Rng) -> u64 {
        let offset = if self.interval == 0 {
            rng.next_u64()
        } else {
            rng.below(self.interval)
        };
        self.last = self.lb + offset;
        self.last
    }

    fn last_value(&self) -> u64 {
        self.last
    }

    fn mean(&self) -> Option<f64> {
        Some((self.lb as f64 + self.ub as f64) / 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_in_range_and_covers_it() {
        let mut rng = Rng::new(3);
        let mut g = Uniform::new(10, 19);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            let v = g.next_value(&mut rng);
            assert!((10..=19).contains(&v), "{v}");
            assert_eq!(g.last_value(), v);
            counts[(v - 10) as usize] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
        assert_eq!(g.mean(), Some(14.5));
    }

    #[test]
    fn uniform_degenerate_and_full_ranges() {
        let mut rng = Rng::new(4);
        let mut one = Uniform::new(7, 7);
        assert_eq!(one.next_value(&mut rng), 7);
        let mut swapped = Uniform::new(5, 1);
        for _ in 0..100 {
            assert!((1..=5).contains(&swapped.next_value(&mut rng)));
        }
        let mut full = Uniform::new(0, u64::MAX);
        let a = full.next_value(&mut rng);
        let b = full.next_value(&mut rng);
        assert_ne!(a, b);
    }
}
