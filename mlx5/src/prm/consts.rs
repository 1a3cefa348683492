//! Constants mirrored from rdma-core's `infiniband/mlx5dv.h` (and, where the
//! public header has none, from rdma-core `providers/mlx5` and Linux
//! `include/linux/mlx5/device.h`). The oracle tests compare every value that the
//! header defines against the header itself.

/// Size of a send WQE basic block (`MLX5_SEND_WQE_BB`).
pub const SEND_WQE_BB: usize = 64;
/// log2 of [`SEND_WQE_BB`] (`MLX5_SEND_WQE_SHIFT`).
pub const SEND_WQE_SHIFT: u32 = 6;
/// Size of a WQE segment unit ("octoword"): the DS field counts these.
pub const WQE_SEG_UNIT: usize = 16;
/// Largest DS value a control segment can carry (6 bits; rdma-core `MLX5_WQE_CTRL_DS_MASK`).
pub const MAX_WQE_DS: usize = 0x3f;
/// Bit 31 of an inline segment's byte count (`MLX5_INLINE_SEG`).
pub const INLINE_SEG: u32 = 0x8000_0000;
/// The lkey that terminates a receive WQE's scatter list (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;

/// Index of the receive counter in a QP doorbell record (`MLX5_RCV_DBR`).
pub const RCV_DBR: usize = 0;
/// Index of the send counter in a QP doorbell record (`MLX5_SND_DBR`).
pub const SND_DBR: usize = 1;
/// Index of the consumer index in a CQ doorbell record (rdma-core `MLX5_CQ_SET_CI`).
pub const CQ_SET_CI: usize = 0;
/// Index of the arm word in a CQ doorbell record (rdma-core `MLX5_CQ_ARM_DB`).
pub const CQ_ARM_DB: usize = 1;
/// Offset of the CQ doorbell register in the UAR page (`MLX5_CQ_DOORBELL`).
pub const CQ_DOORBELL: usize = 0x20;
/// Arm request: next solicited completion only (`MLX5_CQ_DB_REQ_NOT_SOL`).
pub const CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;
/// Arm request: next completion (`MLX5_CQ_DB_REQ_NOT`).
pub const CQ_DB_REQ_NOT: u32 = 0;

/// Control segment `fm_ce_se` bits (`MLX5_WQE_CTRL_*`).
pub mod ctrl_flags {
    /// Generate a CQE for this WQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// Solicited event at the responder (`MLX5_WQE_CTRL_SOLICITED`).
    pub const SOLICITED: u8 = 1 << 1;
    /// Wait for earlier RDMA READ/atomics (`MLX5_WQE_CTRL_FENCE`).
    pub const FENCE: u8 = 4 << 5;
    /// Initiator small fence (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`).
    pub const INITIATOR_SMALL_FENCE: u8 = 1 << 5;
}

/// CQE `op_own` bits.
pub mod op_own {
    /// Owner bit (`MLX5_CQE_OWNER_MASK`).
    pub const OWNER_MASK: u8 = 1;
    /// Solicited-event bit.
    pub const SE_MASK: u8 = 1 << 1;
    /// Format bits (2–3).
    pub const FORMAT_MASK: u8 = 0x0c;
    /// Format: a compressed block's title CQE (`MLX5_COMPRESSED`, 3, in bits 2–3).
    pub const FORMAT_COMPRESSED: u8 = 3 << 2;
    /// The opcode is the high nibble.
    pub const OPCODE_SHIFT: u32 = 4;
    /// The opcode nibble in place.
    pub const OPCODE_MASK: u8 = 0xf0;
    /// Format: data scattered to the CQE, 32 bytes (`MLX5_INLINE_SCATTER_32`).
    pub const INLINE_SCATTER_32: u8 = 0x4;
    /// Format: data scattered to the CQE, 64 bytes (`MLX5_INLINE_SCATTER_64`).
    pub const INLINE_SCATTER_64: u8 = 0x8;
    /// What software writes into every CQE before handing the CQ to the NIC:
    /// opcode INVALID, owner 1.
    pub const INITIAL: u8 = 0xf1;
}

