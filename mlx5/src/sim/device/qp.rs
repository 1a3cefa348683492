//! RC QPs and DC initiators (the QP-table entries with a send queue), their
//! state changes, and their queue memory for the data path.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::cq::SimCq;
use super::pd::SimPd;
use super::srq::SimSrq;
use super::SimContext;
use super::DCI_STREAM_CAPS;
use crate::rq::{RecvQueue, RqMemory};
use crate::sim::engine;
use crate::sim::fabric::pool::Range;
use crate::sim::fabric::FabricError;
use crate::sim::registry::{self, qp_state, LIVE, MAX_DEVS, MAX_QPS};
use crate::sq::{SendQueue, SqConfig, SqMemory};
use crate::types::error::DeviceError;
use crate::types::{
    ack_timeout_us, rnr_timer_us, ConnInfo, DciStreams, QpCaps, QpState, RtrAttr, RtsAttr,
};
use crate::wqe_table::{RecvTable, SendTable};

impl SimContext {
    /// Creates an RC QP on `pd` with the given CQs, on `srq` or on an RQ of its own.
    pub fn create_qp(
        &self,
        pd: &SimPd,
        send_cq: &SimCq,
        recv_cq: &SimCq,
        srq: Option<&SimSrq>,
        caps: &QpCaps,
    ) -> Result<SimQp, DeviceError> {
        self.create_queues(registry::qp_kind::RC, pd, (send_cq, recv_cq), srq, caps, 0)
    }

    /// Creates a DC initiator on `pd` with its completions on `send_cq`,
    /// `streams` within [`DCI_STREAM_CAPS`]. It has no receive queue; it
    /// goes RESET → INIT → RTR ([`SimQp::to_rtr_dci`]) → RTS.
    pub fn create_dci(
        &self,
        pd: &SimPd,
        send_cq: &SimCq,
        caps: &QpCaps,
        streams: DciStreams,
    ) -> Result<SimQp, DeviceError> {
        let max = DCI_STREAM_CAPS;
        if streams.log_concurrent > max.log_concurrent || streams.log_errored > max.log_errored {
            return Err(DeviceError::Invalid(format!(
                "DCI streams 2^{} concurrent, 2^{} errored: the device allows 2^{} and 2^{}",
                streams.log_concurrent, streams.log_errored, max.log_concurrent, max.log_errored
            )));
        }
        let packed = u32::from(streams.log_concurrent) | u32::from(streams.log_errored) << 8;
        let caps = QpCaps {
            rq_wqe_cnt: 0,
            ..*caps
        };
        self.create_queues(
            registry::qp_kind::DCI,
            pd,
            (send_cq, send_cq),
            None,
            &caps,
            packed,
        )
    }

