//! Completion queues (`mlx5dv_create_cq` on mlx5, plain verbs elsewhere).

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::context::HwContext;
use super::info::mlx5_caps;
use super::{nonnull, ops, verb, VerbsParts};
use crate::cq::{Compression, CqArmMemory, CqMemory, CqRing};
use crate::hw::channel::{CqEvents, HwChannel};
use crate::hw::ctx::Ctx;
use crate::hw::ffi::*;
use crate::hw::loader::HwError;
use crate::prm::cqe_res_format;

impl HwContext {
    /// Creates a CQ: on mlx5 through `mlx5dv_create_cq`, with CQE compression
    /// in the requested layout when the device supports it; on other devices a
    /// plain verbs CQ.
    pub fn create_cq(
        &self,
        cqe_cnt: u32,
        cqe_size: usize,
        zip: Compression,
    ) -> Result<HwCq, HwError> {
        self.create_cq_on(cqe_cnt, cqe_size, zip, None)
    }

    /// [`create_cq`](Self::create_cq), with the CQ's completion events going
    /// to `channel` (a channel of this device) when given.
    pub fn create_cq_on(
        &self,
        cqe_cnt: u32,
        cqe_size: usize,
        zip: Compression,
        channel: Option<&HwChannel>,
    ) -> Result<HwCq, HwError> {
        if channel.is_some_and(|ch| !ch.is_on(&self.c)) {
            return Err(HwError::Verb {
                verb: "ibv_create_cq (a completion channel of another device)",
                errno: libc::EINVAL,
            });
        }
        // The CQ's cq_context: where its events are counted.
        let events = channel.map(|_| {
            Arc::new(CqEvents {
                cqn: std::sync::atomic::AtomicU32::new(0),
                taken: Arc::new(std::sync::atomic::AtomicU32::new(0)),
            })
        });
        let cq = HwCq {
            q: Arc::new(self.create_cq_raw(cqe_cnt, cqe_size, zip, events, channel.cloned())?),
        };
        if let Some(e) = &cq.q.events {
            e.cqn.store(cq.cqn()?, Ordering::Relaxed);
        }
        Ok(cq)
    }

    fn create_cq_raw(
        &self,
        cqe_cnt: u32,
        cqe_size: usize,
        zip: Compression,
        events: Option<Arc<CqEvents>>,
        chan: Option<HwChannel>,
    ) -> Result<CqInner, HwError> {
        let cq_context = events
            .as_ref()
            .map_or(std::ptr::null_mut(), |e| Arc::as_ptr(e) as *mut c_void);
        let channel = chan.as_ref().map_or(std::ptr::null_mut(), HwChannel::raw);
        if !self.c.is_mlx5 {
            // A verbs CQ: enough for the control path (and the verbs data path
            // to come); it has no direct data path (`ring` says so).
            // SAFETY: a live context and channel (or none); vector 0.
            let cq = nonnull("ibv_create_cq", unsafe {
                (self.c.v.create_cq)(
                    self.c.ctx.as_ptr(),
                    cqe_cnt as c_int,
                    cq_context,
                    channel,
                    0,
                )
            })?;
            return Ok(CqInner {
                c: self.c.clone(),
                cq,
                zip: Compression::Off,
                taken: AtomicBool::new(false),
                events,
                chan,
            });
        }
        let m = self.c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let caps = mlx5_caps(&self.c)?;
        let mut attr = ibv_cq_init_attr_ex {
            cqe: cqe_cnt,
            cq_context,
            channel,
            ..Default::default()
        };
        let mut dv = mlx5dv_cq_init_attr {
            comp_mask: MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
            cqe_size: cqe_size as u16,
            ..Default::default()
        };
        let zip = if zip != Compression::Off
            && caps.cqe_comp_max_num > 0
            && caps.cqe_comp_formats & cqe_res_format::HASH != 0
        {
            dv.comp_mask |= MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE;
            dv.cqe_comp_res_format = cqe_res_format::HASH as u8;
            zip
        } else {
            Compression::Off
        };
        // SAFETY: valid attribute structs for the call's duration.
        let cq = nonnull("mlx5dv_create_cq", unsafe {
            (m.create_cq)(self.c.ctx.as_ptr(), &mut attr, &mut dv)
        })?;
        Ok(CqInner {
            c: self.c.clone(),
            cq,
            zip,
            taken: AtomicBool::new(false),
            events,
            chan,
        })
    }
}

