//! Java `ExponentialGenerator`.

use super::NumberGenerator;
use crate::rng::Rng;

/// Default of `exponential.percentile`.
pub const EXPONENTIAL_PERCENTILE_DEFAULT: f64 = 95.0;

/// Default of `exponential.frac` (Java's literal `0.8571428571`).
pub const EXPONENTIAL_FRAC_DEFAULT: f64 = 0.8571428571;

/// Exponentially distributed values `−ln(u) / γ` (u uniform in `[0, 1)`),
/// skewed towards 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Exponential {
    gamma: f64,
    last: f64,
}

impl Exponential {
    /// YCSB's form: `percentile` percent of the draws fall below `range`,
    /// i.e. γ = −ln(1 − percentile/100) / range.
    pub fn new(percentile: f64, range: f64) -> Self {
        Exponential {
            gamma: -(1.0 - percentile / 100.0).ln() / range,
            last: 0.0,
        }
    }

    /// Distribution with the given mean (γ = 1/mean).
    pub fn with_mean(mean: f64) -> Self {
        Exponential {
            gamma: 1.0 / mean,
            last: 0.0,
        }
    }

    /// The rate γ.
    pub fn gamma(&self) -> f64 {
        self.gamma
    }

    /// Draws the next value as a real number (Java's `nextValue`, a
    /// `Double`). A draw of u = 0 gives +∞, as in Java.
    #[inline]
    pub fn next_f64(&mut self, rng: &mut Rng) -> f64 {
        self.last = -rng.next_f64().ln() / self.gamma;
        self.last
    }

    /// The last real-valued draw (0 before the first).
    pub fn last_f64(&self) -> f64 {
        self.last
    }
}

impl NumberGenerator for Exponential {
    /// The draw truncated towards zero (Java's `intValue()`), saturating at
    /// `u64::MAX` for +∞.
    #[inline]
    fn next_value(&mut self, rng: &mut Rng) -> u64 {
        self.next_f64(rng) as u64
    }

    fn last_value(&self) -> u64 {
        self.last as u64
    }

    fn mean(&self) -> Option<f64> {
        Some(1.0 / self.gamma)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_mean() {
        let mut g = Exponential::with_mean(100.0);
        assert_eq!(g.mean(), Some(100.0));
        let mut rng = Rng::new(17);
        let n = 200_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let x = g.next_f64(&mut rng);
            assert!(x >= 0.0);
            sum += x;
        }
        let mean = sum / f64::from(n);
        assert!((mean - 100.0).abs() < 1.5, "{mean}");
    }

    #[test]
    fn exponential_percentile_form() {
        // Java's own check: 90% of draws below 100.
        let mut g = Exponential::new(90.0, 100.0);
        let mut rng = Rng::new(18);
        let n = 100_000u32;
        let below = (0..n).filter(|_| g.next_value(&mut rng) < 100).count();
        let f = below as f64 / f64::from(n);
        assert!((f - 0.9).abs() < 0.005, "{f}");
        assert_eq!(g.last_value(), g.last_f64() as u64);
    }
}
