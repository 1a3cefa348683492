//! DC queues on hardware: DC targets (DCTs) and DC initiators (DCIs), made by
//! libmlx5's `mlx5dv_create_qp` (`IBV_QPT_DRIVER` with a DC type), and the
//! address vectors a DCI's WQEs carry, taken from address handles.
//!
//! **Never run on a ConnectX**: no machine this project runs on has one. It
//! is written from rdma-core's installed headers (the structs and constants
//! are checked by the ABI test, `tests/abi.rs`), from rdma-core's and UCX's
//! DC code as the project's notes record them, and reviewed; the hardware
//! suite (`tests/hw_dc.rs`) is ignored without an mlx5 NIC.
//!
//! The state changes are exactly those rdma-core's kernel path accepts:
//! - DCT: RESET → INIT with STATE | ACCESS_FLAGS | PKEY_INDEX | PORT, then
//!   INIT → RTR with STATE | MIN_RNR_TIMER | AV | PATH_MTU, which creates
//!   the DCT in firmware and gives it its number. A DCT never goes to RTS.
//! - DCI: RESET → INIT with STATE | PKEY_INDEX | PORT (no access flags),
//!   INIT → RTR with STATE | PATH_MTU | AV (the port, and a GRH on RoCE; no
//!   destination), RTR → RTS as an RC QP
//!   (STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC).

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::device::{nonnull, verb, HwContext, HwCq, HwPd, HwQp, HwSrq, PdInner, QpInner};
use super::ffi::*;
use super::loader::HwError;
use crate::prm::{AddressVector, DatagramSeg};
use crate::types::{DciStreams, DctAttr, QpCaps};

/// Hop limit of the GRH on RoCE (as the RC path uses).
const HOP_LIMIT: u8 = 64;

/// The AV part of `ibv_qp_attr` for port 1: on an Ethernet port (RoCE) a
/// GRH from the context's chosen GID, with `dgid` as its destination.
fn port_av(ctx: &HwContext, dgid: [u8; 16]) -> ibv_ah_attr {
    let mut ah = ibv_ah_attr {
        port_num: 1,
        ..Default::default()
    };
    if ctx.link_layer == IBV_LINK_LAYER_ETHERNET {
        ah.is_global = 1;
        ah.grh.dgid = ibv_gid { raw: dgid };
        ah.grh.sgid_index = ctx.gid.index as u8;
        ah.grh.hop_limit = HOP_LIMIT;
    }
    ah
}

/// `mlx5dv_create_qp` with a DC type: the QP or the verb's errno.
fn create_dc_qp(
    pd: &HwPd,
    mut attr: ibv_qp_init_attr_ex,
    mut dv: mlx5dv_qp_init_attr,
) -> Result<NonNull<ibv_qp>, HwError> {
    let c = &pd.p.c;
    if !c.is_mlx5 {
        return Err(HwError::NotMlx5(c.name.clone()));
    }
    let m = c.v.mlx5.as_ref().map_err(Clone::clone)?;
    attr.qp_type = IBV_QPT_DRIVER;
    attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
    attr.pd = pd.p.pd.as_ptr();
    dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DC;
    // SAFETY: a live context, PD and CQs (and SRQ) named in the attributes,
    // and valid attribute structs for the call's duration.
    nonnull("mlx5dv_create_qp", unsafe {
        (m.create_qp)(c.ctx.as_ptr(), &mut attr, &mut dv)
    })
}

struct DctInner {
    pd: Arc<PdInner>,
    qp: NonNull<ibv_qp>,
    number: u32,
    key: u64,
    // Held while the DCT lives: the NIC delivers into them.
    _srq: HwSrq,
    _cq: HwCq,
}
// SAFETY: verbs objects may be used from any thread.
unsafe impl Send for DctInner {}
// SAFETY: as above.
unsafe impl Sync for DctInner {}
impl Drop for DctInner {
    fn drop(&mut self) {
        // SAFETY: created by mlx5dv_create_qp; destroyed before its SRQ, CQ
        // and PD (fields drop after this body). rdma-core drains the DCT
        // (DRAIN_DCT, then waits for DCT_DRAINED) before destroying it.
        unsafe { (self.pd.c.v.destroy_qp)(self.qp.as_ptr()) };
    }
}

