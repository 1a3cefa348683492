//! A small, fast, seeded pseudo-random number generator.
//!
//! [`Rng`] is xoshiro256** (Blackman & Vigna) whose 256-bit state is filled
//! from the 64-bit seed with SplitMix64, the seeding procedure the authors
//! recommend. It is not cryptographic; it is meant for drawing benchmark keys
//! and values quickly and reproducibly. Each driver thread owns its own `Rng`
//! (use [`Rng::for_stream`] to derive independent per-thread generators from
//! one run seed), so no synchronisation is needed on the hot path.

/// One step of SplitMix64: advances `state` and returns the next output.
#[inline]
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Seeded xoshiro256** generator.
///
/// The same seed always yields the same sequence, on every platform.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// Creates a generator from a 64-bit seed (any value, zero included).
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let mut s = [0u64; 4];
        for word in &mut s {
            *word = splitmix64(&mut sm);
        }
        // xoshiro must not start from the all-zero state. SplitMix64 is a
        // bijection of its counter, so four consecutive outputs are never all
        // zero in practice, but make it impossible anyway.
        if s == [0; 4] {
            s[0] = 0x9E37_79B9_7F4A_7C15;
        }
        Rng { s }
    }

    /// Creates the generator for stream `stream` (e.g. a thread id) of the
    /// run seeded with `seed`; different streams give unrelated sequences.
    pub fn for_stream(seed: u64, stream: u64) -> Self {
        let mut sm = stream ^ 0xD1B5_4A32_D192_ED03;
        Rng::new(seed ^ splitmix64(&mut sm))
    }

    /// Returns the next 64 uniformly distributed random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Returns a uniformly distributed `f64` in `[0, 1)` with 53 random bits
    /// (the same resolution as Java's `Random.nextDouble`).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Returns a uniformly distributed integer in `[0, n)`, without modulo
    /// bias (Lemire's multiply-and-reject method). Returns 0 when `n == 0`.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        let mut low = m as u64;
        if low < n {
            // Reject the few low products that would make some results more
            // likely than others.
            let threshold = n.wrapping_neg() % n;
            while low < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
                low = m as u64;
            }
        }
        (m >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // Published SplitMix64 outputs for seed 1234567 (from the reference
        // implementation's test vector).
        let mut s = 1234567u64;
        assert_eq!(splitmix64(&mut s), 6457827717110365317);
        assert_eq!(splitmix64(&mut s), 3203168211198807973);
        assert_eq!(splitmix64(&mut s), 9817491932198370423);
    }

    #[test]
    fn xoshiro_reference_values() {
        // xoshiro256** from state {1, 2, 3, 4}, as in the reference C code.
        let mut r = Rng { s: [1, 2, 3, 4] };
        assert_eq!(r.next_u64(), 11520);
        assert_eq!(r.next_u64(), 0);
        assert_eq!(r.next_u64(), 1509978240);
        assert_eq!(r.next_u64(), 1215971899390074240);
    }

    #[test]
    fn deterministic_and_seed_sensitive() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let mut c = Rng::new(43);
        let va: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let vb: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        let vc: Vec<u64> = (0..16).map(|_| c.next_u64()).collect();
        assert_eq!(va, vb);
        assert_ne!(va, vc);
        let mut s0 = Rng::for_stream(7, 0);
        let mut s1 = Rng::for_stream(7, 1);
        assert_ne!(s0.next_u64(), s1.next_u64());
    }

    #[test]
    fn f64_in_unit_interval_with_right_mean() {
        let mut r = Rng::new(1);
        let n = 200_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
            sum += x;
        }
        let mean = sum / n as f64;
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
    }

    #[test]
    fn below_is_in_range_and_uniform() {
        let mut r = Rng::new(9);
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below(1), 0);
        let n = 7u64;
        let draws = 140_000;
        let mut counts = [0u32; 7];
        for _ in 0..draws {
            let x = r.below(n);
            assert!(x < n);
            counts[x as usize] += 1;
        }
        let expect = draws as f64 / n as f64;
        for c in counts {
            assert!((f64::from(c) - expect).abs() < expect * 0.03, "{counts:?}");
        }
        // A bound near 2^64 still stays in range.
        let big = u64::MAX - 3;
        for _ in 0..1000 {
            assert!(r.below(big) < big);
        }
    }
}
