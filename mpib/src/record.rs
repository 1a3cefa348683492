//! The completion record: the exact size of each buffer of a transfer, which
//! the sender's leader rail writes into the receiver's record array (one
//! record per slot) with the same WRITE_WITH_IMM that signals the slot.
//! Written when a transfer has more than one buffer, or when its size cannot
//! travel in the immediate exactly ([`crate::imm::exact_in_imm`]).
//!
//! ```text
//! 0..32   size[0..8]   u32 each, little-endian; only the first nreqs are sent
//! ```

use crate::cts::MAX_BUFFERS;

/// Bytes of one record (a slot's share of the record array).
pub const RECORD_LEN: usize = MAX_BUFFERS * 4;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const fn size(i: usize) -> Field {
        i * 4..i * 4 + 4
    }
}

/// Bytes the sender writes for a record of `nreqs` sizes.
pub const fn wire_len(nreqs: usize) -> usize {
    nreqs * 4
}

/// A view of a completion record over a buffer of at least [`RECORD_LEN`]
/// bytes.
#[derive(Debug, Clone, Copy)]
pub struct Record<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Record<T> {
    /// Wraps a buffer of at least [`RECORD_LEN`] bytes (`None` if shorter).
    pub fn new_checked(buffer: T) -> Option<Self> {
        (buffer.as_ref().len() >= RECORD_LEN).then_some(Self { buffer })
    }
    /// Size of buffer `i` (`i < MAX_BUFFERS`).
    pub fn size(&self, i: usize) -> u32 {
        let f = field::size(i.min(MAX_BUFFERS - 1));
        u32::from_le_bytes(self.buffer.as_ref()[f].try_into().unwrap_or([0; 4]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Record<T> {
    /// Writes the sizes (at most [`MAX_BUFFERS`]).
    pub fn set(&mut self, sizes: &[u32]) {
        for (i, s) in sizes.iter().take(MAX_BUFFERS).enumerate() {
            self.buffer.as_mut()[field::size(i)].copy_from_slice(&s.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut b = [0u8; RECORD_LEN];
        let sizes = [1, 0, 0x0102_0304, u32::MAX, 5, 6, 7, 8];
        Record::new_checked(&mut b[..]).unwrap().set(&sizes);
        let r = Record::new_checked(&b[..]).unwrap();
        for (i, s) in sizes.iter().enumerate() {
            assert_eq!(r.size(i), *s);
        }
        assert_eq!(&b[8..12], &[4, 3, 2, 1]);
        assert_eq!(wire_len(3), 12);
        assert!(Record::new_checked(&b[..RECORD_LEN - 1]).is_none());
    }
}
