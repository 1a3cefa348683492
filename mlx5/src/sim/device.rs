//! The software device behind the device API: contexts, PDs, MRs, CQs, SRQs and
//! RC QPs whose memory lives in the fabric's shared segments, and the doorbell
//! hook that makes the simulated NIC execute work.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use super::channel::SimChannel;
use super::engine;
use super::fabric::pool::Range;
use super::fabric::{fabric_name_from_env, Fabric, FabricError, Segment};
use super::registry::{
    self, qp_state, slot_of, CQ_SCATTER_TO_CQE, CQ_UAR_AFTER_DBREC, LIVE, MAX_CQS, MAX_DEVS,
    MAX_QPS, MAX_SRQS, NO_SEG,
};
use super::sched::Nic;
use crate::cq::{Compression, CqArmMemory, CqMemory, CqRing};
use crate::types::error::DeviceError;
use crate::types::{
    ack_timeout_us, rnr_timer_us, ConnInfo, CqAttr, DciStreams, ExecMode, QpCaps, QpState, RtrAttr,
    RtsAttr, SchedStats,
};

/// The software device's DCI stream limits (`dci_streams_caps`): up to 16
/// streams, and up to 16 errored streams survived. Its NIC keeps each
/// stream's WQEs in order and runs the streams independently: a stream
/// stalled on RNR or an unreachable DCT holds only its own WQEs, and a WQE
/// that fails errors only its stream (whose later WQEs are flushed) until
/// `1 << log_errored` streams have errored, when the whole DCI goes to ERR
/// ([`SimQp::reset_dci_stream`] lets an errored stream run again). A DCI
/// created with `log_errored` 0 or without streams (`log_concurrent` 0)
/// goes to ERR at its first error, as on a ConnectX whose firmware reports
/// `max_log_num_errored` 0.
pub const DCI_STREAM_CAPS: DciStreams = DciStreams {
    log_concurrent: 4,
    log_errored: 4,
};
use crate::doorbell::DeviceNotify;
use crate::rq::{RecvQueue, RqMemory, Srq, SrqTopology};
use crate::sq::{SendQueue, SqConfig, SqMemory};
use crate::wqe_table::{RecvTable, SendTable};

struct Dev {
    fab: Arc<Fabric>,
    dev: u32,
    name: String,
    nic: Arc<Nic>,
}

/// An opened device.
#[derive(Clone)]
pub struct SimContext {
    d: Arc<Dev>,
}

impl std::fmt::Debug for SimContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.d.name)
            .field("fabric", &self.d.fab.name())
            .finish()
    }
}

impl SimContext {
    /// Opens `sim0` .. `sim7` in the fabric named by `MLX5_SIM_FABRIC`.
    pub fn open(name: &str) -> Result<SimContext, DeviceError> {
        Self::open_in(&fabric_name_from_env(), name)
    }

    /// Opens software device `name` (`sim0` .. `sim7`) in fabric `fabric`, in the
    /// execution mode this process already uses there (inline if none).
    pub fn open_in(fabric: &str, name: &str) -> Result<SimContext, DeviceError> {
        Self::open_with(fabric, name, None)
    }

    /// Opens software device `name` in fabric `fabric`, with the simulated NIC
    /// of this process running in `mode` (all devices of one fabric in one
    /// process share it).
    pub fn open_in_mode(
        fabric: &str,
        name: &str,
        mode: ExecMode,
    ) -> Result<SimContext, DeviceError> {
        Self::open_with(fabric, name, Some(mode))
    }

