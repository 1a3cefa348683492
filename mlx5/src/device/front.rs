//! The device API's objects: each an enum over the two backends, with one set
//! of methods. Open a device by name and everything created from it belongs to
//! the same backend.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{
    ConnInfo, CqAttr, DciStreams, DctAttr, DeviceError, QpCaps, QpState, RtrAttr, RtsAttr,
};
use crate::cq::CqRing;
use crate::hw::{
    self, HwChannel, HwContext, HwCq, HwDct, HwError, HwMr, HwPd, HwQp, HwSrq, HwWaker, VerbsCq,
    VerbsQp, VerbsSrq,
};
use crate::prm::AddressVector;
use crate::rq::{RecvQueue, Srq, SrqTopology};
use crate::sim::channel::{SimChannel, SimWaker};
use crate::sim::dct::SimDct;
use crate::sim::device::{SimContext, SimCq, SimMr, SimPd, SimQp, SimSrq, DCI_STREAM_CAPS};
use crate::sim::sched::{ExecMode, SchedStats};
use crate::sq::{SendQueue, SqConfig};
use crate::wqe_table::{RecvTable, SendTable};

impl From<HwError> for DeviceError {
    fn from(e: HwError) -> Self {
        DeviceError::Hw(e)
    }
}

fn mixed() -> DeviceError {
    DeviceError::Invalid("objects of different devices".into())
}

/// An opened device: the software mlx5 device or a NIC.
#[derive(Clone, Debug)]
pub enum Context {
    /// The software device.
    Sim(SimContext),
    /// A NIC through rdma-core.
    Hw(HwContext),
}

impl Context {
    /// Opens a device by name: `sim0` .. `sim7` (the software device, in the
    /// fabric `MLX5_SIM_FABRIC` names), a NIC (`mlx5_0`, …), or `auto`: the first
    /// mlx5 NIC, else `sim0` with a one-line notice on stderr.
    pub fn open(name: &str) -> Result<Context, DeviceError> {
        if name == "auto" {
            return Self::open_auto("sim0");
        }
        if name.starts_with("sim") {
            return Ok(Context::Sim(SimContext::open(name)?));
        }
        Ok(Context::Hw(HwContext::open(name)?))
    }

    /// The first usable mlx5 NIC, else software device `software` (in the
    /// fabric `MLX5_SIM_FABRIC` names) with a one-line notice on stderr.
    pub fn open_auto(software: &str) -> Result<Context, DeviceError> {
        let software = if software == "auto" { "sim0" } else { software };
        match hw::list_devices() {
            Ok(devs) => {
                for d in &devs {
                    if let Ok(c) = HwContext::open(d) {
                        if c.is_mlx5() {
                            return Ok(Context::Hw(c));
                        }
                    }
                }
                eprintln!(
                    "mlx5: no usable mlx5 NIC among {}; using the software device {software}",
                    devs.join(", ")
                );
            }
            Err(e) => eprintln!("mlx5: {e}; using the software device {software}"),
        }
        Self::open(software)
    }

    /// Opens software device `name` in fabric `fabric` (inline mode unless this
    /// process already drives the fabric in another).
    pub fn open_in(fabric: &str, name: &str) -> Result<Context, DeviceError> {
        Ok(Context::Sim(SimContext::open_in(fabric, name)?))
    }

    /// Opens software device `name` in fabric `fabric` with the simulated NIC
    /// in `mode`.
    pub fn open_in_mode(fabric: &str, name: &str, mode: ExecMode) -> Result<Context, DeviceError> {
        Ok(Context::Sim(SimContext::open_in_mode(fabric, name, mode)?))
    }

    /// Device name.
    pub fn name(&self) -> &str {
        match self {
            Context::Sim(c) => c.name(),
            Context::Hw(c) => c.name(),
        }
    }

    /// Port LID (on the software device, the device number + 1).
    pub fn lid(&self) -> u16 {
        match self {
            Context::Sim(c) => c.lid(),
            Context::Hw(c) => c.lid(),
        }
    }

