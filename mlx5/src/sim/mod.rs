//! The software mlx5 device: a NIC model that behaves like a ConnectX as seen
//! through memory.
//!
//! It reads WQEs from SQ memory after the doorbell record moves, executes them
//! with RC verbs semantics (keys, bounds, access rights, PDs, QP states, RNR,
//! transport retries), and writes CQEs in PRM format — owner bit per pass,
//! compressed blocks when the CQ asks for them, scatter-to-CQE — so code under
//! test cannot tell it from hardware by looking at memory.
//!
//! Devices live in a *fabric* in shared memory (`/dev/shm/mlx5sim-<name>`), so
//! processes on one host connect exactly as hosts on a network do. A fabric
//! is private to the user who created it.

pub mod channel;
pub(crate) mod cqe_out;
mod delay;
pub mod device;
pub(crate) mod engine;
pub(crate) mod exec;
pub mod fabric;
pub mod link;
pub(crate) mod registry;
pub(crate) mod sched;
pub(crate) mod shm;
pub(crate) mod sync;
