//! Tag-matching SRQs: an SRQ with a tag list, and the command QP through
//! which software changes the list.
//!
//! The command QP is an RC QP on the SRQ, connected to itself, as UCX builds
//! its own (rdma-core's mlx5 provider makes the same loopback QP inside
//! `ibv_create_srq_ex`). Software posts tag-matching WQEs on its send queue
//! ([`SendQueue::tm_command`](crate::sq::SendQueue::tm_command)); the NIC
//! executes them in order against the list, with the SRQ's lock held so that
//! they serialise with the messages that match against it, and writes the
//! CQEs they ask for to the SRQ's CQ.

use super::cq::SimCq;
use super::pd::SimPd;
use super::qp::SimQp;
use super::srq::SimSrq;
use super::SimContext;
use crate::types::error::DeviceError;
use crate::types::{QpCaps, RtrAttr, RtsAttr, TmCaps, TmSrqAttr};

/// What the software device's tag matching offers (`ibv_tm_caps`): a list of
/// 255 tags (a ConnectX's list sizes are powers of two less one, as rdma-core
/// keeps one entry free), rendezvous headers up to 64 bytes (mlx5's
/// `MLX5_TM_MAX_RNDV_MSG_SIZE`), one SGE per tagged buffer (`MLX5_TM_MAX_SGE`),
/// and up to 32768 outstanding list commands.
pub const SIM_TM_CAPS: TmCaps = TmCaps {
    max_rndv_hdr_size: 64,
    max_num_tags: 255,
    rc: true,
    max_ops: 32768,
    max_sge: 1,
};

impl SimContext {
    /// The device's tag-matching capabilities.
    pub fn tm_caps(&self) -> TmCaps {
        SIM_TM_CAPS
    }

    /// Creates a tag-matching SRQ on `pd` whose completions (receives and
    /// list commands) go to `cq`, with its command QP.
    pub fn create_tm_srq(
        &self,
        pd: &SimPd,
        cq: &SimCq,
        attr: &TmSrqAttr,
    ) -> Result<SimTmSrq, DeviceError> {
        attr.check(self.name(), &SIM_TM_CAPS)?;
        let srq = self.create_srq_in(
            pd,
            attr.wqe_cnt,
            attr.max_sge,
            Some((attr.max_num_tags + 1, cq.cqn())),
        )?;
        let caps = QpCaps {
            sq_wqe_cnt: attr.max_ops,
            rq_wqe_cnt: 0,
            max_recv_sge: 1,
            max_inline: 0,
        };
        let cmd = self.create_qp(pd, cq, cq, Some(&srq), &caps)?;
        // Loopback: the commands go to the NIC, not over the wire; no
        // remote access.
        cmd.to_init()?;
        cmd.to_rtr(&RtrAttr::new(cmd.conn_info(), 0))?;
        cmd.to_rts(&RtsAttr::default())?;
        Ok(SimTmSrq {
            srq,
            cmd,
            max_num_tags: attr.max_num_tags,
        })
    }
}

/// A tag-matching SRQ of the software device and its command QP. QPs that
/// receive tagged messages are created on [`srq`](Self::srq).
#[derive(Debug, Clone)]
pub struct SimTmSrq {
    srq: SimSrq,
    cmd: SimQp,
    max_num_tags: u32,
}

impl SimTmSrq {
    /// The SRQ: QPs are created on it, and its posting side takes the
    /// buffers of unexpected messages.
    pub fn srq(&self) -> &SimSrq {
        &self.srq
    }
    /// The command QP: [`SimQp::send_queue`] gives the queue list commands
    /// are posted on.
    pub fn cmd_qp(&self) -> &SimQp {
        &self.cmd
    }
    /// Tags the list holds.
    pub fn max_num_tags(&self) -> u32 {
        self.max_num_tags
    }
}
