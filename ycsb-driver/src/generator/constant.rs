//! Java `ConstantIntegerGenerator`.

use super::NumberGenerator;
use crate::rng::Rng;

/// Always returns the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Constant {
    value: u64,
}

impl Constant {
    /// A generator that always yields `value`.
    pub fn new(value: u64) -> Self {
        Constant { value }
    }
}

impl NumberGenerator for Constant {
    #[inline]
    fn next_value(&mut self, _rng: &mut Rng) -> u64 {
        self.value
    }

    fn last_value(&self) -> u64 {
        self.value
    }

    fn mean(&self) -> Option<f64> {
        Some(self.value as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_is_constant() {
        let mut rng = Rng::new(1);
        let mut g = Constant::new(100);
        for _ in 0..10 {
            assert_eq!(g.next_value(&mut rng), 100);
        }
        assert_eq!(g.last_value(), 100);
        assert_eq!(g.mean(), Some(100.0));
    }
}
