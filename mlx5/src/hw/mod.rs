//! The hardware backend: real mlx5 NICs through the system's rdma-core
//! (libibverbs + libmlx5), loaded at run time.
//!
//! The control path goes through verbs; on mlx5 the data path is this crate's,
//! over the queue memory `mlx5dv_init_obj` returns; on other devices (soft-RoCE)
//! it is the provider's own post/poll entry points ([`verbs`](mod@verbs)). On mlx5 it
//! also has DC queues (`dc`: DCTs, DCIs with streams, routes from address
//! handles). **Not yet run on a NIC**: no machine this project runs on has
//! one. The bindings are checked against the installed headers by the ABI
//! test (`tests/abi.rs`).

mod channel;
mod ctx;
mod dc;
#[cfg(feature = "rdma-core-oracle")]
mod dc_oracle;
mod device;
// A mirror of rdma-core's headers, checked whole by the ABI test; not every
// item of it is used by the crate.
#[allow(dead_code)]
pub(crate) mod ffi;
/// The hand-written bindings' layout tables, for the ABI test only
/// (`tests/abi.rs` compares them with what a C compiler makes of rdma-core's
/// headers). Hidden: a test hook, not an API.
#[cfg(feature = "rdma-core-oracle")]
#[doc(hidden)]
pub mod abi {
    pub use super::ffi::{all_constants, all_layouts, LayoutRow};
}
mod loader;
mod vctx;
pub mod verbs;

pub use channel::{HwChannel, HwWaker};
pub use dc::HwDct;
pub use device::{
    list_devices, query_device, DeviceInfo, GidInfo, HwContext, HwCq, HwMr, HwPd, HwQp, HwSrq,
    HwTmSrq, Mlx5Caps, PortInfo,
};
pub use loader::{HwError, Verbs};
pub use verbs::{VerbsCq, VerbsQp, VerbsSrq};
