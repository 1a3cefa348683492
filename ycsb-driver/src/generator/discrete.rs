//! Java `DiscreteGenerator`: a weighted choice among a few values.

use crate::rng::Rng;

/// Chooses among values with given weights (Java `DiscreteGenerator`, used
/// for YCSB's operation mix).
///
/// Each draw takes u uniform in `[0, 1)` and walks the values in insertion
/// order, subtracting each normalised weight `w / Σw` until u falls below
/// one, exactly as Java does. Values with weight 0 are never chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct Discrete<T: Copy> {
    /// `(weight, weight / sum, value)`.
    values: Vec<(f64, f64, T)>,
    last: Option<T>,
}

impl<T: Copy> Default for Discrete<T> {
    fn default() -> Self {
        Discrete {
            values: Vec::new(),
            last: None,
        }
    }
}

impl<T: Copy> Discrete<T> {
    /// An empty chooser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `value` with `weight` (weights need not sum to 1; negative or NaN
    /// weights are treated as 0).
    pub fn add(&mut self, weight: f64, value: T) {
        let weight = if weight > 0.0 { weight } else { 0.0 };
        self.values.push((weight, 0.0, value));
        let sum: f64 = self.values.iter().map(|v| v.0).sum();
        for v in &mut self.values {
            v.1 = if sum > 0.0 { v.0 / sum } else { 0.0 };
        }
    }

    /// Number of values added.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no value was added.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Draws a value; `None` when no value has a positive weight.
    #[inline]
    pub fn next(&mut self, rng: &mut Rng) -> Option<T> {
        let mut u = rng.next_f64();
        let mut fallback = None;
        for &(_, p, value) in &self.values {
            if p > 0.0 {
                if u < p {
                    self.last = Some(value);
                    return self.last;
                }
                u -= p;
                fallback = Some(value);
            }
        }
        // Rounding left u just above the total: take the last positive value
        // (Java throws an AssertionError here).
        self.last = fallback;
        fallback
    }

    /// The value drawn last (`None` before the first draw).
    pub fn last(&self) -> Option<T> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportions() {
        let mut d = Discrete::new();
        d.add(0.5, 'r');
        d.add(0.0, 'x');
        d.add(0.3, 'u');
        d.add(0.2, 's');
        assert_eq!(d.len(), 4);
        let mut rng = Rng::new(99);
        let n = 200_000u32;
        let mut counts = [0u32; 3];
        for _ in 0..n {
            match d.next(&mut rng) {
                Some('r') => counts[0] += 1,
                Some('u') => counts[1] += 1,
                Some('s') => counts[2] += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        for (c, p) in counts.iter().zip([0.5, 0.3, 0.2]) {
            let f = f64::from(*c) / f64::from(n);
            assert!((f - p).abs() < 0.005, "{counts:?}");
        }
        assert!(d.last().is_some());
    }

    #[test]
    fn unnormalised_weights_and_empty() {
        let mut d = Discrete::new();
        let mut rng = Rng::new(1);
        assert!(d.is_empty());
        assert_eq!(d.next(&mut rng), None);
        d.add(0.0, 1u8);
        assert_eq!(d.next(&mut rng), None);
        d.add(3.0, 2u8);
        d.add(1.0, 3u8);
        let n = 100_000;
        let twos = (0..n).filter(|_| d.next(&mut rng) == Some(2)).count();
        assert!((twos as f64 / n as f64 - 0.75).abs() < 0.01);
    }
}
