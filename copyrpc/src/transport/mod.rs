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
//! [`Dc`] is the mlx5 direct path over the Dynamically Connected transport:
//! one DC target per context on its SRQ, and a pool of DC initiators whose
//! streams its endpoints borrow while they have work outstanding, so an
//! endpoint costs no QP (docs/architecture.md, "copyrpc over DC").
//!
//! [`Verbs`] is the verbs data path for every other RDMA device (kernel
//! soft-RoCE in particular): the provider's `post_send` / `poll_cq` through
//! rdma-core, one call per work request.
//!
//! Nothing here assumes mlx5 internals: a completion is read only through
//! [`WorkCompletion`] (QPN, byte count, error), a send queue retires work requests
//! up to a completion however it tracks them, and a full queue is
//! [`QueueError::Full`], to be retried after polling.

mod dc;
mod mlx5;
mod rc;
mod select;
mod verbs;

pub use self::dc::{Dc, DcPool, DcSq};
pub use self::mlx5::Mlx5;
pub use self::rc::{RcShared, RcSq};
pub use self::select::{run_on_device, run_on_device_as, DeviceSpec, OnTransport, Wire};
pub use self::verbs::{Verbs, VerbsRecvCq, VerbsSendCq, VerbsSq};
pub use ::mlx5::sq::Sge;

use ::mlx5::cq::Compression;
use ::mlx5::device::{ConnInfo, Context as Device, Cq, DciStreams, Pd, SrqHandle};

use crate::error::{SetupError, WaitError};
use crate::info::{DcInfo, EndpointInfo};

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

/// The context's objects an endpoint's queues are made from.
#[derive(Debug, Clone, Copy)]
pub struct Objects<'a> {
    /// The device.
    pub device: &'a Device,
    /// The context's protection domain.
    pub pd: &'a Pd,
    /// The send CQ (every send queue's completions).
    pub send_cq: &'a Cq,
    /// The receive CQ, bound to the SRQ.
    pub recv_cq: &'a Cq,
    /// The SRQ every receive comes from.
    pub srq: &'a SrqHandle,
    /// Send queue size per endpoint, in basic blocks.
    pub sq_size: u32,
    /// Most endpoints the context holds.
    pub max_endpoints: u32,
    /// CQE compression on the CQs.
    pub compression: Compression,
    /// On DC: the streams each DC initiator is asked for (`None`: the
    /// transport's choice within the device's caps).
    pub dci_streams: Option<DciStreams>,
}

/// What the peer needs to reach a new endpoint, for its [`EndpointInfo`].
#[derive(Debug, Clone, Copy)]
pub struct Reach {
    /// The QP the peer connects to (on DC: the context's DC target).
    pub conn: ConnInfo,
    /// On DC: the target's key, the immediate the peer writes with, and
    /// the initiators this side sends from.
    pub dc: Option<DcInfo>,
}

/// The endpoint a send completion belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Its slot.
    pub idx: u32,
    /// Its generation, where the transport records it: a completion of work
    /// a removed endpoint posted names the old one. `None`: the slot's
    /// current endpoint (the transport forgets a removed endpoint's queue).
    pub gen: Option<u32>,
}

