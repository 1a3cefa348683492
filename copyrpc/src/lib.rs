//! copyrpc: RPC over RDMA WRITE-with-immediate into per-connection rings, on
//! the mlx5 direct data path (specified in docs/protocol.md).
//!
//! `call()` and `reply()` write messages into a local copy of the peer's
//! receive ring; `poll()` sends each endpoint's batch with one WRITE_IMM whose
//! immediate is the batch size, and reads the peer's batches as receive
//! completions. Flow control rides on every batch (the sender's consumer
//! position and a credit grant) and keeps `in_flight + 2R <= C`, so replies
//! never need a ring check; a stale consumer position is refreshed by an RDMA
//! READ of the peer's consumer word.
//!
//! The data path sits behind the [`transport::Transport`] trait: contexts run
//! on the mlx5 direct path ([`transport::Mlx5`]) unless built for another
//! transport with [`ContextBuilder::build_on`].
//!
//! ```no_run
//! use copyrpc::{ContextBuilder, EndpointId};
//! let dev = mlx5::device::Context::open("sim0").unwrap();
//! let mut ctx = ContextBuilder::new().build(&dev, |_tag: u64, resp| {
//!     println!("response: {:?}", resp.map(|b| b.len()));
//! }).unwrap();
//! let (ep, info) = ctx.create_endpoint().unwrap();
//! // ... send `info` to the peer, receive its info as `peer` ...
//! # let peer = info;
//! ctx.connect(ep, &peer).unwrap();
//! ctx.call(ep, b"hello", 64, 1).unwrap();
//! loop {
//!     // Polls; when idle, spins a while, then sleeps until work arrives.
//!     ctx.wait(std::time::Duration::from_millis(100)).unwrap();
//!     while let Some(req) = ctx.recv() {
//!         let answer = ctx.request(&req).map(|d| d.len()).unwrap_or(0);
//!         ctx.reply(req, &answer.to_le_bytes()).unwrap();
//!     }
//! }
//! ```

pub mod clock;
pub mod conn;
mod context;
pub mod encoding;
mod endpoint;
mod error;
mod fifo;
mod idle;
mod info;
#[cfg(feature = "mpi")]
pub mod mpi_setup;
mod slab;
pub mod transport;

pub use conn::{PendingConnection, MAX_PRIVATE_DATA};
pub use context::{Context, ContextBuilder, EndpointId, FlowState, RecvHandle};
pub use endpoint::EndpointStats;
pub use error::{CallError, CallFailed, CloseReason, ReplyError, SetupError, WaitError};
pub use idle::{IdlePolicy, Waker, DEFAULT_MAX_SPIN, DEFAULT_SPIN};
pub use info::{DcInfo, EndpointInfo, ENDPOINT_INFO_VERSION};
