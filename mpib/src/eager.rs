//! Eager messages over tag matching: one rail's share.
//!
//! Where both sides' devices offer tag matching, each rail has a TM-SRQ
//! with a CQ of its own, an *eager QP* on it connected to the peer's, and
//! `BOUNCES` buffers in the SRQ for messages that arrive before their
//! receive. A message travels as a SEND of the tag-matching header
//! (`EAGER`, `app_ctx` = the transfer's tag, tag = its FIFO position) and
//! the payload; the receiver's NIC matches it against the tags its
//! `irecv`s appended (tag = position, exact) and writes the payload
//! straight into the receive's buffer, with no CTS round trip.

use mlx5::device::{access, Mr, QpCaps, RtrAttr, RtsAttr, TmSrqAttr};
use mlx5::prm::{Tmh, TmhOpcode};
use mlx5::sq::Sge;
use mlx5::wr::{CqId, Domain, QpId, SrqId, TmId};

use crate::error::SetupError;
use crate::info::{QpInfo, RailInfo};

/// Bytes of the tag-matching header in front of an eager payload.
pub(crate) const TMH_LEN: usize = 16;

/// One rail's tag-matching resources.
#[derive(Debug)]
pub(crate) struct EagerRail {
    pub tm: TmId,
    pub srq: SrqId,
    pub qp: QpId,
    /// Unexpected-message buffers, `bounce` bytes each.
    pub bounces: Mr,
    pub bounce: usize,
    /// Headers of eager sends, one per send request.
    pub headers: Mr,
}

/// Unexpected-message buffers per rail.
pub(crate) const BOUNCES: usize = 64;

impl EagerRail {
    /// The TM-SRQ, its CQ and eager QP on `dom`, for messages of up to
    /// `eager_max` bytes; `None` when the device has no tag matching (or
    /// too small a tag list for `depth` receives).
    pub fn new(
        dom: &mut Domain,
        scq: CqId,
        (depth, eager_max, send_requests): (usize, usize, usize),
    ) -> Result<Option<EagerRail>, SetupError> {
        let caps = dom.context().tm_caps()?;
        if eager_max == 0 || (caps.max_num_tags as usize) < depth || !caps.rc {
            return Ok(None);
        }
        let cq = dom.create_cq((4 * depth + 2 * BOUNCES + 64).next_power_of_two() as u32)?;
        let attr = TmSrqAttr {
            wqe_cnt: BOUNCES as u32 + 1,
            max_sge: 1,
            max_num_tags: depth as u32,
            max_ops: (4 * depth).next_power_of_two() as u32,
        };
        let (tm, srq) = dom.create_tm_srq(cq, &attr)?;
        let caps = QpCaps {
            sq_wqe_cnt: (send_requests + 16).next_power_of_two() as u32,
            rq_wqe_cnt: 0,
            ..QpCaps::default()
        };
        let qp = dom.create_qp(scq, cq, Some(srq), &caps)?;
        let bounce = TMH_LEN + eager_max;
        let bounces = dom.pd().alloc_mr(bounce * BOUNCES, access::LOCAL_WRITE)?;
        let headers = dom.pd().alloc_mr(TMH_LEN * send_requests, 0)?;
        let r = EagerRail {
            tm,
            srq,
            qp,
            bounces,
            bounce,
            headers,
        };
        for b in 0..BOUNCES {
            r.repost(dom, b as u64)
                .map_err(|e| SetupError::Config(format!("posting eager buffers: {e}")))?;
        }
        Ok(Some(r))
    }

    /// Posts bounce buffer `b` to the SRQ again.
    pub fn repost(&self, dom: &mut Domain, b: u64) -> Result<(), mlx5::wr::PostError> {
        let s = Sge {
            addr: self.bounces.addr() + b * self.bounce as u64,
            len: self.bounce as u32,
            lkey: self.bounces.lkey(),
        };
        dom.post_srq_recv(self.srq, b, &[s])
    }

    /// The address of bounce buffer `b`.
    pub fn bounce_at(&self, b: u64) -> usize {
        self.bounces.as_ptr() as usize + b as usize * self.bounce
    }

    /// The header of bounce buffer `b`: (tag, app_ctx, opcode byte).
    pub fn bounce_header(&self, b: u64) -> (u64, u32, u8) {
        let mut h = [0u8; TMH_LEN];
        self.bounces.read(b as usize * self.bounce, &mut h);
        let t = Tmh::new_unchecked(&h[..]);
        (t.tag(), t.app_ctx(), t.opcode_raw())
    }

    /// Stages the header of send request `idx` (tag = `pos`, `app_ctx` =
    /// `tag`) and returns its SGE.
    pub fn stage_header(&self, idx: u16, pos: u64, tag: u32) -> Sge {
        let mut h = [0u8; TMH_LEN];
        Tmh::new_unchecked(&mut h[..]).set(TmhOpcode::Eager, tag, pos);
        let at = usize::from(idx) * TMH_LEN;
        self.headers.write(at, &h);
        Sge {
            addr: self.headers.addr() + at as u64,
            len: TMH_LEN as u32,
            lkey: self.headers.lkey(),
        }
    }

    /// The eager QP's part of the setup record.
    pub fn info(&self, dom: &Domain) -> QpInfo {
        let c = dom.qp(self.qp).conn_info();
        QpInfo {
            qpn: c.qpn,
            psn: c.psn,
        }
    }

    /// Connects the eager QP to the peer's.
    pub fn connect(
        &self,
        dom: &Domain,
        peer: &RailInfo,
        qp: QpInfo,
        rts: RtsAttr,
    ) -> Result<(), SetupError> {
        dom.qp(self.qp)
            .connect(&RtrAttr::new(peer.conn(qp), 0), &rts)?;
        Ok(())
    }
}
