//! Shared receive queues.

use std::any::Any;
use std::mem::size_of;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::pd::SimPd;
use super::SimContext;
use crate::rq::{RqMemory, Srq, SrqTopology};
use crate::sim::fabric::{FabricError, Segment};
use crate::sim::registry::{self, TagSlot, LIVE, MAX_SRQS};
use crate::types::error::DeviceError;

impl SimContext {
    /// Creates an SRQ of `wqe_cnt` WQEs with up to `max_sge` SGEs each.
    pub fn create_srq(
        &self,
        pd: &SimPd,
        wqe_cnt: u32,
        max_sge: u32,
    ) -> Result<SimSrq, DeviceError> {
        self.create_srq_in(pd, wqe_cnt, max_sge, None)
    }

    /// Creates an SRQ; with `tm` (`(entries, cqn)`), a tag-matching one
    /// whose tag list of `entries` entries follows the doorbell record in
    /// its segment and whose completions go to CQ `cqn`.
    pub(super) fn create_srq_in(
        &self,
        pd: &SimPd,
        wqe_cnt: u32,
        max_sge: u32,
        tm: Option<(u32, u32)>,
    ) -> Result<SimSrq, DeviceError> {
        let cnt = wqe_cnt.max(2).next_power_of_two();
        if cnt > 32768 || max_sge > 63 {
            return Err(DeviceError::Invalid(format!(
                "SRQ of {wqe_cnt} WQEs x {max_sge} SGEs"
            )));
        }
        let stride = (16 * (1 + max_sge.max(1))).next_power_of_two().max(32);
        let fab = &self.d.fab;
        let buf_len = (cnt * stride) as usize;
        // The tag list after the doorbell record's 64 bytes.
        let (tm_slots, tm_cqn) = tm.unwrap_or((0, 0));
        let tm_off = buf_len + 64;
        let seg = fab.alloc_segment(tm_off + tm_slots as usize * size_of::<TagSlot>())?;
        let r = fab.reg();
        let slot = r
            .claim_srq()
            .ok_or_else(|| DeviceError::Fabric(FabricError::Full(fab.name().into(), "SRQ")))?;
        let srqn = registry::object_number(slot, MAX_SRQS, r.next_gen());
        let e = &r.srqs[slot];
        e.srqn.store(srqn, Ordering::Relaxed);
        e.owner.store(fab.token(), Ordering::Relaxed);
        e.dev.store(self.d.dev, Ordering::Relaxed);
        e.pd.store(pd.pdn, Ordering::Relaxed);
        e.seg.store(seg.slot(), Ordering::Relaxed);
        e.stride.store(stride, Ordering::Relaxed);
        e.cnt.store(cnt, Ordering::Relaxed);
        e.buf_off.store(0, Ordering::Relaxed);
        e.dbrec_off.store(buf_len as u64, Ordering::Relaxed);
        e.head.store(0, Ordering::Relaxed);
        e.consumed.store(0, Ordering::Relaxed);
        e.tm_slots.store(tm_slots, Ordering::Relaxed);
        e.tm_cqn.store(tm_cqn, Ordering::Relaxed);
        e.tm_off.store(tm_off as u64, Ordering::Relaxed);
        for c in [&e.tm_next, &e.tm_hw_cnt, &e.tm_sw_cnt, &e.tm_seq] {
            c.store(0, Ordering::Relaxed);
        }
        // A new segment is zeroed: every entry is TAG_FREE.
        e.state.store(LIVE, Ordering::Release);
        Ok(SimSrq {
            inner: Arc::new(SrqInner {
                ctx: self.clone(),
                slot,
                srqn,
                seg,
                cnt,
                stride,
                taken: AtomicBool::new(false),
            }),
        })
    }
}

struct SrqInner {
    ctx: SimContext,
    slot: usize,
    srqn: u32,
    seg: Segment,
    cnt: u32,
    stride: u32,
    taken: AtomicBool,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        self.ctx.d.fab.reg().srqs[self.slot]
            .state
            .store(registry::FREE, Ordering::Release);
    }
}

/// An SRQ of the software device.
#[derive(Clone)]
pub struct SimSrq {
    inner: Arc<SrqInner>,
}

impl std::fmt::Debug for SimSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq")
            .field("srqn", &self.inner.srqn)
            .finish()
    }
}

impl SimSrq {
    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        self.inner.srqn
    }
    /// The posting side of the SRQ for the data path (once).
    pub fn srq<T: SrqTopology>(&self) -> Result<Srq<T>, DeviceError> {
        if self.inner.taken.swap(true, Ordering::AcqRel) {
            return Err(DeviceError::Taken("SRQ"));
        }
        let i = &self.inner;
        let mem = RqMemory {
            buf: i.seg.at(0),
            wqe_cnt: i.cnt,
            stride: i.stride as usize,
            dbrec: i.seg.at((i.cnt * i.stride) as usize),
            qn: i.srqn,
            notify: Some(i.ctx.notify()),
            keepalive: Some(i.clone() as Arc<dyn Any + Send + Sync>),
        };
        // SAFETY: as for SimCq::ring.
        unsafe { Srq::new(mem) }.map_err(|e| DeviceError::Queue(e.to_string()))
    }
}

// SAFETY: (for the Any + Send + Sync keepalive) the inner type holds only
// atomics, Arcs and segments (shared memory handles).
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}