/// A DC target on hardware: receives, into its SRQ, from any DCI whose WQE
/// names its number and carries its key. Never run on a ConnectX (see the
/// module documentation).
#[derive(Clone)]
pub struct HwDct {
    d: Arc<DctInner>,
}

impl std::fmt::Debug for HwDct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwDct")
            .field("number", &self.d.number)
            .finish_non_exhaustive()
    }
}

impl HwDct {
    /// The DCT number, which a DCI's WQE names (the QP number rdma-core
    /// reports once the DCT reached RTR).
    pub fn number(&self) -> u32 {
        self.d.number
    }

    /// The access key a DCI's WQE must carry.
    pub fn key(&self) -> u64 {
        self.d.key
    }
}

/// Modifies a QP that is not yet wrapped (a DCT being brought up).
fn modify_raw(
    pd: &PdInner,
    qp: NonNull<ibv_qp>,
    a: &mut ibv_qp_attr,
    mask: i32,
    what: &'static str,
) -> Result<(), HwError> {
    // SAFETY: a live QP and a valid attribute struct.
    verb(what, unsafe { (pd.c.v.modify_qp)(qp.as_ptr(), a, mask) })
}

impl HwPd {
    /// Creates a DCT on this PD, receiving into `srq` with its completions on
    /// `cq` (also its send CQ, which a DCT never uses but the verbs require),
    /// and brings it to RTR, where it gets its number.
    pub fn create_dct(
        &self,
        ctx: &HwContext,
        srq: &HwSrq,
        cq: &HwCq,
        attr: &DctAttr,
    ) -> Result<HwDct, HwError> {
        let init = ibv_qp_init_attr_ex {
            send_cq: cq.q.cq.as_ptr(),
            recv_cq: cq.q.cq.as_ptr(),
            srq: srq.s.srq.as_ptr(),
            ..Default::default()
        };
        let mut dv = mlx5dv_qp_init_attr::default();
        dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
        dv.dc_init_attr.u.dct_access_key = attr.key;
        let qp = create_dc_qp(self, init, dv)?;
        // Wrapped at once, so a failed state change destroys it.
        let mut d = DctInner {
            pd: self.p.clone(),
            qp,
            number: 0,
            key: attr.key,
            _srq: srq.clone(),
            _cq: cq.clone(),
        };
        use qp_attr_mask::*;
        let mut a = ibv_qp_attr {
            qp_state: qp_state::INIT,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: attr.access,
            ..Default::default()
        };
        let m = STATE | ACCESS_FLAGS | PKEY_INDEX | PORT;
        modify_raw(&self.p, qp, &mut a, m, "ibv_modify_qp(DCT INIT)")?;
        let mut a = ibv_qp_attr {
            qp_state: qp_state::RTR,
            path_mtu: ctx.mtu,
            min_rnr_timer: attr.min_rnr_timer,
            ah_attr: port_av(ctx, [0; 16]),
            ..Default::default()
        };
        let m = STATE | MIN_RNR_TIMER | AV | PATH_MTU;
        modify_raw(&self.p, qp, &mut a, m, "ibv_modify_qp(DCT RTR)")?;
        // SAFETY: a live QP; rdma-core set qp_num to the DCT number at RTR.
        d.number = unsafe { qp.as_ref() }.qp_num;
        Ok(HwDct { d: Arc::new(d) })
    }

    /// Creates a DCI on this PD with its completions on `send_cq`, `streams`
    /// DCI streams (none asked: created without the streams attribute, one
    /// stream). It has no receive queue. The caller checks `streams` against
    /// [`HwContext::dci_stream_caps`]; the device refuses more (EINVAL).
    pub fn create_dci(
        &self,
        send_cq: &HwCq,
        caps: &QpCaps,
        streams: DciStreams,
    ) -> Result<HwQp, HwError> {
        self.create_dci_with(send_cq, caps, streams, 0)
    }

