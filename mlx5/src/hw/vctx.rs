//! The extended verbs a provider offers through `struct verbs_context`
//! (`ibv_query_device_ex`, for the tag-matching capabilities, and
//! `ibv_create_srq_ex`): verbs.h reaches them with
//! static inlines that libibverbs does not export, so this crate does what
//! `verbs_get_ctx_op` does. The `ibv_context` an application holds is the
//! last member of the provider's `verbs_context`; the context is extended
//! when its `abi_compat` is `UINTPTR_MAX`; a verb is there when the
//! provider's struct (its `sz`) reaches back to it and the pointer is set.

use std::ffi::c_void;

use super::ctx::Ctx;
use super::ffi::{
    ibv_device_attr_ex, verbs_context as v, CreateSrqExFn, QueryDeviceExFn, IBV_TM_CAP_RC,
};
use super::loader::HwError;
use crate::types::TmCaps;

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
fn query_device_ex(c: &Ctx) -> Option<QueryDeviceExFn> {
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

/// Context `c`'s tag-matching capabilities; all zero when the device has
/// none, or when the provider has no `query_device_ex` (as verbs.h's inline
/// reports then).
pub(super) fn tm_caps(c: &Ctx) -> Result<TmCaps, HwError> {
    let Some(query) = query_device_ex(c) else {
        return Ok(TmCaps::default());
    };
    let mut a = ibv_device_attr_ex::default();
    // SAFETY: a live context; `a` is valid for the size given, a prefix the
    // provider fills and no more.
    let rc = unsafe {
        query(
            c.ctx.as_ptr(),
            std::ptr::null(),
            &mut a,
            std::mem::size_of::<ibv_device_attr_ex>(),
        )
    };
    if rc == libc::EOPNOTSUPP || rc == libc::ENOSYS {
        return Ok(TmCaps::default());
    }
    if rc != 0 {
        // The provider returns the errno (rdma-core's `query_device_ex`).
        return Err(HwError::Verb {
            verb: "ibv_query_device_ex",
            errno: rc.abs(),
        });
    }
    let t = a.tm_caps;
    Ok(TmCaps {
        max_rndv_hdr_size: t.max_rndv_hdr_size,
        max_num_tags: t.max_num_tags,
        rc: t.flags & IBV_TM_CAP_RC != 0,
        max_ops: t.max_ops,
        max_sge: t.max_sge,
    })
}
