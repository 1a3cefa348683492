//! The verbs data path: work requests through the provider's own `post_send`
//! / `post_srq_recv` / `poll_cq` (kernel soft-RoCE, or any RDMA NIC that is
//! not mlx5), with rdma-core's `ibv_send_wr` and `ibv_wc` as the formats.
//!
//! Send queues number their work requests: `wr_id` is a per-queue sequence,
//! so any completion — the signaled one every `signal_interval` requests, a
//! READ's, or a flush error's — retires every request up to it, as RC orders
//! completions. Outstanding requests are counted against the queue size here,
//! so a full queue is [`QueueError::Full`] before the provider would refuse it.

use std::collections::VecDeque;

use mlx5::device::{Cq, Qp, SrqHandle};
use mlx5::fastmap::FastMap;

use super::rc::{self, RcShared, RcSq, SIGNAL_INTERVAL};
use super::{Objects, Owner, Reach};
use crate::info::EndpointInfo;
use mlx5::hw::verbs::{ibv_wc, RdmaOp};
use mlx5::hw::{HwError, VerbsCq, VerbsQp, VerbsSrq};

use super::{QueueError, Sge, Transport, WorkCompletion};
use crate::error::{SetupError, WaitError};

/// Completions read from the provider per `poll_cq` call.
const POLL_BATCH: usize = 32;

/// The verbs data path, for RDMA devices that are not mlx5 (pick it with
/// [`mlx5::wr::DataPath::of`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verbs;

impl WorkCompletion for ibv_wc {
    #[inline(always)]
    fn qpn(&self) -> u32 {
        self.qp_num
    }
    #[inline(always)]
    fn byte_len(&self) -> u32 {
        self.byte_len
    }
    /// The `ibv_wc_status`.
    #[inline(always)]
    fn error(&self) -> Option<u32> {
        (self.status != 0).then_some(self.status)
    }
}

/// An endpoint's send queue on the verbs path.
#[derive(Debug)]
pub struct VerbsSq {
    qp: VerbsQp,
    /// Requests between two signaled ones (at most half the queue).
    interval: u32,
    /// Unsignaled requests posted since the last signaled one.
    unsignaled: u32,
    /// Capacity: outstanding requests never exceed it.
    size: u64,
    /// `wr_id` of the next request.
    next: u64,
    /// Every request below this has completed.
    retired: u64,
    /// `wr_id`s of outstanding READs, oldest first (capacity `size`, never
    /// grown).
    reads: VecDeque<u64>,
}

/// A CQ on the verbs path with its completion buffer.
pub struct VerbsRecvCq {
    cq: VerbsCq,
    wcs: Box<[ibv_wc]>,
}

impl std::fmt::Debug for VerbsRecvCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsRecvCq")
            .field("cq", &self.cq)
            .finish_non_exhaustive()
    }
}

/// The receive side on the verbs path: the receive CQ and the SRQ whose
/// receives it completes.
#[derive(Debug)]
pub struct VerbsRecv {
    cq: VerbsRecvCq,
    srq: VerbsSrq,
}

/// The send CQ on the verbs path: a CQ, its buffer, and the QPN → endpoint
/// index table.
#[derive(Debug)]
pub struct VerbsSendCq {
    cq: VerbsRecvCq,
    by_qpn: FastMap<u32>,
}

impl VerbsRecvCq {
    fn new(cq: &Cq) -> Result<Self, SetupError> {
        Ok(VerbsRecvCq {
            cq: cq.verbs()?,
            wcs: vec![ibv_wc::default(); POLL_BATCH].into_boxed_slice(),
        })
    }

