//! Java `HotspotIntegerGenerator`.

use super::NumberGenerator;
use crate::rng::Rng;

/// Hot-spot distribution over `lb..=ub`: a fraction `hot_opn_fraction` of the
/// draws fall uniformly in the hot set, the first `hotset_fraction` of the
/// interval (`lb..lb+hot`), the rest uniformly in the remaining cold set.
///
/// As in Java, a fraction outside `[0, 1]` is replaced by 0 and reversed
/// bounds are swapped (validate beforehand to report errors instead).
/// Differences from Java, which only show at extremes: the uniform choice is
/// unbiased (Java uses `abs(nextLong()) % n`), the hot-set size is not
/// truncated to 32 bits, and an empty hot (or cold) set sends every draw to
/// the other set instead of dividing by zero.
#[derive(Debug, Clone, PartialEq)]
pub struct Hotspot {
    lb: u64,
    ub: u64,
    hot_interval: u64,
    cold_interval: u64,
    hotset_fraction: f64,
    hot_opn_fraction: f64,
    last: u64,
}

impl Hotspot {
    /// Hot spot over `lb..=ub`; `last_value` is `lb` until the first draw.
    pub fn new(lb: u64, ub: u64, hotset_fraction: f64, hot_opn_fraction: f64) -> Self {
        let valid = |f: f64| if (0.0..=1.0).contains(&f) { f } else { 0.0 };
        let hotset_fraction = valid(hotset_fraction);
        let hot_opn_fraction = valid(hot_opn_fraction);
        let (lb, ub) = if lb <= ub { (lb, ub) } else { (ub, lb) };
        let interval = (ub - lb).saturating_add(1);
        let hot_interval = ((interval as f64 * hotset_fraction) as u64).min(interval);
        Hotspot {
            lb,
            ub,
            hot_interval,
            cold_interval: interval - hot_interval,
            hotset_fraction,
            hot_opn_fraction,
            last: lb,
        }
    }

    /// Number of values in the hot set (`lb..lb + hot_interval()`).
    pub fn hot_interval(&self) -> u64 {
        self.hot_interval
    }

    /// The lower bound (inclusive).
    pub fn lower_bound(&self) -> u64 {
        self.lb
    }

    /// The upper bound (inclusive).
    pub fn upper_bound(&self) -> u64 {
        self.ub
    }

    /// The fraction of the interval that is hot.
    pub fn hotset_fraction(&self) -> f64 {
        self.hotset_fraction
    }

    /// The fraction of draws that go to the hot set.
    pub fn hot_opn_fraction(&self) -> f64 {
        self.hot_opn_fraction
    }
}

impl NumberGenerator for Hotspot {
    #[inline]
    fn next_value(&mut self, rng: &mut Rng) -> u64 {
        let hot = rng.next_f64() < self.hot_opn_fraction;
        self.last = if (hot && self.hot_interval > 0) || self.cold_interval == 0 {
            self.lb + rng.below(self.hot_interval)
        } else {
            self.lb + self.hot_interval + rng.below(self.cold_interval)
        };
        self.last
    }

    fn last_value(&self) -> u64 {
        self.last
    }

    fn mean(&self) -> Option<f64> {
        let lb = self.lb as f64;
        let hot = self.hot_interval as f64;
        let cold = self.cold_interval as f64;
        Some(
            self.hot_opn_fraction * (lb + hot / 2.0)
                + (1.0 - self.hot_opn_fraction) * (lb + hot + cold / 2.0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_fraction_of_operations() {
        let mut g = Hotspot::new(0, 999, 0.2, 0.8);
        assert_eq!(g.hot_interval(), 200);
        let mut rng = Rng::new(13);
        let draws = 200_000;
        let mut hot = 0u32;
        let mut cold_low = 0u32;
        for _ in 0..draws {
            let v = g.next_value(&mut rng);
            assert!(v <= 999);
            if v < 200 {
                hot += 1;
            } else if v < 600 {
                cold_low += 1;
            }
        }
        let f = f64::from(hot) / f64::from(draws);
        assert!((f - 0.8).abs() < 0.005, "{f}");
        // Cold draws are uniform over 200..1000: half of them below 600.
        let cold = f64::from(draws - hot);
        assert!((f64::from(cold_low) / cold - 0.5).abs() < 0.01);
    }

    #[test]
    fn degenerate_sets_and_clamping() {
        let mut rng = Rng::new(1);
        let mut all_cold = Hotspot::new(10, 19, 0.0, 0.9);
        for _ in 0..100 {
            assert!((10..=19).contains(&all_cold.next_value(&mut rng)));
        }
        let mut all_hot = Hotspot::new(10, 19, 1.0, 0.1);
        for _ in 0..100 {
            assert!((10..=19).contains(&all_hot.next_value(&mut rng)));
        }
        let clamped = Hotspot::new(19, 10, 1.5, -1.0);
        assert_eq!(clamped.hotset_fraction(), 0.0);
        assert_eq!(clamped.hot_opn_fraction(), 0.0);
        assert_eq!((clamped.lower_bound(), clamped.upper_bound()), (10, 19));
        let m = Hotspot::new(0, 99, 0.2, 0.8).mean().unwrap();
        assert!((m - (0.8 * 10.0 + 0.2 * 60.0)).abs() < 1e-9);
    }
}