    /// [`create_dci`](Self::create_dci), with rdma-core's work-request API
    /// (`ibv_qp_ex`) enabled for `send_ops` (`IBV_QP_EX_WITH_*`) when not 0.
    pub(super) fn create_dci_with(
        &self,
        send_cq: &HwCq,
        caps: &QpCaps,
        streams: DciStreams,
        send_ops: u64,
    ) -> Result<HwQp, HwError> {
        let mut init = ibv_qp_init_attr_ex {
            send_cq: send_cq.q.cq.as_ptr(),
            recv_cq: send_cq.q.cq.as_ptr(),
            cap: ibv_qp_cap {
                max_send_wr: caps.sq_wqe_cnt,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 0,
                max_inline_data: caps.max_inline,
            },
            ..Default::default()
        };
        if send_ops != 0 {
            init.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            init.send_ops_flags = send_ops;
        }
        let mut dv = mlx5dv_qp_init_attr::default();
        dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
        if streams != DciStreams::default() {
            dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
            dv.dc_init_attr.u.dci_streams = mlx5dv_dci_streams {
                log_num_concurent: streams.log_concurrent,
                log_num_errored: streams.log_errored,
            };
        }
        let qp = create_dc_qp(self, init, dv)?;
        // `init.cap` is what mlx5dv_create_qp reported back.
        Ok(HwQp {
            q: Arc::new(QpInner {
                pd: self.p.clone(),
                qp,
                _cqs: (send_cq.clone(), send_cq.clone()),
                _srq: None,
                max_inline: init.cap.max_inline_data,
                sq_taken: AtomicBool::new(false),
                // No receive queue to hand out.
                rq_taken: AtomicBool::new(true),
                dci: true,
            }),
        })
    }

    /// The address vector of the route to port `lid` / `gid` (a DCT's
    /// device), as the provider builds it for an address handle
    /// (`ibv_create_ah`, then `mlx5dv_init_obj(MLX5DV_OBJ_AH)`): on RoCE it
    /// carries the destination MAC the kernel resolved, which a DCI's WQE
    /// needs. Its key and DCT number are zero: the WQE sets them
    /// ([`SendQueue::dc_via`](crate::sq::SendQueue::dc_via)).
    pub fn dc_route(
        &self,
        ctx: &HwContext,
        lid: u16,
        gid: [u8; 16],
    ) -> Result<AddressVector, HwError> {
        let ah = Ah::new(self, ctx, lid, gid)?;
        let bytes = ah.av_bytes()?;
        Ok(DatagramSeg::new_unchecked(&bytes[..]).get())
    }
}

/// An address handle, destroyed on drop.
pub(super) struct Ah<'a> {
    pd: &'a HwPd,
    pub(super) ah: NonNull<ibv_ah>,
}

impl<'a> Ah<'a> {
    /// `ibv_create_ah` towards `lid` (InfiniBand) or `gid` (a GRH: always on
    /// RoCE, and on InfiniBand when only a GID is given).
    pub(super) fn new(
        pd: &'a HwPd,
        ctx: &HwContext,
        lid: u16,
        gid: [u8; 16],
    ) -> Result<Self, HwError> {
        let mut a = port_av(ctx, gid);
        a.dlid = lid;
        if a.is_global == 0 && gid != [0; 16] && lid == 0 {
            a.is_global = 1;
            a.grh.dgid = ibv_gid { raw: gid };
            a.grh.sgid_index = ctx.gid.index as u8;
            a.grh.hop_limit = HOP_LIMIT;
        }
        // SAFETY: a live PD and a valid attribute struct.
        let ah = nonnull("ibv_create_ah", unsafe {
            (pd.p.c.v.create_ah)(pd.p.pd.as_ptr(), &mut a)
        })?;
        Ok(Ah { pd, ah })
    }

    /// The provider's AV of this AH (`struct mlx5_wqe_av`), copied.
    pub(super) fn av_bytes(&self) -> Result<[u8; MLX5_WQE_AV_LEN], HwError> {
        let c = &self.pd.p.c;
        if !c.is_mlx5 {
            return Err(HwError::NotMlx5(c.name.clone()));
        }
        let m = c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let mut out = mlx5dv_ah::default();
        let mut obj = mlx5dv_obj::default();
        obj.ah.in_ = self.ah.as_ptr() as *mut c_void;
        obj.ah.out = &mut out as *mut _ as *mut c_void;
        // SAFETY: valid in/out pointers for the call.
        verb("mlx5dv_init_obj(AH)", unsafe {
            (m.init_obj)(&mut obj, MLX5DV_OBJ_AH)
        })?;
        let av = nonnull("mlx5dv_init_obj(AH).av", out.av)?;
        let mut b = [0; MLX5_WQE_AV_LEN];
        // SAFETY: the AH's `struct mlx5_wqe_av`, 48 bytes inside the live AH.
        unsafe { std::ptr::copy_nonoverlapping(av.as_ptr(), b.as_mut_ptr(), b.len()) };
        Ok(b)
    }
}

