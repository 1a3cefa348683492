//! The work-request level over the direct (mlx5) data path: WQEs built by
//! [`SendQueue`], receives in [`RecvQueue`] / [`Srq`], CQEs parsed by
//! [`CqRing`] and turned into [`Wc`]s the way rdma-core's mlx5 provider does.

use std::collections::HashMap;

use super::{PostError, SendOp, SendWr, TmWc, Wc, WcOpcode, WcStatus};
use crate::cq::{Completion, CompletionSource, CqRing};
use crate::device::{Cq, DeviceError, Qp, QpCaps, SrqHandle, TmSrqHandle};
use crate::prm::CqeOpcode;
use crate::rq::{RecvQueue, RqError, Srq};
use crate::sq::{Payload, SendQueue, Sge, SqConfig, SqError};
use crate::tm::{is_tm_cqe, TmEvent, TmSrq};
use crate::wqe_table::{OrderedDense, OrderedRecv, UnorderedRecv};

/// What a posted WQE remembers.
struct Pending {
    wr_id: u64,
    signaled: bool,
}

struct DirectQp {
    sq: SendQueue<OrderedDense<Pending>>,
    rq: Option<RecvQueue<OrderedRecv<u64>>>,
    srq: Option<usize>,
}

/// An SRQ and its posting side.
type SrqPart = (SrqHandle, Srq<UnorderedRecv<u64>>);

/// A TM-SRQ: its list, its SRQ (an index into `srqs`) and its CQ.
struct Tm {
    tm: TmSrq<u64>,
    srq: usize,
    cq: usize,
}

/// The direct path's queues of one domain.
#[derive(Default)]
pub(super) struct Queues {
    cqs: Vec<(Cq, CqRing)>,
    srqs: Vec<SrqPart>,
    qps: Vec<DirectQp>,
    tms: Vec<Tm>,
}

fn sq_err(e: SqError) -> PostError {
    match e {
        SqError::Full => PostError::Full,
        e => PostError::Invalid(e.to_string()),
    }
}

fn rq_err(e: RqError) -> PostError {
    match e {
        RqError::Full => PostError::Full,
        e => PostError::Invalid(e.to_string()),
    }
}

impl Queues {
    pub(super) fn add_cq(&mut self, cq: Cq) -> Result<usize, DeviceError> {
        let ring = cq.ring()?;
        self.cqs.push((cq, ring));
        Ok(self.cqs.len() - 1)
    }

    pub(super) fn add_srq(&mut self, h: SrqHandle) -> Result<usize, DeviceError> {
        let srq = h.srq()?;
        self.srqs.push((h, srq));
        Ok(self.srqs.len() - 1)
    }

    pub(super) fn cq(&self, i: usize) -> Option<Cq> {
        self.cqs.get(i).map(|c| c.0.clone())
    }

    pub(super) fn srq(&self, i: usize) -> Option<SrqHandle> {
        self.srqs.get(i).map(|s| s.0.clone())
    }

    pub(super) fn add_qp(
        &mut self,
        qp: &Qp,
        srq: Option<usize>,
        caps: &QpCaps,
    ) -> Result<(), DeviceError> {
        let sq = qp.send_queue(SqConfig {
            // Completions only where asked (and where the ring needs one).
            signal_interval: 0,
            max_inline: caps.max_inline as usize,
            ..SqConfig::default()
        })?;
        let rq = match srq {
            Some(_) => None,
            None => Some(qp.recv_queue()?),
        };
        self.qps.push(DirectQp { sq, rq, srq });
        Ok(())
    }

    pub(super) fn post_send(&mut self, qp: usize, wr: &SendWr<'_>) -> Result<(), PostError> {
        let sq = &mut self.qps[qp].sq;
        let (raddr, rkey) = wr.remote;
        let data = Payload::Sges(wr.sges);
        let b = match wr.op {
            SendOp::Write => sq.write(raddr, rkey, data),
            SendOp::WriteImm(imm) => sq.write_imm(raddr, rkey, imm, data),
            SendOp::Send => sq.send(data),
            SendOp::SendImm(imm) => sq.send_imm(imm, data),
            SendOp::Read => sq.read(raddr, rkey, wr.sges),
            SendOp::CompSwap { compare, swap } => {
                sq.atomic_cs(raddr, rkey, compare, swap, wr.sges[0])
            }
            SendOp::FetchAdd(add) => sq.atomic_fa(raddr, rkey, add, wr.sges[0]),
        }
        .map_err(sq_err)?;
        let b = if wr.fence { b.fence() } else { b };
        let b = if wr.signaled { b.signaled() } else { b };
        b.post(Pending {
            wr_id: wr.wr_id,
            signaled: wr.signaled,
        });
        sq.ring_doorbell();
        Ok(())
    }

