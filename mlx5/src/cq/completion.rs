//! One completion, as handed to the consumer.

use crate::prm::{op_own, Cqe64, CqeFormat, CqeOpcode, ErrCqe};

/// A completion: a view of a 64-byte CQE in CQ memory, or of the CQE expanded
/// from a mini CQE, plus any data the NIC scattered into the CQE. Valid until
/// the next poll.
#[derive(Clone, Copy)]
pub struct Completion<'a> {
    cqe: &'a [u8; 64],
    scatter: &'a [u8],
}

impl std::fmt::Debug for Completion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Completion");
        d.field("opcode", &self.opcode_raw())
            .field("qpn", &self.qpn())
            .field("wqe_counter", &self.wqe_counter());
        if self.is_error() {
            d.field("syndrome", &self.syndrome_raw());
        } else {
            d.field("byte_cnt", &self.byte_cnt())
                .field("imm", &self.imm());
        }
        d.finish()
    }
}

impl<'a> Completion<'a> {
    /// Wraps CQE bytes and scattered data.
    #[inline(always)]
    pub fn new(cqe: &'a [u8; 64], scatter: &'a [u8]) -> Self {
        Self { cqe, scatter }
    }

    /// The CQE's 64 bytes.
    #[inline(always)]
    pub fn bytes(&self) -> &'a [u8; 64] {
        self.cqe
    }

    /// The CQE as a [`Cqe64`] view.
    #[inline(always)]
    pub fn cqe(&self) -> Cqe64<&'a [u8]> {
        Cqe64::new_unchecked(&self.cqe[..])
    }

    /// The CQE as an [`ErrCqe`] view (meaningful when [`is_error`](Self::is_error)).
    #[inline(always)]
    pub fn err_cqe(&self) -> ErrCqe<&'a [u8]> {
        ErrCqe::new_unchecked(&self.cqe[..])
    }

    /// Raw opcode nibble.
    #[inline(always)]
    pub fn opcode_raw(&self) -> u8 {
        self.cqe[Cqe64::<()>::OP_OWN_OFFSET] >> op_own::OPCODE_SHIFT
    }

    /// Opcode, if known.
    #[inline(always)]
    pub fn opcode(&self) -> Option<CqeOpcode> {
        CqeOpcode::from_u8(self.opcode_raw())
    }

    /// True for REQ_ERR and RESP_ERR.
    #[inline(always)]
    pub fn is_error(&self) -> bool {
        matches!(self.opcode_raw(), 13 | 14)
    }

    /// True for a requester completion (REQ or REQ_ERR).
    #[inline(always)]
    pub fn is_requester(&self) -> bool {
        matches!(self.opcode_raw(), 0 | 13)
    }

    /// Error syndrome, when [`is_error`](Self::is_error).
    #[inline(always)]
    pub fn syndrome_raw(&self) -> Option<u8> {
        self.is_error().then(|| self.err_cqe().syndrome_raw())
    }

    /// Vendor error syndrome, when [`is_error`](Self::is_error).
    #[inline(always)]
    pub fn vendor_syndrome(&self) -> Option<u8> {
        self.is_error().then(|| self.err_cqe().vendor_err_synd())
    }

    /// QP number (the same offset in normal and error CQEs).
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.cqe().qpn()
    }

    /// WQE counter (the same offset in normal and error CQEs).
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        self.cqe().wqe_counter()
    }

    /// Requester completions: opcode of the completed WQE.
    #[inline(always)]
    pub fn s_wqe_opcode(&self) -> u8 {
        self.cqe().s_wqe_opcode()
    }

    /// Byte count.
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        self.cqe().byte_cnt()
    }

    /// Immediate (host value; see [`CtrlSeg::set_imm`](crate::prm::CtrlSeg::set_imm)).
    /// Not carried by mini CQEs: in an expanded completion it is the title's.
    #[inline(always)]
    pub fn imm(&self) -> u32 {
        self.cqe().imm_inval_pkey()
    }

    /// SRQ number (receive completions on an SRQ).
    #[inline(always)]
    pub fn srqn(&self) -> u32 {
        self.cqe().srqn()
    }

    /// Format of the CQE as written by the NIC (expanded completions report
    /// [`CqeFormat::Plain`]).
    #[inline(always)]
    pub fn format(&self) -> CqeFormat {
        self.cqe().format()
    }

    /// Data the NIC scattered into the CQE (formats 1 and 2), else empty.
    #[inline(always)]
    pub fn scatter_data(&self) -> &'a [u8] {
        self.scatter
    }
}
