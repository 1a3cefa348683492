//! SRQ "next" segment (`struct mlx5_wqe_srq_next_seg`), the head of every SRQ WQE.

use super::{be16, put16, view, Field};

mod field {
    use super::Field;
    pub const RSVD0: Field = 0..2;
    pub const NEXT_WQE_INDEX: Field = 2..4;
    pub const SIGNATURE: usize = 4;
    pub const RSVD1: Field = 5..16;
}

view!(
    /// SRQ next segment: the index of the WQE the NIC moves to after this one.
    SrqNextSeg,
    16
);

impl<T: AsRef<[u8]>> SrqNextSeg<T> {
    /// Index of the next WQE in the SRQ's list.
    #[inline]
    pub fn next_wqe_index(&self) -> u16 {
        be16(self.buffer.as_ref(), field::NEXT_WQE_INDEX)
    }
    /// Signature byte.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SrqNextSeg<T> {
    /// Writes the whole segment: reserved bytes zero, the given next index.
    #[inline]
    pub fn set(&mut self, next_wqe_index: u16) {
        let b = self.buffer.as_mut();
        b[field::RSVD0].fill(0);
        put16(b, field::NEXT_WQE_INDEX, next_wqe_index);
        b[field::SIGNATURE] = 0;
        b[field::RSVD1].fill(0);
    }
}