    /// Polls up to `max` completions, `POLL_BATCH` at a time, calling `f`.
    /// A failing `poll_cq` (the CQ is broken) reads as empty.
    #[inline(always)]
    fn poll(&mut self, max: usize, mut f: impl FnMut(&ibv_wc)) -> usize {
        let mut done = 0;
        while done < max {
            let want = (max - done).min(self.wcs.len());
            let n = self.cq.poll(&mut self.wcs[..want]).unwrap_or(0);
            for w in &self.wcs[..n] {
                f(w);
            }
            done += n;
            if n < want {
                break;
            }
        }
        done
    }
}

impl VerbsSq {
    /// The send queue of `qp` (with `sq_size` entries), requesting a
    /// completion at least every `signal_interval` work requests.
    fn new(qp: &Qp, signal_interval: u32, sq_size: u32) -> Result<Self, SetupError> {
        if sq_size < 2 {
            return Err(SetupError::Invalid(format!(
                "send queue of {sq_size} entries (at least 2)"
            )));
        }
        Ok(VerbsSq {
            qp: qp.verbs()?,
            interval: signal_interval.clamp(1, sq_size / 2),
            unsignaled: 0,
            size: u64::from(sq_size),
            next: 0,
            retired: 0,
            reads: VecDeque::with_capacity(sq_size as usize),
        })
    }
}

impl Transport for Verbs {
    type Cqe<'a> = ibv_wc;
    type Sq = RcSq<VerbsSq>;
    type RecvCq = VerbsRecv;
    type SendCq = VerbsSendCq;
    type Shared = RcShared;

    fn recv_cq(cq: &Cq, srq: &SrqHandle) -> Result<Self::RecvCq, SetupError> {
        Ok(VerbsRecv {
            cq: VerbsRecvCq::new(cq)?,
            srq: srq.verbs()?,
        })
    }

    fn send_cq(cq: &Cq) -> Result<Self::SendCq, SetupError> {
        Ok(VerbsSendCq {
            cq: VerbsRecvCq::new(cq)?,
            by_qpn: FastMap::new(),
        })
    }

    fn shared(_: &Objects<'_>) -> Result<RcShared, SetupError> {
        Ok(RcShared::default())
    }

    fn open(
        sh: &mut RcShared,
        send_cq: &mut Self::SendCq,
        o: &Objects<'_>,
        idx: u32,
        _gen: u32,
    ) -> Result<(Self::Sq, Reach), SetupError> {
        let (sq, reach) = rc::open(sh, o, idx, |qp| {
            VerbsSq::new(qp, SIGNAL_INTERVAL, o.sq_size)
        })?;
        send_cq.by_qpn.insert(reach.conn.qpn, idx);
        Ok((sq, reach))
    }

    fn connect(
        _: &mut RcShared,
        sq: &mut Self::Sq,
        remote: &EndpointInfo,
    ) -> Result<(), SetupError> {
        rc::connect(sq, remote)
    }

    fn close(_: &mut RcShared, sq: &mut Self::Sq) {
        rc::close(sq);
    }

    fn remove(sh: &mut RcShared, send_cq: &mut Self::SendCq, sq: Self::Sq) {
        let qpn = rc::remove(sh, sq);
        send_cq.by_qpn.remove(qpn);
    }

    /// Posts a zero-length receive at once (receives need no doorbell on
    /// verbs); false when the provider refuses it (the SRQ is full).
    #[inline(always)]
    fn srq_post(cq: &mut Self::RecvCq) -> bool {
        cq.srq.post(0, &[]).is_ok()
    }

    #[inline(always)]
    fn srq_ring(_cq: &mut Self::RecvCq) {}

    /// Every completion on the receive CQ, error or not, returns one of the
    /// SRQ's receives: verbs reports a receive once, when the device is done
    /// with it (a QP's flush never touches an SRQ's receives).
    #[inline(always)]
    fn poll_recv(cq: &mut Self::RecvCq, max: usize, mut f: impl FnMut(&ibv_wc, bool)) -> usize {
        cq.cq.poll(max, |c| f(c, true))
    }