    /// The GID used for connections.
    pub fn gid(&self) -> [u8; 16] {
        match self {
            Context::Sim(c) => c.gid(),
            Context::Hw(c) => c.gid().gid,
        }
    }

    /// The software device, if this is one (for its own controls).
    pub fn as_sim(&self) -> Option<&SimContext> {
        match self {
            Context::Sim(c) => Some(c),
            Context::Hw(_) => None,
        }
    }

    /// Runs the software device's queued or stalled work (nothing on hardware,
    /// whose NIC needs no help). Returns the QPs still waiting.
    pub fn progress(&self) -> usize {
        match self {
            Context::Sim(c) => c.progress(),
            Context::Hw(_) => 0,
        }
    }

    /// Deferred-mode statistics of the software device (zero on hardware).
    pub fn sched_stats(&self) -> SchedStats {
        self.as_sim()
            .map(SimContext::sched_stats)
            .unwrap_or_default()
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd, DeviceError> {
        Ok(match self {
            Context::Sim(c) => Pd::Sim(c.alloc_pd()),
            Context::Hw(c) => Pd::Hw(c.alloc_pd()?),
        })
    }

    /// Creates a CQ.
    pub fn create_cq(&self, attr: &CqAttr) -> Result<Cq, DeviceError> {
        Ok(match self {
            Context::Sim(c) => Cq::Sim(c.create_cq(attr)?),
            Context::Hw(c) => {
                if attr.scatter_to_cqe {
                    return Err(DeviceError::Invalid(
                        "scatter-to-CQE is not set up on hardware CQs yet".into(),
                    ));
                }
                Cq::Hw(c.create_cq(attr.cqe_cnt, attr.cqe_size, attr.compression)?)
            }
        })
    }

    /// Creates a completion channel: the events of CQs created on it
    /// ([`create_cq_on`](Self::create_cq_on)) and armed
    /// ([`CqRing::arm`](crate::cq::CqRing::arm),
    /// [`VerbsCq::req_notify`]) arrive there, and
    /// [`CompletionChannel::wait`] sleeps until one does.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel, DeviceError> {
        Ok(match self {
            Context::Sim(c) => CompletionChannel::Sim(c.create_comp_channel()?),
            Context::Hw(c) => CompletionChannel::Hw(c.create_comp_channel()?),
        })
    }

    /// Creates a CQ whose completion events go to `channel` (a channel of this
    /// device): a CQ that can be armed.
    pub fn create_cq_on(
        &self,
        attr: &CqAttr,
        channel: &CompletionChannel,
    ) -> Result<Cq, DeviceError> {
        Ok(match (self, channel) {
            (Context::Sim(c), CompletionChannel::Sim(ch)) => Cq::Sim(c.create_cq_on(attr, ch)?),
            (Context::Hw(c), CompletionChannel::Hw(ch)) => {
                if attr.scatter_to_cqe {
                    return Err(DeviceError::Invalid(
                        "scatter-to-CQE is not set up on hardware CQs yet".into(),
                    ));
                }
                Cq::Hw(c.create_cq_on(attr.cqe_cnt, attr.cqe_size, attr.compression, Some(ch))?)
            }
            _ => return Err(mixed()),
        })
    }

    /// Creates an SRQ of `wqe_cnt` WQEs with up to `max_sge` SGEs each.
    pub fn create_srq(
        &self,
        pd: &Pd,
        wqe_cnt: u32,
        max_sge: u32,
    ) -> Result<SrqHandle, DeviceError> {
        Ok(match (self, pd) {
            (Context::Sim(c), Pd::Sim(p)) => SrqHandle::Sim(c.create_srq(p, wqe_cnt, max_sge)?),
            (Context::Hw(_), Pd::Hw(p)) => SrqHandle::Hw(p.create_srq(wqe_cnt, max_sge)?),
            _ => return Err(mixed()),
        })
    }