    fn open_with(
        fabric: &str,
        name: &str,
        mode: Option<ExecMode>,
    ) -> Result<SimContext, DeviceError> {
        let dev = name
            .strip_prefix("sim")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|&n| (n as usize) < MAX_DEVS && name == format!("sim{n}"))
            .ok_or_else(|| DeviceError::UnknownDevice(name.to_owned()))?;
        let fab = Fabric::open(fabric)?;
        fab.reg().devs[dev as usize].store(1, Ordering::Relaxed);
        let nic = Nic::attach(&fab, mode)?;
        Ok(SimContext {
            d: Arc::new(Dev {
                fab,
                dev,
                name: name.to_owned(),
                nic,
            }),
        })
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.d.name
    }

    /// The fabric this device lives in.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.d.fab
    }

    /// The execution mode of the simulated NIC.
    pub fn exec_mode(&self) -> ExecMode {
        self.d.nic.mode()
    }

    /// Starts or stops accounting the time the simulated NIC of this process
    /// spends executing doorbells (inline mode).
    pub fn set_sim_timing(&self, on: bool) {
        self.d.nic.set_timing(on);
    }

    /// Nanoseconds the simulated NIC spent executing doorbells while timing was on.
    pub fn sim_busy_ns(&self) -> u64 {
        self.d.nic.busy_ns()
    }

    /// What the deferred scheduler did so far.
    pub fn sched_stats(&self) -> SchedStats {
        self.d.nic.stats()
    }

    /// Takes this device's port down or brings it up again (see
    /// [`Fabric::set_port_down`]).
    pub fn set_port_down(&self, down: bool) {
        super::link::set_down(self.d.fab.reg(), self.d.dev, down);
    }

    /// Whether this device's port is down.
    pub fn port_down(&self) -> bool {
        self.d.fab.port_down(self.d.dev)
    }

    /// Port LID: the device number + 1.
    pub fn lid(&self) -> u16 {
        self.d.dev as u16 + 1
    }

    /// GID-like address: `fe80::` + a hash of the fabric name + the device number.
    pub fn gid(&self) -> [u8; 16] {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.d.fab.name().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8..15].copy_from_slice(&h.to_be_bytes()[..7]);
        g[15] = self.d.dev as u8;
        g
    }

    /// Runs queued work (deferred mode) and retries work stalled on RNR or an
    /// unreachable peer. Polling an empty CQ does some of this too. Returns how
    /// many QPs still wait.
    pub fn progress(&self) -> usize {
        self.d.nic.progress()
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> SimPd {
        SimPd {
            ctx: self.clone(),
            pdn: self.d.fab.reg().next_gen() | 0x8000_0000,
        }
    }

    /// This process's NIC on the context's fabric.
    #[cfg(test)]
    pub(crate) fn nic(&self) -> &Arc<Nic> {
        &self.d.nic
    }

    fn notify(&self) -> Arc<dyn DeviceNotify> {
        self.d.nic.clone()
    }

    /// Creates a completion channel: CQs created on it
    /// ([`create_cq_on`](Self::create_cq_on)) can be armed, and their events
    /// waited for on it.
    pub fn create_comp_channel(&self) -> Result<SimChannel, DeviceError> {
        Ok(SimChannel::new(&self.d.fab, &self.d.nic)?)
    }

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

    /// Creates an SRQ of `wqe_cnt` WQEs with up to `max_sge` SGEs each.
    pub fn create_srq(
        &self,
        pd: &SimPd,
        wqe_cnt: u32,
        max_sge: u32,
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
        let seg = fab.alloc_segment(buf_len + 64)?;
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

    /// Creates an RC QP on `pd` with the given CQs, on `srq` or on an RQ of its own.
    pub fn create_qp(
        &self,
        pd: &SimPd,
        send_cq: &SimCq,
        recv_cq: &SimCq,
        srq: Option<&SimSrq>,
        caps: &QpCaps,
    ) -> Result<SimQp, DeviceError> {
        self.create_queues(registry::qp_kind::RC, pd, (send_cq, recv_cq), srq, caps, 0)
    }

    /// Creates a DC initiator on `pd` with its completions on `send_cq`,
    /// `streams` within [`DCI_STREAM_CAPS`]. It has no receive queue; it
    /// goes RESET → INIT → RTR ([`SimQp::to_rtr_dci`]) → RTS.
    pub fn create_dci(
        &self,
        pd: &SimPd,
        send_cq: &SimCq,
        caps: &QpCaps,
        streams: DciStreams,
    ) -> Result<SimQp, DeviceError> {
        let max = DCI_STREAM_CAPS;
        if streams.log_concurrent > max.log_concurrent || streams.log_errored > max.log_errored {
            return Err(DeviceError::Invalid(format!(
                "DCI streams 2^{} concurrent, 2^{} errored: the device allows 2^{} and 2^{}",
                streams.log_concurrent, streams.log_errored, max.log_concurrent, max.log_errored
            )));
        }
        let packed = u32::from(streams.log_concurrent) | u32::from(streams.log_errored) << 8;
        let caps = QpCaps {
            rq_wqe_cnt: 0,
            ..*caps
        };
        self.create_queues(
            registry::qp_kind::DCI,
            pd,
            (send_cq, send_cq),
            None,
            &caps,
            packed,
        )
    }

    /// A QP-table entry with a send queue: an RC QP or a DCI.
    fn create_queues(
        &self,
        kind: u32,
        pd: &SimPd,
        (send_cq, recv_cq): (&SimCq, &SimCq),
        srq: Option<&SimSrq>,
        caps: &QpCaps,
        dci_streams: u32,
    ) -> Result<SimQp, DeviceError> {
        let sq_cnt = caps.sq_wqe_cnt.max(1).next_power_of_two();
        if sq_cnt > 32768 {
            return Err(DeviceError::Invalid(format!(
                "SQ of {} BBs exceeds 32768",
                caps.sq_wqe_cnt
            )));
        }
        let (rq_cnt, rq_stride) = if srq.is_some() || kind == registry::qp_kind::DCI {
            (0, 0)
        } else {
            if caps.rq_wqe_cnt > 32768 || caps.max_recv_sge > 63 {
                return Err(DeviceError::Invalid("RQ too large".into()));
            }
            (
                caps.rq_wqe_cnt.max(1).next_power_of_two(),
                (16 * caps.max_recv_sge.max(1)).next_power_of_two(),
            )
        };
        let fab = &self.d.fab;
        let sq_len = sq_cnt as u64 * 64;
        let rq_len = u64::from(rq_cnt) * u64::from(rq_stride);
        let dbrec_off = (sq_len + rq_len).next_multiple_of(64);
        // A DCI's NIC keeps its stream state after the doorbell record.
        let nic_private = if kind == registry::qp_kind::DCI {
            engine::DCI_STATE_AFTER_DBREC + engine::dci_state_len(sq_cnt)
        } else {
            64
        };
        let bf_off = (dbrec_off + nic_private).next_multiple_of(4096);
        // Carved out of a shared segment: page-aligned, so the BlueFlame
        // page stays page-aligned, and zero-filled.
        let mem = Range::alloc(fab, (bf_off + 512) as usize)?;
        let base = mem.off() as u64;
        let r = fab.reg();
        let slot = r
            .claim_qp()
            .ok_or_else(|| DeviceError::Fabric(FabricError::Full(fab.name().into(), "QP")))?;
        let qpn = registry::object_number(slot, MAX_QPS, r.next_gen());
        let e = &r.qps[slot];
        e.clear(qpn, kind, fab.token(), self.d.dev, pd.pdn);
        e.dci_streams.store(dci_streams, Ordering::Relaxed);
        e.seg.store(mem.slot(), Ordering::Relaxed);
        e.sq_off.store(base, Ordering::Relaxed);
        e.sq_cnt.store(sq_cnt, Ordering::Relaxed);
        e.rq_cnt.store(rq_cnt, Ordering::Relaxed);
        e.rq_stride.store(rq_stride, Ordering::Relaxed);
        e.srqn
            .store(srq.map_or(u32::MAX, |s| s.inner.srqn), Ordering::Relaxed);
        e.send_cqn.store(send_cq.inner.cqn, Ordering::Relaxed);
        e.recv_cqn.store(recv_cq.inner.cqn, Ordering::Relaxed);
        e.rq_off.store(base + sq_len, Ordering::Relaxed);
        e.dbrec_off.store(base + dbrec_off, Ordering::Relaxed);
        if kind == registry::qp_kind::DCI && !engine::init_dci_streams(fab, e) {
            e.state.store(registry::FREE, Ordering::Release);
            return Err(DeviceError::Invalid(
                "DCI segment too small for its stream state".into(),
            ));
        }
        e.state.store(LIVE, Ordering::Release);
        Ok(SimQp {
            inner: Arc::new(QpInner {
                ctx: self.clone(),
                slot,
                qpn,
                mem,
                sq_cnt,
                rq_cnt,
                rq_stride,
                dbrec_off: dbrec_off as usize,
                bf_off: bf_off as usize,
                has_srq: srq.is_some(),
                max_inline: caps.max_inline,
                _cqs: (send_cq.clone(), recv_cq.clone()),
                _srq: srq.cloned(),
                sq_taken: AtomicBool::new(false),
                rq_taken: AtomicBool::new(false),
            }),
        })
    }
}

/// A protection domain.
#[derive(Debug, Clone)]
pub struct SimPd {
    ctx: SimContext,
    pdn: u32,
}

impl SimPd {
    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.pdn
    }

    fn register(
        &self,
        mem: Option<Arc<Range>>,
        va: u64,
        off: u64,
        len: u64,
        access: u32,
    ) -> Result<SimMr, DeviceError> {
        let fab = &self.ctx.d.fab;
        let r = fab.reg();
        let slot = r
            .claim_mr()
            .ok_or_else(|| DeviceError::Fabric(FabricError::Full(fab.name().into(), "MR")))?;
        let key = ((slot as u32) << 8) | (r.next_gen() % 255 + 1);
        let e = &r.mrs[slot];
        e.key.store(key, Ordering::Relaxed);
        e.owner.store(fab.token(), Ordering::Relaxed);
        e.dev.store(self.ctx.d.dev, Ordering::Relaxed);
        e.pd.store(self.pdn, Ordering::Relaxed);
        e.access.store(access, Ordering::Relaxed);
        e.seg
            .store(mem.as_ref().map_or(NO_SEG, |m| m.slot()), Ordering::Relaxed);
        e.off.store(off, Ordering::Relaxed);
        e.va.store(va, Ordering::Relaxed);
        e.len.store(len, Ordering::Relaxed);
        e.state.store(LIVE, Ordering::Release);
        Ok(SimMr {
            inner: Arc::new(MrInner {
                fab: fab.clone(),
                slot,
                key,
                addr: va,
                len: len as usize,
                _mem: mem,
            }),
        })
    }

    /// Allocates `len` zeroed bytes of device memory that peers in any process of
    /// the fabric can reach, registered with `access`
    /// ([`access`](crate::device::access) flags).
    pub fn alloc_mr(&self, len: usize, access: u32) -> Result<SimMr, DeviceError> {
        let mem = self.ctx.d.fab.alloc_region_memory(len.max(1))?;
        let va = mem.base().as_ptr() as u64;
        let off = mem.off() as u64;
        self.register(Some(mem), va, off, len as u64, access)
    }

    /// Registers memory of this process. Memory inside a region this process
    /// allocated with [`alloc_mr`](Self::alloc_mr) — on any device of the
    /// fabric, e.g. the same buffer registered on both rails — is reachable
    /// from every process, and the new region keeps it alive. Any other
    /// memory is reachable from peers in the same process only; a peer in
    /// another process gets a remote access error, since the software device
    /// can only share memory it allocated.
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay valid until the MR is dropped, and the
    /// NIC may write it at any time its access flags allow.
    pub unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: u32,
    ) -> Result<SimMr, DeviceError> {
        let (va, len) = (addr as u64, len as u64);
        match self.ctx.d.fab.region_memory_containing(va, len) {
            Some(mem) => {
                // Offsets in the registry are within the segment the
                // region memory was carved from.
                let off = mem.off() as u64 + (va - mem.base().as_ptr() as u64);
                self.register(Some(mem), va, off, len, access)
            }
            None => self.register(None, va, 0, len, access),
        }
    }
}

