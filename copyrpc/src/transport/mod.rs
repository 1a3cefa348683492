//! The data path copyrpc needs from an RDMA device, as one narrow trait.
//!
//! copyrpc posts two kinds of work request — a WRITE_IMM of one batch (one
//! SGE, the batch size in the immediate) and a signaled RDMA READ of the peer's
//! consumer word — keeps a shared receive queue stocked with zero-length
//! receives, and polls two completion queues: receive completions (one per
//! batch the peer wrote, its size in the byte count) and send completions
//! (dispatched to the endpoint whose QP they belong to). [`Transport`] is that
//! and nothing more; everything else (PD, MRs, QP creation and state changes)
//! goes through [`mlx5::device`](::mlx5::device) on every backend.
//!
//! [`Mlx5`] is the mlx5 direct data path (the software device or a ConnectX
//! NIC): WQEs written straight into the send queue, CQEs read straight from CQ
//! memory. The trait is generic rather than dynamic — a
//! [`Context`](crate::Context) is monomorphized for its transport and every
//! call inlines — so the choice costs the mlx5 path nothing.
//!
//! [`Verbs`] is the verbs data path for every other RDMA device (kernel
//! soft-RoCE in particular): the provider's `post_send` / `poll_cq` through
//! rdma-core, one call per work request.
//!
//! Nothing here assumes mlx5 internals: a completion is read only through
//! [`WorkCompletion`] (QPN, byte count, error), a send queue retires work requests
//! up to a completion however it tracks them, and a full queue is
//! [`QueueError::Full`], to be retried after polling.

mod mlx5;
mod select;
mod verbs;

pub use self::mlx5::Mlx5;
pub use self::select::{run_on_device, DeviceSpec, OnTransport};
pub use self::verbs::{Verbs, VerbsRecvCq, VerbsSendCq, VerbsSq};
pub use ::mlx5::sq::Sge;

use ::mlx5::device::{Cq, Qp, SrqHandle};

use crate::error::{SetupError, WaitError};

/// Why a work request was not posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The queue has no room now: poll completions and retry.
    #[error("queue full")]
    Full,
    /// The device refused the request (the provider's errno on verbs): the
    /// queue cannot take it, ever, and its endpoint closes.
    #[error("refused by the device (code {0})")]
    Failed(u32),
}

/// What copyrpc reads from a work completion.
pub trait WorkCompletion {
    /// The local QP the completion belongs to.
    fn qpn(&self) -> u32;
    /// Bytes transferred (receive completions: the size of the WRITE_IMM that
    /// consumed the receive).
    fn byte_len(&self) -> u32;
    /// `None` on success, else a transport error code (the mlx5 CQE syndrome,
    /// or `ibv_wc_status` on verbs).
    fn error(&self) -> Option<u32>;
}

/// A data path copyrpc can run on. All functions are associated functions on
/// the transport's queue types, so a context generic over `T` calls them
/// without indirection.
///
/// One context owns one send CQ, one receive CQ bound to its SRQ, and one
/// send queue per endpoint; it uses each from one thread at a time and never
/// concurrently, so nothing here needs to synchronize.
pub trait Transport: Sized + 'static {
    /// A completion, borrowed from the CQ for the duration of a callback.
    type Cqe<'a>: WorkCompletion;
    /// An endpoint's send queue.
    type Sq;
    /// The receive CQ bound to the SRQ whose receives it completes: polled,
    /// and posted to.
    type RecvCq;
    /// The send CQ, shared by every endpoint's send queue; completions are
    /// dispatched by QPN to the index registered for it.
    type SendCq;

    /// The send queue of `qp` (a QP with `sq_size` send queue entries),
    /// requesting a completion at least every `signal_interval` work requests.
    fn send_queue(qp: &Qp, signal_interval: u32, sq_size: u32) -> Result<Self::Sq, SetupError>;
    /// The polling side of the receive CQ `cq`, bound to the posting side of
    /// `srq`.
    fn recv_cq(cq: &Cq, srq: &SrqHandle) -> Result<Self::RecvCq, SetupError>;
    /// The polling side of the send CQ, with no QP registered.
    fn send_cq(cq: &Cq) -> Result<Self::SendCq, SetupError>;

    /// Posts one zero-length receive to the SRQ (announced by
    /// [`srq_ring`](Self::srq_ring)); false when the SRQ is full.
    fn srq_post(cq: &mut Self::RecvCq) -> bool;
    /// Announces the receives posted since the last call.
    fn srq_ring(cq: &mut Self::RecvCq);

    /// Polls up to `max` receive completions, calling `f` for each (error
    /// ones included) with whether it used one of the SRQ's receives (which
    /// the caller then counts as gone); returns how many were polled.
    fn poll_recv(cq: &mut Self::RecvCq, max: usize, f: impl FnMut(&Self::Cqe<'_>, bool)) -> usize;

    /// Dispatches completions of QP `qpn` to `idx`.
    fn register(cq: &mut Self::SendCq, qpn: u32, idx: u32);
    /// Stops dispatching completions of QP `qpn` (later ones are dropped).
    fn unregister(cq: &mut Self::SendCq, qpn: u32);
    /// Polls up to `max` send completions, calling `f` with the index
    /// registered for the completion's QP (completions of unregistered QPs are
    /// dropped); returns how many were polled.
    fn poll_send(cq: &mut Self::SendCq, max: usize, f: impl FnMut(u32, &Self::Cqe<'_>)) -> usize;

    /// Arms the receive CQ (created on a completion channel): one event at
    /// its next completion, solicited or not.
    fn arm_recv(cq: &mut Self::RecvCq) -> Result<(), WaitError>;
    /// Arms the send CQ likewise.
    fn arm_send(cq: &mut Self::SendCq) -> Result<(), WaitError>;

    /// Queues an RDMA WRITE with immediate `imm` of `local` to `raddr`/`rkey`,
    /// unsignaled unless the signal interval asks for a completion.
    /// Announced by [`ring`](Self::ring).
    fn post_write_imm(
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), QueueError>;
    /// Queues a signaled RDMA READ of `raddr`/`rkey` into `local`, remembered
    /// as a READ: [`sq_complete`](Self::sq_complete) reports its completion.
    /// Announced by [`ring`](Self::ring).
    fn post_read(sq: &mut Self::Sq, local: Sge, raddr: u64, rkey: u32) -> Result<(), QueueError>;
    /// Hands the work requests queued since the last call to the device.
    fn ring(sq: &mut Self::Sq);
    /// Retires the work requests that completion `c` (of this queue)
    /// completes, error completions included; true if a READ was among them.
    fn sq_complete(sq: &mut Self::Sq, c: &Self::Cqe<'_>) -> bool;
}