/// A data path copyrpc can run on. All functions are associated functions on
/// the transport's queue types, so a context generic over `T` calls them
/// without indirection.
///
/// One context owns one send CQ, one receive CQ bound to its SRQ, the
/// send-side state its endpoints share ([`Shared`](Self::Shared)), and one
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
    /// The send CQ, shared by every endpoint's send queue.
    type SendCq;
    /// Send-side state every endpoint of a context shares: the QPN → endpoint
    /// table on RC ([`RcShared`]), the DC target and initiator pool on DC.
    type Shared;

    /// The polling side of the receive CQ `cq`, bound to the posting side of
    /// `srq`.
    fn recv_cq(cq: &Cq, srq: &SrqHandle) -> Result<Self::RecvCq, SetupError>;
    /// The polling side of the send CQ.
    fn send_cq(cq: &Cq) -> Result<Self::SendCq, SetupError>;
    /// The shared send-side state of a new context.
    fn shared(o: &Objects<'_>) -> Result<Self::Shared, SetupError>;

    /// The send queue of a new endpoint in slot `idx` (generation `gen`),
    /// and what the peer needs to reach it.
    fn open(
        sh: &mut Self::Shared,
        send_cq: &mut Self::SendCq,
        o: &Objects<'_>,
        idx: u32,
        gen: u32,
    ) -> Result<(Self::Sq, Reach), SetupError>;
    /// Connects an endpoint's send queue to the peer `remote` describes.
    fn connect(
        sh: &mut Self::Shared,
        sq: &mut Self::Sq,
        remote: &EndpointInfo,
    ) -> Result<(), SetupError>;
    /// Stops an endpoint's transport (it closed): on RC its QP goes to ERR,
    /// which the peer's QP sees as a silent peer.
    fn close(sh: &mut Self::Shared, sq: &mut Self::Sq);
    /// Forgets an endpoint's send queue (it was removed): its later
    /// completions are dropped or retired without an owner.
    fn remove(sh: &mut Self::Shared, send_cq: &mut Self::SendCq, sq: Self::Sq);

    /// Posts one zero-length receive to the SRQ (announced by
    /// [`srq_ring`](Self::srq_ring)); false when the SRQ is full.
    fn srq_post(cq: &mut Self::RecvCq) -> bool;
    /// Announces the receives posted since the last call.
    fn srq_ring(cq: &mut Self::RecvCq);

    /// Polls up to `max` receive completions, calling `f` for each (error
    /// ones included) with whether it used one of the SRQ's receives (which
    /// the caller then counts as gone); returns how many were polled.
    fn poll_recv(cq: &mut Self::RecvCq, max: usize, f: impl FnMut(&Self::Cqe<'_>, bool)) -> usize;
    /// The endpoint slot a receive completion names, if any.
    fn recv_owner(sh: &Self::Shared, c: &Self::Cqe<'_>) -> Option<u32>;
    /// Whether receive completion `c`, which names the endpoint of `sq`,
    /// came from that endpoint's peer (on DC, where one target receives
    /// for every endpoint; always on RC, whose QP has one peer).
    fn recv_from_peer(sq: &Self::Sq, c: &Self::Cqe<'_>) -> bool;

    /// Polls up to `max` send completions, calling `f` with the shared
    /// state and the value the completion's queue was registered under;
    /// returns how many were polled.
    fn poll_send(
        cq: &mut Self::SendCq,
        sh: &mut Self::Shared,
        max: usize,
        f: impl FnMut(&mut Self::Shared, u32, &Self::Cqe<'_>),
    ) -> usize;
    /// The endpoint send completion `c` belongs to (`reg`: what
    /// [`poll_send`](Self::poll_send) passed); `None` when it belongs to
    /// none (a transport's own padding, which this call retires).
    fn send_owner(sh: &mut Self::Shared, reg: u32, c: &Self::Cqe<'_>) -> Option<Owner>;

    /// Arms the receive CQ (created on a completion channel): one event at
    /// its next completion, solicited or not.
    fn arm_recv(cq: &mut Self::RecvCq) -> Result<(), WaitError>;
    /// Arms the send CQ likewise.
    fn arm_send(cq: &mut Self::SendCq) -> Result<(), WaitError>;

    /// Queues an RDMA WRITE with immediate `imm` of `local` to `raddr`/`rkey`,
    /// unsignaled unless the signal interval asks for a completion.
    /// Announced by [`ring`](Self::ring). On DC the immediate is the one the
    /// peer asked for in its [`DcInfo`], which names its endpoint.
    fn post_write_imm(
        sh: &mut Self::Shared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), QueueError>;
    /// Queues a signaled RDMA READ of `raddr`/`rkey` into `local`, remembered
    /// as a READ: [`sq_complete`](Self::sq_complete) reports its completion.
    /// Announced by [`ring`](Self::ring).
    fn post_read(
        sh: &mut Self::Shared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
    ) -> Result<(), QueueError>;
    /// Hands the work requests queued since the last call to the device.
    fn ring(sh: &mut Self::Shared, sq: &mut Self::Sq);
    /// Retires the work requests that completion `c` completes, error
    /// completions included; true if a READ was among them. `sq` is the
    /// owner's queue, `None` when its endpoint is gone.
    fn sq_complete(sh: &mut Self::Shared, sq: Option<&mut Self::Sq>, c: &Self::Cqe<'_>) -> bool;
}
