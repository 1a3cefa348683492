//! A rail: one device's share of a communicator.
//!
//! Per rail: a PD with a send CQ and a receive CQ, one SRQ of generic
//! zero-length receives that every QP of the rail draws from, the CTS QP, the
//! data QPs (used round-robin, one per request), and two small memory areas:
//!
//! - the *inbox*, written by the peer: the FIFO of CTS entries this side reads
//!   as a sender, and the completion records this side reads as a receiver;
//! - the *staging* area, read by this rail's NIC: the CTS entries this side
//!   writes as a receiver, and the completion records it writes as a sender
//!   (one of each per slot, so a WQE's source is never rewritten before the
//!   NIC read it: a slot is reused only after its transfer completed).

use mlx5::device::{access, Context, Mr, QpCaps, RtrAttr, RtsAttr};
use mlx5::wr::{CqId, Domain, QpId, SrqId};

use crate::cts::{ENTRY_LEN, MAX_BUFFERS};
use crate::eager::EagerRail;
use crate::error::SetupError;
use crate::info::{QpInfo, RailInfo};
use crate::record::RECORD_LEN;

/// Transport retries (ACK timeouts) before a QP gives up on its peer: 7
/// tries of a 67 ms ACK timeout, about half a second.
const TRANSPORT_RETRIES: u8 = 6;

/// Queue sizes derived from the configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizing {
    pub depth: usize,
    pub qps: usize,
    pub srq_high: usize,
    pub send_requests: usize,
    /// Largest eager message (0: no tag matching).
    pub eager_max: usize,
}

/// Where the peer's inbox on this rail is.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PeerRail {
    pub fifo_addr: u64,
    pub fifo_rkey: u32,
    pub records_addr: u64,
    pub records_rkey: u32,
}

pub(crate) struct Rail {
    pub dom: Domain,
    pub scq: CqId,
    pub rcq: CqId,
    pub srq: SrqId,
    pub cts_qp: QpId,
    pub data_qps: Vec<QpId>,
    next_qp: usize,
    pub inbox: Mr,
    pub staging: Mr,
    /// Receives posted on the SRQ and not yet consumed (as far as polled).
    pub srq_outstanding: u32,
    pub peer: PeerRail,
    /// Tag matching for eager messages, where the device has it.
    pub eager: Option<EagerRail>,
    depth: usize,
}

impl std::fmt::Debug for Rail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rail")
            .field("device", &self.dom.context().name())
            .field("data_qps", &self.data_qps.len())
            .field("srq_outstanding", &self.srq_outstanding)
            .finish()
    }
}

impl Rail {
    pub fn new(ctx: &Context, s: &Sizing) -> Result<Rail, SetupError> {
        let mut dom = Domain::new(ctx)?;
        // Send CQ: a signaled WR per request per rail, CTS writes, and room
        // for the flush of a failing QP.
        let scq =
            dom.create_cq(((s.send_requests + s.depth) * 4 + 64).next_power_of_two() as u32)?;
        // Receive CQ: at most one completion per posted receive.
        let rcq = dom.create_cq((s.srq_high * 2 + 64).next_power_of_two() as u32)?;
        // A linked-list SRQ holds one WQE fewer than its size.
        let srq = dom.create_srq(s.srq_high as u32 + 1, 1)?;
        // A request puts at most MAX_BUFFERS writes and one signal on one
        // data QP; the send pool bounds the requests outstanding.
        let data_caps = QpCaps {
            sq_wqe_cnt: (s.send_requests * (MAX_BUFFERS + 1) + 16).next_power_of_two() as u32,
            rq_wqe_cnt: 0,
            ..QpCaps::default()
        };
        // One CTS per slot in flight, plus unretired ones (see `Comm::irecv`).
        let cts_caps = QpCaps {
            sq_wqe_cnt: (s.depth * 2 + 16).next_power_of_two() as u32,
            rq_wqe_cnt: 0,
            ..QpCaps::default()
        };
        let cts_qp = dom.create_qp(scq, rcq, Some(srq), &cts_caps)?;
        let mut data_qps = Vec::with_capacity(s.qps);
        for _ in 0..s.qps {
            data_qps.push(dom.create_qp(scq, rcq, Some(srq), &data_caps)?);
        }
        let inbox = dom.pd().alloc_mr(
            s.depth * (ENTRY_LEN + RECORD_LEN),
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        )?;
        let staging = dom
            .pd()
            .alloc_mr(s.depth * (ENTRY_LEN + RECORD_LEN), access::LOCAL_WRITE)?;
        let eager = EagerRail::new(&mut dom, scq, (s.depth, s.eager_max, s.send_requests))?;
        Ok(Rail {
            dom,
            scq,
            rcq,
            srq,
            cts_qp,
            data_qps,
            next_qp: 0,
            inbox,
            staging,
            srq_outstanding: 0,
            peer: PeerRail::default(),
            eager,
            depth: s.depth,
        })
    }

