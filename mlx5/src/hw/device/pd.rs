//! Protection domains.

use std::ptr::NonNull;
use std::sync::Arc;

use super::context::HwContext;
use super::nonnull;
use crate::hw::ctx::Ctx;
use crate::hw::ffi::*;
use crate::hw::loader::HwError;

pub(in crate::hw) struct PdInner {
    pub(in crate::hw) c: Arc<Ctx>,
    pub(in crate::hw) pd: NonNull<ibv_pd>,
}
// SAFETY: verbs objects may be used from any thread.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}
impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated by alloc_pd; MRs, SRQs and QPs holding it are gone.
        unsafe { (self.c.v.dealloc_pd)(self.pd.as_ptr()) };
    }
}

/// A protection domain on hardware.
#[derive(Clone)]
pub struct HwPd {
    pub(in crate::hw) p: Arc<PdInner>,
}

impl HwContext {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<HwPd, HwError> {
        // SAFETY: a live context.
        let pd = nonnull("ibv_alloc_pd", unsafe {
            (self.c.v.alloc_pd)(self.c.ctx.as_ptr())
        })?;
        Ok(HwPd {
            p: Arc::new(PdInner {
                c: self.c.clone(),
                pd,
            }),
        })
    }
}

debug_handle!(HwPd { p.pd });
