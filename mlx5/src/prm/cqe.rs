//! 64-byte completion queue entry (`struct mlx5_cqe64`).

use super::{
    be16, be32, be64, put16, put32, put64, view, CqeFormat, CqeOpcode, Field, TmAppOp, Tmh,
    CQE_APP_TAG_MATCHING, TMC_SUCCESS,
};

mod field {
    use super::Field;
    pub const WQE_ID: Field = 2..4;
    pub const ML_PATH: usize = 17;
    pub const SLID: Field = 22..24;
    pub const FLAGS_RQPN: Field = 24..28;
    pub const HDS_IP_EXT: usize = 28;
    pub const L4_HDR_TYPE_ETC: usize = 29;
    pub const VLAN_INFO: Field = 30..32;
    pub const SRQN_UIDX: Field = 32..36;
    pub const IMM_INVAL_PKEY: Field = 36..40;
    pub const APP: usize = 40;
    pub const APP_OP: usize = 41;
    pub const APP_INFO: Field = 42..44;
    pub const BYTE_CNT: Field = 44..48;
    pub const TIMESTAMP: Field = 48..56;
    pub const SOP_DROP_QPN: Field = 56..60;
    pub const WQE_COUNTER: Field = 60..62;
    pub const SIGNATURE: usize = 62;
    pub const OP_OWN: usize = 63;
    /// Data scattered to the CQE (format 1) lands in the first 32 bytes.
    pub const INLINE32: Field = 0..32;
    // The tag-matching forms of the first 32 bytes (a union in the header).
    /// `tmh`: the matched message's tag-matching header.
    pub const TMH: Field = 0..16;
    /// `tm_cqe.success`.
    pub const TM_SUCCESS: Field = 0..4;
    /// `tm_cqe.hw_phase_cnt`.
    pub const TM_HW_PHASE_CNT: Field = 4..6;
}

/// Offset of `signature` (the validity iteration count in the enhanced
/// compression layout), for owner checks that read one byte.
pub const SIGNATURE_OFFSET: usize = field::SIGNATURE;
/// Offset of `op_own`, for owner checks that read one byte.
pub const OP_OWN_OFFSET: usize = field::OP_OWN;

view!(
    /// A 64-byte CQE. In a CQ with 128-byte entries this is the second half of
    /// each entry (the first half carries 64-byte scatter-to-CQE data).
    Cqe64,
    64
);

impl<T> Cqe64<T> {
    /// Byte offset of `signature`.
    pub const SIGNATURE_OFFSET: usize = SIGNATURE_OFFSET;
    /// Byte offset of `op_own`.
    pub const OP_OWN_OFFSET: usize = OP_OWN_OFFSET;
}

