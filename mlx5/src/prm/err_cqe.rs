//! Error CQE (`struct mlx5_err_cqe`): the layout of a CQE whose opcode is
//! REQ_ERR or RESP_ERR.

use super::{be16, be32, put16, put32, view, Field, Syndrome};

mod field {
    use super::Field;
    pub const SRQN: Field = 32..36;
    pub const VENDOR_ERR_SYND: usize = 54;
    pub const SYNDROME: usize = 55;
    pub const S_WQE_OPCODE_QPN: Field = 56..60;
    pub const WQE_COUNTER: Field = 60..62;
    pub const SIGNATURE: usize = 62;
    pub const OP_OWN: usize = 63;
}

view!(
    /// Error CQE: syndrome, vendor syndrome, WQE opcode, QPN and WQE counter.
    ErrCqe,
    64
);

impl<T: AsRef<[u8]>> ErrCqe<T> {
    #[inline(always)]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// SRQ number (raw word).
    #[inline]
    pub fn srqn(&self) -> u32 {
        be32(self.b(), field::SRQN)
    }
    /// Vendor-specific syndrome.
    #[inline]
    pub fn vendor_err_synd(&self) -> u8 {
        self.b()[field::VENDOR_ERR_SYND]
    }
    /// Raw syndrome.
    #[inline]
    pub fn syndrome_raw(&self) -> u8 {
        self.b()[field::SYNDROME]
    }
    /// Syndrome, if known.
    #[inline]
    pub fn syndrome(&self) -> Option<Syndrome> {
        Syndrome::from_u8(self.syndrome_raw())
    }
    /// `s_wqe_opcode_qpn` (raw word).
    #[inline]
    pub fn s_wqe_opcode_qpn(&self) -> u32 {
        be32(self.b(), field::S_WQE_OPCODE_QPN)
    }
    /// QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.s_wqe_opcode_qpn() & 0x00ff_ffff
    }
    /// Opcode of the failed WQE (requester errors).
    #[inline]
    pub fn s_wqe_opcode(&self) -> u8 {
        (self.s_wqe_opcode_qpn() >> 24) as u8
    }
    /// WQE counter of the failed WQE.
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        be16(self.b(), field::WQE_COUNTER)
    }
    /// Signature byte.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.b()[field::SIGNATURE]
    }
    /// `op_own`.
    #[inline]
    pub fn op_own(&self) -> u8 {
        self.b()[field::OP_OWN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ErrCqe<T> {
    /// Sets the SRQ number word.
    #[inline]
    pub fn set_srqn(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::SRQN, v)
    }
    /// Sets the vendor syndrome.
    #[inline]
    pub fn set_vendor_err_synd(&mut self, v: u8) {
        self.buffer.as_mut()[field::VENDOR_ERR_SYND] = v
    }
    /// Sets the syndrome.
    #[inline]
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[field::SYNDROME] = v
    }
    /// Sets `s_wqe_opcode_qpn`.
    #[inline]
    pub fn set_s_wqe_opcode_qpn(&mut self, opcode: u8, qpn: u32) {
        put32(
            self.buffer.as_mut(),
            field::S_WQE_OPCODE_QPN,
            (u32::from(opcode) << 24) | (qpn & 0x00ff_ffff),
        )
    }
    /// Sets the WQE counter.
    #[inline]
    pub fn set_wqe_counter(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::WQE_COUNTER, v)
    }
    /// Sets the signature byte.
    #[inline]
    pub fn set_signature(&mut self, v: u8) {
        self.buffer.as_mut()[field::SIGNATURE] = v
    }
    /// Sets `op_own`.
    #[inline]
    pub fn set_op_own(&mut self, v: u8) {
        self.buffer.as_mut()[field::OP_OWN] = v
    }
}
