//! The hardware backend: real mlx5 NICs through the system's rdma-core
//! (libibverbs + libmlx5), loaded at run time.
//!
//! The control path goes through verbs; the data path is this crate's, over the
//! queue memory `mlx5dv_init_obj` returns. **Not yet run on a NIC**: no machine
//! this project runs on has one. The bindings are checked against the installed
//! headers by the ABI test (`tests/abi.rs`).

pub mod device;
pub mod ffi;
pub mod loader;

pub use device::{
    list_devices, query_device, DeviceInfo, GidInfo, HwContext, HwCq, HwMr, HwPd, HwQp, HwSrq,
    Mlx5Caps, PortInfo,
};
pub use loader::{verbs, HwError, Verbs};