    #[inline(always)]
    fn recv_owner(sh: &RcShared, c: &ibv_wc) -> Option<u32> {
        sh.slot(c.qp_num)
    }

    #[inline(always)]
    fn recv_from_peer(_: &Self::Sq, _: &ibv_wc) -> bool {
        true
    }

    #[inline(always)]
    fn poll_send(
        cq: &mut Self::SendCq,
        sh: &mut RcShared,
        max: usize,
        mut f: impl FnMut(&mut RcShared, u32, &ibv_wc),
    ) -> usize {
        let VerbsSendCq { cq, by_qpn } = cq;
        cq.poll(max, |w| {
            if let Some(&i) = by_qpn.get(w.qp_num) {
                f(sh, i, w);
            }
        })
    }

    #[inline(always)]
    fn send_owner(_: &mut RcShared, reg: u32, _: &ibv_wc) -> Option<Owner> {
        Some(Owner {
            idx: reg,
            gen: None,
        })
    }

    #[inline]
    fn arm_recv(cq: &mut Self::RecvCq) -> Result<(), WaitError> {
        Ok(cq.cq.cq.req_notify(false)?)
    }

    #[inline]
    fn arm_send(cq: &mut Self::SendCq) -> Result<(), WaitError> {
        Ok(cq.cq.cq.req_notify(false)?)
    }

    #[inline(always)]
    fn post_write_imm(
        _: &mut RcShared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), QueueError> {
        let sq = &mut sq.q;
        let signaled = sq.unsignaled + 1 >= sq.interval;
        sq.post(RdmaOp::WriteImm(imm), local, raddr, rkey, signaled)
    }

    #[inline(always)]
    fn post_read(
        _: &mut RcShared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
    ) -> Result<(), QueueError> {
        let sq = &mut sq.q;
        let id = sq.next;
        sq.post(RdmaOp::Read, local, raddr, rkey, true)?;
        sq.reads.push_back(id);
        Ok(())
    }

    /// Requests went to the provider as they were posted.
    #[inline(always)]
    fn ring(_: &mut RcShared, _sq: &mut Self::Sq) {}

    #[inline(always)]
    fn sq_complete(_: &mut RcShared, sq: Option<&mut Self::Sq>, c: &ibv_wc) -> bool {
        let Some(RcSq { q: sq, .. }) = sq else {
            return false;
        };
        // A completion names the request it completes; every earlier one is
        // done too (RC completes in order). An id never posted is ignored.
        if c.wr_id >= sq.next || c.wr_id < sq.retired {
            return false;
        }
        sq.retired = c.wr_id + 1;
        let mut read = false;
        while sq.reads.front().is_some_and(|&r| r <= c.wr_id) {
            sq.reads.pop_front();
            read = true;
        }
        read
    }
}

impl VerbsSq {
    /// Posts one request of one SGE, numbered `self.next`.
    #[inline(always)]
    fn post(
        &mut self,
        op: RdmaOp,
        local: Sge,
        raddr: u64,
        rkey: u32,
        signaled: bool,
    ) -> Result<(), QueueError> {
        if self.next - self.retired >= self.size {
            return Err(QueueError::Full);
        }
        // ENOMEM: the provider's queue is full (retry after polling). Anything
        // else (EINVAL, a QP the provider will not post to) cannot succeed
        // later: the endpoint closes with the errno.
        self.qp
            .post_rdma(self.next, op, local, raddr, rkey, signaled)
            .map_err(|e| match e {
                HwError::Verb { errno, .. }
                    if std::io::Error::from_raw_os_error(errno).kind()
                        == std::io::ErrorKind::OutOfMemory =>
                {
                    QueueError::Full
                }
                HwError::Verb { errno, .. } => QueueError::Failed(errno as u32),
                _ => QueueError::Failed(u32::MAX),
            })?;
        self.next += 1;
        self.unsignaled = if signaled { 0 } else { self.unsignaled + 1 };
        Ok(())
    }
}
