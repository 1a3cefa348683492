//! The device API: one interface for the backends that supply queue memory to
//! the data path — the software mlx5 device (`mlx5::sim`, feature `sim`) and
//! NICs through rdma-core ([`crate::hw`]).
//!
//! Open a device by name (`sim0`, `sim1`, …, or `auto`), allocate protection
//! domains and memory regions, create CQs, SRQs and RC QPs, move QPs through
//! RESET → INIT → RTR → RTS, exchange [`ConnInfo`] with the peer, and take the
//! data-path objects ([`SendQueue`](crate::sq::SendQueue),
//! [`RecvQueue`](crate::rq::RecvQueue), [`Srq`](crate::rq::Srq),
//! [`CqRing`](crate::cq::CqRing)) out of them. CQs created on a
//! [`CompletionChannel`] can be armed, and a thread can sleep on the channel
//! until one of them raises its completion event.
//!
//! Each object is an enum over the backends, with one set of methods, in a
//! file of its own: `context` ([`Context`]: opening a device, creating the
//! RC objects), `pd`, `mr`, `cq`, `srq`, `qp`, `channel` (completion
//! channels) and `dc` (the DC transport). Open a device by name and
//! everything created from it belongs to the same backend. These are
//! control-path objects; the data path is handed out by them and never goes
//! through them. Every call into a backend goes through one seam (`seam`:
//! the `backend!` macro, the only place that matches an object on its
//! backend).
//!
//! The layout is a one-way chain: the attributes, states and errors live in
//! a leaf outside this folder (`crate::types`, re-exported here) that the
//! backends and the data path import; the objects here dispatch to the
//! backends and are imported by neither. The software device is built with
//! the crate's `sim` feature (on by default); without it, opening `sim*`
//! fails with [`DeviceError::NoSoftwareDevice`].

mod channel;
mod context;
mod cq;
mod dc;
mod mr;
mod pd;
mod qp;
mod seam;
mod srq;
mod tm;

pub use crate::types::error::DeviceError;
pub use crate::types::*;
pub use channel::{ChannelWaker, CompletionChannel, CqEvent};
pub use context::Context;
pub use cq::Cq;
pub use dc::Dct;
pub use mr::Mr;
pub use pd::Pd;
pub use qp::{HwQpHandle, Qp};
pub use srq::SrqHandle;
pub use tm::TmSrqHandle;