    /// Creates an RC QP on `pd` with the given CQs, on `srq` or an RQ of its own.
    pub fn create_qp(
        &self,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: Option<&SrqHandle>,
        caps: &QpCaps,
    ) -> Result<Qp, DeviceError> {
        Ok(match (self, pd, send_cq, recv_cq) {
            (Context::Sim(c), Pd::Sim(p), Cq::Sim(s), Cq::Sim(r)) => {
                let srq = match srq {
                    None => None,
                    Some(SrqHandle::Sim(x)) => Some(x),
                    Some(_) => return Err(mixed()),
                };
                Qp::Sim(c.create_qp(p, s, r, srq, caps)?)
            }
            (Context::Hw(c), Pd::Hw(p), Cq::Hw(s), Cq::Hw(r)) => {
                let srq = match srq {
                    None => None,
                    Some(SrqHandle::Hw(x)) => Some(x),
                    Some(_) => return Err(mixed()),
                };
                let qp = p.create_qp(s, r, srq, caps)?;
                Qp::Hw {
                    qp,
                    ctx: c.clone(),
                    state: Arc::new(AtomicU32::new(hw::ffi::qp_state::RESET)),
                }
            }
            _ => return Err(mixed()),
        })
    }
}

/// The Dynamically Connected transport: DC targets and initiators. On a NIC
/// they are mlx5 DC queues ([`crate::hw::dc`], written from rdma-core's
/// headers and never run on a ConnectX yet); a device that is not mlx5
/// (soft-RoCE `rxe`) has no DC and refuses them with
/// [`DeviceError::Invalid`].
impl Context {
    /// The DCI streams the device supports: the largest `log_concurrent`
    /// and `log_errored` [`create_dci`](Self::create_dci) accepts (on a NIC,
    /// `mlx5dv_query_device`'s `dci_streams_caps`; zero and zero where the
    /// device has none).
    pub fn dci_stream_caps(&self) -> Result<DciStreams, DeviceError> {
        match self {
            Context::Sim(_) => Ok(DCI_STREAM_CAPS),
            Context::Hw(c) => Ok(dc_capable(c)?.dci_stream_caps()?),
        }
    }

    /// The route a DCI's WQE carries to the port `lid` / `gid` (a DCT's
    /// device, as its owner publishes it), for
    /// [`SendQueue::dc_via`](crate::sq::SendQueue::dc_via). On a NIC it is
    /// the address vector of an address handle (`ibv_create_ah`), which on
    /// RoCE holds the destination MAC; get it once per peer device, not per
    /// WQE. On the software device it is
    /// [`AddressVector::lid_gid_route`], what
    /// [`SendQueue::dc`](crate::sq::SendQueue::dc) writes.
    pub fn dc_route(&self, pd: &Pd, lid: u16, gid: [u8; 16]) -> Result<AddressVector, DeviceError> {
        match (self, pd) {
            (Context::Sim(_), Pd::Sim(_)) => Ok(AddressVector::lid_gid_route(lid, gid)),
            (Context::Hw(c), Pd::Hw(p)) => Ok(p.dc_route(dc_capable(c)?, lid, gid)?),
            _ => Err(mixed()),
        }
    }

    /// Creates a DC target on `pd`, ready to receive: any DCI whose WQE
    /// names its number and carries `attr.key` reaches it. Its receives
    /// come from `srq` and complete on `recv_cq`. On a NIC it is brought to
    /// RTR here, where it gets its number; dropping it destroys it (rdma-core
    /// drains it first).
    pub fn create_dct(
        &self,
        pd: &Pd,
        srq: &SrqHandle,
        recv_cq: &Cq,
        attr: &DctAttr,
    ) -> Result<Dct, DeviceError> {
        match (self, pd, srq, recv_cq) {
            (Context::Sim(c), Pd::Sim(p), SrqHandle::Sim(s), Cq::Sim(q)) => {
                Ok(Dct::Sim(c.create_dct(p, s, q, attr)?))
            }
            (Context::Hw(c), Pd::Hw(p), SrqHandle::Hw(s), Cq::Hw(q)) => {
                Ok(Dct::Hw(p.create_dct(dc_capable(c)?, s, q, attr)?))
            }
            _ => Err(mixed()),
        }
    }

