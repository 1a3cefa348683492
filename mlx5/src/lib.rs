//! Direct-verbs data path for mlx5 (NVIDIA/Mellanox ConnectX) NICs.
//!
//! This crate writes work queue entries straight into a send queue's memory,
//! rings doorbells (doorbell record + BlueFlame), and polls completions straight
//! out of completion queue memory, the way rdma-core's `providers/mlx5` and UCX's
//! `uct/ib/mlx5` do, without going through libibverbs on the fast path.
//!
//! It is device-independent: a backend (real hardware through rdma-core's
//! `mlx5dv_init_obj`, or the software device) supplies the queue memory, the
//! doorbell records and the BlueFlame register, and the same posting and polling
//! code runs on either.
//!
//! - [`prm`]: the hardware byte layouts, as zero-copy views, and their constants.
//! - [`sq`]: the send queue and its WQE builder (and how it rings the
//!   BlueFlame register, [`sq::BfMode`]).
//! - [`rq`]: receive queues (RQ) and shared receive queues (SRQ).
//! - [`cq`]: completion queue polling (owner bit, compressed CQEs,
//!   scatter-to-CQE), [`cq::DispatchCq`] with QPN dispatch and [`cq::MonoCq`].
//! - [`wqe_table`]: per-WQE user data and free-space accounting.
//! - [`fastmap`]: the direct-indexed QPN table.
//! - [`device`]: opening devices and creating PDs, MRs, CQs, SRQs and QPs;
//!   `sim`: the software mlx5 device behind it (the `sim` feature, on by
//!   default), and [`hw`]: NICs through rdma-core.
//! - [`wr`]: verbs semantics (send work requests, receives, work completions)
//!   over the direct path or, on devices that are not mlx5, the provider's own
//!   post/poll entry points ([`hw::verbs`]).
//!
//! The queues can also be built over memory the caller supplies
//! ([`sq::SqMemory`], [`rq::RqMemory`], [`cq::CqMemory`]), with a
//! [`DeviceNotify`] hook for what a doorbell does beyond its memory writes;
//! the backends build them that way. At the root, besides the most used
//! data-path types: [`prefetch`] and [`flush_wc`], the CPU hints and
//! barriers the data path uses, for code that touches the same memory.
//! The crate's own tests and benchmarks turn on the `test-hooks` feature,
//! which adds `mem` (page-aligned buffers to build queues on) and the
//! software device's test hooks.

mod barrier;
#[cfg(feature = "cli")]
mod cli_logs;
pub mod cq;
pub mod device;
mod doorbell;
pub mod fastmap;
pub mod hw;
#[cfg(feature = "test-hooks")]
pub mod mem;
pub mod prm;
pub mod rq;
#[cfg(feature = "sim")]
pub mod sim;
pub mod sq;
pub mod tm;
mod types;
pub mod wqe_table;
pub mod wr;

pub use barrier::{flush_wc, prefetch};
#[cfg(feature = "cli")]
pub use cli_logs::log_to_stderr;
pub use cq::{Completion, CqRing, DispatchCq, MonoCq};
pub use doorbell::DeviceNotify;
pub use sq::SendQueue;
