//! The work-request level: verbs semantics (post a send work request, post a
//! receive, poll work completions) over either data path.
//!
//! - **direct**: WQEs written into the send queue and CQEs parsed out of CQ
//!   memory by this crate ([`crate::sq`], [`crate::cq`]): the software device
//!   and mlx5 NICs;
//! - **verbs**: the provider's own post/poll entry points
//!   ([`crate::hw::verbs`]): any other RDMA device, kernel soft-RoCE (`rxe`)
//!   above all.
//!
//! A [`Domain`] owns a PD and the CQs, SRQs and QPs made on it, so a CQ can
//! hand each completion to the queue it retires without shared ownership.
//! Completions come out as [`Wc`]s, the same whichever path made them — which
//! is what lets the same scenario run on `sim` and on `rxe` and have its
//! completions compared (the differential suite, `tests/differential.rs`).
//!
//! This is a convenience and conformance layer: one dispatch per call and a
//! few table lookups per completion. Fast paths (copyrpc) use the queues
//! directly.

mod direct;
mod status;
mod tm;
mod verbs;

use std::collections::HashMap;

pub use status::{WcOpcode, WcStatus};
pub use tm::{TmId, TmWc};

use crate::device::{Context, CqAttr, DeviceError, Pd, Qp, QpCaps};
use crate::sq::Sge;

/// Which data path a [`Domain`] drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// This crate's WQE/CQE code (software device, mlx5 NICs).
    Direct,
    /// The provider's post/poll entry points (other RDMA devices).
    Verbs,
}

impl DataPath {
    /// The path a device takes: direct on the software device and mlx5 NICs
    /// (`mlx5dv_is_supported`), verbs elsewhere.
    pub fn of(ctx: &Context) -> DataPath {
        if ctx.has_direct_path() {
            DataPath::Direct
        } else {
            DataPath::Verbs
        }
    }
}

/// The operation of a send work request (`enum ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// RDMA WRITE of the gather list to `remote`.
    Write,
    /// RDMA WRITE with immediate: also consumes a receive at the peer.
    WriteImm(u32),
    /// SEND into the peer's next receive.
    Send,
    /// SEND with immediate.
    SendImm(u32),
    /// RDMA READ from `remote` into the gather list.
    Read,
    /// 64-bit compare-and-swap at `remote`; the old value lands in the one
    /// 8-byte SGE.
    CompSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// 64-bit fetch-and-add at `remote`; the old value lands in the one 8-byte
    /// SGE.
    FetchAdd(u64),
}

/// A send work request.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Handed back in the work completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local gather (or, for READ and atomics, scatter) list.
    pub sges: &'a [Sge],
    /// Remote address and rkey (ignored by SEND).
    pub remote: (u64, u32),
    /// Ask for a completion (errors complete regardless).
    pub signaled: bool,
    /// Wait for earlier READs and atomics before starting.
    pub fence: bool,
}

/// A work completion (`struct ibv_wc`), the same whichever path made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The work request's id.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode (verbs defines it for successful completions only).
    pub opcode: Option<WcOpcode>,
    /// Bytes received (receives), read (READ), or 8 (atomics); 0 otherwise.
    pub byte_len: u32,
    /// The immediate, in host order, when the completion carries one.
    pub imm: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
    /// The device's own error detail (the mlx5 vendor syndrome; rxe: 0).
    pub vendor_err: u32,
}

/// Why a post failed.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// The queue is full: poll completions and retry.
    #[error("queue full")]
    Full,
    /// The request is malformed for this queue (too many SGEs, an atomic
    /// without its one 8-byte SGE, no receive queue on an SRQ QP, ...).
    #[error("invalid work request: {0}")]
    Invalid(String),
    /// No such object in this domain.
    #[error("no such {0} in this domain")]
    NoSuch(&'static str),
    /// The device refused.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// A CQ of a [`Domain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqId(usize);
/// An SRQ of a [`Domain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqId(usize);
/// A QP of a [`Domain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpId(usize);

enum Path {
    Direct(direct::Queues),
    Verbs(verbs::Queues),
}

/// A PD with the CQs, SRQs and RC QPs made on it, driven at the work-request
/// level through one data path.
pub struct Domain {
    ctx: Context,
    pd: Pd,
    qps: Vec<Qp>,
    by_qpn: HashMap<u32, usize>,
    path: Path,
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("device", &self.ctx.name())
            .field("path", &self.path())
            .field("qps", &self.qps.len())
            .finish()
    }
}

impl Domain {
    /// A domain on `ctx`, with the data path the device takes
    /// ([`DataPath::of`]).
    pub fn new(ctx: &Context) -> Result<Domain, DeviceError> {
        Self::with_path(ctx, DataPath::of(ctx))
    }

    /// A domain on `ctx` driven through `path` (the verbs path needs a device
    /// opened through rdma-core; an mlx5 NIC can take either).
    fn with_path(ctx: &Context, path: DataPath) -> Result<Domain, DeviceError> {
        if path == DataPath::Verbs && !ctx.has_verbs_path() {
            return Err(DeviceError::Invalid(
                "the software device has the direct (mlx5) data path only".into(),
            ));
        }
        Ok(Domain {
            ctx: ctx.clone(),
            pd: ctx.alloc_pd()?,
            qps: Vec::new(),
            by_qpn: HashMap::new(),
            path: match path {
                DataPath::Direct => Path::Direct(direct::Queues::default()),
                DataPath::Verbs => Path::Verbs(verbs::Queues::default()),
            },
        })
    }

