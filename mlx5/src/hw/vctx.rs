//! The extended verbs a provider offers through `struct verbs_context`
//! (`ibv_query_device_ex`, `ibv_create_srq_ex`): verbs.h reaches them with
//! static inlines that libibverbs does not export, so this crate does what
//! `verbs_get_ctx_op` does. The `ibv_context` an application holds is the
//! last member of the provider's `verbs_context`; the context is extended
//! when its `abi_compat` is `UINTPTR_MAX`; a verb is there when the
//! provider's struct (its `sz`) reaches back to it and the pointer is set.

use std::ffi::c_void;

use super::ctx::Ctx;
use super::ffi::{verbs_context as v, CreateSrqExFn, QueryDeviceExFn};

/// The pointer-sized word `at` bytes from the start of context `c`'s
/// `ibv_context`: a member of it (`at` ≥ 0), or of the `verbs_context` it
/// ends (`at` < 0).
fn word(c: &Ctx, at: isize) -> usize {
    // SAFETY: `at` is one of the checked offsets below: inside the
    // `ibv_context` (abi_compat), or, once the context is known to be
    // extended and `sz` covers it, inside its `verbs_context`; both are
    // live while the context is. Read as a plain aligned word, as the C
    // inline does.
    unsafe {
        (c.ctx.as_ptr() as *const u8)
            .offset(at)
            .cast::<usize>()
            .read()
    }
}

/// The extended verb `v::CONTEXT - off` bytes before context `c`'s
/// `ibv_context`, if the provider has it.
fn op(c: &Ctx, off: usize) -> Option<*const c_void> {
    if word(c, v::ABI_COMPAT as isize) != usize::MAX {
        return None;
    }
    let back = (v::CONTEXT - off) as isize;
    let sz = word(c, -((v::CONTEXT - v::SZ) as isize));
    // verbs_get_ctx_op: sz >= sizeof(*vctx) - offsetof(op), which is the
    // op's distance back to the context plus the context's own size.
    if sz < back as usize + v::IBV_CONTEXT_LEN {
        return None;
    }
    let p = word(c, -back) as *const c_void;
    (!p.is_null()).then_some(p)
}

/// `verbs_context.query_device_ex`, if the provider has it.
pub(super) fn query_device_ex(c: &Ctx) -> Option<QueryDeviceExFn> {
    // SAFETY: a non-null pointer in that member is the provider's function
    // of that signature (verbs.h).
    op(c, v::QUERY_DEVICE_EX)
        .map(|p| unsafe { std::mem::transmute::<*const c_void, QueryDeviceExFn>(p) })
}

/// `verbs_context.create_srq_ex`, if the provider has it.
pub(super) fn create_srq_ex(c: &Ctx) -> Option<CreateSrqExFn> {
    // SAFETY: as above.
    op(c, v::CREATE_SRQ_EX)
        .map(|p| unsafe { std::mem::transmute::<*const c_void, CreateSrqExFn>(p) })
}
