//! Types shared by every backend of the device API and the data path: the
//! attributes objects are created and connected with, their states, the
//! software device's execution modes, and the errors (`error`). A leaf: the
//! backends (`sim`, `hw`), the send queue and the device front import
//! these, and nothing here knows a backend. The device API re-exports them
//! (`mlx5::device::QpCaps`, …).

pub(crate) mod error;
mod tm;

pub use tm::{TmCaps, TmSrqAttr};

/// Memory-region access flags (the values of `IBV_ACCESS_*`).
pub mod access {
    /// The NIC may write the region locally (receives, READ results, atomics).
    pub const LOCAL_WRITE: u32 = 1;
    /// Peers may RDMA WRITE into the region.
    pub const REMOTE_WRITE: u32 = 2;
    /// Peers may RDMA READ the region.
    pub const REMOTE_READ: u32 = 4;
    /// Peers may run atomics on the region.
    pub const REMOTE_ATOMIC: u32 = 8;
}

/// RC QP states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Just created, or reset.
    Reset,
    /// Receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// In error: every outstanding WQE completes with a flush error.
    Err,
}

/// What a peer needs to connect to a QP: exchanged out of band (TCP, MPI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnInfo {
    /// QP number.
    pub qpn: u32,
    /// Port LID (InfiniBand); on the software device, the device number + 1.
    pub lid: u16,
    /// GID (RoCE); on the software device, derived from fabric and device.
    pub gid: [u8; 16],
    /// Initial packet sequence number.
    pub psn: u32,
}

/// How a CQ is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqAttr {
    /// Number of CQEs (rounded up to a power of two).
    pub cqe_cnt: u32,
    /// 64 or 128 bytes per CQE.
    pub cqe_size: usize,
    /// Compression layout the NIC may use.
    pub compression: crate::cq::Compression,
    /// Small receives (on QPs with their own RQ) land in the CQE.
    pub scatter_to_cqe: bool,
}

impl Default for CqAttr {
    fn default() -> Self {
        Self {
            cqe_cnt: 4096,
            cqe_size: 64,
            compression: crate::cq::Compression::Off,
            scatter_to_cqe: false,
        }
    }
}

/// How an RC QP is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// SQ size in 64-byte basic blocks (rounded up to a power of two).
    pub sq_wqe_cnt: u32,
    /// RQ size in WQEs (ignored with an SRQ).
    pub rq_wqe_cnt: u32,
    /// SGEs per receive WQE (ignored with an SRQ).
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            sq_wqe_cnt: 256,
            rq_wqe_cnt: 256,
            max_recv_sge: 1,
            max_inline: 256,
        }
    }
}

/// Attributes for INIT → RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    /// The peer.
    pub remote: ConnInfo,
    /// Remote operations this QP accepts ([`access`] REMOTE_* bits).
    pub access: u32,
    /// RNR NAK delay asked of peers, IB encoding (0 = 655.36 ms, 1 = 0.01 ms,
    /// … 12 = 0.64 ms, 31 = 491.52 ms).
    pub min_rnr_timer: u8,
    /// Incoming READ/atomic depth.
    pub max_dest_rd_atomic: u8,
}

impl RtrAttr {
    /// RTR towards `remote`, accepting the remote operations in `access`; an
    /// RNR NAK asks peers to wait 0.01 ms; no incoming READs or atomics.
    pub fn new(remote: ConnInfo, access: u32) -> Self {
        RtrAttr {
            remote,
            access,
            min_rnr_timer: 1,
            max_dest_rd_atomic: 0,
        }
    }
}

/// How a DC target (DCT) is created. A ConnectX gives it its number at
/// RTR, its last state, so it is created ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DctAttr {
    /// The DC access key: a DCI's WQE must carry it to reach the DCT.
    pub key: u64,
    /// Remote operations the DCT accepts ([`access`] REMOTE_* bits).
    pub access: u32,
    /// RNR NAK delay asked of DCIs, IB encoding (see [`RtrAttr`]).
    pub min_rnr_timer: u8,
}

/// A DC initiator's streams: WQEs of one stream complete in order, and an
/// error stops its stream alone until `1 << log_errored` streams have
/// failed (then the whole DCI goes to ERR). Zero and zero: one stream, and
/// any error stops the DCI, as on an RC QP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DciStreams {
    /// log2 of the streams that may be in flight at once.
    pub log_concurrent: u8,
    /// log2 of the errored streams the DCI survives (0: none).
    pub log_errored: u8,
}

/// Where a DCI's WQE goes: a DCT, the key it checks, the route to its
/// device, and the DCI stream the WQE belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DcDest {
    /// The DCT number.
    pub dct: u32,
    /// The DCT's access key.
    pub key: u64,
    /// The DCT's port LID (on the software device, its device number + 1).
    pub lid: u16,
    /// The DCT's GID (RoCE).
    pub gid: [u8; 16],
    /// The DCI stream.
    pub stream: u16,
}

/// Attributes for RTR → RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    /// Local ACK timeout, IB encoding: 4.096 µs × 2^timeout (0: infinite).
    pub timeout: u8,
    /// Transport retries before TRANSPORT_RETRY_EXC_ERR.
    pub retry_cnt: u8,
    /// RNR retries before RNR_RETRY_EXC_ERR (7: forever).
    pub rnr_retry: u8,
    /// Outgoing READ/atomic depth.
    pub max_rd_atomic: u8,
    /// Initial send PSN.
    pub sq_psn: u32,
}

impl Default for RtsAttr {
    fn default() -> Self {
        Self {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
            sq_psn: 0,
        }
    }
}

/// IB `min_rnr_timer` encoding to microseconds (IBA table 45).
#[cfg(feature = "sim")]
pub(crate) fn rnr_timer_us(code: u8) -> u32 {
    const T: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    T[usize::from(code & 31)]
}

/// IB local ACK timeout encoding to microseconds (0: infinite).
pub fn ack_timeout_us(code: u8) -> u32 {
    if code == 0 {
        u32::MAX
    } else {
        (4.096f64 * f64::from(1u32 << code.min(31))).min(f64::from(u32::MAX - 1)) as u32
    }
}

/// Faults the deferred scheduler injects, each a probability in parts per
/// thousand per step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// A step does nothing (the NIC is slow).
    pub delay: u16,
    /// The responder has no receive WQE for this message (RNR NAK).
    pub rnr: u16,
    /// The responder rejects the rkey (remote access error; both QPs to ERR).
    pub access: u16,
    /// The peer does not answer this try (transport retry; fatal once
    /// `retry_cnt` is used up).
    pub peer_loss: u16,
    /// CQEs written in this step are not compressed even if the CQ allows it.
    pub no_compress: u16,
}

/// When the simulated NIC runs work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// In the doorbell call (the default).
    Inline,
    /// Later, in a seeded order, with faults.
    Deferred {
        /// Seed of the scheduler and the fault plan.
        seed: u64,
        /// Faults to inject.
        faults: FaultPlan,
    },
}

/// What the deferred scheduler did (for tests and diagnostics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// Steps taken.
    pub steps: u64,
    /// Steps skipped by a delay fault.
    pub delays: u64,
    /// WQEs executed (completed, failed or flushed).
    pub executed: u64,
    /// Faults armed: RNR, access, peer loss, compression off.
    pub rnr: u64,
    /// See `rnr`.
    pub access: u64,
    /// See `rnr`.
    pub peer_loss: u64,
    /// See `rnr`.
    pub no_compress: u64,
    /// The logical clock (ns): each step takes a microsecond, and time
    /// jumps ahead to the next CQE the link model holds when nothing else is
    /// pending.
    pub clock_ns: u64,
}
