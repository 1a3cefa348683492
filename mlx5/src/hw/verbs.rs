//! The verbs data path: for RDMA devices that are not mlx5 (kernel soft-RoCE
//! `rxe`, in particular), work requests go through the provider's own
//! `post_send` / `post_recv` / `post_srq_recv` / `poll_cq`, reached through the
//! context's ops table exactly as verbs.h's inline `ibv_post_send` and
//! `ibv_poll_cq` reach them.
//!
//! The structs passed are rdma-core's own (`ibv_send_wr`, `ibv_recv_wr`,
//! `ibv_wc`, checked by the ABI test); each queue is handed out once, like the
//! direct path's rings.

use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::Arc;

use super::device::{HwCq, HwQp, HwSrq};
use super::ffi::*;
use crate::sq::Sge;

/// rdma-core's `struct ibv_sge` and `struct ibv_wc`: the gather entries and
/// work completions of this API.
pub use super::ffi::{ibv_sge, ibv_wc};

/// An RDMA operation on one remote range (see [`VerbsQp::post_rdma`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaOp {
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with this immediate (host order; sent big-endian).
    WriteImm(u32),
    /// RDMA READ into the local buffer.
    Read,
}
use super::loader::HwError;

fn post_result(verb: &'static str, rc: c_int) -> Result<(), HwError> {
    // Providers return a positive errno (ENOMEM: the queue is full).
    match rc {
        0 => Ok(()),
        e => Err(HwError::Verb {
            verb,
            errno: e.abs(),
        }),
    }
}

/// One receive work request over `sges` (valid while `sges` is).
fn recv_wr(wr_id: u64, sges: &[ibv_sge]) -> ibv_recv_wr {
    ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: sges.as_ptr() as *mut ibv_sge,
        num_sge: sges.len() as c_int,
    }
}

/// A QP's send and receive queues on the verbs data path.
pub struct VerbsQp {
    _keep: Arc<dyn Send + Sync>,
    qp: NonNull<ibv_qp>,
    post_send: PostSendFn,
    post_recv: PostRecvFn,
    max_inline: u32,
}

// SAFETY: the QP is kept alive by `_keep`; providers allow posting from any
// thread (one at a time, which `&mut self` ensures).
unsafe impl Send for VerbsQp {}

impl std::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsQp").field("qpn", &self.qpn()).finish()
    }
}

impl VerbsQp {
    /// Takes `qp`'s data path (fails if the direct path or another `VerbsQp`
    /// already has it).
    pub fn new(qp: &HwQp) -> Result<VerbsQp, HwError> {
        let p = qp.take_verbs()?;
        Ok(VerbsQp {
            _keep: p.keep,
            qp: p.obj,
            post_send: p.entry.0,
            post_recv: p.entry.1,
            max_inline: qp.max_inline(),
        })
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: a live QP.
        unsafe { self.qp.as_ref() }.qp_num
    }

    /// Largest inline payload (`IBV_SEND_INLINE`) the QP takes.
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// Posts one send work request with `sges` as its gather list (`wr`'s own
    /// `sg_list`, `num_sge` and `next` are overwritten). The provider copies
    /// the request into its queue before returning; with `IBV_SEND_INLINE` it
    /// copies the data too, otherwise the device reads it later, within the
    /// registered regions the lkeys name.
    pub(crate) fn post_send(
        &mut self,
        wr: &mut ibv_send_wr,
        sges: &[ibv_sge],
    ) -> Result<(), HwError> {
        wr.sg_list = sges.as_ptr() as *mut ibv_sge;
        wr.num_sge = sges.len() as c_int;
        wr.next = std::ptr::null_mut();
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; `wr` and `sges` are valid for the call and the
        // chain ends here. The device only touches memory through lkeys/rkeys.
        post_result("ibv_post_send", unsafe {
            (self.post_send)(self.qp.as_ptr(), wr, &mut bad)
        })
    }

    /// Posts `op` between the local buffer `local` and `raddr`/`rkey` as work
    /// request `wr_id`, with a completion only if `signaled`.
    #[inline]
    pub fn post_rdma(
        &mut self,
        wr_id: u64,
        op: RdmaOp,
        local: Sge,
        raddr: u64,
        rkey: u32,
        signaled: bool,
    ) -> Result<(), HwError> {
        let (opcode, imm) = match op {
            RdmaOp::Write => (wr_opcode::RDMA_WRITE, 0),
            RdmaOp::WriteImm(imm) => (wr_opcode::RDMA_WRITE_WITH_IMM, imm),
            RdmaOp::Read => (wr_opcode::RDMA_READ, 0),
        };
        let mut wr = ibv_send_wr {
            wr_id,
            opcode,
            send_flags: if signaled { send_flags::SIGNALED } else { 0 },
            imm_data: imm.to_be(),
            ..Default::default()
        };
        wr.wr.rdma = ibv_rdma_wr {
            remote_addr: raddr,
            rkey,
        };
        let sge = [ibv_sge {
            addr: local.addr,
            length: local.len,
            lkey: local.lkey,
        }];
        self.post_send(&mut wr, &sge)
    }