    pub(super) fn post_recv(
        &mut self,
        qp: usize,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result<(), PostError> {
        let Some(rq) = self.qps[qp].rq.as_mut() else {
            return Err(PostError::Invalid(
                "the QP receives from an SRQ; post there".into(),
            ));
        };
        rq.post(sges, wr_id).map_err(rq_err)?;
        rq.ring_doorbell();
        Ok(())
    }

    pub(super) fn post_srq_recv(
        &mut self,
        srq: usize,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result<(), PostError> {
        let Some((_, s)) = self.srqs.get_mut(srq) else {
            return Err(PostError::NoSuch("SRQ"));
        };
        s.post(sges, wr_id).map_err(rq_err)?;
        s.ring_doorbell();
        Ok(())
    }

    pub(super) fn poll(
        &mut self,
        cq: usize,
        max: usize,
        by_qpn: &HashMap<u32, usize>,
        out: &mut Vec<Wc>,
    ) -> Result<(), PostError> {
        let Queues { cqs, srqs, qps, .. } = self;
        let Some((_, ring)) = cqs.get_mut(cq) else {
            return Err(PostError::NoSuch("CQ"));
        };
        ring.poll(max, |c| {
            wc_of(c, (qps, srqs, by_qpn), &mut |wc| out.push(wc))
        });
        Ok(())
    }

    /// Adds TM-SRQ `h` whose completions go to CQ `cq`: its SRQ joins the
    /// domain's SRQs. Returns the TM-SRQ's and the SRQ's indexes.
    pub(super) fn add_tm(
        &mut self,
        h: TmSrqHandle,
        cq: usize,
    ) -> Result<(usize, usize), DeviceError> {
        let tm = h.tm_srq()?;
        let srq = self.add_srq(h.srq())?;
        self.tms.push(Tm { tm, srq, cq });
        Ok((self.tms.len() - 1, srq))
    }

    /// TM-SRQ `i`'s list.
    pub(super) fn tm(&mut self, i: usize) -> Option<&mut TmSrq<u64>> {
        self.tms.get_mut(i).map(|t| &mut t.tm)
    }

    /// Polls up to `max` CQEs of TM-SRQ `tm`'s CQ: tag-matching ones as
    /// events (with the SRQ WQE's `wr_id` for a message that landed in
    /// one), the others as work completions.
    pub(super) fn poll_tm(
        &mut self,
        tm: usize,
        max: usize,
        by_qpn: &HashMap<u32, usize>,
        out: &mut Vec<TmWc>,
    ) -> Result<(), PostError> {
        let Queues {
            cqs,
            srqs,
            qps,
            tms,
        } = self;
        let Some(t) = tms.get_mut(tm) else {
            return Err(PostError::NoSuch("TM-SRQ"));
        };
        let Some((_, ring)) = cqs.get_mut(t.cq) else {
            return Err(PostError::NoSuch("CQ"));
        };
        let mut bad = None;
        ring.poll(max, |c| {
            if !is_tm_cqe(c) {
                return wc_of(c, (qps, srqs, by_qpn), &mut |wc| out.push(TmWc::Wc(wc)));
            }
            match t.tm.complete(c) {
                Ok(event) => {
                    let srq_wr_id = match event {
                        TmEvent::Unexpected { .. } | TmEvent::NoTag { .. } => {
                            srqs.get_mut(t.srq).and_then(|(_, s)| s.take(c))
                        }
                        _ => None,
                    };
                    out.push(TmWc::Tm { event, srq_wr_id });
                }
                Err(e) => bad = Some(e),
            }
        });
        bad.map_or(Ok(()), |e| Err(PostError::Invalid(e.to_string())))
    }
}

/// The work completion of CQE `c`, handed to `out` (none for a CQE that
/// names no WQE of the domain, or an unsignaled one).
fn wc_of(
    c: &Completion<'_>,
    (qps, srqs, by_qpn): (&mut [DirectQp], &mut [SrqPart], &HashMap<u32, usize>),
    out: &mut dyn FnMut(Wc),
) {
    let Some(q) = by_qpn.get(&c.qpn()).and_then(|&i| qps.get_mut(i)) else {
        return;
    };
    let status = match c.syndrome_raw() {
        None => WcStatus::Success,
        Some(s) => WcStatus::from_syndrome(s),
    };
    let mut wc = Wc {
        wr_id: 0,
        status,
        opcode: None,
        byte_len: 0,
        imm: None,
        qp_num: c.qpn(),
        vendor_err: c.vendor_syndrome().map_or(0, u32::from),
    };
    if c.is_requester() {
        if status == WcStatus::Success {
            wc.opcode = WcOpcode::from_wqe_opcode(c.s_wqe_opcode());
            wc.byte_len = match wc.opcode {
                Some(WcOpcode::RdmaRead) => c.byte_cnt(),
                Some(WcOpcode::CompSwap | WcOpcode::FetchAdd) => 8,
                _ => 0,
            };
        }
        // Unsignaled WQEs before the named one completed silently.
        q.sq.complete(c, |p, named| {
            if named.is_some() && (p.signaled || status != WcStatus::Success) {
                out(Wc {
                    wr_id: p.wr_id,
                    ..wc
                });
            }
        });
        return;
    }
    let wr_id = match (q.srq, q.rq.as_mut()) {
        (Some(s), _) => srqs.get_mut(s).and_then(|(_, srq)| srq.take(c)),
        (None, Some(rq)) => {
            let mut id = None;
            rq.complete(c, |e, _| id = Some(e));
            id
        }
        (None, None) => None,
    };
    let Some(wr_id) = wr_id else { return };
    if status == WcStatus::Success {
        wc.byte_len = c.byte_cnt();
        match CqeOpcode::from_u8(c.opcode_raw()) {
            Some(CqeOpcode::RespWrImm) => {
                wc.opcode = Some(WcOpcode::RecvRdmaWithImm);
                wc.imm = Some(c.imm());
            }
            Some(CqeOpcode::RespSendImm) => {
                wc.opcode = Some(WcOpcode::Recv);
                wc.imm = Some(c.imm());
            }
            _ => wc.opcode = Some(WcOpcode::Recv),
        }
    }
    out(Wc { wr_id, ..wc });
}
