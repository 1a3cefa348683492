//! Java `ScrambledZipfianGenerator`.

use super::{NumberGenerator, Zipfian, ZIPFIAN_CONSTANT};
use crate::fnv::fnvhash64;
use crate::rng::Rng;

/// Zipfian popularity scattered over `min..=max` by hashing (Java
/// `ScrambledZipfianGenerator`, YCSB's `requestdistribution=zipfian`).
///
/// A [`Zipfian`] over `0..=ITEM_COUNT` (θ = 0.99, with the precomputed
/// [`ScrambledZipfian::ZETAN`]) is drawn and mapped to
/// `min + fnvhash64(v) % itemcount`. As in Java, the skew is therefore that of
/// 10^10 items whatever the real item count (YCSB issue #1305): the most
/// popular value gets ≈ 1/26.469 ≈ 3.78% of the draws. Construction is O(1).
#[derive(Debug, Clone, PartialEq)]
pub struct ScrambledZipfian {
    gen: Zipfian,
    min: u64,
    max: u64,
    itemcount: u64,
    last: u64,
}

impl ScrambledZipfian {
    /// Java's `ITEM_COUNT`: the size of the underlying zipfian.
    pub const ITEM_COUNT: u64 = 10_000_000_000;
    /// Java's `ZETAN`: ζ(10^10, 0.99), precomputed.
    pub const ZETAN: f64 = 26.46902820178302;

    /// Values in `min..=max` (bounds swapped if reversed).
    pub fn new(min: u64, max: u64) -> Self {
        let (min, max) = if min <= max { (min, max) } else { (max, min) };
        ScrambledZipfian {
            // Java: new ZipfianGenerator(0, ITEM_COUNT, 0.99, ZETAN), i.e.
            // ITEM_COUNT + 1 items with the ζ of ITEM_COUNT.
            gen: Zipfian::with_zetan(0, Self::ITEM_COUNT, ZIPFIAN_CONSTANT, Self::ZETAN),
            min,
            max,
            itemcount: (max - min).wrapping_add(1),
            last: min,
        }
    }

    /// Values in `0..items` (`items` ≥ 1).
    pub fn with_items(items: u64) -> Self {
        Self::new(0, items.saturating_sub(1))
    }

    /// The smallest value (inclusive).
    pub fn lower_bound(&self) -> u64 {
        self.min
    }

    /// The largest value (inclusive).
    pub fn upper_bound(&self) -> u64 {
        self.max
    }
}

/// Java's `min + hash % itemcount` in signed 64-bit arithmetic. The hash is
/// non-negative except for the single bit pattern `1 << 63` (Java's
/// `Math.abs(Long.MIN_VALUE)`), where Java's remainder is negative; that case
/// is reproduced with wrapping arithmetic. `itemcount == 0` stands for the
/// whole `u64` range.
#[inline]
fn scramble(min: u64, itemcount: u64, hash: u64) -> u64 {
    if itemcount == 0 {
        return hash;
    }
    if (hash as i64) >= 0 {
        min + hash % itemcount
    } else {
        let rem = (hash as i64).wrapping_rem(itemcount as i64);
        min.wrapping_add(rem as u64)
    }
}

impl NumberGenerator for ScrambledZipfian {
    #[inline]
    fn next_value(&mut self, rng: &mut Rng) -> u64 {
        let v = self.gen.next_value(rng);
        self.last = scramble(self.min, self.itemcount, fnvhash64(v));
        self.last
    }

    fn last_value(&self) -> u64 {
        self.last
    }

    /// The middle of the range, as Java (the values are scattered).
    fn mean(&self) -> Option<f64> {
        Some((self.min as f64 + self.max as f64) / 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::zeta;

    #[test]
    fn zetan_constant_is_zeta_of_item_count() {
        // Check the precomputed constant against the asymptotic expansion
        // ζ(n, s) ≈ ζ(s) + n^(1−s)/(1−s) + n^(−s)/2 − s·n^(−s−1)/12, with
        // ζ(s) obtained from the same expansion at a size we can sum exactly.
        let s = ZIPFIAN_CONSTANT;
        let tail =
            |n: f64| n.powf(1.0 - s) / (1.0 - s) + n.powf(-s) / 2.0 - s * n.powf(-s - 1.0) / 12.0;
        let m = 100_000u64;
        let zeta_s = zeta(m, s) - tail(m as f64);
        let expected = zeta_s + tail(ScrambledZipfian::ITEM_COUNT as f64);
        assert!(
            (expected - ScrambledZipfian::ZETAN).abs() < 1e-4,
            "{expected}"
        );
    }

    #[test]
    fn hottest_value_has_the_10e10_item_skew() {
        let n = 1_000_000u64;
        let draws = 1_000_000u32;
        let mut g = ScrambledZipfian::new(0, n - 1);
        let mut rng = Rng::new(21);
        let mut counts = vec![0u32; n as usize];
        for _ in 0..draws {
            let v = g.next_value(&mut rng);
            assert!(v < n);
            assert_eq!(g.last_value(), v);
            counts[v as usize] += 1;
        }
        let hottest = fnvhash64(0) % n;
        let (argmax, &max) = counts.iter().enumerate().max_by_key(|&(_, c)| *c).unwrap();
        assert_eq!(
            argmax as u64, hottest,
            "the hottest value is item 0 scrambled"
        );
        let freq = f64::from(max) / f64::from(draws);
        let theory = 1.0 / ScrambledZipfian::ZETAN; // ≈ 0.0378
        assert!(
            (freq - theory).abs() < 0.002,
            "freq {freq}, theory {theory}"
        );
        // Second item: 0.5^θ of that.
        let second = f64::from(counts[(fnvhash64(1) % n) as usize]) / f64::from(draws);
        let theory2 = 0.5f64.powf(ZIPFIAN_CONSTANT) / ScrambledZipfian::ZETAN;
        assert!((second - theory2).abs() < 0.0015, "{second} vs {theory2}");
    }

    #[test]
    fn offset_range() {
        let mut g = ScrambledZipfian::new(1000, 1099);
        let mut rng = Rng::new(2);
        let mut seen = [false; 100];
        for _ in 0..50_000 {
            let v = g.next_value(&mut rng);
            assert!((1000..=1099).contains(&v));
            seen[(v - 1000) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every value reachable");
        assert_eq!(g.mean(), Some(1049.5));
    }

    #[test]
    fn scramble_follows_java_signed_remainder() {
        assert_eq!(scramble(10, 10, 12345), 15);
        assert_eq!(scramble(0, 0, 12345), 12345);
        // Java: 10 + Long.MIN_VALUE % 10 = 10 + (-8) = 2.
        assert_eq!(scramble(10, 10, 1 << 63), 2);
    }
}