    /// Creates a DC initiator on `pd` with its completions on `send_cq`
    /// and `streams` within [`dci_stream_caps`](Self::dci_stream_caps).
    /// It has no receive queue (`caps.rq_wqe_cnt` is ignored); bring it up
    /// with [`Qp::ready_dci`], then post through
    /// [`SendQueue::dc`](crate::sq::SendQueue::dc).
    pub fn create_dci(
        &self,
        pd: &Pd,
        send_cq: &Cq,
        caps: &QpCaps,
        streams: DciStreams,
    ) -> Result<Qp, DeviceError> {
        match (self, pd, send_cq) {
            (Context::Sim(c), Pd::Sim(p), Cq::Sim(s)) => {
                Ok(Qp::Sim(c.create_dci(p, s, caps, streams)?))
            }
            (Context::Hw(c), Pd::Hw(p), Cq::Hw(s)) => {
                check_streams(c.name(), streams, dc_capable(c)?.dci_stream_caps()?)?;
                Ok(Qp::Hw {
                    qp: p.create_dci(s, caps, streams)?,
                    ctx: c.clone(),
                    state: Arc::new(AtomicU32::new(hw::ffi::qp_state::RESET)),
                })
            }
            _ => Err(mixed()),
        }
    }
}

/// The device, if it has DC queues: mlx5 devices have, others (soft-RoCE
/// `rxe`, in particular) have not.
fn dc_capable(c: &HwContext) -> Result<&HwContext, DeviceError> {
    if c.is_mlx5() {
        Ok(c)
    } else {
        Err(DeviceError::Invalid(format!(
            "{}: not an mlx5 device, so it has no DC transport (soft-RoCE rxe has none); \
             use RC QPs",
            c.name()
        )))
    }
}

/// `want` within the device's DCI stream caps, else a clear error.
fn check_streams(dev: &str, want: DciStreams, caps: DciStreams) -> Result<(), DeviceError> {
    if want.log_concurrent > caps.log_concurrent || want.log_errored > caps.log_errored {
        return Err(DeviceError::Invalid(format!(
            "{dev}: DCI streams 2^{} concurrent, 2^{} errored: the device's dci_streams_caps \
             allow 2^{} and 2^{} (max_log_num_concurent {}, max_log_num_errored {})",
            want.log_concurrent,
            want.log_errored,
            caps.log_concurrent,
            caps.log_errored,
            caps.log_concurrent,
            caps.log_errored
        )));
    }
    Ok(())
}

/// A DC target: receives from any DCI that names it and carries its key.
#[derive(Debug, Clone)]
pub enum Dct {
    /// Software device.
    Sim(SimDct),
    /// An mlx5 NIC (never run on one yet: see [`crate::hw::dc`]).
    Hw(HwDct),
}

impl Dct {
    /// The DCT number, which a DCI's WQE names.
    pub fn number(&self) -> u32 {
        match self {
            Dct::Sim(d) => d.number(),
            Dct::Hw(d) => d.number(),
        }
    }

    /// The access key a DCI's WQE must carry.
    pub fn key(&self) -> u64 {
        match self {
            Dct::Sim(d) => d.key(),
            Dct::Hw(d) => d.key(),
        }
    }
}

/// A completion event: an armed CQ of the channel raised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqEvent {
    /// The CQ's number ([`Cq::cqn`]).
    pub cqn: u32,
}

/// Where the completion events of armed CQs arrive (`ibv_comp_channel`), and
/// where a thread sleeps until one does.
///
/// Each arm of a CQ raises at most one event, and each event is handed out
/// once. The way to sleep on a CQ without missing a completion is poll, arm,
/// poll again, then wait (see [`CqRing::arm`](crate::cq::CqRing::arm)).
#[derive(Clone, Debug)]
pub enum CompletionChannel {
    /// The software device: a futex in the fabric's shared memory, so a NIC
    /// in any process of the fabric wakes the waiter.
    Sim(SimChannel),
    /// An RDMA device: `ibv_create_comp_channel`'s file descriptor.
    Hw(HwChannel),
}