impl Drop for Ah<'_> {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah; no WQE refers to it (its AV was
        // copied, as rdma-core's own DC path copies it into each WQE).
        unsafe { (self.pd.p.c.v.destroy_ah)(self.ah.as_ptr()) };
    }
}

impl HwContext {
    /// The DCI streams the device supports (`mlx5dv_query_device`'s
    /// `dci_streams_caps`); zero and zero when it reports none, or when it is
    /// not an mlx5 device.
    pub fn dci_stream_caps(&self) -> Result<DciStreams, HwError> {
        let c = &self.c;
        if !c.is_mlx5 {
            return Ok(DciStreams::default());
        }
        let m = c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let mut dv = mlx5dv_context {
            comp_mask: MLX5DV_CONTEXT_MASK_DCI_STREAMS,
            ..Default::default()
        };
        // SAFETY: a live context and a zeroed, full-size mlx5dv_context.
        verb("mlx5dv_query_device", unsafe {
            (m.query_device)(c.ctx.as_ptr(), &mut dv)
        })?;
        // The provider clears the bits of what it did not report.
        if dv.comp_mask & MLX5DV_CONTEXT_MASK_DCI_STREAMS == 0 {
            return Ok(DciStreams::default());
        }
        Ok(DciStreams {
            log_concurrent: dv.dci_streams_caps.max_log_num_concurent,
            log_errored: dv.dci_streams_caps.max_log_num_errored,
        })
    }
}

impl HwQp {
    /// Whether this is a DC initiator.
    pub fn is_dci(&self) -> bool {
        self.q.dci
    }

    /// RESET → INIT of a DCI: exactly STATE | PKEY_INDEX | PORT.
    pub(super) fn dci_to_init(&self) -> Result<(), HwError> {
        let mut a = ibv_qp_attr {
            qp_state: qp_state::INIT,
            pkey_index: 0,
            port_num: 1,
            ..Default::default()
        };
        use qp_attr_mask::*;
        self.modify(&mut a, STATE | PKEY_INDEX | PORT, "ibv_modify_qp(DCI INIT)")
    }

    /// INIT → RTR of a DCI: the path MTU and the port (a GRH on RoCE), no
    /// destination (each WQE names its own).
    pub fn to_rtr_dci(&self, ctx: &HwContext) -> Result<(), HwError> {
        if !self.q.dci {
            return Err(HwError::Verb {
                verb: "ibv_modify_qp(DCI RTR) on a QP that is not a DCI",
                errno: libc::EINVAL,
            });
        }
        let mut a = ibv_qp_attr {
            qp_state: qp_state::RTR,
            path_mtu: ctx.mtu,
            ah_attr: port_av(ctx, [0; 16]),
            ..Default::default()
        };
        use qp_attr_mask::*;
        self.modify(&mut a, STATE | PATH_MTU | AV, "ibv_modify_qp(DCI RTR)")
    }

    /// Resets DCI stream `stream` after an error stopped it
    /// (`mlx5dv_dci_stream_id_reset`): its later WQEs run again, the other
    /// streams never stopped. Fails with [`HwError::SymbolMissing`] on an
    /// rdma-core without DCI streams.
    pub fn reset_dci_stream(&self, stream: u16) -> Result<(), HwError> {
        let c = &self.q.pd.c;
        let m = c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let reset = m.dci_stream_id_reset.ok_or(HwError::SymbolMissing {
            lib: "libmlx5".into(),
            symbol: "mlx5dv_dci_stream_id_reset",
        })?;
        // SAFETY: a live QP.
        verb("mlx5dv_dci_stream_id_reset", unsafe {
            reset(self.q.qp.as_ptr(), stream)
        })
    }
}
