//! Atomic segment (`struct mlx5_wqe_atomic_seg`).

use super::{be64, put64, view, Field};

mod field {
    use super::Field;
    pub const SWAP_ADD: Field = 0..8;
    pub const COMPARE: Field = 8..16;
}

view!(
    /// Atomic segment: swap (CAS) or add (fetch-add) operand, and compare operand.
    AtomicSeg,
    16
);

impl<T: AsRef<[u8]>> AtomicSeg<T> {
    /// Swap value (compare-and-swap) or addend (fetch-and-add).
    #[inline]
    pub fn swap_add(&self) -> u64 {
        be64(self.buffer.as_ref(), field::SWAP_ADD)
    }
    /// Compare value (compare-and-swap).
    #[inline]
    pub fn compare(&self) -> u64 {
        be64(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicSeg<T> {
    /// Writes the whole segment.
    #[inline(always)]
    pub fn set(&mut self, swap_add: u64, compare: u64) {
        let b = self.buffer.as_mut();
        put64(b, field::SWAP_ADD, swap_add);
        put64(b, field::COMPARE, compare);
    }
}