    /// Offset of slot `slot`'s CTS entry in the inbox (FIFO) and in staging.
    pub fn cts_off(slot: u8) -> usize {
        usize::from(slot) * ENTRY_LEN
    }

    /// Offset of slot `slot`'s completion record in the inbox and in staging.
    pub fn record_off(&self, slot: u8) -> usize {
        self.depth * ENTRY_LEN + usize::from(slot) * RECORD_LEN
    }

    fn qp_info(&self, q: QpId) -> QpInfo {
        let c = self.dom.qp(q).conn_info();
        QpInfo {
            qpn: c.qpn,
            psn: c.psn,
        }
    }

    /// This rail's part of the setup record.
    pub fn info(&self) -> RailInfo {
        let c = self.dom.qp(self.cts_qp).conn_info();
        RailInfo {
            lid: c.lid,
            gid: c.gid,
            cts_qp: self.qp_info(self.cts_qp),
            data_qps: self.data_qps.iter().map(|&q| self.qp_info(q)).collect(),
            fifo_addr: self.inbox.addr(),
            fifo_rkey: self.inbox.rkey(),
            records_addr: self.inbox.addr() + (self.depth * ENTRY_LEN) as u64,
            records_rkey: self.inbox.rkey(),
            eager_qp: self.eager.as_ref().map(|e| e.info(&self.dom)),
        }
    }

    /// Connects every QP to its counterpart in `peer` (RESET to RTS; remote
    /// writes accepted).
    pub fn connect(&mut self, peer: &RailInfo) -> Result<(), SetupError> {
        let pairs = std::iter::once((self.cts_qp, peer.cts_qp)).chain(
            self.data_qps
                .iter()
                .copied()
                .zip(peer.data_qps.iter().copied()),
        );
        for (q, p) in pairs {
            let qp = self.dom.qp(q);
            // A silent peer must end in RETRY_EXC_ERR on every device: kernel
            // soft-RoCE retries forever at retry_cnt 7 (the IB spec gives 7
            // that meaning only for rnr_retry), so a peer that vanished
            // without a liveness channel was never noticed there.
            let rts = RtsAttr {
                sq_psn: qp.conn_info().psn,
                retry_cnt: TRANSPORT_RETRIES,
                ..RtsAttr::default()
            };
            qp.connect(&RtrAttr::new(peer.conn(p), access::REMOTE_WRITE), &rts)?;
        }
        if let (Some(e), Some(q)) = (&self.eager, peer.eager_qp) {
            let rts = RtsAttr {
                sq_psn: self.dom.qp(e.qp).conn_info().psn,
                retry_cnt: TRANSPORT_RETRIES,
                ..RtsAttr::default()
            };
            e.connect(&self.dom, peer, q, rts)?;
        }
        self.peer = PeerRail {
            fifo_addr: peer.fifo_addr,
            fifo_rkey: peer.fifo_rkey,
            records_addr: peer.records_addr,
            records_rkey: peer.records_rkey,
        };
        Ok(())
    }

    /// The data QP for the next request (round-robin).
    pub fn next_data_qp(&mut self) -> QpId {
        let q = self.data_qps[self.next_qp % self.data_qps.len()];
        self.next_qp = self.next_qp.wrapping_add(1);
        q
    }

    /// Moves every QP to ERR: nothing more is sent, and the peer's writes
    /// into this side's memory stop.
    pub fn shut(&self) {
        let eager = self.eager.as_ref().map(|e| e.qp);
        for q in std::iter::once(self.cts_qp)
            .chain(self.data_qps.iter().copied())
            .chain(eager)
        {
            let _ = self.dom.qp(q).to_err();
        }
    }
}