    /// Posts a SEND (`imm` none) or SEND with immediate of `sges` as work
    /// request `wr_id`, with a completion only if `signaled`, and asking the
    /// responder for a solicited event if `solicited` (`IBV_SEND_SOLICITED`).
    pub fn post_send_msg(
        &mut self,
        wr_id: u64,
        imm: Option<u32>,
        sges: &[ibv_sge],
        signaled: bool,
        solicited: bool,
    ) -> Result<(), HwError> {
        let mut flags = 0;
        if signaled {
            flags |= send_flags::SIGNALED;
        }
        if solicited {
            flags |= send_flags::SOLICITED;
        }
        let mut wr = ibv_send_wr {
            wr_id,
            opcode: match imm {
                Some(_) => wr_opcode::SEND_WITH_IMM,
                None => wr_opcode::SEND,
            },
            send_flags: flags,
            imm_data: imm.unwrap_or(0).to_be(),
            ..Default::default()
        };
        self.post_send(&mut wr, sges)
    }

    /// Posts one receive of `sges` (on a QP with its own receive queue).
    pub fn post_recv(&mut self, wr_id: u64, sges: &[ibv_sge]) -> Result<(), HwError> {
        let mut wr = recv_wr(wr_id, sges);
        let mut bad = std::ptr::null_mut();
        // SAFETY: as for post_send.
        post_result("ibv_post_recv", unsafe {
            (self.post_recv)(self.qp.as_ptr(), &mut wr, &mut bad)
        })
    }
}

/// An SRQ on the verbs data path.
pub struct VerbsSrq {
    _keep: Arc<dyn Send + Sync>,
    srq: NonNull<ibv_srq>,
    post: PostSrqRecvFn,
}

// SAFETY: as for VerbsQp.
unsafe impl Send for VerbsSrq {}

impl std::fmt::Debug for VerbsSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsSrq").finish_non_exhaustive()
    }
}

impl VerbsSrq {
    /// Takes `srq`'s data path.
    pub fn new(srq: &HwSrq) -> Result<VerbsSrq, HwError> {
        let p = srq.take_verbs()?;
        Ok(VerbsSrq {
            _keep: p.keep,
            srq: p.obj,
            post: p.entry,
        })
    }

    /// Posts one receive of `sges` (none: a zero-length receive).
    pub fn post(&mut self, wr_id: u64, sges: &[ibv_sge]) -> Result<(), HwError> {
        let mut wr = recv_wr(wr_id, sges);
        let mut bad = std::ptr::null_mut();
        // SAFETY: as for VerbsQp::post_send.
        post_result("ibv_post_srq_recv", unsafe {
            (self.post)(self.srq.as_ptr(), &mut wr, &mut bad)
        })
    }
}

/// A CQ on the verbs data path.
pub struct VerbsCq {
    _keep: Arc<dyn Send + Sync>,
    cq: NonNull<ibv_cq>,
    poll: PollCqFn,
    req_notify: Option<ReqNotifyCqFn>,
}

// SAFETY: as for VerbsQp.
unsafe impl Send for VerbsCq {}

impl std::fmt::Debug for VerbsCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsCq").finish_non_exhaustive()
    }
}

impl VerbsCq {
    /// Takes `cq`'s data path.
    pub fn new(cq: &HwCq) -> Result<VerbsCq, HwError> {
        let p = cq.take_verbs()?;
        Ok(VerbsCq {
            _keep: p.keep,
            cq: p.obj,
            poll: p.entry.0,
            req_notify: p.entry.1,
        })
    }

    /// Arms the CQ (`ibv_req_notify_cq`): one completion event, at the next
    /// completion (`solicited_only` false) or the next solicited or error
    /// completion, to the channel the CQ was created on. Completions already
    /// in the CQ may not raise it (verbs leaves that to the provider): poll
    /// once more after arming, before waiting (see
    /// [`CqRing::arm`](crate::cq::CqRing::arm)).
    pub fn req_notify(&mut self, solicited_only: bool) -> Result<(), HwError> {
        let f = self.req_notify.ok_or(HwError::SymbolMissing {
            lib: "the device's provider".into(),
            symbol: "ibv_context_ops.req_notify_cq",
        })?;
        // SAFETY: a live CQ; the provider's own entry point.
        let rc = unsafe { f(self.cq.as_ptr(), c_int::from(solicited_only)) };
        post_result("ibv_req_notify_cq", rc)
    }

    /// Polls up to `out.len()` completions into `out`; returns how many.
    #[inline]
    pub fn poll(&mut self, out: &mut [ibv_wc]) -> Result<usize, HwError> {
        let n = out.len().min(c_int::MAX as usize) as c_int;
        // SAFETY: a live CQ; `out` holds `n` writable entries.
        let rc = unsafe { (self.poll)(self.cq.as_ptr(), n, out.as_mut_ptr()) };
        if rc < 0 {
            return Err(HwError::Verb {
                verb: "ibv_poll_cq",
                errno: -rc,
            });
        }
        Ok(rc as usize)
    }
}