    /// A QP-table entry with a send queue: an RC QP or a DCI.
    fn create_queues(
        &self,
        kind: u32,
        pd: &SimPd,
        (send_cq, recv_cq): (&SimCq, &SimCq),
        srq: Option<&SimSrq>,
        caps: &QpCaps,
        dci_streams: u32,
    ) -> Result<SimQp, DeviceError> {
        let sq_cnt = caps.sq_wqe_cnt.max(1).next_power_of_two();
        if sq_cnt > 32768 {
            return Err(DeviceError::Invalid(format!(
                "SQ of {} BBs exceeds 32768",
                caps.sq_wqe_cnt
            )));
        }
        let (rq_cnt, rq_stride) = if srq.is_some() || kind == registry::qp_kind::DCI {
            (0, 0)
        } else {
            if caps.rq_wqe_cnt > 32768 || caps.max_recv_sge > 63 {
                return Err(DeviceError::Invalid("RQ too large".into()));
            }
            (
                caps.rq_wqe_cnt.max(1).next_power_of_two(),
                (16 * caps.max_recv_sge.max(1)).next_power_of_two(),
            )
        };
        let fab = &self.d.fab;
        let sq_len = sq_cnt as u64 * 64;
        let rq_len = u64::from(rq_cnt) * u64::from(rq_stride);
        let dbrec_off = (sq_len + rq_len).next_multiple_of(64);
        // A DCI's NIC keeps its stream state after the doorbell record.
        let nic_private = if kind == registry::qp_kind::DCI {
            engine::DCI_STATE_AFTER_DBREC + engine::dci_state_len(sq_cnt)
        } else {
            64
        };
        let bf_off = (dbrec_off + nic_private).next_multiple_of(4096);
        // Carved out of a shared segment: page-aligned, so the BlueFlame
        // page stays page-aligned, and zero-filled.
        let mem = Range::alloc(fab, (bf_off + 512) as usize)?;
        let base = mem.off() as u64;
        let r = fab.reg();
        let slot = r
            .claim_qp()
            .ok_or_else(|| DeviceError::Fabric(FabricError::Full(fab.name().into(), "QP")))?;
        let qpn = registry::object_number(slot, MAX_QPS, r.next_gen());
        let e = &r.qps[slot];
        e.clear(qpn, kind, fab.token(), self.d.dev, pd.pdn);
        e.dci_streams.store(dci_streams, Ordering::Relaxed);
        e.seg.store(mem.slot(), Ordering::Relaxed);
        e.sq_off.store(base, Ordering::Relaxed);
        e.sq_cnt.store(sq_cnt, Ordering::Relaxed);
        e.rq_cnt.store(rq_cnt, Ordering::Relaxed);
        e.rq_stride.store(rq_stride, Ordering::Relaxed);
        e.srqn
            .store(srq.map_or(u32::MAX, |s| s.srqn()), Ordering::Relaxed);
        e.send_cqn.store(send_cq.cqn(), Ordering::Relaxed);
        e.recv_cqn.store(recv_cq.cqn(), Ordering::Relaxed);
        e.rq_off.store(base + sq_len, Ordering::Relaxed);
        e.dbrec_off.store(base + dbrec_off, Ordering::Relaxed);
        if kind == registry::qp_kind::DCI && !engine::init_dci_streams(fab, e) {
            e.state.store(registry::FREE, Ordering::Release);
            return Err(DeviceError::Invalid(
                "DCI segment too small for its stream state".into(),
            ));
        }
        e.state.store(LIVE, Ordering::Release);
        Ok(SimQp {
            inner: Arc::new(QpInner {
                ctx: self.clone(),
                slot,
                qpn,
                mem,
                sq_cnt,
                rq_cnt,
                rq_stride,
                dbrec_off: dbrec_off as usize,
                bf_off: bf_off as usize,
                has_srq: srq.is_some(),
                max_inline: caps.max_inline,
                _cqs: (send_cq.clone(), recv_cq.clone()),
                _srq: srq.cloned(),
                sq_taken: AtomicBool::new(false),
                rq_taken: AtomicBool::new(false),
            }),
        })
    }
}

// SAFETY: (for the Any + Send + Sync keepalive) the inner type holds only
// atomics, Arcs and segments (shared memory handles).
unsafe impl Send for QpInner {}
// SAFETY: as above.
unsafe impl Sync for QpInner {}

struct QpInner {
    ctx: SimContext,
    slot: usize,
    qpn: u32,
    /// SQ, RQ, doorbell record (and a DCI's stream state) and BlueFlame
    /// page; offsets below are within the range.
    mem: Range,
    sq_cnt: u32,
    rq_cnt: u32,
    rq_stride: u32,
    dbrec_off: usize,
    bf_off: usize,
    has_srq: bool,
    max_inline: u32,
    _cqs: (SimCq, SimCq),
    _srq: Option<SimSrq>,
    sq_taken: AtomicBool,
    rq_taken: AtomicBool,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let e = &self.ctx.d.fab.reg().qps[self.slot];
        e.qp_state.store(qp_state::RESET, Ordering::Release);
        e.state.store(registry::FREE, Ordering::Release);
    }
}

/// A QP of the software device with a send queue: an RC QP or a DCI.
#[derive(Clone)]
pub struct SimQp {
    inner: Arc<QpInner>,
}

impl std::fmt::Debug for SimQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.inner.qpn)
            .field("state", &self.state())
            .finish()
    }
}

