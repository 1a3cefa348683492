//! Remote address segment (`struct mlx5_wqe_raddr_seg`).

use super::{be32, be64, put32, put64, view, Field};

mod field {
    use super::Field;
    pub const RADDR: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const RESERVED: Field = 12..16;
}

view!(
    /// Remote address segment: remote virtual address and rkey.
    RaddrSeg,
    16
);

impl<T: AsRef<[u8]>> RaddrSeg<T> {
    /// Remote virtual address.
    #[inline]
    pub fn raddr(&self) -> u64 {
        be64(self.buffer.as_ref(), field::RADDR)
    }
    /// Remote key.
    #[inline]
    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::RKEY)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RaddrSeg<T> {
    /// Writes the whole segment (the reserved word is zeroed).
    #[inline(always)]
    pub fn set(&mut self, raddr: u64, rkey: u32) {
        let b = self.buffer.as_mut();
        put64(b, field::RADDR, raddr);
        put32(b, field::RKEY, rkey);
        put32(b, field::RESERVED, 0);
    }
}
