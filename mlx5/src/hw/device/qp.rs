//! RC QPs: creation, state changes and the queue memory `mlx5dv_init_obj`
//! hands the data path.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::context::HwContext;
use super::cq::HwCq;
use super::pd::{HwPd, PdInner};
use super::srq::HwSrq;
use super::{nonnull, ops, verb, VerbsParts};
use crate::hw::ffi::*;
use crate::hw::loader::HwError;
use crate::rq::{RecvQueue, RqMemory};
use crate::sq::{SendQueue, SqConfig, SqMemory};
use crate::types::{ConnInfo, QpCaps, RtrAttr, RtsAttr};
use crate::wqe_table::{RecvTable, SendTable};

impl HwPd {
    /// Creates an RC QP on `srq` or with its own RQ.
    pub fn create_qp(
        &self,
        send_cq: &HwCq,
        recv_cq: &HwCq,
        srq: Option<&HwSrq>,
        caps: &QpCaps,
    ) -> Result<HwQp, HwError> {
        let p = &self.p;
        let mut a = ibv_qp_init_attr {
            send_cq: send_cq.q.cq.as_ptr(),
            recv_cq: recv_cq.q.cq.as_ptr(),
            srq: srq.map_or(std::ptr::null_mut(), |s| s.s.srq.as_ptr()),
            cap: ibv_qp_cap {
                max_send_wr: caps.sq_wqe_cnt,
                max_recv_wr: if srq.is_some() { 0 } else { caps.rq_wqe_cnt },
                max_send_sge: 1,
                max_recv_sge: if srq.is_some() { 0 } else { caps.max_recv_sge },
                max_inline_data: caps.max_inline,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
            ..Default::default()
        };
        // SAFETY: a live PD, CQs and SRQ; a valid attribute struct.
        let qp = nonnull("ibv_create_qp", unsafe {
            (p.c.v.create_qp)(p.pd.as_ptr(), &mut a)
        })?;
        Ok(HwQp {
            q: Arc::new(QpInner {
                pd: p.clone(),
                qp,
                _cqs: (send_cq.clone(), recv_cq.clone()),
                _srq: srq.cloned(),
                max_inline: a.cap.max_inline_data,
                sq_taken: AtomicBool::new(false),
                rq_taken: AtomicBool::new(false),
                dci: false,
            }),
        })
    }
}

pub(in crate::hw) struct QpInner {
    pub(in crate::hw) pd: Arc<PdInner>,
    pub(in crate::hw) qp: NonNull<ibv_qp>,
    pub(in crate::hw) _cqs: (HwCq, HwCq),
    pub(in crate::hw) _srq: Option<HwSrq>,
    pub(in crate::hw) max_inline: u32,
    pub(in crate::hw) sq_taken: AtomicBool,
    pub(in crate::hw) rq_taken: AtomicBool,
    /// A DC initiator (`mlx5dv_create_qp`, DCI), not an RC QP: its
    /// RESET → INIT carries no access flags.
    pub(in crate::hw) dci: bool,
}
// SAFETY: as for PdInner.
unsafe impl Send for QpInner {}
// SAFETY: as above.
unsafe impl Sync for QpInner {}
impl Drop for QpInner {
    fn drop(&mut self) {
        // SAFETY: created by create_qp; destroyed before its CQs/SRQ/PD (fields
        // drop after this body runs).
        unsafe { (self.pd.c.v.destroy_qp)(self.qp.as_ptr()) };
    }
}

/// An RC QP on hardware.
#[derive(Clone)]
pub struct HwQp {
    pub(in crate::hw) q: Arc<QpInner>,
}

impl HwQp {
    /// The QP object and the provider's `post_send` / `post_recv`, taking both
    /// queues' data path (once).
    pub(in crate::hw) fn take_verbs(
        &self,
    ) -> Result<VerbsParts<ibv_qp, (PostSendFn, PostRecvFn)>, HwError> {
        let o = ops(&self.q.pd.c);
        let missing = |symbol| HwError::SymbolMissing {
            lib: self.q.pd.c.name.clone(),
            symbol,
        };
        let send = o
            .post_send
            .ok_or_else(|| missing("ibv_context_ops.post_send"))?;
        let recv = o
            .post_recv
            .ok_or_else(|| missing("ibv_context_ops.post_recv"))?;
        if self.q.sq_taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("send queue"));
        }
        if self.q.rq_taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("receive queue"));
        }
        Ok(VerbsParts {
            keep: self.q.clone(),
            obj: self.q.qp,
            entry: (send, recv),
        })
    }

    /// Largest inline payload the QP was created with.
    pub fn max_inline(&self) -> u32 {
        self.q.max_inline
    }

    fn raw(&self) -> &ibv_qp {
        // SAFETY: a live QP.
        unsafe { self.q.qp.as_ref() }
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.raw().qp_num
    }

    /// The QP's state as the device reports it (`ibv_query_qp`): `IBV_QPS_*`.
    pub fn query_state(&self) -> Result<u32, HwError> {
        let mut a = ibv_qp_attr::default();
        let mut i = ibv_qp_init_attr::default();
        // SAFETY: a live QP and zeroed out-structs.
        verb("ibv_query_qp", unsafe {
            (self.q.pd.c.v.query_qp)(self.q.qp.as_ptr(), &mut a, qp_attr_mask::STATE, &mut i)
        })?;
        Ok(a.qp_state)
    }

    /// What the peer needs, with the context's port LID and chosen GID.
    pub fn conn_info(&self, ctx: &HwContext, psn: u32) -> ConnInfo {
        ConnInfo {
            qpn: self.qpn(),
            lid: ctx.lid,
            gid: ctx.gid.gid,
            psn,
        }
    }

    pub(in crate::hw) fn modify(
        &self,
        a: &mut ibv_qp_attr,
        mask: i32,
        what: &'static str,
    ) -> Result<(), HwError> {
        // SAFETY: a live QP and a valid attribute struct.
        verb(what, unsafe {
            (self.q.pd.c.v.modify_qp)(self.q.qp.as_ptr(), a, mask)
        })
    }

    /// RESET → INIT on port 1 with `access` remote rights (none on a DCI,
    /// whose RESET → INIT takes exactly STATE | PKEY_INDEX | PORT).
    pub fn to_init(&self, access: u32) -> Result<(), HwError> {
        if self.q.dci {
            return self.dci_to_init();
        }
        let mut a = ibv_qp_attr {
            qp_state: qp_state::INIT,
            port_num: 1,
            pkey_index: 0,
            qp_access_flags: access,
            ..Default::default()
        };
        use qp_attr_mask::*;
        self.modify(
            &mut a,
            STATE | PKEY_INDEX | PORT | ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
        )
    }

    /// INIT → RTR towards `attr.remote` (RoCE v2: GRH with the chosen GID index).
    pub fn to_rtr(&self, ctx: &HwContext, attr: &RtrAttr) -> Result<(), HwError> {
        let mut a = ibv_qp_attr {
            qp_state: qp_state::RTR,
            path_mtu: ctx.mtu,
            dest_qp_num: attr.remote.qpn,
            rq_psn: attr.remote.psn,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            qp_access_flags: attr.access,
            ..Default::default()
        };
        a.ah_attr.dlid = attr.remote.lid;
        a.ah_attr.port_num = 1;
        if ctx.link_layer == IBV_LINK_LAYER_ETHERNET
            || attr.remote.gid != [0; 16] && attr.remote.lid == 0
        {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid {
                raw: attr.remote.gid,
            };
            a.ah_attr.grh.sgid_index = ctx.gid.index as u8;
            a.ah_attr.grh.hop_limit = 64;
        }
        use qp_attr_mask::*;
        self.modify(
            &mut a,
            // The remote rights are (re)set here: INIT got none (found by the
            // differential suite on rxe, where WRITEs were refused without it).
            STATE
                | AV
                | PATH_MTU
                | DEST_QPN
                | RQ_PSN
                | MAX_DEST_RD_ATOMIC
                | MIN_RNR_TIMER
                | ACCESS_FLAGS,
            "ibv_modify_qp(RTR)",
        )
    }

    /// RTR → RTS.
    pub fn to_rts(&self, attr: &RtsAttr) -> Result<(), HwError> {
        let mut a = ibv_qp_attr {
            qp_state: qp_state::RTS,
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            sq_psn: attr.sq_psn,
            max_rd_atomic: attr.max_rd_atomic,
            ..Default::default()
        };
        use qp_attr_mask::*;
        self.modify(
            &mut a,
            STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC,
            "ibv_modify_qp(RTS)",
        )
    }

    /// Any state → ERR.
    pub fn to_err(&self) -> Result<(), HwError> {
        let mut a = ibv_qp_attr {
            qp_state: qp_state::ERR,
            ..Default::default()
        };
        self.modify(&mut a, qp_attr_mask::STATE, "ibv_modify_qp(ERR)")
    }

    pub(in crate::hw) fn dv(&self) -> Result<mlx5dv_qp, HwError> {
        if !self.q.pd.c.is_mlx5 {
            return Err(HwError::NotMlx5(self.q.pd.c.name.clone()));
        }
        let m = self.q.pd.c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let mut out = mlx5dv_qp::default();
        let mut obj = mlx5dv_obj::default();
        obj.qp.in_ = self.q.qp.as_ptr() as *mut c_void;
        obj.qp.out = &mut out as *mut _ as *mut c_void;
        // SAFETY: valid in/out pointers.
        verb("mlx5dv_init_obj(QP)", unsafe {
            (m.init_obj)(&mut obj, MLX5DV_OBJ_QP)
        })?;
        Ok(out)
    }

    /// The send queue for the data path, over the QP's real SQ, doorbell record
    /// and BlueFlame register.
    pub fn send_queue<T: SendTable>(&self, mut cfg: SqConfig) -> Result<SendQueue<T>, HwError> {
        if self.q.sq_taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("send queue"));
        }
        let d = self.dv()?;
        cfg.max_inline = cfg.max_inline.min(self.q.max_inline as usize);
        let mem = SqMemory {
            buf: nonnull("mlx5dv_qp.sq.buf", d.sq.buf as *mut u8)?,
            wqe_cnt: d.sq.wqe_cnt,
            dbrec: nonnull("mlx5dv_qp.dbrec", d.dbrec as *mut u8)?,
            bf_reg: nonnull("mlx5dv_qp.bf.reg", d.bf.reg as *mut u8)?,
            bf_half: d.bf.size as usize,
            qpn: self.qpn(),
            notify: None,
            keepalive: Some(self.q.clone()),
        };
        // SAFETY: the QP's SQ, doorbell record and BF register, alive with `keepalive`.
        unsafe { SendQueue::new(mem, cfg) }.map_err(|_| HwError::Verb {
            verb: "mlx5dv_qp.sq shape",
            errno: libc::EINVAL,
        })
    }

    /// The QP's own receive queue for the data path.
    pub fn recv_queue<T: RecvTable>(&self) -> Result<RecvQueue<T>, HwError> {
        if self.q.dci {
            return Err(HwError::Verb {
                verb: "recv_queue (a DCI has no receive queue)",
                errno: libc::EINVAL,
            });
        }
        if self.q.rq_taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("receive queue"));
        }
        let d = self.dv()?;
        // The receive counter is word 0 of the QP doorbell record.
        let mem = RqMemory {
            buf: nonnull("mlx5dv_qp.rq.buf", d.rq.buf as *mut u8)?,
            wqe_cnt: d.rq.wqe_cnt,
            stride: d.rq.stride as usize,
            dbrec: nonnull("mlx5dv_qp.dbrec", d.dbrec as *mut u8)?,
            qn: self.qpn(),
            notify: None,
            keepalive: Some(self.q.clone()),
        };
        // SAFETY: the QP's RQ and doorbell record, alive with `keepalive`.
        unsafe { RecvQueue::new(mem) }.map_err(|_| HwError::Verb {
            verb: "mlx5dv_qp.rq shape",
            errno: libc::EINVAL,
        })
    }
}

debug_handle!(HwQp { q.qp });