/// Mini CQE responder formats for compressed CQs (`enum mlx5dv_cqe_comp_res_format`).
pub mod cqe_res_format {
    /// `MLX5DV_CQE_RES_FORMAT_HASH`: rx hash result + byte count.
    pub const HASH: u32 = 1 << 0;
    /// `MLX5DV_CQE_RES_FORMAT_CSUM`: checksum + byte count.
    pub const CSUM: u32 = 1 << 1;
    /// `MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX`: checksum + stride index + byte count.
    pub const CSUM_STRIDX: u32 = 1 << 2;
}

macro_rules! byte_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $n:expr,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $name { $($(#[$vm])* $v = $n,)* }

        impl $name {
            /// Every value, for tables and tests.
            pub const ALL: &'static [$name] = &[$($name::$v,)*];

            /// Decodes a raw value; `None` for a value this crate does not know.
            #[inline]
            pub const fn from_u8(v: u8) -> Option<Self> {
                match v { $($n => Some($name::$v),)* _ => None }
            }
        }

        impl From<$name> for u8 {
            #[inline(always)]
            fn from(v: $name) -> u8 { v as u8 }
        }
    };
}

byte_enum! {
    /// Send WQE opcodes (`MLX5_OPCODE_*`).
    WqeOpcode {
        /// `MLX5_OPCODE_NOP`
        Nop = 0x00,
        /// `MLX5_OPCODE_SEND_INVAL`
        SendInval = 0x01,
        /// `MLX5_OPCODE_RDMA_WRITE`
        RdmaWrite = 0x08,
        /// `MLX5_OPCODE_RDMA_WRITE_IMM`
        RdmaWriteImm = 0x09,
        /// `MLX5_OPCODE_SEND`
        Send = 0x0a,
        /// `MLX5_OPCODE_SEND_IMM`
        SendImm = 0x0b,
        /// `MLX5_OPCODE_RDMA_READ`
        RdmaRead = 0x10,
        /// `MLX5_OPCODE_ATOMIC_CS`
        AtomicCs = 0x11,
        /// `MLX5_OPCODE_ATOMIC_FA`
        AtomicFa = 0x12,
        /// `MLX5_OPCODE_ATOMIC_MASKED_CS`
        AtomicMaskedCs = 0x14,
        /// `MLX5_OPCODE_ATOMIC_MASKED_FA`
        AtomicMaskedFa = 0x15,
        /// `MLX5_OPCODE_LOCAL_INVAL`
        LocalInval = 0x1b,
        /// `MLX5_OPCODE_TAG_MATCHING`: a tag-list command on a TM-SRQ's
        /// command QP (control segment, [`TmSeg`](super::TmSeg), and for an
        /// append the buffer's [`DataSeg`](super::DataSeg)).
        TagMatching = 0x28,
    }
}

byte_enum! {
    /// CQE opcodes, the top nibble of `op_own` (`MLX5_CQE_*`).
    CqeOpcode {
        /// Requester completion (`MLX5_CQE_REQ`).
        Req = 0,
        /// RDMA WRITE with immediate received (`MLX5_CQE_RESP_WR_IMM`).
        RespWrImm = 1,
        /// SEND received (`MLX5_CQE_RESP_SEND`).
        RespSend = 2,
        /// SEND with immediate received (`MLX5_CQE_RESP_SEND_IMM`).
        RespSendImm = 3,
        /// SEND with invalidate received (`MLX5_CQE_RESP_SEND_INV`).
        RespSendInv = 4,
        /// CQ resize marker (`MLX5_CQE_RESIZE_CQ`).
        ResizeCq = 5,
        /// No packet (`MLX5_CQE_NO_PACKET`).
        NoPacket = 6,
        /// Signature error (`MLX5_CQE_SIG_ERR`).
        SigErr = 12,
        /// Requester error (`MLX5_CQE_REQ_ERR`).
        ReqErr = 13,
        /// Responder error (`MLX5_CQE_RESP_ERR`).
        RespErr = 14,
        /// Not yet written (`MLX5_CQE_INVALID`).
        Invalid = 15,
    }
}

byte_enum! {
    /// The CQE format, bits 2–3 of `op_own`.
    CqeFormat {
        /// Plain CQE.
        Plain = 0,
        /// Up to 32 bytes of data scattered into the CQE (`MLX5_INLINE_SCATTER_32`).
        Inline32 = 1,
        /// Up to 64 bytes of data scattered into a 128-byte CQE (`MLX5_INLINE_SCATTER_64`).
        Inline64 = 2,
        /// A compressed block of mini CQEs.
        Compressed = 3,
    }
}

byte_enum! {
    /// Error CQE syndromes (`MLX5_CQE_SYNDROME_*`).
    Syndrome {
        /// `MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR`
        LocalLength = 0x01,
        /// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`
        LocalQpOp = 0x02,
        /// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`
        LocalProt = 0x04,
        /// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`
        WrFlush = 0x05,
        /// `MLX5_CQE_SYNDROME_MW_BIND_ERR`
        MwBind = 0x06,
        /// `MLX5_CQE_SYNDROME_BAD_RESP_ERR`
        BadResp = 0x10,
        /// `MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR`
        LocalAccess = 0x11,
        /// `MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR`
        RemoteInvalReq = 0x12,
        /// `MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR`
        RemoteAccess = 0x13,
        /// `MLX5_CQE_SYNDROME_REMOTE_OP_ERR`
        RemoteOp = 0x14,
        /// `MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR`
        TransportRetryExc = 0x15,
        /// `MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR`
        RnrRetryExc = 0x16,
        /// `MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR`
        RemoteAborted = 0x22,
    }
}

/// Flags of a tag-matching WQE segment's `flags` byte
/// (`MLX5_SRQ_FLAG_TM_*`; rdma-core `providers/mlx5/mlx5.h`, not in the
/// public header).
pub mod tm_flags {
    /// The command produces a CQE (`MLX5_SRQ_FLAG_TM_CQE_REQ`). A command
    /// WQE's control segment leaves `fm_ce_se` zero: this flag, not
    /// [`CQ_UPDATE`](super::ctrl_flags::CQ_UPDATE), asks for its completion.
    pub const CQE_REQ: u8 = 1 << 7;
    /// `sw_cnt` holds the number of unexpected messages software has
    /// handled (`MLX5_SRQ_FLAG_TM_SW_CNT`). Once the NIC deems a message
    /// unexpected it matches no new tags until software reports, with this
    /// count, that it has caught up; the NIC's own count comes back in a
    /// command CQE's `tm_cqe.hw_phase_cnt`.
    pub const SW_CNT: u8 = 1 << 6;
}

/// The CQE's `app` when the completion comes from tag matching
/// (`MLX5_CQE_APP_TAG_MATCHING`; rdma-core `providers/mlx5/cq.c`): its
/// `app_op` is then a [`TmAppOp`].
pub const CQE_APP_TAG_MATCHING: u8 = 1;

/// The success bit of a tag-list command's CQE, in `tm_cqe.success`
/// (`MLX5_TMC_SUCCESS`). A REMOVE without it failed: the tag had already
/// been consumed by a message.
pub const TMC_SUCCESS: u32 = 0x8000_0000;

byte_enum! {
    /// Operation of a tag-matching header (`enum ibv_tmh_op`), the first byte
    /// of a [`Tmh`](super::Tmh).
    TmhOpcode {
        /// No tag: the message bypasses matching and lands in the SRQ
        /// (`IBV_TMH_NO_TAG`).
        NoTag = 0,
        /// Rendezvous request: a [`Rvh`](super::Rvh) naming the sender's
        /// buffer follows the header (then optional data for software), and
        /// the receiver fetches the data with an RDMA READ (`IBV_TMH_RNDV`).
        Rndv = 1,
        /// Rendezvous finished: the request's header and RVH sent back with
        /// this opcode once the receiver has read the data; the sender's
        /// buffer is free from then on (`IBV_TMH_FIN`).
        Fin = 2,
        /// Eager: the payload follows the header (`IBV_TMH_EAGER`).
        Eager = 3,
    }
}

byte_enum! {
    /// Tag-list command of a [`TmSeg`](super::TmSeg) (`MLX5_TM_OPCODE_*`;
    /// rdma-core `providers/mlx5/mlx5.h`). The segment carries it in the high
    /// nibble of its `opcode` byte.
    TmOpcode {
        /// No list change; with [`tm_flags::SW_CNT`] a sync of the
        /// unexpected-message count (`MLX5_TM_OPCODE_NOP`).
        Nop = 0x00,
        /// Add a tag and its buffer to the list (`MLX5_TM_OPCODE_APPEND`).
        Append = 0x01,
        /// Remove a tag from the list (`MLX5_TM_OPCODE_REMOVE`).
        Remove = 0x02,
    }
}

byte_enum! {
    /// A tag-matching CQE's `app_op` (`MLX5_CQE_APP_OP_TM_*`; rdma-core
    /// `providers/mlx5/cq.c`). The command QP's completions
    /// ([`is_list_op`](TmAppOp::is_list_op)) and [`TmAppOp::Consumed`] come
    /// with the CQE opcode `NO_PACKET`, the others with a receive opcode
    /// (as rdma-core's `mlx5_cq_read_wc_opcode` reads them).
    TmAppOp {
        /// A message matched a tag; its data completes later with
        /// [`TmAppOp::Expected`] (`MLX5_CQE_APP_OP_TM_CONSUMED`).
        Consumed = 0x1,
        /// The data of a message that matched earlier has arrived
        /// (`MLX5_CQE_APP_OP_TM_EXPECTED`).
        Expected = 0x2,
        /// A tagged message matched no tag and landed in an SRQ WQE
        /// (`MLX5_CQE_APP_OP_TM_UNEXPECTED`).
        Unexpected = 0x3,
        /// A message without a tag landed in an SRQ WQE
        /// (`MLX5_CQE_APP_OP_TM_NO_TAG`).
        NoTag = 0x4,
        /// An append command completed (`MLX5_CQE_APP_OP_TM_APPEND`).
        Append = 0x5,
        /// A remove command completed; see [`TMC_SUCCESS`]
        /// (`MLX5_CQE_APP_OP_TM_REMOVE`).
        Remove = 0x6,
        /// A NOP (sync) command completed (`MLX5_CQE_APP_OP_TM_NOOP`).
        Noop = 0x7,
        /// A rendezvous request matched, and software must fetch the data
        /// (`MLX5_CQE_APP_OP_TM_CONSUMED_SW_RDNV`).
        ConsumedSwRndv = 0x9,
        /// A message matched and its data arrived, in one CQE
        /// (`MLX5_CQE_APP_OP_TM_CONSUMED_MSG`).
        ConsumedMsg = 0xa,
        /// A rendezvous request matched in one CQE, and software must fetch
        /// the data (`MLX5_CQE_APP_OP_TM_CONSUMED_MSG_SW_RDNV`).
        ConsumedMsgSwRndv = 0xb,
        /// A matched message's transfer was cancelled; software must fetch
        /// the data (`MLX5_CQE_APP_OP_TM_MSG_COMPLETION_CANCELED`).
        MsgCompletionCanceled = 0xc,
    }
}

impl TmAppOp {
    /// True for the completions of a matched message: `app_info` holds the
    /// index of the tag-list entry it matched (rdma-core reads
    /// `tm_list[app_info]` for these).
    #[inline(always)]
    pub const fn names_tag(self) -> bool {
        matches!(
            self,
            TmAppOp::Consumed
                | TmAppOp::Expected
                | TmAppOp::ConsumedSwRndv
                | TmAppOp::ConsumedMsg
                | TmAppOp::ConsumedMsgSwRndv
                | TmAppOp::MsgCompletionCanceled
        )
    }
    /// True for the last completion of a matched message, after which its
    /// tag-list entry is free: every [`names_tag`](Self::names_tag) opcode but
    /// the two first-of-two ones, [`TmAppOp::Consumed`] and
    /// [`TmAppOp::ConsumedSwRndv`] (rdma-core
    /// `mlx5_cqe_app_op_tm_is_complete`). `false` for the others.
    #[inline(always)]
    pub const fn ends_tag(self) -> bool {
        self.names_tag() && !matches!(self, TmAppOp::Consumed | TmAppOp::ConsumedSwRndv)
    }
    /// True when software must complete a rendezvous itself
    /// (`IBV_WC_TM_RNDV_INCOMPLETE`).
    #[inline(always)]
    pub const fn is_rndv_incomplete(self) -> bool {
        matches!(
            self,
            TmAppOp::ConsumedSwRndv | TmAppOp::ConsumedMsgSwRndv | TmAppOp::MsgCompletionCanceled
        )
    }
    /// True for the completion of a command-QP WQE (append, remove, NOP): it
    /// carries `tm_cqe.success` and `tm_cqe.hw_phase_cnt`.
    #[inline(always)]
    pub const fn is_list_op(self) -> bool {
        matches!(self, TmAppOp::Append | TmAppOp::Remove | TmAppOp::Noop)
    }
    /// True when the message landed in an SRQ WQE, named by the CQE's
    /// `wqe_counter`, with its tag-matching header in front of the data.
    #[inline(always)]
    pub const fn uses_srq_wqe(self) -> bool {
        matches!(self, TmAppOp::Unexpected | TmAppOp::NoTag)
    }
    /// True when the completion reports a match (`IBV_WC_TM_MATCH`): the
    /// CQE's [`tmh`](super::Cqe64::tmh) holds the message's header.
    #[inline(always)]
    pub const fn is_match(self) -> bool {
        matches!(
            self,
            TmAppOp::Consumed
                | TmAppOp::ConsumedSwRndv
                | TmAppOp::ConsumedMsg
                | TmAppOp::ConsumedMsgSwRndv
                | TmAppOp::MsgCompletionCanceled
        )
    }
    /// True when the completion reports the data in place
    /// (`IBV_WC_TM_DATA_VALID`).
    #[inline(always)]
    pub const fn is_data_valid(self) -> bool {
        matches!(
            self,
            TmAppOp::Expected
                | TmAppOp::ConsumedMsg
                | TmAppOp::ConsumedMsgSwRndv
                | TmAppOp::MsgCompletionCanceled
        )
    }
}

impl CqeOpcode {
    /// True for the two error opcodes, whose CQE has the [`ErrCqe`](super::ErrCqe) layout.
    #[inline(always)]
    pub const fn is_error(self) -> bool {
        matches!(self, CqeOpcode::ReqErr | CqeOpcode::RespErr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matched_message_ends_its_tag_once() {
        // Two CQEs (match, then data) or one: exactly one frees the tag.
        for seq in [
            &[TmAppOp::Consumed, TmAppOp::Expected][..],
            &[TmAppOp::ConsumedSwRndv, TmAppOp::Expected][..],
            &[TmAppOp::ConsumedMsg][..],
            &[TmAppOp::ConsumedMsgSwRndv][..],
            &[TmAppOp::MsgCompletionCanceled][..],
        ] {
            assert!(seq.iter().all(|op| op.names_tag()), "{seq:?}");
            assert_eq!(seq.iter().filter(|op| op.ends_tag()).count(), 1, "{seq:?}");
            assert!(seq[0].is_match(), "{seq:?}");
            assert!(seq[seq.len() - 1].is_data_valid(), "{seq:?}");
        }
        // The rest never name a tag, and every operation has one role.
        for &op in TmAppOp::ALL {
            let roles = [op.names_tag(), op.is_list_op(), op.uses_srq_wqe()];
            assert_eq!(roles.iter().filter(|&&r| r).count(), 1, "{op:?}");
        }
    }
}