impl CompletionChannel {
    /// Waits up to `timeout` for the next completion event of one of the
    /// channel's CQs; `None` when none came. `Duration::ZERO` only looks.
    ///
    /// On the software device the wait also lets this process's simulated
    /// NIC progress (it has no thread of its own): stalled work is retried,
    /// held CQEs are written, and in deferred mode the scheduler takes its
    /// steps, so a seeded run stays deterministic and a wait never blocks on
    /// work only this process would run. On an RDMA device it is `poll(2)` on
    /// the channel's descriptor, then `ibv_get_cq_event` and
    /// `ibv_ack_cq_events`.
    ///
    /// A [`ChannelWaker::wake`] from another thread ends the wait early
    /// (with `None`), as `ucp_worker_signal` does for UCX; a wake that came
    /// while nobody waited ends the next wait at once, so none is lost.
    pub fn wait(&self, timeout: Duration) -> Result<Option<CqEvent>, DeviceError> {
        let cqn = match self {
            CompletionChannel::Sim(c) => c.wait(timeout),
            CompletionChannel::Hw(c) => c.wait(timeout)?,
        };
        Ok(cqn.map(|cqn| CqEvent { cqn }))
    }

    /// Takes a wake that no wait has taken yet: whether there was one. For a
    /// thread that learnt of the wake by other means and will not wait for
    /// it.
    pub fn take_wake(&self) -> bool {
        match self {
            CompletionChannel::Sim(c) => c.take_wake(),
            CompletionChannel::Hw(c) => c.take_wake(),
        }
    }

    /// A handle that ends this channel's wait early, from any thread (a
    /// thread that hands work to the waiter by other means than the CQs).
    pub fn waker(&self) -> ChannelWaker {
        match self {
            CompletionChannel::Sim(c) => ChannelWaker::Sim(c.waker()),
            CompletionChannel::Hw(c) => ChannelWaker::Hw(c.waker()),
        }
    }
}

/// Ends a [`CompletionChannel::wait`] from another thread.
#[derive(Clone, Debug)]
pub enum ChannelWaker {
    /// The software device: a flag and the channel's futex word.
    Sim(SimWaker),
    /// An RDMA device: an eventfd the wait polls beside the channel.
    Hw(HwWaker),
}

impl ChannelWaker {
    /// Ends the channel's current wait, or the next one if none is under
    /// way. Wakes do not pile up: several before a wait end that one wait.
    pub fn wake(&self) {
        match self {
            ChannelWaker::Sim(w) => w.wake(),
            ChannelWaker::Hw(w) => w.wake(),
        }
    }
}

/// A protection domain.
#[derive(Clone, Debug)]
pub enum Pd {
    /// Software device.
    Sim(SimPd),
    /// NIC.
    Hw(HwPd),
}

impl Pd {
    /// Allocates `len` zeroed bytes registered with `access` (on the software
    /// device: shared memory any process of the fabric can reach).
    pub fn alloc_mr(&self, len: usize, access: u32) -> Result<Mr, DeviceError> {
        Ok(match self {
            Pd::Sim(p) => Mr::Sim(p.alloc_mr(len, access)?),
            Pd::Hw(p) => Mr::Hw(p.alloc_mr(len, access, false)?),
        })
    }

    /// [`alloc_mr`](Self::alloc_mr) in 2 MiB huge pages where the device can
    /// have them, for memory the NIC reaches often (rings): fewer pages mean
    /// fewer translation entries for the NIC (MTT/IOTLB) and fewer TLB misses
    /// for the CPU.
    ///
    /// On a NIC (the mlx5 direct path and the verbs path alike, soft-RoCE
    /// included) the memory is an anonymous `MAP_HUGETLB | MAP_HUGE_2MB`
    /// mapping, `len` rounded up to a multiple of 2 MiB (the region itself is
    /// `len` long), from the 2 MiB pool the operator reserves
    /// (`vm.nr_hugepages`, or
    /// `/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages` where the
    /// default huge page size is another). When the pool has too few free
    /// pages the memory is normal pages, as `alloc_mr` gives: not an error.
    /// [`Mr::is_huge`] tells which it got.
    ///
    /// On the software device, whose memory is a shared-memory file in
    /// `/dev/shm` that every process of the fabric maps, huge pages do not
    /// apply: this allocates as `alloc_mr` does and the region reports
    /// `is_huge() == false`.
    pub fn alloc_mr_huge(&self, len: usize, access: u32) -> Result<Mr, DeviceError> {
        Ok(match self {
            Pd::Sim(p) => Mr::Sim(p.alloc_mr(len, access)?),
            Pd::Hw(p) => Mr::Hw(p.alloc_mr(len, access, true)?),
        })
    }

