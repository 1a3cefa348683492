//! The setup record: what one side tells the other to connect a
//! communicator (exchanged over TCP by [`crate::conn`], over MPI by
//! `mpi_setup`, or directly by [`crate::pair`]).

use mlx5::device::ConnInfo;

/// The current layout version of [`CommInfo`].
pub const COMM_INFO_VERSION: u32 = 2;

/// One side's communicator, as its peer needs it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommInfo {
    /// Layout version ([`COMM_INFO_VERSION`]).
    pub version: u32,
    /// FIFO slots (both sides must agree).
    pub depth: u32,
    /// Bytes per `size_q` unit (both sides must agree).
    pub granularity: u32,
    /// Largest eager message this side sends and takes over tag matching
    /// (0: none). Both sides use the smaller of the two, and only if every
    /// rail of both has an eager QP.
    pub eager_max: u32,
    /// Per rail (rail 0 first).
    pub rails: Vec<RailInfo>,
}

/// One rail of a [`CommInfo`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RailInfo {
    /// Port LID of the rail's device.
    pub lid: u16,
    /// GID of the rail's device.
    pub gid: [u8; 16],
    /// The CTS QP.
    pub cts_qp: QpInfo,
    /// The data QPs (the peer's QP `i` connects to this side's QP `i`).
    pub data_qps: Vec<QpInfo>,
    /// Where the peer writes CTS entries on this rail (one per slot).
    pub fifo_addr: u64,
    /// See `fifo_addr`.
    pub fifo_rkey: u32,
    /// Where the peer's leader rail writes completion records (one per slot).
    pub records_addr: u64,
    /// See `records_addr`.
    pub records_rkey: u32,
    /// The eager QP, on the rail's TM-SRQ (where the device has tag
    /// matching).
    pub eager_qp: Option<QpInfo>,
}

/// A QP of a [`RailInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QpInfo {
    /// QP number.
    pub qpn: u32,
    /// Initial packet sequence number.
    pub psn: u32,
}

impl RailInfo {
    /// The connection details of QP `q` of this rail.
    pub(crate) fn conn(&self, q: QpInfo) -> ConnInfo {
        ConnInfo {
            qpn: q.qpn,
            lid: self.lid,
            gid: self.gid,
            psn: q.psn,
        }
    }
}

impl CommInfo {
    /// The eager threshold both sides use with `peer`: the smaller of the
    /// two, if every rail of both has an eager QP; else 0 (no eager
    /// messages).
    pub(crate) fn eager_with(&self, peer: &CommInfo) -> u32 {
        let all = |i: &CommInfo| i.rails.iter().all(|r| r.eager_qp.is_some());
        if all(self) && all(peer) {
            self.eager_max.min(peer.eager_max)
        } else {
            0
        }
    }

    /// Checks that a peer's record fits this side's.
    pub(crate) fn check_peer(&self, peer: &CommInfo) -> Result<(), String> {
        if peer.version != COMM_INFO_VERSION {
            return Err(format!(
                "version {} (this side speaks {COMM_INFO_VERSION})",
                peer.version
            ));
        }
        if peer.depth != self.depth {
            return Err(format!("depth {} (this side: {})", peer.depth, self.depth));
        }
        if peer.granularity != self.granularity {
            return Err(format!(
                "granularity {} (this side: {})",
                peer.granularity, self.granularity
            ));
        }
        if peer.rails.len() != self.rails.len() {
            return Err(format!(
                "{} rails (this side: {})",
                peer.rails.len(),
                self.rails.len()
            ));
        }
        for (i, (a, b)) in self.rails.iter().zip(&peer.rails).enumerate() {
            if a.data_qps.len() != b.data_qps.len() {
                return Err(format!(
                    "rail {i}: {} data QPs (this side: {})",
                    b.data_qps.len(),
                    a.data_qps.len()
                ));
            }
        }
        Ok(())
    }
}
