//! Completion queues, on a completion channel or not.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use super::SimContext;
use crate::cq::{Compression, CqArmMemory, CqMemory, CqRing};
use crate::sim::channel::SimChannel;
use crate::sim::fabric::{FabricError, Segment};
use crate::sim::registry::{self, slot_of, CQ_SCATTER_TO_CQE, CQ_UAR_AFTER_DBREC, LIVE, MAX_CQS};
use crate::types::error::DeviceError;
use crate::types::CqAttr;

impl SimContext {
    /// Creates a CQ.
    pub fn create_cq(&self, attr: &CqAttr) -> Result<SimCq, DeviceError> {
        self.create_cq_with(attr, None)
    }

    /// Creates a CQ whose events go to `channel` (a channel of this fabric).
    pub fn create_cq_on(&self, attr: &CqAttr, channel: &SimChannel) -> Result<SimCq, DeviceError> {
        if !Arc::ptr_eq(channel.fabric(), &self.d.fab) {
            return Err(DeviceError::Invalid(
                "the completion channel belongs to another fabric".into(),
            ));
        }
        self.create_cq_with(attr, Some(channel))
    }

    fn create_cq_with(
        &self,
        attr: &CqAttr,
        channel: Option<&SimChannel>,
    ) -> Result<SimCq, DeviceError> {
        let cnt = attr.cqe_cnt.max(2).next_power_of_two();
        if cnt > 1 << 22 {
            return Err(DeviceError::Invalid(format!(
                "{} CQEs exceed 2^22",
                attr.cqe_cnt
            )));
        }
        if attr.cqe_size != 64 && attr.cqe_size != 128 {
            return Err(DeviceError::Invalid(format!(
                "CQE size {} is neither 64 nor 128",
                attr.cqe_size
            )));
        }
        if attr.compression != Compression::Off && attr.cqe_size != 64 {
            return Err(DeviceError::Invalid(
                "CQE compression needs 64-byte CQEs".into(),
            ));
        }
        let fab = &self.d.fab;
        let buf_len = cnt as usize * attr.cqe_size;
        // The buffer, the doorbell record (64 bytes) and the UAR page whose CQ
        // doorbell register takes arms (64 bytes).
        let seg = fab.alloc_segment(buf_len + 64 + CQ_UAR_AFTER_DBREC as usize)?;
        let r = fab.reg();
        let slot = r
            .claim_cq()
            .ok_or_else(|| DeviceError::Fabric(FabricError::Full(fab.name().into(), "CQ")))?;
        let cqn = registry::object_number(slot, MAX_CQS, r.next_gen());
        let e = &r.cqs[slot];
        e.cqn.store(cqn, Ordering::Relaxed);
        e.owner.store(fab.token(), Ordering::Relaxed);
        e.dev.store(self.d.dev, Ordering::Relaxed);
        e.seg.store(seg.slot(), Ordering::Relaxed);
        e.cqe_cnt.store(cnt, Ordering::Relaxed);
        e.cqe_size.store(attr.cqe_size as u32, Ordering::Relaxed);
        e.zip.store(
            match attr.compression {
                Compression::Off => 0,
                Compression::Enhanced => 1,
                Compression::Basic => 2,
            },
            Ordering::Relaxed,
        );
        e.buf_off.store(0, Ordering::Relaxed);
        e.dbrec_off.store(buf_len as u64, Ordering::Relaxed);
        e.pi.store(0, Ordering::Relaxed);
        e.overrun.store(0, Ordering::Relaxed);
        e.title.store(u32::MAX, Ordering::Relaxed);
        e.since_title.store(0, Ordering::Relaxed);
        e.ci_seen.store(0, Ordering::Relaxed);
        e.arm.store(0, Ordering::Relaxed);
        e.events.store(0, Ordering::Relaxed);
        e.notable_pi.store(0, Ordering::Relaxed);
        e.arm_sn.store(0, Ordering::Relaxed);
        e.arm_ci.store(0, Ordering::Relaxed);
        e.chan
            .store(channel.map_or(0, SimChannel::tag), Ordering::Relaxed);
        e.flags.store(
            if attr.scatter_to_cqe {
                CQ_SCATTER_TO_CQE
            } else {
                0
            },
            Ordering::Relaxed,
        );
        let events = channel.map(|c| (c.clone(), c.attach(cqn, slot)));
        e.state.store(LIVE, Ordering::Release);
        Ok(SimCq {
            inner: Arc::new(CqInner {
                ctx: self.clone(),
                slot,
                cqn,
                seg,
                cnt,
                size: attr.cqe_size,
                zip: attr.compression,
                taken: AtomicBool::new(false),
                events,
            }),
        })
    }
}

struct CqInner {
    ctx: SimContext,
    slot: usize,
    cqn: u32,
    seg: Segment,
    cnt: u32,
    size: usize,
    zip: Compression,
    taken: AtomicBool,
    /// The channel the CQ's events go to, and the events it handed out.
    events: Option<(SimChannel, Arc<AtomicU32>)>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let e = &self.ctx.d.fab.reg().cqs[self.slot];
        e.chan.store(0, Ordering::Relaxed);
        e.arm.store(0, Ordering::Relaxed);
        e.state.store(registry::FREE, Ordering::Release);
        if let Some((ch, _)) = &self.events {
            ch.detach(self.cqn);
        }
    }
}

/// A CQ of the software device.
#[derive(Clone)]
pub struct SimCq {
    inner: Arc<CqInner>,
}

impl std::fmt::Debug for SimCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq").field("cqn", &self.inner.cqn).finish()
    }
}

impl SimCq {
    /// CQ number.
    pub fn cqn(&self) -> u32 {
        self.inner.cqn
    }
    /// Whether the NIC found the CQ full. Completions are never overwritten: an
    /// overrun CQ is in error and takes no more CQEs.
    pub fn overrun(&self) -> bool {
        self.inner.ctx.d.fab.reg().cqs[slot_of(self.inner.cqn, MAX_CQS)]
            .overrun
            .load(Ordering::Acquire)
            != 0
    }
    /// The consumer side of the CQ for the data path (once).
    pub fn ring(&self) -> Result<CqRing, DeviceError> {
        if self.inner.taken.swap(true, Ordering::AcqRel) {
            return Err(DeviceError::Taken("CQ ring"));
        }
        let i = &self.inner;
        let mem = CqMemory {
            buf: i.seg.at(0),
            cqe_cnt: i.cnt,
            cqe_size: i.size,
            dbrec: i.seg.at(i.cnt as usize * i.size),
            cqn: i.cqn,
            notify: Some(i.ctx.notify()),
            keepalive: Some(i.clone() as Arc<dyn Any + Send + Sync>),
            arm: i.events.as_ref().map(|(_, delivered)| CqArmMemory {
                uar: i
                    .seg
                    .at(i.cnt as usize * i.size + CQ_UAR_AFTER_DBREC as usize),
                events: delivered.clone(),
            }),
        };
        // SAFETY: the segment holds the buffer, the doorbell record and the
        // UAR page (64-byte aligned, 64 bytes) and is kept alive by
        // `keepalive`; the ring is handed out once.
        unsafe { CqRing::new(mem, i.zip) }.map_err(|e| DeviceError::Queue(e.to_string()))
    }
}

// SAFETY: (for the Any + Send + Sync keepalive) the inner type holds only
// atomics, Arcs and segments (shared memory handles).
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}
