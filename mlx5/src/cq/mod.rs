//! Completion queues: polling CQEs straight out of CQ memory.
//!
//! - [`CqRing`]: the CQ memory and the consumer side — owner check, read barrier,
//!   compressed-CQE expansion (enhanced and basic layouts), scatter-to-CQE, the
//!   consumer-index doorbell record.
//! - [`Completion`]: one completion as the consumer sees it, a view of a CQE (or
//!   of the CQE expanded from a mini CQE).
//! - [`DispatchCq`]: a CQ shared by many queues, dispatching each completion by QPN
//!   through a [`FastMap`](crate::fastmap::FastMap).
//! - [`MonoCq`]: a CQ fed by a single completion source (a send queue, an RQ, an
//!   SRQ), with the source and the callback as type parameters so the whole
//!   poll loop inlines.

mod completion;
mod mono;
mod ring;
mod shared;

pub use completion::Completion;
pub use mono::{CompletionSource, MonoCq};
pub use ring::{Compression, CqArmMemory, CqError, CqMemory, CqRing};
pub use shared::DispatchCq;
