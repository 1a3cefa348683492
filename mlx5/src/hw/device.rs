//! The hardware backend's control path: devices, ports and GIDs, PDs, MRs,
//! CQs (through `mlx5dv_create_cq`), SRQs, RC QPs and their state changes, and
//! `mlx5dv_init_obj`, which hands the real queue memory, doorbell records and
//! BlueFlame register to the same data path the software device feeds.
//!
//! A file per object, as the software device has: `info` (device listing
//! and queries), `context` (an opened device), `pd`, `mr`, `cq`, `srq` and
//! `qp`; this module holds the helpers they share.
//!
//! Not yet run on a NIC: compiled, checked against the installed headers by the
//! ABI test, and reviewed.

use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ctx::Ctx;
use super::ffi::*;
use super::loader::{errno, HwError};

/// `Debug` for the handles: the type and its verbs object's address.
macro_rules! debug_handle {
    ($($ty:ident { $inner:ident . $obj:ident }),* $(,)?) => {$(
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field(stringify!($obj), &self.$inner.$obj)
                    .finish_non_exhaustive()
            }
        }
    )*};
}

mod context;
mod cq;
mod info;
mod mr;
mod pd;
mod qp;
mod srq;
mod tm;

pub use context::HwContext;
pub use cq::HwCq;
pub use info::{list_devices, query_device, DeviceInfo, GidInfo, Mlx5Caps, PortInfo};
pub use mr::HwMr;
pub use pd::HwPd;
pub(in crate::hw) use pd::PdInner;
pub use qp::HwQp;
pub(in crate::hw) use qp::QpInner;
pub use srq::HwSrq;
pub use tm::HwTmSrq;

pub(super) fn verb(name: &'static str, rc: c_int) -> Result<(), HwError> {
    if rc == 0 {
        Ok(())
    } else {
        // Verbs return -errno or set errno and return -1.
        Err(HwError::Verb {
            verb: name,
            errno: if rc > 0 {
                rc
            } else if rc < -1 {
                -rc
            } else {
                errno()
            },
        })
    }
}

/// What the verbs data path takes of an object: a keep-alive, the object, and
/// the provider's entry point(s) for it.
pub(super) struct VerbsParts<T, F> {
    pub keep: Arc<dyn Send + Sync>,
    pub obj: NonNull<T>,
    pub entry: F,
}

/// The provider's data-path entry points (`struct ibv_context_ops`), as
/// verbs.h's inline `ibv_post_send` / `ibv_poll_cq` reach them.
fn ops(c: &Ctx) -> &ibv_context_ops {
    // SAFETY: a live context; `ops` sits right after the device pointer in
    // every rdma-core since the extended context was introduced (ABI test).
    unsafe { &(*c.ctx.as_ptr()).ops }
}

pub(super) fn nonnull<T>(name: &'static str, p: *mut T) -> Result<NonNull<T>, HwError> {
    NonNull::new(p).ok_or_else(|| HwError::Verb {
        verb: name,
        errno: errno(),
    })
}
