//! Queue pairs ([`Qp`]): RC QPs and DC initiators, their state changes, and
//! the data-path queues they hand out; on a NIC through [`HwQpHandle`].

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::seam::backend;
#[cfg(feature = "sim")]
use super::seam::no_verbs;
use crate::hw::{self, HwContext, HwQp, VerbsQp};
use crate::rq::RecvQueue;
#[cfg(feature = "sim")]
use crate::sim::device::SimQp;
use crate::sq::{SendQueue, SqConfig};
use crate::types::error::{DeviceError, HwError};
use crate::types::{ConnInfo, QpState, RtrAttr, RtsAttr};
use crate::wqe_table::{RecvTable, SendTable};

/// An RC queue pair (or a DC initiator).
#[derive(Clone)]
pub enum Qp {
    /// Software device.
    #[cfg(feature = "sim")]
    Sim(SimQp),
    /// NIC, with the context it was created on.
    Hw(HwQpHandle),
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn())
            .field("state", &self.state())
            .finish()
    }
}

impl Qp {
    /// QP number.
    pub fn qpn(&self) -> u32 {
        backend!(self, q => q.qpn())
    }

    /// Current state (the NIC moves a QP to ERR on its own after an error).
    pub fn state(&self) -> QpState {
        backend!(self, q => q.state())
    }

    /// What the peer needs to connect.
    pub fn conn_info(&self) -> ConnInfo {
        backend!(self, q => q.conn_info())
    }

    /// RESET → INIT.
    pub fn to_init(&self) -> Result<(), DeviceError> {
        backend!(self, q => q.to_init())
    }

    /// INIT → RTR: connect to `attr.remote`, accept `attr.access` remote operations.
    pub fn to_rtr(&self, attr: &RtrAttr) -> Result<(), DeviceError> {
        backend!(self, q => q.to_rtr(attr))
    }

    /// RTR → RTS.
    pub fn to_rts(&self, attr: &RtsAttr) -> Result<(), DeviceError> {
        backend!(self, q => q.to_rts(attr))
    }

    /// RESET → INIT → RTR → RTS: connects to `rtr.remote` and makes the QP
    /// ready to send (the usual bring-up in one call).
    pub fn connect(&self, rtr: &RtrAttr, rts: &RtsAttr) -> Result<(), DeviceError> {
        self.to_init()?;
        self.to_rtr(rtr)?;
        self.to_rts(rts)
    }

    /// INIT → RTR of a DCI: it names its peer in each WQE, so nothing is
    /// connected.
    pub fn to_rtr_dci(&self) -> Result<(), DeviceError> {
        backend!(self, q => q.to_rtr_dci())
    }

    /// RTS → RTS of a DCI with a stream id (`mlx5dv_dci_stream_id_reset`):
    /// an errored `stream` runs again. Refused on a QP that is not a DCI,
    /// a stream it does not have, or a DCI not in RTS.
    pub fn reset_dci_stream(&self, stream: u16) -> Result<(), DeviceError> {
        backend!(self, q => q.reset_dci_stream(stream))
    }

    /// RESET → INIT → RTR → RTS of a DCI: ready to send to any DCT.
    pub fn ready_dci(&self, rts: &RtsAttr) -> Result<(), DeviceError> {
        self.to_init()?;
        self.to_rtr_dci()?;
        self.to_rts(rts)
    }

    /// Any state → ERR: every outstanding WQE completes with WR_FLUSH_ERR.
    pub fn to_err(&self) -> Result<(), DeviceError> {
        backend!(self, q => q.to_err())
    }

    /// The send queue for the data path.
    pub fn send_queue<T: SendTable>(&self, cfg: SqConfig) -> Result<SendQueue<T>, DeviceError> {
        Ok(backend!(self, Sim(q) => q.send_queue(cfg)?, Hw(q) => q.qp.send_queue(cfg)?))
    }

    /// The QP's own receive queue for the data path.
    pub fn recv_queue<T: RecvTable>(&self) -> Result<RecvQueue<T>, DeviceError> {
        Ok(backend!(self, Sim(q) => q.recv_queue()?, Hw(q) => q.qp.recv_queue()?))
    }

    /// Both queues on the verbs data path (devices opened through rdma-core).
    pub fn verbs(&self) -> Result<VerbsQp, DeviceError> {
        backend!(self, Sim(_) => Err(no_verbs()), Hw(q) => Ok(VerbsQp::new(&q.qp)?))
    }
}

/// A QP on a NIC as the device API sees it: the rdma-core QP, the context it
/// was created on (port, GID and MTU for RTR), and the last state this API
/// moved it to (rdma-core answers for the current one when it can).
#[derive(Clone)]
pub struct HwQpHandle {
    qp: HwQp,
    ctx: HwContext,
    state: Arc<AtomicU32>,
}

impl std::fmt::Debug for HwQpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwQpHandle")
            .field("qpn", &self.qpn())
            .field("state", &self.state())
            .finish()
    }
}

fn hw_state(v: u32) -> QpState {
    use hw::ffi::qp_state::*;
    match v {
        RESET => QpState::Reset,
        INIT => QpState::Init,
        RTR => QpState::Rtr,
        RTS => QpState::Rts,
        _ => QpState::Err,
    }
}

/// The hardware side of [`Qp`]'s methods, named as the software device's.
impl HwQpHandle {
    pub(super) fn new(qp: HwQp, ctx: &HwContext) -> Self {
        HwQpHandle {
            qp,
            ctx: ctx.clone(),
            state: Arc::new(AtomicU32::new(hw::ffi::qp_state::RESET)),
        }
    }

    fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    fn state(&self) -> QpState {
        hw_state(
            self.qp
                .query_state()
                .unwrap_or(self.state.load(Ordering::Relaxed)),
        )
    }

    fn conn_info(&self) -> ConnInfo {
        self.qp.conn_info(&self.ctx, 0)
    }

    /// Records state `v` once the transition `r` went through.
    fn step(&self, v: u32, r: Result<(), HwError>) -> Result<(), DeviceError> {
        r?;
        self.state.store(v, Ordering::Relaxed);
        Ok(())
    }

    fn to_init(&self) -> Result<(), DeviceError> {
        self.step(hw::ffi::qp_state::INIT, self.qp.to_init(0))
    }

    fn to_rtr(&self, attr: &RtrAttr) -> Result<(), DeviceError> {
        if self.qp.is_dci() {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is a DCI: it has no peer to connect (to_rtr_dci)",
                self.qp.qpn()
            )));
        }
        self.step(hw::ffi::qp_state::RTR, self.qp.to_rtr(&self.ctx, attr))
    }

    fn to_rts(&self, attr: &RtsAttr) -> Result<(), DeviceError> {
        self.step(hw::ffi::qp_state::RTS, self.qp.to_rts(attr))
    }

    fn to_rtr_dci(&self) -> Result<(), DeviceError> {
        if !self.qp.is_dci() {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is not a DCI: connect it with to_rtr",
                self.qp.qpn()
            )));
        }
        self.step(hw::ffi::qp_state::RTR, self.qp.to_rtr_dci(&self.ctx))
    }

    fn reset_dci_stream(&self, stream: u16) -> Result<(), DeviceError> {
        if !self.qp.is_dci() {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is not a DCI: it has no streams",
                self.qp.qpn()
            )));
        }
        Ok(self.qp.reset_dci_stream(stream)?)
    }

    fn to_err(&self) -> Result<(), DeviceError> {
        self.step(hw::ffi::qp_state::ERR, self.qp.to_err())
    }
}
