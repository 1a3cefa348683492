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
//!
//! The processes of a fabric need not share a PID namespace: servers in
//! containers on one kernel may bind-mount one fabric directory. So pids play
//! no part in it (see the `member` module):
//! - *identity*: a process that opens a fabric gets a token from a counter in
//!   the fabric's registry, unique in the fabric; it owns the registry
//!   entries it creates (QPs, CQs, memory regions, segments...) and holds the
//!   shared locks it takes under that token;
//! - *liveness*: it holds an OFD file lock on `proc-<token>` in the fabric's
//!   directory while it lives, which the kernel drops when it dies, and which
//!   every process that sees the file sees, whatever its namespace. A peer
//!   whose lock is gone does not answer (transport retries run out), its
//!   entries and files are reaped, and a shared lock it held is taken over.

pub mod channel;
pub(crate) mod cqe_out;
pub mod dct;
mod delay;
pub mod device;
pub(crate) mod engine;
pub(crate) mod exec;
pub mod fabric;
pub mod link;
pub(crate) mod member;
pub(crate) mod registry;
pub(crate) mod sched;
pub(crate) mod shm;
pub(crate) mod sync;