struct MrInner {
    fab: Arc<Fabric>,
    slot: usize,
    key: u32,
    addr: u64,
    len: usize,
    _mem: Option<Arc<Range>>,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        self.fab.reg().mrs[self.slot]
            .state
            .store(registry::FREE, Ordering::Release);
    }
}

/// A memory region.
#[derive(Clone)]
pub struct SimMr {
    inner: Arc<MrInner>,
}

impl std::fmt::Debug for SimMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("key", &format_args!("{:#x}", self.inner.key))
            .field("addr", &format_args!("{:#x}", self.inner.addr))
            .field("len", &self.inner.len)
            .finish()
    }
}

impl SimMr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.inner.key
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.key
    }
    /// Address of the region in this process (what SGEs and remote addresses use).
    pub fn addr(&self) -> u64 {
        self.inner.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
    /// Base pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.addr as *mut u8
    }
    /// Copies `data` into the region at `off`.
    ///
    /// # Panics
    /// When the range is outside the region.
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.inner.len, "write outside the MR");
        // SAFETY: inside the region; the NIC's concurrent writes are the
        // caller's protocol, as with any DMA buffer.
        unsafe { std::ptr::copy(data.as_ptr(), self.as_ptr().add(off), data.len()) };
    }
    /// Copies bytes at `off` out of the region.
    ///
    /// # Panics
    /// When the range is outside the region.
    pub fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.inner.len, "read outside the MR");
        // SAFETY: as for write.
        unsafe { std::ptr::copy(self.as_ptr().add(off), out.as_mut_ptr(), out.len()) };
    }
    /// `len` bytes at `off`, copied out.
    pub fn to_vec(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(off, &mut v);
        v
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

// SAFETY: (for the Any + Send + Sync keepalives) the inner types hold only
// atomics, Arcs and segments (shared memory handles).
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}
// SAFETY: as above.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}
// SAFETY: as above.
unsafe impl Send for QpInner {}
// SAFETY: as above.
unsafe impl Sync for QpInner {}