    /// Registers memory of this process.
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay valid until the MR is dropped, and the NIC
    /// may write it whenever its access flags allow.
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: u32) -> Result<Mr, DeviceError> {
        Ok(match self {
            // SAFETY: the caller's guarantee, forwarded unchanged.
            Pd::Sim(p) => Mr::Sim(unsafe { p.reg_mr(addr, len, access) }?),
            // SAFETY: as above.
            Pd::Hw(p) => Mr::Hw(unsafe { p.reg_mr(addr, len, access) }?),
        })
    }
}

/// A memory region.
#[derive(Clone)]
pub enum Mr {
    /// Software device.
    Sim(SimMr),
    /// NIC.
    Hw(HwMr),
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("lkey", &self.lkey())
            .field("addr", &self.addr())
            .field("len", &self.len())
            .field("huge", &self.is_huge())
            .finish()
    }
}

impl Mr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        match self {
            Mr::Sim(m) => m.lkey(),
            Mr::Hw(m) => m.lkey(),
        }
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        match self {
            Mr::Sim(m) => m.rkey(),
            Mr::Hw(m) => m.rkey(),
        }
    }
    /// Address in this process (what SGEs and remote addresses use).
    pub fn addr(&self) -> u64 {
        match self {
            Mr::Sim(m) => m.addr(),
            Mr::Hw(m) => m.addr(),
        }
    }
    /// Length.
    pub fn len(&self) -> usize {
        match self {
            Mr::Sim(m) => m.len(),
            Mr::Hw(m) => m.len(),
        }
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the region lies in 2 MiB huge pages: one
    /// [`Pd::alloc_mr_huge`] allocated while the pool had pages to give.
    /// Always false on the software device, and for memory registered with
    /// [`Pd::reg_mr`].
    pub fn is_huge(&self) -> bool {
        match self {
            Mr::Sim(_) => false,
            Mr::Hw(m) => m.is_huge(),
        }
    }
    /// Base pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr() as *mut u8
    }
    /// Copies `data` into the region at `off`.
    ///
    /// # Panics
    /// When the range is outside the region.
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len(), "write outside the MR");
        // SAFETY: inside the region; concurrent NIC writes are the caller's
        // protocol, as with any DMA buffer.
        unsafe { std::ptr::copy(data.as_ptr(), self.as_ptr().add(off), data.len()) };
    }
    /// Copies bytes at `off` out of the region.
    ///
    /// # Panics
    /// When the range is outside the region.
    pub fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len(), "read outside the MR");
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

/// A completion queue.
#[derive(Clone, Debug)]
pub enum Cq {
    /// Software device.
    Sim(SimCq),
    /// NIC.
    Hw(HwCq),
}

impl Cq {
    /// CQ number.
    pub fn cqn(&self) -> u32 {
        match self {
            Cq::Sim(c) => c.cqn(),
            Cq::Hw(c) => c.cqn().unwrap_or(0),
        }
    }
    /// Whether the software device found the CQ full (hardware reports an
    /// overrun as an asynchronous event, which this API does not read yet).
    pub fn overrun(&self) -> bool {
        match self {
            Cq::Sim(c) => c.overrun(),
            Cq::Hw(_) => false,
        }
    }
    /// The consumer side for the data path (once on the software device).
    pub fn ring(&self) -> Result<CqRing, DeviceError> {
        Ok(match self {
            Cq::Sim(c) => c.ring()?,
            Cq::Hw(c) => c.ring()?,
        })
    }

