//! Work-completion status and opcode, with the values of `enum ibv_wc_status`
//! and `enum ibv_wc_opcode`, and how an mlx5 CQE maps onto them (as rdma-core's
//! `providers/mlx5/cq.c` does).

use crate::hw::ffi::{wc_opcode, wc_status};
use crate::prm::{Syndrome, WqeOpcode};

macro_rules! wc_enum {
    ($(#[$m:meta])* $name:ident : $mod:ident { $($(#[$vm:meta])* $v:ident = $c:ident,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $name { $($(#[$vm])* $v = $mod::$c,)* }

        impl $name {
            /// Every value.
            pub const ALL: &'static [$name] = &[$($name::$v,)*];

            /// Decodes a raw verbs value; `None` for one this crate does not know.
            pub(crate) fn from_raw(v: u32) -> Option<Self> {
                match v { $(x if x == $mod::$c => Some($name::$v),)* _ => None }
            }

            /// The verbs name (`IBV_WC_…`).
            pub fn name(self) -> &'static str {
                match self { $($name::$v => concat!("IBV_WC_", stringify!($c)),)* }
            }
        }
    };
}

wc_enum! {
    /// `enum ibv_wc_status`.
    WcStatus: wc_status {
        /// The work request completed.
        Success = SUCCESS,
        /// Local length error (a receive too small for the message).
        LocLenErr = LOC_LEN_ERR,
        /// Local QP operation error.
        LocQpOpErr = LOC_QP_OP_ERR,
        /// Local EE context operation error.
        LocEecOpErr = LOC_EEC_OP_ERR,
        /// Local protection error (a bad lkey or range).
        LocProtErr = LOC_PROT_ERR,
        /// Flushed: the QP is in the error state.
        WrFlushErr = WR_FLUSH_ERR,
        /// Memory window bind error.
        MwBindErr = MW_BIND_ERR,
        /// Bad response.
        BadRespErr = BAD_RESP_ERR,
        /// Local access error.
        LocAccessErr = LOC_ACCESS_ERR,
        /// Remote invalid request (e.g. a SEND longer than the receive).
        RemInvReqErr = REM_INV_REQ_ERR,
        /// Remote access error (a bad rkey, range or access right).
        RemAccessErr = REM_ACCESS_ERR,
        /// Remote operation error.
        RemOpErr = REM_OP_ERR,
        /// Transport retries exceeded (no ACK from the peer).
        RetryExcErr = RETRY_EXC_ERR,
        /// RNR retries exceeded (no receive posted at the peer).
        RnrRetryExcErr = RNR_RETRY_EXC_ERR,
        /// Local RDD violation.
        LocRddViolErr = LOC_RDD_VIOL_ERR,
        /// Remote invalid RD request.
        RemInvRdReqErr = REM_INV_RD_REQ_ERR,
        /// Remote aborted.
        RemAbortErr = REM_ABORT_ERR,
        /// Invalid EE context number.
        InvEecnErr = INV_EECN_ERR,
        /// Invalid EE context state.
        InvEecStateErr = INV_EEC_STATE_ERR,
        /// Fatal error.
        FatalErr = FATAL_ERR,
        /// Response timeout.
        RespTimeoutErr = RESP_TIMEOUT_ERR,
        /// Any other error.
        GeneralErr = GENERAL_ERR,
    }
}

wc_enum! {
    /// `enum ibv_wc_opcode` (the ones RC produces).
    WcOpcode: wc_opcode {
        /// A SEND or SEND with immediate completed.
        Send = SEND,
        /// An RDMA WRITE (with or without immediate) completed.
        RdmaWrite = RDMA_WRITE,
        /// An RDMA READ completed.
        RdmaRead = RDMA_READ,
        /// A compare-and-swap completed.
        CompSwap = COMP_SWAP,
        /// A fetch-and-add completed.
        FetchAdd = FETCH_ADD,
        /// A SEND arrived in a receive.
        Recv = RECV,
        /// An RDMA WRITE with immediate consumed a receive.
        RecvRdmaWithImm = RECV_RDMA_WITH_IMM,
    }
}

