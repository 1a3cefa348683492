//! Mini CQE (`struct mlx5_mini_cqe8` in Linux `include/linux/mlx5/device.h`):
//! the 8-byte per-completion record inside a compressed CQE block. rdma-core's
//! public header does not define it; the layout follows Linux and UCX.

use super::{be16, be32, put16, put32, view, Field};

mod field {
    use super::Field;
    // Requester form (s_wqe_info).
    pub const WQE_COUNTER: Field = 0..2;
    pub const S_WQE_OPCODE: usize = 2;
    pub const RESERVED: usize = 3;
    // Responder HASH form.
    pub const RX_HASH_RESULT: Field = 0..4;
    // Every form.
    pub const BYTE_CNT: Field = 4..8;
}

/// Mini CQEs per 64-byte compressed slot in the enhanced layout.
pub const MINI_PER_ENHANCED_SLOT: usize = 7;
/// Mini CQEs per 64-byte mini-CQE array in the basic layout.
pub const MINI_PER_BASIC_SLOT: usize = 8;

view!(
    /// Mini CQE. The first word depends on the form: requester (wqe_counter,
    /// s_wqe_opcode) or responder HASH (rx_hash_result; the CSUM(_STRIDX)
    /// forms, checksum and stride index, are never asked for). The byte
    /// count is common to all.
    MiniCqe,
    8
);

impl<T: AsRef<[u8]>> MiniCqe<T> {
    /// Requester form: WQE counter.
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WQE_COUNTER)
    }
    /// Requester form: WQE opcode.
    #[inline]
    pub fn s_wqe_opcode(&self) -> u8 {
        self.buffer.as_ref()[field::S_WQE_OPCODE]
    }
    /// Byte count.
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        be32(self.buffer.as_ref(), field::BYTE_CNT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MiniCqe<T> {
    /// Writes a requester mini CQE.
    #[inline]
    pub fn set_requester(&mut self, wqe_counter: u16, s_wqe_opcode: u8, byte_cnt: u32) {
        let b = self.buffer.as_mut();
        put16(b, field::WQE_COUNTER, wqe_counter);
        b[field::S_WQE_OPCODE] = s_wqe_opcode;
        b[field::RESERVED] = 0;
        put32(b, field::BYTE_CNT, byte_cnt);
    }
    /// Writes a responder HASH-form mini CQE.
    #[inline]
    pub fn set_responder_hash(&mut self, rx_hash_result: u32, byte_cnt: u32) {
        let b = self.buffer.as_mut();
        put32(b, field::RX_HASH_RESULT, rx_hash_result);
        put32(b, field::BYTE_CNT, byte_cnt);
    }
}