    /// The verbs data path's consumer side (devices opened through rdma-core).
    pub fn verbs(&self) -> Result<VerbsCq, DeviceError> {
        match self {
            Cq::Sim(_) => Err(no_verbs()),
            Cq::Hw(c) => Ok(VerbsCq::new(c)?),
        }
    }
}

fn no_verbs() -> DeviceError {
    DeviceError::Invalid("the software device has the direct (mlx5) data path only".into())
}

/// A shared receive queue.
#[derive(Clone, Debug)]
pub enum SrqHandle {
    /// Software device.
    Sim(SimSrq),
    /// NIC.
    Hw(HwSrq),
}

impl SrqHandle {
    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        match self {
            SrqHandle::Sim(s) => s.srqn(),
            SrqHandle::Hw(s) => s.srqn().unwrap_or(0),
        }
    }
    /// The posting side for the data path.
    pub fn srq<T: SrqTopology>(&self) -> Result<Srq<T>, DeviceError> {
        Ok(match self {
            SrqHandle::Sim(s) => s.srq()?,
            SrqHandle::Hw(s) => s.srq()?,
        })
    }

    /// The verbs data path's posting side (devices opened through rdma-core).
    pub fn verbs(&self) -> Result<VerbsSrq, DeviceError> {
        match self {
            SrqHandle::Sim(_) => Err(no_verbs()),
            SrqHandle::Hw(s) => Ok(VerbsSrq::new(s)?),
        }
    }
}

/// An RC queue pair.
#[derive(Clone)]
pub enum Qp {
    /// Software device.
    Sim(SimQp),
    /// NIC, with the context it was created on.
    Hw {
        /// The QP.
        qp: HwQp,
        /// Its device (port, GID and MTU for RTR).
        ctx: HwContext,
        /// The last state this API moved it to.
        state: Arc<AtomicU32>,
    },
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn())
            .field("state", &self.state())
            .finish()
    }
}

fn hw_state(v: u32) -> QpState {
    use hw::ffi::qp_state::*;
    match v {
        RESET => QpState::Reset,
        INIT => QpState::Init,
        RTR => QpState::Rtr,
        RTS => QpState::Rts,
        _ => QpState::Err,
    }
}

impl Qp {
    /// QP number.
    pub fn qpn(&self) -> u32 {
        match self {
            Qp::Sim(q) => q.qpn(),
            Qp::Hw { qp, .. } => qp.qpn(),
        }
    }

    /// Current state (the NIC moves a QP to ERR on its own after an error).
    pub fn state(&self) -> QpState {
        match self {
            Qp::Sim(q) => q.state(),
            Qp::Hw { qp, state, .. } => {
                hw_state(qp.query_state().unwrap_or(state.load(Ordering::Relaxed)))
            }
        }
    }

    /// What the peer needs to connect.
    pub fn conn_info(&self) -> ConnInfo {
        match self {
            Qp::Sim(q) => q.conn_info(),
            Qp::Hw { qp, ctx, .. } => qp.conn_info(ctx, 0),
        }
    }

    fn hw_step(state: &AtomicU32, v: u32, r: Result<(), HwError>) -> Result<(), DeviceError> {
        r?;
        state.store(v, Ordering::Relaxed);
        Ok(())
    }

    /// RESET → INIT.
    pub fn to_init(&self) -> Result<(), DeviceError> {
        match self {
            Qp::Sim(q) => q.to_init(),
            Qp::Hw { qp, state, .. } => {
                Self::hw_step(state, hw::ffi::qp_state::INIT, qp.to_init(0))
            }
        }
    }

    /// INIT → RTR: connect to `attr.remote`, accept `attr.access` remote operations.
    pub fn to_rtr(&self, attr: &RtrAttr) -> Result<(), DeviceError> {
        match self {
            Qp::Sim(q) => q.to_rtr(attr),
            Qp::Hw { qp, .. } if qp.is_dci() => Err(DeviceError::Invalid(format!(
                "QP {:#x} is a DCI: it has no peer to connect (to_rtr_dci)",
                qp.qpn()
            ))),
            Qp::Hw { qp, ctx, state } => {
                Self::hw_step(state, hw::ffi::qp_state::RTR, qp.to_rtr(ctx, attr))
            }
        }
    }

