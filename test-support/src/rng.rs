//! A seeded generator for tests.

/// A tiny deterministic generator (xorshift64*); any seed works (zero is
/// made odd).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0 | 1;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_sequence_and_zero_is_a_seed() {
        let (mut a, mut b) = (Rng(42), Rng(42));
        let xs: Vec<u64> = (0..100).map(|_| a.next()).collect();
        assert!(xs.iter().all(|&x| x == b.next()));
        assert_ne!(xs[0], xs[1]);
        let mut z = Rng(0);
        assert_ne!(z.next(), 0);
        assert!((0..1000).all(|_| z.below(7) < 7));
    }
}