impl<T: AsRef<[u8]>> Cqe64<T> {
    #[inline(always)]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// `wqe_id` (striding RQ).
    #[inline]
    pub fn wqe_id(&self) -> u16 {
        be16(self.b(), field::WQE_ID)
    }
    /// `ml_path`.
    #[inline]
    pub fn ml_path(&self) -> u8 {
        self.b()[field::ML_PATH]
    }
    /// Source LID (IB, UD).
    #[inline]
    pub fn slid(&self) -> u16 {
        be16(self.b(), field::SLID)
    }
    /// `flags_rqpn`: flags in the top byte, remote QPN (UD) in the low 24 bits.
    #[inline]
    pub fn flags_rqpn(&self) -> u32 {
        be32(self.b(), field::FLAGS_RQPN)
    }
    /// `hds_ip_ext`.
    #[inline]
    pub fn hds_ip_ext(&self) -> u8 {
        self.b()[field::HDS_IP_EXT]
    }
    /// `l4_hdr_type_etc`.
    #[inline]
    pub fn l4_hdr_type_etc(&self) -> u8 {
        self.b()[field::L4_HDR_TYPE_ETC]
    }
    /// `vlan_info`.
    #[inline]
    pub fn vlan_info(&self) -> u16 {
        be16(self.b(), field::VLAN_INFO)
    }
    /// `srqn_uidx` (raw word).
    #[inline]
    pub fn srqn_uidx(&self) -> u32 {
        be32(self.b(), field::SRQN_UIDX)
    }
    /// SRQ number (low 24 bits of `srqn_uidx`).
    #[inline]
    pub fn srqn(&self) -> u32 {
        self.srqn_uidx() & 0x00ff_ffff
    }
    /// Immediate / invalidated rkey / P_Key, as the host value the sender posted.
    #[inline]
    pub fn imm_inval_pkey(&self) -> u32 {
        be32(self.b(), field::IMM_INVAL_PKEY)
    }
    /// `app`: which offload produced the CQE ([`CQE_APP_TAG_MATCHING`]), or 0.
    #[inline]
    pub fn app(&self) -> u8 {
        self.b()[field::APP]
    }
    /// `app_op`: the offload's operation ([`TmAppOp`] for tag matching).
    #[inline]
    pub fn app_op(&self) -> u8 {
        self.b()[field::APP_OP]
    }
    /// `app_info`: for a tag-matching CQE whose [`TmAppOp::names_tag`], the
    /// index of the tag-list entry the message matched.
    #[inline]
    pub fn app_info(&self) -> u16 {
        be16(self.b(), field::APP_INFO)
    }
    /// True when tag matching produced the CQE (`app` is
    /// [`CQE_APP_TAG_MATCHING`]).
    #[inline]
    pub fn is_tag_matching(&self) -> bool {
        self.app() == CQE_APP_TAG_MATCHING
    }
    /// The tag-matching operation: `None` unless tag matching produced the
    /// CQE and its `app_op` is one this crate knows.
    #[inline]
    pub fn tm_op(&self) -> Option<TmAppOp> {
        if self.is_tag_matching() {
            TmAppOp::from_u8(self.app_op())
        } else {
            None
        }
    }
    /// The tag-matching header the NIC scattered into the CQE on a match
    /// (`tmh`, the first 16 bytes; [`TmAppOp::is_match`]).
    #[inline]
    pub fn tmh(&self) -> Tmh<&[u8]> {
        Tmh::new_unchecked(&self.b()[field::TMH])
    }
    /// `tm_cqe.success` (raw word) of a tag-list command's CQE
    /// ([`TmAppOp::is_list_op`]).
    #[inline]
    pub fn tm_success(&self) -> u32 {
        be32(self.b(), field::TM_SUCCESS)
    }
    /// True when a tag-list command succeeded ([`TMC_SUCCESS`] in
    /// `tm_cqe.success`; rdma-core checks it for a remove).
    #[inline]
    pub fn tm_succeeded(&self) -> bool {
        self.tm_success() & TMC_SUCCESS != 0
    }
    /// `tm_cqe.hw_phase_cnt` of a tag-list command's CQE: the NIC's count of
    /// unexpected messages, which software compares with the count it last
    /// reported ([`tm_flags::SW_CNT`](super::tm_flags::SW_CNT)) to tell
    /// whether it must sync.
    #[inline]
    pub fn tm_hw_phase_cnt(&self) -> u16 {
        be16(self.b(), field::TM_HW_PHASE_CNT)
    }
    /// Bytes transferred (receive) or read (READ/atomic requester).
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        be32(self.b(), field::BYTE_CNT)
    }
    /// Completion timestamp.
    #[inline]
    pub fn timestamp(&self) -> u64 {
        be64(self.b(), field::TIMESTAMP)
    }
    /// `sop_drop_qpn` (raw word).
    #[inline]
    pub fn sop_drop_qpn(&self) -> u32 {
        be32(self.b(), field::SOP_DROP_QPN)
    }
    /// QP number (low 24 bits of `sop_drop_qpn`).
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn() & 0x00ff_ffff
    }
    /// Requester CQE: the opcode of the completed WQE (top byte of `sop_drop_qpn`).
    #[inline]
    pub fn s_wqe_opcode(&self) -> u8 {
        (self.sop_drop_qpn() >> 24) as u8
    }
    /// WQE counter of the completed WQE.
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        be16(self.b(), field::WQE_COUNTER)
    }
    /// Signature, or the validity iteration count in the enhanced compression layout.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.b()[field::SIGNATURE]
    }
    /// `op_own`: opcode, format, solicited and owner bits.
    #[inline]
    pub fn op_own(&self) -> u8 {
        self.b()[field::OP_OWN]
    }
    /// Owner bit (`mlx5dv_get_cqe_owner`).
    #[inline]
    pub fn owner(&self) -> u8 {
        self.op_own() & 1
    }
    /// Solicited-event bit (`mlx5dv_get_cqe_se`).
    #[inline]
    pub fn se(&self) -> u8 {
        (self.op_own() >> 1) & 1
    }
    /// Format bits (`mlx5dv_get_cqe_format`).
    #[inline]
    pub fn format_raw(&self) -> u8 {
        (self.op_own() >> 2) & 3
    }
    /// Format.
    #[inline]
    pub fn format(&self) -> CqeFormat {
        match self.format_raw() {
            0 => CqeFormat::Plain,
            1 => CqeFormat::Inline32,
            2 => CqeFormat::Inline64,
            _ => CqeFormat::Compressed,
        }
    }
    /// Opcode nibble (`mlx5dv_get_cqe_opcode`).
    #[inline]
    pub fn opcode_raw(&self) -> u8 {
        self.op_own() >> 4
    }
    /// Opcode, if known.
    #[inline]
    pub fn opcode(&self) -> Option<CqeOpcode> {
        CqeOpcode::from_u8(self.opcode_raw())
    }
    /// The 32 bytes that format-1 scatter-to-CQE data occupies.
    #[inline]
    pub fn inline32(&self) -> &[u8] {
        &self.b()[field::INLINE32]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe64<T> {
    #[inline(always)]
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets `wqe_id`.
    #[inline]
    pub fn set_wqe_id(&mut self, v: u16) {
        put16(self.m(), field::WQE_ID, v)
    }
    /// Sets `flags_rqpn`.
    #[inline]
    pub fn set_flags_rqpn(&mut self, v: u32) {
        put32(self.m(), field::FLAGS_RQPN, v)
    }
    /// Sets `slid`.
    #[inline]
    pub fn set_slid(&mut self, v: u16) {
        put16(self.m(), field::SLID, v)
    }
    /// Sets `srqn_uidx`.
    #[inline]
    pub fn set_srqn_uidx(&mut self, v: u32) {
        put32(self.m(), field::SRQN_UIDX, v)
    }
    /// Sets the immediate (host value; stored big-endian).
    #[inline]
    pub fn set_imm_inval_pkey(&mut self, v: u32) {
        put32(self.m(), field::IMM_INVAL_PKEY, v)
    }
    /// Sets `app`.
    #[inline]
    pub fn set_app(&mut self, v: u8) {
        self.m()[field::APP] = v
    }
    /// Sets `app_op`.
    #[inline]
    pub fn set_app_op(&mut self, v: u8) {
        self.m()[field::APP_OP] = v
    }
    /// Sets `app_info`.
    #[inline]
    pub fn set_app_info(&mut self, v: u16) {
        put16(self.m(), field::APP_INFO, v)
    }
    /// Marks the CQE as tag matching's, with operation `op`: `app` and
    /// `app_op`.
    #[inline]
    pub fn set_tm_op(&mut self, op: TmAppOp) {
        self.set_app(CQE_APP_TAG_MATCHING);
        self.set_app_op(op.into());
    }
    /// The tag-matching header in the first 16 bytes, to write.
    #[inline]
    pub fn tmh_mut(&mut self) -> Tmh<&mut [u8]> {
        Tmh::new_unchecked(&mut self.m()[field::TMH])
    }
    /// Sets `tm_cqe.success` (raw word).
    #[inline]
    pub fn set_tm_success(&mut self, v: u32) {
        put32(self.m(), field::TM_SUCCESS, v)
    }
    /// Sets `tm_cqe.hw_phase_cnt`.
    #[inline]
    pub fn set_tm_hw_phase_cnt(&mut self, v: u16) {
        put16(self.m(), field::TM_HW_PHASE_CNT, v)
    }
    /// Sets `byte_cnt`.
    #[inline]
    pub fn set_byte_cnt(&mut self, v: u32) {
        put32(self.m(), field::BYTE_CNT, v)
    }
    /// Sets `timestamp`.
    #[inline]
    pub fn set_timestamp(&mut self, v: u64) {
        put64(self.m(), field::TIMESTAMP, v)
    }
    /// Sets `sop_drop_qpn`.
    #[inline]
    pub fn set_sop_drop_qpn(&mut self, v: u32) {
        put32(self.m(), field::SOP_DROP_QPN, v)
    }
    /// Sets `wqe_counter`.
    #[inline]
    pub fn set_wqe_counter(&mut self, v: u16) {
        put16(self.m(), field::WQE_COUNTER, v)
    }
    /// Sets `signature`.
    #[inline]
    pub fn set_signature(&mut self, v: u8) {
        self.m()[field::SIGNATURE] = v
    }
    /// Sets `op_own`.
    #[inline]
    pub fn set_op_own(&mut self, v: u8) {
        self.m()[field::OP_OWN] = v
    }
    /// The 32 bytes that format-1 scatter-to-CQE data occupies.
    #[inline]
    pub fn inline32_mut(&mut self) -> &mut [u8] {
        &mut self.m()[field::INLINE32]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_own_bits() {
        let mut b = [0u8; 64];
        let mut c = Cqe64::new_checked(&mut b[..]).unwrap();
        c.set_op_own((1 << 4) | (1 << 2) | 2 | 1);
        assert_eq!(c.opcode(), Some(CqeOpcode::RespWrImm));
        assert_eq!(c.format(), CqeFormat::Inline32);
        assert_eq!(c.se(), 1);
        assert_eq!(c.owner(), 1);
        c.set_sop_drop_qpn(0x0900_1234);
        assert_eq!(c.qpn(), 0x1234);
        assert_eq!(c.s_wqe_opcode(), 9);
    }

    #[test]
    fn tag_matching_fields() {
        let mut b = [0u8; 64];
        let mut c = Cqe64::new_checked(&mut b[..]).unwrap();
        assert!(!c.is_tag_matching());
        c.set_app_op(TmAppOp::Expected.into());
        assert_eq!(c.tm_op(), None, "app_op alone is not tag matching");
        c.set_tm_op(TmAppOp::ConsumedMsg);
        c.set_app_info(0x0102);
        c.tmh_mut().set(
            crate::prm::TmhOpcode::Eager,
            0xa1b2_c3d4,
            0x1122_3344_5566_7788,
        );
        assert!(c.is_tag_matching());
        assert_eq!(c.tm_op(), Some(TmAppOp::ConsumedMsg));
        assert_eq!(c.app_info(), 0x0102);
        assert_eq!(
            (c.tmh().app_ctx(), c.tmh().tag()),
            (0xa1b2_c3d4, 0x1122_3344_5566_7788)
        );
        assert_eq!(&b[40..44], &[1, 0x0a, 0x01, 0x02]);
        assert_eq!(&b[..4], &[3, 0, 0, 0]);

        // A command's CQE: the success bit and the NIC's count, same bytes.
        let mut c = Cqe64::new_checked(&mut b[..]).unwrap();
        c.set_tm_op(TmAppOp::Remove);
        c.set_tm_success(0);
        c.set_tm_hw_phase_cnt(0xbeef);
        assert!(!c.tm_succeeded());
        c.set_tm_success(TMC_SUCCESS);
        assert!(c.tm_succeeded());
        assert_eq!(c.tm_hw_phase_cnt(), 0xbeef);
        assert_eq!(&b[..6], &[0x80, 0, 0, 0, 0xbe, 0xef]);
        b[41] = 0x08; // no such operation
        assert_eq!(Cqe64::new_unchecked(&b[..]).tm_op(), None);
    }
}