    /// RTR → RTS.
    pub fn to_rts(&self, attr: &RtsAttr) -> Result<(), DeviceError> {
        match self {
            Qp::Sim(q) => q.to_rts(attr),
            Qp::Hw { qp, state, .. } => {
                Self::hw_step(state, hw::ffi::qp_state::RTS, qp.to_rts(attr))
            }
        }
    }

    /// RESET → INIT → RTR → RTS: connects to `rtr.remote` and makes the QP
    /// ready to send (the usual bring-up in one call).
    pub fn connect(&self, rtr: &RtrAttr, rts: &RtsAttr) -> Result<(), DeviceError> {
        self.to_init()?;
        self.to_rtr(rtr)?;
        self.to_rts(rts)
    }

    /// INIT → RTR of a DCI: it names its peer in each WQE, so nothing is
    /// connected.
    pub fn to_rtr_dci(&self) -> Result<(), DeviceError> {
        match self {
            Qp::Sim(q) => q.to_rtr_dci(),
            Qp::Hw { qp, .. } if !qp.is_dci() => Err(DeviceError::Invalid(format!(
                "QP {:#x} is not a DCI: connect it with to_rtr",
                qp.qpn()
            ))),
            Qp::Hw { qp, ctx, state } => {
                Self::hw_step(state, hw::ffi::qp_state::RTR, qp.to_rtr_dci(ctx))
            }
        }
    }

    /// RTS → RTS of a DCI with a stream id (`mlx5dv_dci_stream_id_reset`):
    /// an errored `stream` runs again. Refused on a QP that is not a DCI,
    /// a stream it does not have, or a DCI not in RTS.
    pub fn reset_dci_stream(&self, stream: u16) -> Result<(), DeviceError> {
        match self {
            Qp::Sim(q) => q.reset_dci_stream(stream),
            Qp::Hw { qp, .. } if !qp.is_dci() => Err(DeviceError::Invalid(format!(
                "QP {:#x} is not a DCI: it has no streams",
                qp.qpn()
            ))),
            Qp::Hw { qp, .. } => Ok(qp.reset_dci_stream(stream)?),
        }
    }

    /// RESET → INIT → RTR → RTS of a DCI: ready to send to any DCT.
    pub fn ready_dci(&self, rts: &RtsAttr) -> Result<(), DeviceError> {
        self.to_init()?;
        self.to_rtr_dci()?;
        self.to_rts(rts)
    }

    /// Any state → ERR: every outstanding WQE completes with WR_FLUSH_ERR.
    pub fn to_err(&self) -> Result<(), DeviceError> {
        match self {
            Qp::Sim(q) => q.to_err(),
            Qp::Hw { qp, state, .. } => Self::hw_step(state, hw::ffi::qp_state::ERR, qp.to_err()),
        }
    }

    /// The send queue for the data path.
    pub fn send_queue<T: SendTable>(&self, cfg: SqConfig) -> Result<SendQueue<T>, DeviceError> {
        Ok(match self {
            Qp::Sim(q) => q.send_queue(cfg)?,
            Qp::Hw { qp, .. } => qp.send_queue(cfg)?,
        })
    }

    /// The QP's own receive queue for the data path.
    pub fn recv_queue<T: RecvTable>(&self) -> Result<RecvQueue<T>, DeviceError> {
        Ok(match self {
            Qp::Sim(q) => q.recv_queue()?,
            Qp::Hw { qp, .. } => qp.recv_queue()?,
        })
    }

    /// Both queues on the verbs data path (devices opened through rdma-core).
    pub fn verbs(&self) -> Result<VerbsQp, DeviceError> {
        match self {
            Qp::Sim(_) => Err(no_verbs()),
            Qp::Hw { qp, .. } => Ok(VerbsQp::new(qp)?),
        }
    }
}
