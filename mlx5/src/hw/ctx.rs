//! An opened device context (`ibv_context`), shared by everything created
//! on it and closed when the last of them is gone. A leaf: the device, its
//! completion channels and its queues all hold one.

use std::ptr::NonNull;

use super::ffi::ibv_context;
use super::loader::Verbs;

/// An opened device context and the verbs it is used through.
pub(super) struct Ctx {
    pub(super) v: &'static Verbs,
    pub(super) ctx: NonNull<ibv_context>,
    pub(super) name: String,
    pub(super) is_mlx5: bool,
}

// SAFETY: ibv_context is thread-safe for the verbs used here.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: opened by open_device; every object holding an Arc<Ctx> is gone.
        unsafe { (self.v.close_device)(self.ctx.as_ptr()) };
    }
}
