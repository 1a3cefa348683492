//! The setup record: what the peer needs to connect to an endpoint (its
//! queue, its receive ring, its consumer word, and on DC how to reach it),
//! exchanged out of band over TCP or MPI.

/// What the peer needs to connect to an endpoint (exchanged out of band).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EndpointInfo {
    /// Layout version of this record.
    pub version: u32,
    /// QP number.
    pub qpn: u32,
    /// Port LID.
    pub lid: u16,
    /// GID.
    pub gid: [u8; 16],
    /// Initial PSN.
    pub psn: u32,
    /// Receive ring address and key, and size in bytes.
    pub ring_addr: u64,
    /// See `ring_addr`.
    pub ring_rkey: u32,
    /// See `ring_addr`.
    pub ring_size: u64,
    /// Address and key of the word holding this side's consumer position (for
    /// the peer's RDMA READ).
    pub consumer_addr: u64,
    /// See `consumer_addr`.
    pub consumer_rkey: u32,
    /// Largest response reservation this side keeps (bounds the credit it grants).
    pub max_resp_reservation: u64,
    /// On the DC transport: how to reach this endpoint through its context's
    /// DC target (whose number is `qpn`). `None` on RC.
    #[serde(default)]
    pub dc: Option<DcInfo>,
}

/// How a peer reaches an endpoint over DC, and what this endpoint accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DcInfo {
    /// The DC target's access key.
    pub key: u64,
    /// The immediate the peer's WRITE_IMMs carry: this endpoint's slot in
    /// its low bits, a nonce above. A receive completion on the shared target
    /// is taken for this endpoint only with exactly this immediate.
    pub imm: u32,
}

/// The current version of [`EndpointInfo`].
pub const ENDPOINT_INFO_VERSION: u32 = 2;
