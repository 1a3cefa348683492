//! The work-request level over the verbs data path: rdma-core's own
//! `ibv_send_wr` / `ibv_recv_wr` / `ibv_wc` through the provider's entry points.

use super::{PostError, SendOp, SendWr, Wc, WcOpcode, WcStatus};
use crate::device::{Cq, DeviceError, Qp, SrqHandle};
use crate::hw::ffi::{
    ibv_atomic_wr, ibv_rdma_wr, ibv_send_wr, ibv_sge, ibv_wc, send_flags, wc_opcode, wr_opcode,
    IBV_WC_WITH_IMM,
};
use crate::hw::{HwError, VerbsCq, VerbsQp, VerbsSrq};
use crate::sq::Sge;

/// Most SGEs one work request carries here.
const MAX_SGE: usize = 16;

/// The verbs path's queues of one domain.
#[derive(Default)]
pub(super) struct Queues {
    cqs: Vec<(Cq, VerbsCq)>,
    srqs: Vec<(SrqHandle, VerbsSrq)>,
    qps: Vec<VerbsQp>,
    wcs: Vec<ibv_wc>,
}

fn post_err(e: HwError) -> PostError {
    match e {
        HwError::Verb { errno, .. } if errno == libc::ENOMEM => PostError::Full,
        e => PostError::Device(e.into()),
    }
}

fn sges(list: &[Sge], out: &mut [ibv_sge; MAX_SGE]) -> Result<usize, PostError> {
    if list.len() > MAX_SGE {
        return Err(PostError::Invalid(format!(
            "{} SGEs (at most {MAX_SGE})",
            list.len()
        )));
    }
    for (o, s) in out.iter_mut().zip(list) {
        *o = ibv_sge {
            addr: s.addr,
            length: s.len,
            lkey: s.lkey,
        };
    }
    Ok(list.len())
}

impl Queues {
    pub(super) fn add_cq(&mut self, cq: Cq) -> Result<usize, DeviceError> {
        let v = cq.verbs()?;
        self.cqs.push((cq, v));
        Ok(self.cqs.len() - 1)
    }

    pub(super) fn add_srq(&mut self, h: SrqHandle) -> Result<usize, DeviceError> {
        let v = h.verbs()?;
        self.srqs.push((h, v));
        Ok(self.srqs.len() - 1)
    }

    pub(super) fn cq(&self, i: usize) -> Option<Cq> {
        self.cqs.get(i).map(|c| c.0.clone())
    }

    pub(super) fn srq(&self, i: usize) -> Option<SrqHandle> {
        self.srqs.get(i).map(|s| s.0.clone())
    }

    pub(super) fn add_qp(&mut self, qp: &Qp) -> Result<(), DeviceError> {
        self.qps.push(qp.verbs()?);
        Ok(())
    }

    pub(super) fn post_send(&mut self, qp: usize, wr: &SendWr<'_>) -> Result<(), PostError> {
        let mut list = [ibv_sge::default(); MAX_SGE];
        let n = sges(wr.sges, &mut list)?;
        let (raddr, rkey) = wr.remote;
        let mut w = ibv_send_wr {
            wr_id: wr.wr_id,
            ..Default::default()
        };
        let rdma = ibv_rdma_wr {
            remote_addr: raddr,
            rkey,
        };
        let atomic = |compare_add, swap| ibv_atomic_wr {
            remote_addr: raddr,
            compare_add,
            swap,
            rkey,
        };
        let (opcode, imm) = match wr.op {
            SendOp::Write => (wr_opcode::RDMA_WRITE, 0),
            SendOp::WriteImm(imm) => (wr_opcode::RDMA_WRITE_WITH_IMM, imm),
            SendOp::Send => (wr_opcode::SEND, 0),
            SendOp::SendImm(imm) => (wr_opcode::SEND_WITH_IMM, imm),
            SendOp::Read => (wr_opcode::RDMA_READ, 0),
            SendOp::CompSwap { .. } => (wr_opcode::ATOMIC_CMP_AND_SWP, 0),
            SendOp::FetchAdd(_) => (wr_opcode::ATOMIC_FETCH_AND_ADD, 0),
        };
        w.opcode = opcode;
        w.imm_data = imm.to_be();
        match wr.op {
            SendOp::CompSwap { compare, swap } => w.wr.atomic = atomic(compare, swap),
            SendOp::FetchAdd(add) => w.wr.atomic = atomic(add, 0),
            _ => w.wr.rdma = rdma,
        }
        if wr.signaled {
            w.send_flags |= send_flags::SIGNALED;
        }
        if wr.fence {
            w.send_flags |= send_flags::FENCE;
        }
        self.qps[qp].post_send(&mut w, &list[..n]).map_err(post_err)
    }

    pub(super) fn post_recv(&mut self, qp: usize, wr_id: u64, s: &[Sge]) -> Result<(), PostError> {
        let mut list = [ibv_sge::default(); MAX_SGE];
        let n = sges(s, &mut list)?;
        self.qps[qp].post_recv(wr_id, &list[..n]).map_err(post_err)
    }

    pub(super) fn post_srq_recv(
        &mut self,
        srq: usize,
        wr_id: u64,
        s: &[Sge],
    ) -> Result<(), PostError> {
        let mut list = [ibv_sge::default(); MAX_SGE];
        let n = sges(s, &mut list)?;
        let Some((_, v)) = self.srqs.get_mut(srq) else {
            return Err(PostError::NoSuch("SRQ"));
        };
        v.post(wr_id, &list[..n]).map_err(post_err)
    }

    pub(super) fn poll(
        &mut self,
        cq: usize,
        max: usize,
        out: &mut Vec<Wc>,
    ) -> Result<(), PostError> {
        let Some((_, v)) = self.cqs.get_mut(cq) else {
            return Err(PostError::NoSuch("CQ"));
        };
        self.wcs.resize(max.min(256), ibv_wc::default());
        let n = v
            .poll(&mut self.wcs)
            .map_err(|e| PostError::Device(e.into()))?;
        out.extend(self.wcs[..n].iter().map(to_wc));
        Ok(())
    }
}

/// A verbs work completion as a [`Wc`].
fn to_wc(w: &ibv_wc) -> Wc {
    let status = WcStatus::from_raw(w.status).unwrap_or(WcStatus::GeneralErr);
    let ok = status == WcStatus::Success;
    let opcode = if ok {
        WcOpcode::from_raw(w.opcode)
    } else {
        None
    };
    Wc {
        wr_id: w.wr_id,
        status,
        opcode,
        byte_len: match opcode {
            Some(
                WcOpcode::RdmaRead
                | WcOpcode::CompSwap
                | WcOpcode::FetchAdd
                | WcOpcode::Recv
                | WcOpcode::RecvRdmaWithImm,
            ) => w.byte_len,
            _ => 0,
        },
        // Verbs defines the immediate for receive completions (rxe also flags
        // it on the sender's completion of a *_WITH_IMM request).
        imm: (ok && w.opcode & wc_opcode::RECV != 0 && w.wc_flags & IBV_WC_WITH_IMM != 0)
            .then(|| u32::from_be(w.imm_data)),
        qp_num: w.qp_num,
        vendor_err: w.vendor_err,
    }
}
