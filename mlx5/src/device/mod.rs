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
//! The layout is a one-way chain: the attributes, states and errors live in
//! a leaf outside this folder (`crate::types`, re-exported here) that the
//! backends and the data path import; the front (the enums below)
//! dispatches to the backends through one seam and is imported by neither. The software device
//! is built with the crate's `sim` feature (on by default); without it,
//! opening `sim*` fails with [`DeviceError::NoSoftwareDevice`].

mod front;

pub use crate::types::error::DeviceError;
pub use crate::types::*;
pub use front::{
    ChannelWaker, CompletionChannel, Context, Cq, CqEvent, Dct, HwQpHandle, Mr, Pd, Qp, SrqHandle,
};
