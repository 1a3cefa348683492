//! Shared receive queues.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::pd::{HwPd, PdInner};
use super::{nonnull, ops, verb, VerbsParts};
use crate::hw::ffi::*;
use crate::hw::loader::HwError;
use crate::rq::{RqMemory, Srq, SrqTopology};

impl HwPd {
    /// Creates an SRQ.
    pub fn create_srq(&self, wqe_cnt: u32, max_sge: u32) -> Result<HwSrq, HwError> {
        let p = &self.p;
        let mut a = ibv_srq_init_attr {
            attr: ibv_srq_attr {
                max_wr: wqe_cnt,
                max_sge,
                srq_limit: 0,
            },
            ..Default::default()
        };
        // SAFETY: a live PD and a valid attribute struct.
        let srq = nonnull("ibv_create_srq", unsafe {
            (p.c.v.create_srq)(p.pd.as_ptr(), &mut a)
        })?;
        Ok(HwSrq::own(p, srq))
    }
}

impl HwSrq {
    /// The handle of SRQ `srq`, created on PD `pd`; destroyed with it.
    pub(in crate::hw) fn own(pd: &Arc<PdInner>, srq: NonNull<ibv_srq>) -> HwSrq {
        HwSrq {
            s: Arc::new(SrqInner {
                pd: pd.clone(),
                srq,
                taken: AtomicBool::new(false),
            }),
        }
    }
}

pub(in crate::hw) struct SrqInner {
    pd: Arc<PdInner>,
    pub(in crate::hw) srq: NonNull<ibv_srq>,
    taken: AtomicBool,
}
// SAFETY: as for PdInner.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}
impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created by create_srq; QPs using it are gone.
        unsafe { (self.pd.c.v.destroy_srq)(self.srq.as_ptr()) };
    }
}

/// An SRQ on hardware.
#[derive(Clone)]
pub struct HwSrq {
    pub(in crate::hw) s: Arc<SrqInner>,
}

impl HwSrq {
    /// The SRQ object and the provider's `post_srq_recv`, taking the data path
    /// (once).
    pub(in crate::hw) fn take_verbs(&self) -> Result<VerbsParts<ibv_srq, PostSrqRecvFn>, HwError> {
        let post = ops(&self.s.pd.c)
            .post_srq_recv
            .ok_or(HwError::SymbolMissing {
                lib: self.s.pd.c.name.clone(),
                symbol: "ibv_context_ops.post_srq_recv",
            })?;
        if self.s.taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("SRQ"));
        }
        Ok(VerbsParts {
            keep: self.s.clone(),
            obj: self.s.srq,
            entry: post,
        })
    }

    fn dv(&self) -> Result<mlx5dv_srq, HwError> {
        if !self.s.pd.c.is_mlx5 {
            return Err(HwError::NotMlx5(self.s.pd.c.name.clone()));
        }
        let m = self.s.pd.c.v.mlx5.as_ref().map_err(Clone::clone)?;
        // The SRQ number comes back only when asked for (rdma-core's
        // `mlx5dv_get_srq` fills `srqn` if the caller set its mask bit, and
        // leaves in `comp_mask` the fields it filled).
        let mut out = mlx5dv_srq {
            comp_mask: MLX5DV_SRQ_MASK_SRQN,
            ..Default::default()
        };
        let mut obj = mlx5dv_obj::default();
        obj.srq.in_ = self.s.srq.as_ptr() as *mut c_void;
        obj.srq.out = &mut out as *mut _ as *mut c_void;
        // SAFETY: valid in/out pointers.
        verb("mlx5dv_init_obj(SRQ)", unsafe {
            (m.init_obj)(&mut obj, MLX5DV_OBJ_SRQ)
        })?;
        if out.comp_mask & MLX5DV_SRQ_MASK_SRQN == 0 {
            return Err(HwError::Verb {
                verb: "mlx5dv_init_obj(SRQ) (no SRQ number)",
                errno: libc::EOPNOTSUPP,
            });
        }
        Ok(out)
    }

    /// SRQ number.
    pub fn srqn(&self) -> Result<u32, HwError> {
        Ok(self.dv()?.srqn)
    }

    /// The posting side for the data path, over the SRQ's real memory (once).
    pub fn srq<T: SrqTopology>(&self) -> Result<Srq<T>, HwError> {
        if self.s.taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("SRQ"));
        }
        let out = self.dv()?;
        // rdma-core allocates max_wr + 1 rounded to a power of two; the buffer
        // holds (tail + 1) WQEs.
        let cnt = out.tail + 1;
        let mem = RqMemory {
            buf: nonnull("mlx5dv_init_obj(SRQ).buf", out.buf as *mut u8)?,
            wqe_cnt: cnt,
            stride: out.stride as usize,
            dbrec: nonnull("mlx5dv_init_obj(SRQ).dbrec", out.dbrec as *mut u8)?,
            qn: out.srqn,
            notify: None,
            keepalive: Some(self.s.clone()),
        };
        // SAFETY: the SRQ's buffer and doorbell record, alive with `keepalive`.
        unsafe { Srq::new(mem) }.map_err(|_| HwError::Verb {
            verb: "mlx5dv_init_obj(SRQ) shape",
            errno: libc::EINVAL,
        })
    }
}

debug_handle!(HwSrq { s.srq });