struct QpInner {
    ctx: SimContext,
    slot: usize,
    qpn: u32,
    /// SQ, RQ, doorbell record (and a DCI's stream state) and BlueFlame
    /// page; offsets below are within the range.
    mem: Range,
    sq_cnt: u32,
    rq_cnt: u32,
    rq_stride: u32,
    dbrec_off: usize,
    bf_off: usize,
    has_srq: bool,
    max_inline: u32,
    _cqs: (SimCq, SimCq),
    _srq: Option<SimSrq>,
    sq_taken: AtomicBool,
    rq_taken: AtomicBool,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let e = &self.ctx.d.fab.reg().qps[self.slot];
        e.qp_state.store(qp_state::RESET, Ordering::Release);
        e.state.store(registry::FREE, Ordering::Release);
    }
}

/// A QP of the software device with a send queue: an RC QP or a DCI.
#[derive(Clone)]
pub struct SimQp {
    inner: Arc<QpInner>,
}

impl std::fmt::Debug for SimQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.inner.qpn)
            .field("state", &self.state())
            .finish()
    }
}

fn state_of(v: u32) -> QpState {
    match v {
        qp_state::RESET => QpState::Reset,
        qp_state::INIT => QpState::Init,
        qp_state::RTR => QpState::Rtr,
        qp_state::RTS => QpState::Rts,
        _ => QpState::Err,
    }
}

