//! Inline data segment header (`struct mlx5_wqe_inl_data_seg`): a byte count
//! with [`INLINE_SEG`](super::INLINE_SEG) set, followed by the data itself,
//! padded to a 16-byte boundary.

use super::{be32, put32, view, Field, INLINE_SEG};

mod field {
    use super::Field;
    pub const BYTE_COUNT: Field = 0..4;
}

view!(
    /// Inline segment header.
    InlineSeg,
    4
);

impl InlineSeg<()> {
    /// Bytes that an inline segment carrying `len` data bytes occupies in the
    /// WQE: header plus data, rounded up to 16.
    #[inline(always)]
    pub const fn wqe_bytes(len: usize) -> usize {
        (4 + len + 15) & !15
    }
}

impl<T: AsRef<[u8]>> InlineSeg<T> {
    /// True when bit 31 marks the segment as inline.
    #[inline]
    pub fn is_inline(&self) -> bool {
        be32(self.buffer.as_ref(), field::BYTE_COUNT) & INLINE_SEG != 0
    }
    /// Data length in bytes.
    #[inline]
    pub fn len(&self) -> u32 {
        be32(self.buffer.as_ref(), field::BYTE_COUNT) & !INLINE_SEG
    }
    /// True when the segment carries no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> InlineSeg<T> {
    /// Writes the header for `len` data bytes.
    #[inline(always)]
    pub fn set_len(&mut self, len: u32) {
        put32(self.buffer.as_mut(), field::BYTE_COUNT, len | INLINE_SEG);
    }
}