fn state_of(v: u32) -> QpState {
    match v {
        qp_state::RESET => QpState::Reset,
        qp_state::INIT => QpState::Init,
        qp_state::RTR => QpState::Rtr,
        qp_state::RTS => QpState::Rts,
        _ => QpState::Err,
    }
}

impl SimQp {
    fn e(&self) -> &registry::QpEntry {
        &self.inner.ctx.d.fab.reg().qps[self.inner.slot]
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.qpn
    }

    /// Current state (the NIC moves a QP to ERR on its own after an error).
    pub fn state(&self) -> QpState {
        state_of(self.e().qp_state.load(Ordering::Acquire))
    }

    /// What the peer needs to connect.
    pub fn conn_info(&self) -> ConnInfo {
        ConnInfo {
            qpn: self.inner.qpn,
            lid: self.inner.ctx.lid(),
            gid: self.inner.ctx.gid(),
            psn: 0,
        }
    }

    fn transition(
        &self,
        from: &[QpState],
        to: QpState,
        f: impl FnOnce(&registry::QpEntry),
    ) -> Result<(), DeviceError> {
        let e = self.e();
        let _g = e.exec_lock.lock(self.inner.ctx.d.fab.member());
        let cur = state_of(e.qp_state.load(Ordering::Acquire));
        if !from.contains(&cur) {
            return Err(DeviceError::BadTransition {
                qpn: self.inner.qpn,
                from: cur,
                to,
            });
        }
        f(e);
        let v = match to {
            QpState::Reset => qp_state::RESET,
            QpState::Init => qp_state::INIT,
            QpState::Rtr => qp_state::RTR,
            QpState::Rts => qp_state::RTS,
            QpState::Err => qp_state::ERR,
        };
        e.qp_state.store(v, Ordering::Release);
        Ok(())
    }

    /// RESET → INIT.
    pub fn to_init(&self) -> Result<(), DeviceError> {
        self.transition(&[QpState::Reset], QpState::Init, |_| {})
    }