impl WcStatus {
    /// The status rdma-core's mlx5 provider reports for an error CQE's
    /// syndrome (`mlx5_handle_error_cqe`); unknown syndromes are
    /// `IBV_WC_GENERAL_ERR`.
    pub(crate) fn from_syndrome(syndrome: u8) -> WcStatus {
        match Syndrome::from_u8(syndrome) {
            Some(Syndrome::LocalLength) => WcStatus::LocLenErr,
            Some(Syndrome::LocalQpOp) => WcStatus::LocQpOpErr,
            Some(Syndrome::LocalProt) => WcStatus::LocProtErr,
            Some(Syndrome::WrFlush) => WcStatus::WrFlushErr,
            Some(Syndrome::MwBind) => WcStatus::MwBindErr,
            Some(Syndrome::BadResp) => WcStatus::BadRespErr,
            Some(Syndrome::LocalAccess) => WcStatus::LocAccessErr,
            Some(Syndrome::RemoteInvalReq) => WcStatus::RemInvReqErr,
            Some(Syndrome::RemoteAccess) => WcStatus::RemAccessErr,
            Some(Syndrome::RemoteOp) => WcStatus::RemOpErr,
            Some(Syndrome::TransportRetryExc) => WcStatus::RetryExcErr,
            Some(Syndrome::RnrRetryExc) => WcStatus::RnrRetryExcErr,
            Some(Syndrome::RemoteAborted) => WcStatus::RemAbortErr,
            None => WcStatus::GeneralErr,
        }
    }
}

impl WcOpcode {
    /// The opcode of a requester completion, from the WQE opcode the CQE
    /// echoes (`sop_drop_qpn >> 24`), as rdma-core's `handle_good_req` does.
    pub(crate) fn from_wqe_opcode(op: u8) -> Option<WcOpcode> {
        Some(match WqeOpcode::from_u8(op)? {
            WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm => WcOpcode::RdmaWrite,
            WqeOpcode::Send | WqeOpcode::SendImm | WqeOpcode::SendInval => WcOpcode::Send,
            WqeOpcode::RdmaRead => WcOpcode::RdmaRead,
            WqeOpcode::AtomicCs | WqeOpcode::AtomicMaskedCs => WcOpcode::CompSwap,
            WqeOpcode::AtomicFa | WqeOpcode::AtomicMaskedFa => WcOpcode::FetchAdd,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_syndrome_maps_to_its_own_status() {
        let mut seen = std::collections::HashSet::new();
        for s in Syndrome::ALL {
            let st = WcStatus::from_syndrome(*s as u8);
            assert_ne!(st, WcStatus::Success);
            assert_ne!(st, WcStatus::GeneralErr, "{s:?}");
            assert!(
                seen.insert(st),
                "{s:?} maps to a status another syndrome has"
            );
        }
        assert_eq!(WcStatus::from_syndrome(0x77), WcStatus::GeneralErr);
        assert_eq!(WcStatus::from_raw(5), Some(WcStatus::WrFlushErr));
        assert_eq!(WcStatus::WrFlushErr.name(), "IBV_WC_WR_FLUSH_ERR");
        assert_eq!(WcStatus::from_raw(99), None);
    }

    #[test]
    fn requester_opcodes() {
        assert_eq!(
            WcOpcode::from_wqe_opcode(WqeOpcode::RdmaWriteImm as u8),
            Some(WcOpcode::RdmaWrite)
        );
        assert_eq!(
            WcOpcode::from_wqe_opcode(WqeOpcode::AtomicFa as u8),
            Some(WcOpcode::FetchAdd)
        );
        assert_eq!(WcOpcode::from_wqe_opcode(WqeOpcode::Nop as u8), None);
        assert_eq!(WcOpcode::from_raw(129), Some(WcOpcode::RecvRdmaWithImm));
    }
}
