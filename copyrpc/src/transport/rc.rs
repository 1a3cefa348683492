//! What the RC transports ([`Mlx5`](super::Mlx5), [`Verbs`](super::Verbs))
//! share: one QP per endpoint, connected to the peer's, and the QPN that
//! names the endpoint a completion belongs to.

use mlx5::device::{access, Qp, QpCaps, RtrAttr, RtsAttr};
use mlx5::fastmap::FastMap;

use super::{Objects, Reach};
use crate::error::SetupError;
use crate::info::EndpointInfo;

/// Work requests between requested completions on an endpoint's send queue.
pub(crate) const SIGNAL_INTERVAL: u32 = 64;
/// Transport retries (ACK timeouts) before a QP gives up on its peer.
pub(crate) const TRANSPORT_RETRIES: u8 = 6;

/// The RC transports' shared state: which endpoint slot each QP serves.
#[derive(Debug, Default)]
pub struct RcShared {
    by_qpn: FastMap<u32>,
}

impl RcShared {
    /// The endpoint slot of QP `qpn`.
    #[inline(always)]
    pub fn slot(&self, qpn: u32) -> Option<u32> {
        self.by_qpn.get(qpn).copied()
    }
}

/// An RC endpoint's send side: its QP and the data path's queue on it.
#[derive(Debug)]
pub struct RcSq<Q> {
    /// The endpoint's QP.
    pub qp: Qp,
    /// The data path's send queue on it.
    pub q: Q,
}

/// Creates an endpoint's QP on the context's CQs and SRQ, its send queue
/// through `queue`, and records it for slot `idx`.
pub(crate) fn open<Q>(
    sh: &mut RcShared,
    o: &Objects<'_>,
    idx: u32,
    queue: impl FnOnce(&Qp) -> Result<Q, SetupError>,
) -> Result<(RcSq<Q>, Reach), SetupError> {
    let caps = QpCaps {
        sq_wqe_cnt: o.sq_size,
        rq_wqe_cnt: 0,
        max_recv_sge: 1,
        max_inline: 0,
    };
    let qp = o
        .device
        .create_qp(o.pd, o.send_cq, o.recv_cq, Some(o.srq), &caps)?;
    let q = queue(&qp)?;
    let conn = qp.conn_info();
    sh.by_qpn.insert(conn.qpn, idx);
    Ok((RcSq { qp, q }, Reach { conn, dc: None }))
}

/// Connects an endpoint's QP to the peer's (RESET → RTS).
pub(crate) fn connect<Q>(sq: &mut RcSq<Q>, remote: &EndpointInfo) -> Result<(), SetupError> {
    if remote.dc.is_some() {
        return Err(SetupError::Invalid(
            "the peer's endpoint is on DC, this context on RC: build both on one transport".into(),
        ));
    }
    let peer = mlx5::device::ConnInfo {
        qpn: remote.qpn,
        lid: remote.lid,
        gid: remote.gid,
        psn: remote.psn,
    };
    // A silent peer must end in RETRY_EXC_ERR on every implementation:
    // kernel soft-RoCE retries forever at retry_cnt 7 (the IB spec gives
    // 7 that meaning only for rnr_retry). Seven tries of a 67 ms ACK
    // timeout: a dead peer is seen in about half a second.
    sq.qp.connect(
        &RtrAttr {
            remote: peer,
            access: access::REMOTE_WRITE | access::REMOTE_READ,
            min_rnr_timer: 1,
            max_dest_rd_atomic: 4,
        },
        &RtsAttr {
            retry_cnt: TRANSPORT_RETRIES,
            ..RtsAttr::default()
        },
    )?;
    Ok(())
}

/// Moves a closed endpoint's QP to ERR: its peer's QP sees a silent peer.
pub(crate) fn close<Q>(sq: &mut RcSq<Q>) {
    let _ = sq.qp.to_err();
}

/// Forgets a removed endpoint's QP; returns its number.
pub(crate) fn remove<Q>(sh: &mut RcShared, sq: RcSq<Q>) -> u32 {
    let qpn = sq.qp.qpn();
    sh.by_qpn.remove(qpn);
    qpn
}