    /// INIT → RTR of a DCI: it names its peer in each WQE, so nothing is
    /// connected.
    pub fn to_rtr_dci(&self) -> Result<(), DeviceError> {
        if self.e().kind.load(Ordering::Relaxed) != registry::qp_kind::DCI {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is not a DCI: connect it with to_rtr",
                self.inner.qpn
            )));
        }
        self.transition(&[QpState::Init], QpState::Rtr, |_| {})
    }

    /// INIT → RTR: connect to `attr.remote` and accept `attr.access` remote
    /// operations.
    pub fn to_rtr(&self, attr: &RtrAttr) -> Result<(), DeviceError> {
        if self.e().kind.load(Ordering::Relaxed) != registry::qp_kind::RC {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is a DCI: it has no peer to connect (to_rtr_dci)",
                self.inner.qpn
            )));
        }
        let remote_dev = u32::from(attr.remote.lid).wrapping_sub(1);
        if remote_dev as usize >= MAX_DEVS {
            return Err(DeviceError::Invalid(format!(
                "remote LID {} names no device",
                attr.remote.lid
            )));
        }
        self.transition(&[QpState::Init], QpState::Rtr, |e| {
            e.remote_qpn.store(attr.remote.qpn, Ordering::Relaxed);
            e.remote_dev.store(remote_dev, Ordering::Relaxed);
            e.access.store(attr.access, Ordering::Relaxed);
            e.min_rnr_us
                .store(rnr_timer_us(attr.min_rnr_timer), Ordering::Relaxed);
        })
    }

    /// RTR → RTS.
    pub fn to_rts(&self, attr: &RtsAttr) -> Result<(), DeviceError> {
        if attr.rnr_retry > 7 || attr.retry_cnt > 7 {
            return Err(DeviceError::Invalid("retry counts are 3 bits".into()));
        }
        self.transition(&[QpState::Rtr], QpState::Rts, |e| {
            e.rnr_retry
                .store(u32::from(attr.rnr_retry), Ordering::Relaxed);
            e.retry_cnt
                .store(u32::from(attr.retry_cnt), Ordering::Relaxed);
            e.timeout_us
                .store(ack_timeout_us(attr.timeout), Ordering::Relaxed);
        })
    }

    /// RTS → RTS of a DCI with a stream id (`mlx5dv_dci_stream_id_reset`):
    /// errored `stream` runs again (its later WQEs are no longer flushed;
    /// its next WQE connects anew). Refused on a QP that is not a DCI, on a
    /// stream the DCI does not have, and on a DCI not in RTS.
    pub fn reset_dci_stream(&self, stream: u16) -> Result<(), DeviceError> {
        let qpn = self.inner.qpn;
        let e = self.e();
        if e.kind.load(Ordering::Relaxed) != registry::qp_kind::DCI {
            return Err(DeviceError::Invalid(format!(
                "QP {qpn:#x} is not a DCI: it has no streams to reset"
            )));
        }
        let fab = &self.inner.ctx.d.fab;
        let _g = e.exec_lock.lock(fab.member());
        let cur = state_of(e.qp_state.load(Ordering::Acquire));
        if cur != QpState::Rts {
            return Err(DeviceError::BadTransition {
                qpn,
                from: cur,
                to: QpState::Rts,
            });
        }
        engine::reset_dci_stream(fab, e, stream).map_err(|err| match err {
            engine::StreamResetError::Range(n) => DeviceError::Invalid(format!(
                "DCI {qpn:#x} has streams 0..{n}: no stream {stream} to reset"
            )),
            engine::StreamResetError::NoState => {
                DeviceError::Invalid(format!("DCI {qpn:#x}: no stream state in its segment"))
            }
        })
    }

    /// Any state → ERR: every outstanding WQE completes with WR_FLUSH_ERR.
    pub fn to_err(&self) -> Result<(), DeviceError> {
        self.transition(
            &[
                QpState::Reset,
                QpState::Init,
                QpState::Rtr,
                QpState::Rts,
                QpState::Err,
            ],
            QpState::Err,
            |_| {},
        )?;
        self.inner.ctx.d.nic.flush_qp(self.inner.qpn);
        Ok(())
    }

    /// The send queue for the data path (once).
    pub fn send_queue<T: SendTable>(&self, mut cfg: SqConfig) -> Result<SendQueue<T>, DeviceError> {
        if self.inner.sq_taken.swap(true, Ordering::AcqRel) {
            return Err(DeviceError::Taken("send queue"));
        }
        let i = &self.inner;
        cfg.max_inline = cfg.max_inline.min(i.max_inline as usize);
        let mem = SqMemory {
            buf: i.mem.at(0),
            wqe_cnt: i.sq_cnt,
            dbrec: i.mem.at(i.dbrec_off),
            bf_reg: i.mem.at(i.bf_off),
            bf_half: 256,
            qpn: i.qpn,
            notify: Some(i.ctx.notify()),
            keepalive: Some(i.clone() as Arc<dyn Any + Send + Sync>),
        };
        // SAFETY: the segment holds SQ, doorbell record and BF page, kept alive
        // by `keepalive`; the SQ is handed out once.
        unsafe { SendQueue::new(mem, cfg) }.map_err(|e| DeviceError::Queue(e.to_string()))
    }

    /// The QP's own receive queue for the data path (once; not with an SRQ).
    pub fn recv_queue<T: RecvTable>(&self) -> Result<RecvQueue<T>, DeviceError> {
        if self.inner.has_srq {
            return Err(DeviceError::Invalid("the QP receives on an SRQ".into()));
        }
        if self.inner.rq_taken.swap(true, Ordering::AcqRel) {
            return Err(DeviceError::Taken("receive queue"));
        }
        let i = &self.inner;
        let mem = RqMemory {
            buf: i.mem.at(i.sq_cnt as usize * 64),
            wqe_cnt: i.rq_cnt,
            stride: i.rq_stride as usize,
            dbrec: i.mem.at(i.dbrec_off),
            qn: i.qpn,
            notify: Some(i.ctx.notify()),
            keepalive: Some(i.clone() as Arc<dyn Any + Send + Sync>),
        };
        // SAFETY: as for send_queue.
        unsafe { RecvQueue::new(mem) }.map_err(|e| DeviceError::Queue(e.to_string()))
    }
}