impl SimQp {
    fn e(&self) -> &registry::QpEntry {
        &self.inner.ctx.d.fab.reg().qps[self.inner.slot]
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.qpn
    }

    /// Current state (the NIC moves a QP to ERR on its own after an error).
    pub fn state(&self) -> QpState {
        state_of(self.e().qp_state.load(Ordering::Acquire))
    }

    /// What the peer needs to connect.
    pub fn conn_info(&self) -> ConnInfo {
        ConnInfo {
            qpn: self.inner.qpn,
            lid: self.inner.ctx.lid(),
            gid: self.inner.ctx.gid(),
            psn: 0,
        }
    }

    fn transition(
        &self,
        from: &[QpState],
        to: QpState,
        f: impl FnOnce(&registry::QpEntry),
    ) -> Result<(), DeviceError> {
        let e = self.e();
        let _g = e.exec_lock.lock(self.inner.ctx.d.fab.member());
        let cur = state_of(e.qp_state.load(Ordering::Acquire));
        if !from.contains(&cur) {
            return Err(DeviceError::BadTransition {
                qpn: self.inner.qpn,
                from: cur,
                to,
            });
        }
        f(e);
        let v = match to {
            QpState::Reset => qp_state::RESET,
            QpState::Init => qp_state::INIT,
            QpState::Rtr => qp_state::RTR,
            QpState::Rts => qp_state::RTS,
            QpState::Err => qp_state::ERR,
        };
        e.qp_state.store(v, Ordering::Release);
        Ok(())
    }

