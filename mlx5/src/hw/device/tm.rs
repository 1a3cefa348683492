//! Tag-matching SRQs on a NIC: the device's tag-matching capabilities
//! (`ibv_query_device_ex`), the SRQ (`ibv_create_srq_ex` with
//! `IBV_SRQ_INIT_ATTR_TM`), and its command QP, an RC QP on the SRQ
//! connected to itself, as UCX builds its own (rdma-core's mlx5 provider
//! makes one too, inside `ibv_create_srq_ex`, for its `ibv_post_srq_ops`;
//! this crate posts the commands on its own, through its data path).
//!
//! Not yet run on a ConnectX: kernel soft-RoCE, the only RDMA device these
//! tests reach, has no tag matching and refuses such an SRQ.

use super::context::HwContext;
use super::cq::HwCq;
use super::nonnull;
use super::pd::HwPd;
use super::qp::HwQp;
use super::srq::HwSrq;
use crate::hw::ffi::*;
use crate::hw::loader::HwError;
use crate::hw::vctx;
use crate::types::{QpCaps, RtrAttr, RtsAttr, TmCaps, TmSrqAttr};

impl HwContext {
    /// The device's tag-matching capabilities; all zero when it has none,
    /// or when the provider has no `query_device_ex` (as verbs.h's inline
    /// reports then).
    pub fn tm_caps(&self) -> Result<TmCaps, HwError> {
        vctx::tm_caps(&self.c)
    }

    /// Creates a tag-matching SRQ on `pd` whose completions go to `cq` (a
    /// CQ of this crate's mlx5 path: rdma-core wants an extended CQ), and
    /// its command QP. `attr` is checked against [`tm_caps`](Self::tm_caps)
    /// by the caller.
    pub fn create_tm_srq(
        &self,
        pd: &HwPd,
        cq: &HwCq,
        attr: &TmSrqAttr,
    ) -> Result<HwTmSrq, HwError> {
        let create = vctx::create_srq_ex(&self.c).ok_or(HwError::Verb {
            verb: "ibv_create_srq_ex (the provider has none)",
            errno: libc::EOPNOTSUPP,
        })?;
        let mut a = ibv_srq_init_attr_ex {
            attr: ibv_srq_attr {
                max_wr: attr.wqe_cnt,
                max_sge: attr.max_sge,
                srq_limit: 0,
            },
            comp_mask: srq_init_attr_mask::TYPE
                | srq_init_attr_mask::PD
                | srq_init_attr_mask::CQ
                | srq_init_attr_mask::TM,
            srq_type: IBV_SRQT_TM,
            pd: pd.p.pd.as_ptr(),
            cq: cq.q.cq.as_ptr(),
            tm_cap: ibv_tm_cap {
                max_num_tags: attr.max_num_tags,
                max_ops: attr.max_ops,
            },
            ..Default::default()
        };
        // SAFETY: a live context, PD and CQ; a valid attribute struct.
        let srq = nonnull("ibv_create_srq_ex", unsafe {
            create(self.c.ctx.as_ptr(), &mut a)
        })?;
        let srq = HwSrq::own(&pd.p, srq);
        let caps = QpCaps {
            sq_wqe_cnt: attr.max_ops,
            rq_wqe_cnt: 0,
            max_recv_sge: 0,
            max_inline: 0,
        };
        let cmd = pd.create_qp(cq, cq, Some(&srq), &caps)?;
        // Loopback: the commands go to the NIC, not over the wire.
        cmd.to_init(0)?;
        cmd.to_rtr(self, &RtrAttr::new(cmd.conn_info(self, 0), 0))?;
        cmd.to_rts(&RtsAttr::default())?;
        Ok(HwTmSrq {
            cmd,
            srq,
            max_num_tags: attr.max_num_tags,
        })
    }
}

/// A tag-matching SRQ on a NIC and its command QP.
#[derive(Debug, Clone)]
pub struct HwTmSrq {
    // Declared first: the QP goes before the SRQ it is on.
    cmd: HwQp,
    srq: HwSrq,
    max_num_tags: u32,
}

impl HwTmSrq {
    /// The SRQ: QPs are created on it; its posting side takes the buffers
    /// of unexpected messages.
    pub fn srq(&self) -> &HwSrq {
        &self.srq
    }
    /// The command QP, whose send queue takes the list commands.
    pub fn cmd_qp(&self) -> &HwQp {
        &self.cmd
    }
    /// Tags the list holds.
    pub fn max_num_tags(&self) -> u32 {
        self.max_num_tags
    }
}
