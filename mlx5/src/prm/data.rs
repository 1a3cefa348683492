//! Data (scatter/gather) segment (`struct mlx5_wqe_data_seg`).

use super::{be32, be64, put32, put64, view, Field};

mod field {
    use super::Field;
    pub const BYTE_COUNT: Field = 0..4;
    pub const LKEY: Field = 4..8;
    pub const ADDR: Field = 8..16;
}

view!(
    /// Data segment: byte count, lkey and local address of one SGE.
    DataSeg,
    16
);

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// Byte count.
    #[inline]
    pub fn byte_count(&self) -> u32 {
        be32(self.buffer.as_ref(), field::BYTE_COUNT)
    }
    /// Local key.
    #[inline]
    pub fn lkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::LKEY)
    }
    /// Local address.
    #[inline]
    pub fn addr(&self) -> u64 {
        be64(self.buffer.as_ref(), field::ADDR)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataSeg<T> {
    /// Writes the whole segment, as `mlx5dv_set_data_seg` does.
    #[inline(always)]
    pub fn set(&mut self, byte_count: u32, lkey: u32, addr: u64) {
        let b = self.buffer.as_mut();
        put32(b, field::BYTE_COUNT, byte_count);
        put32(b, field::LKEY, lkey);
        put64(b, field::ADDR, addr);
    }
}