    /// RESET → INIT.
    pub fn to_init(&self) -> Result<(), DeviceError> {
        self.transition(&[QpState::Reset], QpState::Init, |_| {})
    }

    /// INIT → RTR of a DCI: it names its peer in each WQE, so nothing is
    /// connected.
    pub fn to_rtr_dci(&self) -> Result<(), DeviceError> {
        if self.e().kind.load(Ordering::Relaxed) != registry::qp_kind::DCI {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is not a DCI: connect it with to_rtr",
                self.inner.qpn
            )));
        }
        self.transition(&[QpState::Init], QpState::Rtr, |_| {})
    }

    /// INIT → RTR: connect to `attr.remote` and accept `attr.access` remote
    /// operations.
    pub fn to_rtr(&self, attr: &RtrAttr) -> Result<(), DeviceError> {
        if self.e().kind.load(Ordering::Relaxed) != registry::qp_kind::RC {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is a DCI: it has no peer to connect (to_rtr_dci)",
                self.inner.qpn
            )));
        }
        let remote_dev = u32::from(attr.remote.lid).wrapping_sub(1);
        if remote_dev as usize >= MAX_DEVS {
            return Err(DeviceError::Invalid(format!(
                "remote LID {} names no device",
                attr.remote.lid
            )));
        }
        self.transition(&[QpState::Init], QpState::Rtr, |e| {
            e.remote_qpn.store(attr.remote.qpn, Ordering::Relaxed);
            e.remote_dev.store(remote_dev, Ordering::Relaxed);
            e.access.store(attr.access, Ordering::Relaxed);
            e.min_rnr_us
                .store(rnr_timer_us(attr.min_rnr_timer), Ordering::Relaxed);
        })
    }

    /// RTR → RTS.
    pub fn to_rts(&self, attr: &RtsAttr) -> Result<(), DeviceError> {
        if attr.rnr_retry > 7 || attr.retry_cnt > 7 {
            return Err(DeviceError::Invalid("retry counts are 3 bits".into()));
        }
        self.transition(&[QpState::Rtr], QpState::Rts, |e| {
            e.rnr_retry
                .store(u32::from(attr.rnr_retry), Ordering::Relaxed);
            e.retry_cnt
                .store(u32::from(attr.retry_cnt), Ordering::Relaxed);
            e.timeout_us
                .store(ack_timeout_us(attr.timeout), Ordering::Relaxed);
        })
    }

    /// RTS → RTS of a DCI with a stream id (`mlx5dv_dci_stream_id_reset`):
    /// errored `stream` runs again (its later WQEs are no longer flushed;
    /// its next WQE connects anew). Refused on a QP that is not a DCI, on a
    /// stream the DCI does not have, and on a DCI not in RTS.
    pub fn reset_dci_stream(&self, stream: u16) -> Result<(), DeviceError> {
        let qpn = self.inner.qpn;
        let e = self.e();
        if e.kind.load(Ordering::Relaxed) != registry::qp_kind::DCI {
            return Err(DeviceError::Invalid(format!(
                "QP {qpn:#x} is not a DCI: it has no streams to reset"
            )));
        }
        let fab = &self.inner.ctx.d.fab;
        let _g = e.exec_lock.lock(fab.member());
        let cur = state_of(e.qp_state.load(Ordering::Acquire));
        if cur != QpState::Rts {
            return Err(DeviceError::BadTransition {
                qpn,
                from: cur,
                to: QpState::Rts,
            });
        }
        engine::reset_dci_stream(fab, e, stream).map_err(|err| match err {
            engine::StreamResetError::Range(n) => DeviceError::Invalid(format!(
                "DCI {qpn:#x} has streams 0..{n}: no stream {stream} to reset"
            )),
            engine::StreamResetError::NoState => {
                DeviceError::Invalid(format!("DCI {qpn:#x}: no stream state in its segment"))
            }
        })
    }

    /// Any state → ERR: every outstanding WQE completes with WR_FLUSH_ERR.
    pub fn to_err(&self) -> Result<(), DeviceError> {
        self.transition(
            &[
                QpState::Reset,
                QpState::Init,
                QpState::Rtr,
                QpState::Rts,
                QpState::Err,
            ],
            QpState::Err,
            |_| {},
        )?;
        self.inner.ctx.d.nic.flush_qp(self.inner.qpn);
        Ok(())
    }

    /// The send queue for the data path (once).
    pub fn send_queue<T: SendTable>(&self, mut cfg: SqConfig) -> Result<SendQueue<T>, DeviceError> {
        if self.inner.sq_taken.swap(true, Ordering::AcqRel) {
            return Err(DeviceError::Taken("send queue"));
        }
        let i = &self.inner;
        cfg.max_inline = cfg.max_inline.min(i.max_inline as usize);
        let mem = SqMemory {
            buf: i.mem.at(0),
            wqe_cnt: i.sq_cnt,
            dbrec: i.mem.at(i.dbrec_off),
            bf_reg: i.mem.at(i.bf_off),
            bf_half: 256,
            qpn: i.qpn,
            notify: Some(i.ctx.notify()),
            keepalive: Some(i.clone() as Arc<dyn Any + Send + Sync>),
        };
        // SAFETY: the segment holds SQ, doorbell record and BF page, kept alive
        // by `keepalive`; the SQ is handed out once.
        unsafe { SendQueue::new(mem, cfg) }.map_err(|e| DeviceError::Queue(e.to_string()))
    }

    /// The QP's own receive queue for the data path (once; not with an SRQ).
    pub fn recv_queue<T: RecvTable>(&self) -> Result<RecvQueue<T>, DeviceError> {
        if self.inner.has_srq {
            return Err(DeviceError::Invalid("the QP receives on an SRQ".into()));
        }
        if self.inner.rq_taken.swap(true, Ordering::AcqRel) {
            return Err(DeviceError::Taken("receive queue"));
        }
        let i = &self.inner;
        let mem = RqMemory {
            buf: i.mem.at(i.sq_cnt as usize * 64),
            wqe_cnt: i.rq_cnt,
            stride: i.rq_stride as usize,
            dbrec: i.mem.at(i.dbrec_off),
            qn: i.qpn,
            notify: Some(i.ctx.notify()),
            keepalive: Some(i.clone() as Arc<dyn Any + Send + Sync>),
        };
        // SAFETY: as for send_queue.
        unsafe { RecvQueue::new(mem) }.map_err(|e| DeviceError::Queue(e.to_string()))
    }
}

/// Device-wide counters for tests: live QPs of this process in the fabric.
pub fn live_qps(ctx: &SimContext) -> usize {
    let me = ctx.d.fab.token();
    ctx.d
        .fab
        .reg()
        .qps
        .iter()
        .filter(|e| {
            e.state.load(Ordering::Acquire) == LIVE && e.owner.load(Ordering::Relaxed) == me
        })
        .count()
}

/// Test support: takes the shared lock of CQ `cqn` (any process's CQ of the
/// fabric) as this process's NIC takes it to write CQEs, and never releases
/// it, as a process killed in the middle of writing a CQE leaves it. Tests of
/// the takeover by a survivor call it and then let the process die. False if
/// the fabric has no such CQ.
pub fn hold_cq_lock_forever(ctx: &SimContext, cqn: u32) -> bool {
    let fab = &ctx.d.fab;
    let e = &fab.reg().cqs[registry::slot_of(cqn, MAX_CQS)];
    if e.state.load(Ordering::Acquire) != LIVE || e.cqn.load(Ordering::Relaxed) != cqn {
        return false;
    }
    std::mem::forget(e.lock.lock(fab.member()));
    true
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn f<T: Send + Sync>() {}
    f::<AtomicU32>();
}