pub(in crate::hw) struct CqInner {
    c: Arc<Ctx>,
    pub(in crate::hw) cq: NonNull<ibv_cq>,
    zip: Compression,
    taken: AtomicBool,
    /// Its `cq_context` when created on a channel: its number and events.
    events: Option<Arc<CqEvents>>,
    /// The channel its events go to (kept alive while the CQ lives).
    chan: Option<HwChannel>,
}
// SAFETY: as for PdInner.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}
impl Drop for CqInner {
    fn drop(&mut self) {
        // A waiter reading an event of this CQ holds the channel's lock: the
        // CQ (and `events`, its cq_context) outlive that read.
        let _g = self.chan.as_ref().map(HwChannel::lock);
        // SAFETY: created by mlx5dv_create_cq or ibv_create_cq; QPs using it
        // are gone. Verbs drops the CQ's events still queued on its channel.
        unsafe { (self.c.v.destroy_cq)(self.cq.as_ptr()) };
    }
}

/// A CQ on hardware.
#[derive(Clone)]
pub struct HwCq {
    pub(in crate::hw) q: Arc<CqInner>,
}

impl HwCq {
    /// The CQ object and the provider's `poll_cq`, taking the data path (once).
    pub(in crate::hw) fn take_verbs(
        &self,
    ) -> Result<VerbsParts<ibv_cq, (PollCqFn, Option<ReqNotifyCqFn>)>, HwError> {
        let o = ops(&self.q.c);
        let poll = o.poll_cq.ok_or(HwError::SymbolMissing {
            lib: self.q.c.name.clone(),
            symbol: "ibv_context_ops.poll_cq",
        })?;
        if self.q.taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("CQ"));
        }
        Ok(VerbsParts {
            keep: self.q.clone(),
            obj: self.q.cq,
            entry: (poll, o.req_notify_cq),
        })
    }

    fn dv(&self) -> Result<mlx5dv_cq, HwError> {
        if !self.q.c.is_mlx5 {
            return Err(HwError::NotMlx5(self.q.c.name.clone()));
        }
        let m = self.q.c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let mut out = mlx5dv_cq::default();
        let mut obj = mlx5dv_obj::default();
        obj.cq.in_ = self.q.cq.as_ptr() as *mut c_void;
        obj.cq.out = &mut out as *mut _ as *mut c_void;
        // SAFETY: valid in/out pointers for the call.
        verb("mlx5dv_init_obj(CQ)", unsafe {
            (m.init_obj)(&mut obj, MLX5DV_OBJ_CQ)
        })?;
        Ok(out)
    }

    /// CQ number (mlx5). On other devices, which have no CQ numbers to show,
    /// the CQ's kernel handle: unique on its device context, and what a
    /// completion event names the CQ by.
    pub fn cqn(&self) -> Result<u32, HwError> {
        if !self.q.c.is_mlx5 {
            // SAFETY: a live CQ.
            return Ok(unsafe { self.q.cq.as_ref() }.handle);
        }
        Ok(self.dv()?.cqn)
    }

    /// The consumer side for the data path, over the CQ's real memory (once).
    pub fn ring(&self) -> Result<CqRing, HwError> {
        if self.q.taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("CQ ring"));
        }
        let out = self.dv()?;
        let arm = match &self.q.events {
            None => None,
            Some(e) => Some(CqArmMemory {
                uar: nonnull("mlx5dv_init_obj(CQ).cq_uar", out.cq_uar as *mut u8)?,
                events: e.taken.clone(),
            }),
        };
        let mem = CqMemory {
            buf: nonnull("mlx5dv_init_obj(CQ).buf", out.buf as *mut u8)?,
            cqe_cnt: out.cqe_cnt,
            cqe_size: out.cqe_size as usize,
            dbrec: nonnull("mlx5dv_init_obj(CQ).dbrec", out.dbrec as *mut u8)?,
            cqn: out.cqn,
            notify: None,
            keepalive: Some(self.q.clone()),
            arm,
        };
        // SAFETY: the CQ's buffer, doorbell record and UAR page (the context's
        // CQ doorbell page, mapped for the context's life), alive with
        // `keepalive`.
        unsafe { CqRing::new(mem, self.q.zip) }.map_err(|_| HwError::Verb {
            verb: "mlx5dv_init_obj(CQ) shape",
            errno: libc::EINVAL,
        })
    }
}

debug_handle!(HwCq { q.cq });