    /// The data path.
    pub fn path(&self) -> DataPath {
        match self.path {
            Path::Direct(_) => DataPath::Direct,
            Path::Verbs(_) => DataPath::Verbs,
        }
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The domain's PD (register memory on it).
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// Creates a CQ of at least `cqe_cnt` entries.
    pub fn create_cq(&mut self, cqe_cnt: u32) -> Result<CqId, DeviceError> {
        let cq = self.ctx.create_cq(&CqAttr {
            cqe_cnt,
            ..CqAttr::default()
        })?;
        Ok(CqId(match &mut self.path {
            Path::Direct(q) => q.add_cq(cq)?,
            Path::Verbs(q) => q.add_cq(cq)?,
        }))
    }

    /// Creates an SRQ of `wqe_cnt` receives of up to `max_sge` SGEs.
    pub fn create_srq(&mut self, wqe_cnt: u32, max_sge: u32) -> Result<SrqId, DeviceError> {
        let srq = self.ctx.create_srq(&self.pd, wqe_cnt, max_sge)?;
        Ok(SrqId(match &mut self.path {
            Path::Direct(q) => q.add_srq(srq)?,
            Path::Verbs(q) => q.add_srq(srq)?,
        }))
    }

    /// Creates an RC QP completing sends on `send_cq` and receives on
    /// `recv_cq`, receiving from `srq` or from a receive queue of its own.
    pub fn create_qp(
        &mut self,
        send_cq: CqId,
        recv_cq: CqId,
        srq: Option<SrqId>,
        caps: &QpCaps,
    ) -> Result<QpId, DeviceError> {
        let no = |what: &str| DeviceError::Invalid(format!("no such {what} in this domain"));
        let (scq, rcq, srqh) = match &self.path {
            Path::Direct(q) => (q.cq(send_cq.0), q.cq(recv_cq.0), srq.map(|s| q.srq(s.0))),
            Path::Verbs(q) => (q.cq(send_cq.0), q.cq(recv_cq.0), srq.map(|s| q.srq(s.0))),
        };
        let (scq, rcq) = (scq.ok_or_else(|| no("CQ"))?, rcq.ok_or_else(|| no("CQ"))?);
        let srqh = match srqh {
            None => None,
            Some(h) => Some(h.ok_or_else(|| no("SRQ"))?),
        };
        let qp = self
            .ctx
            .create_qp(&self.pd, &scq, &rcq, srqh.as_ref(), caps)?;
        let idx = self.qps.len();
        match &mut self.path {
            Path::Direct(q) => q.add_qp(&qp, srq.map(|s| s.0), caps)?,
            Path::Verbs(q) => q.add_qp(&qp)?,
        }
        self.by_qpn.insert(qp.qpn(), idx);
        self.qps.push(qp);
        Ok(QpId(idx))
    }

    /// A QP, for its control path (state transitions, connection info).
    pub fn qp(&self, id: QpId) -> &Qp {
        &self.qps[id.0]
    }

    /// Posts a send work request on `qp`.
    pub fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<(), PostError> {
        if qp.0 >= self.qps.len() {
            return Err(PostError::NoSuch("QP"));
        }
        if matches!(wr.op, SendOp::CompSwap { .. } | SendOp::FetchAdd(_))
            && (wr.sges.len() != 1 || wr.sges[0].len != 8)
        {
            return Err(PostError::Invalid(
                "an atomic takes exactly one 8-byte SGE".into(),
            ));
        }
        match &mut self.path {
            Path::Direct(q) => q.post_send(qp.0, wr),
            Path::Verbs(q) => q.post_send(qp.0, wr),
        }
    }

    /// Posts a receive of `sges` on `qp`'s own receive queue.
    pub fn post_recv(&mut self, qp: QpId, wr_id: u64, sges: &[Sge]) -> Result<(), PostError> {
        if qp.0 >= self.qps.len() {
            return Err(PostError::NoSuch("QP"));
        }
        match &mut self.path {
            Path::Direct(q) => q.post_recv(qp.0, wr_id, sges),
            Path::Verbs(q) => q.post_recv(qp.0, wr_id, sges),
        }
    }

    /// Posts a receive of `sges` on `srq`.
    pub fn post_srq_recv(&mut self, srq: SrqId, wr_id: u64, sges: &[Sge]) -> Result<(), PostError> {
        match &mut self.path {
            Path::Direct(q) => q.post_srq_recv(srq.0, wr_id, sges),
            Path::Verbs(q) => q.post_srq_recv(srq.0, wr_id, sges),
        }
    }

    /// Polls up to `max` work completions of `cq` onto `out`; returns how many.
    pub fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Wc>) -> Result<usize, PostError> {
        let before = out.len();
        match &mut self.path {
            Path::Direct(q) => q.poll(cq.0, max, &self.by_qpn, out)?,
            Path::Verbs(q) => q.poll(cq.0, max, out)?,
        }
        Ok(out.len() - before)
    }
}
