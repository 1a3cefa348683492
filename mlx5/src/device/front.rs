//! The device API's objects: each an enum over the backends, with one set
//! of methods. Open a device by name and everything created from it belongs to
//! the same backend.
//!
//! The seam: every call into a backend goes through `backend!`, the one
//! place that matches an object on its backend (its software arm exists only
//! with the `sim` feature), and a call that takes several objects of one
//! device takes each one's backend part with `sim_part` / `hw_part`, written
//! once for all objects by `backend_parts!`. Besides the enums' variants,
//! only opening a device names a backend. These are control-path objects; the data path
//! ([`SendQueue`], [`CqRing`], …) is handed out by them and never goes through
//! the front.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::cq::CqRing;
use crate::hw::{
    self, HwChannel, HwContext, HwCq, HwDct, HwMr, HwPd, HwQp, HwSrq, HwWaker, VerbsCq, VerbsQp,
    VerbsSrq,
};
use crate::prm::AddressVector;
use crate::rq::{RecvQueue, Srq, SrqTopology};
#[cfg(feature = "sim")]
use crate::sim::{
    channel::{SimChannel, SimWaker},
    dct::SimDct,
    device::{SimContext, SimCq, SimMr, SimPd, SimQp, SimSrq, DCI_STREAM_CAPS},
};
use crate::sq::{SendQueue, SqConfig};
use crate::types::error::{DeviceError, HwError};
use crate::types::{
    ConnInfo, CqAttr, DciStreams, DctAttr, ExecMode, QpCaps, QpState, RtrAttr, RtsAttr, SchedStats,
};
use crate::wqe_table::{RecvTable, SendTable};

/// The seam: runs one expression per backend on the backend object inside
/// `self` (a front enum). `backend!(self, x => x.f())` calls the same method
/// on either; `backend!(self, Sim(x) => a, Hw(y) => b)` gives each its own.
/// The software device's arm exists only with the `sim` feature.
macro_rules! backend {
    ($obj:expr, $x:ident => $both:expr) => {
        backend!($obj, Sim($x) => $both, Hw($x) => $both)
    };
    ($obj:expr, Sim($s:pat) => $sim:expr, Hw($h:pat) => $hw:expr $(,)?) => {
        match $obj {
            #[cfg(feature = "sim")]
            Self::Sim($s) => $sim,
            Self::Hw($h) => $hw,
        }
    };
}

/// The backend parts of a front enum, for a call that takes several objects
/// and needs them all on the device it runs on.
macro_rules! backend_parts {
    ($front:ident, $sim:ty, $hw:ty) => {
        impl $front {
            /// The software device's object, else [`mixed`].
            #[cfg(feature = "sim")]
            fn sim_part(&self) -> Result<&$sim, DeviceError> {
                backend!(self, Sim(x) => Ok(x), Hw(_) => Err(mixed()))
            }
            /// The NIC's object, else [`mixed`].
            fn hw_part(&self) -> Result<&$hw, DeviceError> {
                backend!(self, Sim(_) => Err(mixed()), Hw(x) => Ok(x))
            }
        }
    };
}

// Without the `sim` feature the `Sim*` types are never resolved: the
// functions that name them are configured out first.
backend_parts!(Pd, SimPd, HwPd);
backend_parts!(Cq, SimCq, HwCq);
backend_parts!(SrqHandle, SimSrq, HwSrq);
backend_parts!(CompletionChannel, SimChannel, HwChannel);

/// Objects of two devices (or two backends) were handed to one call.
#[cfg(feature = "sim")]
fn mixed() -> DeviceError {
    DeviceError::Invalid("objects of different devices".into())
}

/// An opened device: the software mlx5 device or a NIC.
#[derive(Clone, Debug)]
pub enum Context {
    /// The software device.
    #[cfg(feature = "sim")]
    Sim(SimContext),
    /// A NIC through rdma-core.
    Hw(HwContext),
}

impl Context {
    /// Opens a device by name: `sim0` .. `sim7` (the software device, in the
    /// fabric `MLX5_SIM_FABRIC` names), a NIC (`mlx5_0`, …), or `auto`: the first
    /// mlx5 NIC, else `sim0` with a one-line notice on stderr. Without the
    /// `sim` feature a software device is [`DeviceError::NoSoftwareDevice`].
    pub fn open(name: &str) -> Result<Context, DeviceError> {
        if name == "auto" {
            return Self::open_auto("sim0");
        }
        if name.starts_with("sim") {
            return Self::open_software(name);
        }
        Ok(Context::Hw(HwContext::open(name)?))
    }

    /// The first usable mlx5 NIC, else software device `software` (in the
    /// fabric `MLX5_SIM_FABRIC` names) with a one-line notice on stderr.
    /// Without the `sim` feature there is nothing to fall back on: no NIC is
    /// [`DeviceError::NoSoftwareDevice`], saying why.
    pub fn open_auto(software: &str) -> Result<Context, DeviceError> {
        let software = if software == "auto" { "sim0" } else { software };
        let why = match hw::list_devices() {
            Ok(devs) => {
                for d in &devs {
                    if let Ok(c) = HwContext::open(d) {
                        if c.is_mlx5() {
                            return Ok(Context::Hw(c));
                        }
                    }
                }
                format!("no usable mlx5 NIC among {}", devs.join(", "))
            }
            Err(e) => e.to_string(),
        };
        Self::fall_back(software, &why)
    }

    /// `open_auto` found no NIC (`why`): the software device `software`.
    #[cfg(feature = "sim")]
    fn fall_back(software: &str, why: &str) -> Result<Context, DeviceError> {
        tracing::warn!("{why}; using the software device {software}");
        Self::open(software)
    }

    /// `open_auto` found no NIC (`why`), and there is no software device.
    #[cfg(not(feature = "sim"))]
    fn fall_back(software: &str, why: &str) -> Result<Context, DeviceError> {
        Err(DeviceError::NoSoftwareDevice(format!("{why}; {software}")))
    }

    /// Software device `name` in the fabric `MLX5_SIM_FABRIC` names.
    #[cfg(feature = "sim")]
    fn open_software(name: &str) -> Result<Context, DeviceError> {
        Ok(Context::Sim(SimContext::open(name)?))
    }

    /// No software device in this build.
    #[cfg(not(feature = "sim"))]
    fn open_software(name: &str) -> Result<Context, DeviceError> {
        Err(DeviceError::NoSoftwareDevice(name.to_owned()))
    }

    /// Opens software device `name` in fabric `fabric` (inline mode unless this
    /// process already drives the fabric in another). Without the `sim`
    /// feature: [`DeviceError::NoSoftwareDevice`].
    pub fn open_in(fabric: &str, name: &str) -> Result<Context, DeviceError> {
        Self::open_in_mode_or(fabric, name, None)
    }

    /// Opens software device `name` in fabric `fabric` with the simulated NIC
    /// in `mode`. Without the `sim` feature:
    /// [`DeviceError::NoSoftwareDevice`].
    pub fn open_in_mode(fabric: &str, name: &str, mode: ExecMode) -> Result<Context, DeviceError> {
        Self::open_in_mode_or(fabric, name, Some(mode))
    }

    /// Software device `name` of `fabric`, in `mode` or, for `None`, the
    /// mode this process drives the fabric in (inline for a new one).
    #[cfg(feature = "sim")]
    fn open_in_mode_or(
        fabric: &str,
        name: &str,
        mode: Option<ExecMode>,
    ) -> Result<Context, DeviceError> {
        Ok(Context::Sim(match mode {
            None => SimContext::open_in(fabric, name)?,
            Some(mode) => SimContext::open_in_mode(fabric, name, mode)?,
        }))
    }

    /// No software device in this build.
    #[cfg(not(feature = "sim"))]
    fn open_in_mode_or(
        _fabric: &str,
        name: &str,
        _mode: Option<ExecMode>,
    ) -> Result<Context, DeviceError> {
        Err(DeviceError::NoSoftwareDevice(name.to_owned()))
    }

    /// Device name.
    pub fn name(&self) -> &str {
        backend!(self, c => c.name())
    }

    /// Port LID (on the software device, the device number + 1).
    pub fn lid(&self) -> u16 {
        backend!(self, c => c.lid())
    }

    /// The GID used for connections.
    pub fn gid(&self) -> [u8; 16] {
        backend!(self, Sim(c) => c.gid(), Hw(c) => c.gid().gid)
    }

    /// Whether this is the software device (always false without the `sim`
    /// feature).
    pub fn is_software(&self) -> bool {
        backend!(self, Sim(_) => true, Hw(_) => false)
    }

    /// The software device, if this is one (for its own controls).
    #[cfg(feature = "sim")]
    pub fn as_sim(&self) -> Option<&SimContext> {
        backend!(self, Sim(c) => Some(c), Hw(_) => None)
    }

    /// Whether this crate's direct data path drives the device: the software
    /// device and mlx5 NICs (`mlx5dv_is_supported`).
    pub(crate) fn has_direct_path(&self) -> bool {
        backend!(self, Sim(_) => true, Hw(c) => c.is_mlx5())
    }

    /// Whether the provider's own post/poll entry points can drive the
    /// device (any device opened through rdma-core).
    pub(crate) fn has_verbs_path(&self) -> bool {
        backend!(self, Sim(_) => false, Hw(_) => true)
    }

    /// Runs the software device's queued or stalled work (nothing on hardware,
    /// whose NIC needs no help). Returns the QPs still waiting.
    pub fn progress(&self) -> usize {
        backend!(self, Sim(c) => c.progress(), Hw(_) => 0)
    }

    /// Deferred-mode statistics of the software device (zero on hardware).
    pub fn sched_stats(&self) -> SchedStats {
        backend!(self, Sim(c) => c.sched_stats(), Hw(_) => SchedStats::default())
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd, DeviceError> {
        Ok(backend!(self, Sim(c) => Pd::Sim(c.alloc_pd()), Hw(c) => Pd::Hw(c.alloc_pd()?)))
    }

    /// Creates a CQ.
    pub fn create_cq(&self, attr: &CqAttr) -> Result<Cq, DeviceError> {
        Ok(backend!(self,
            Sim(c) => Cq::Sim(c.create_cq(attr)?),
            Hw(c) => Cq::Hw(c.create_cq(attr.cqe_cnt, attr.cqe_size, hw_compression(attr)?)?),
        ))
    }

    /// Creates a completion channel: the events of CQs created on it
    /// ([`create_cq_on`](Self::create_cq_on)) and armed
    /// ([`CqRing::arm`](crate::cq::CqRing::arm),
    /// [`VerbsCq::req_notify`]) arrive there, and
    /// [`CompletionChannel::wait`] sleeps until one does.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel, DeviceError> {
        Ok(backend!(self,
            Sim(c) => CompletionChannel::Sim(c.create_comp_channel()?),
            Hw(c) => CompletionChannel::Hw(c.create_comp_channel()?),
        ))
    }

    /// Creates a CQ whose completion events go to `channel` (a channel of this
    /// device): a CQ that can be armed.
    pub fn create_cq_on(
        &self,
        attr: &CqAttr,
        channel: &CompletionChannel,
    ) -> Result<Cq, DeviceError> {
        Ok(backend!(self,
            Sim(c) => Cq::Sim(c.create_cq_on(attr, channel.sim_part()?)?),
            Hw(c) => {
                let ch = channel.hw_part()?;
                let comp = hw_compression(attr)?;
                Cq::Hw(c.create_cq_on(attr.cqe_cnt, attr.cqe_size, comp, Some(ch))?)
            },
        ))
    }

    /// Creates an SRQ of `wqe_cnt` WQEs with up to `max_sge` SGEs each.
    pub fn create_srq(
        &self,
        pd: &Pd,
        wqe_cnt: u32,
        max_sge: u32,
    ) -> Result<SrqHandle, DeviceError> {
        Ok(backend!(self,
            Sim(c) => SrqHandle::Sim(c.create_srq(pd.sim_part()?, wqe_cnt, max_sge)?),
            Hw(_) => SrqHandle::Hw(pd.hw_part()?.create_srq(wqe_cnt, max_sge)?),
        ))
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
        Ok(backend!(self,
            Sim(c) => {
                let srq = srq.map(SrqHandle::sim_part).transpose()?;
                let (s, r) = (send_cq.sim_part()?, recv_cq.sim_part()?);
                Qp::Sim(c.create_qp(pd.sim_part()?, s, r, srq, caps)?)
            },
            Hw(c) => {
                let srq = srq.map(SrqHandle::hw_part).transpose()?;
                let (s, r) = (send_cq.hw_part()?, recv_cq.hw_part()?);
                Qp::Hw(HwQpHandle::new(pd.hw_part()?.create_qp(s, r, srq, caps)?, c))
            }
        ))
    }
}

/// The compression a hardware CQ of `attr` gets, or why it cannot have
/// what `attr` asks.
fn hw_compression(attr: &CqAttr) -> Result<crate::cq::Compression, DeviceError> {
    if attr.scatter_to_cqe {
        return Err(DeviceError::Invalid(
            "scatter-to-CQE is not set up on hardware CQs yet".into(),
        ));
    }
    Ok(attr.compression)
}

/// The Dynamically Connected transport: DC targets and initiators. On a NIC
/// they are mlx5 DC queues (`hw::dc`, written from rdma-core's
/// headers and never run on a ConnectX yet); a device that is not mlx5
/// (soft-RoCE `rxe`) has no DC and refuses them with
/// [`DeviceError::Invalid`].
impl Context {
    /// The DCI streams the device supports: the largest `log_concurrent`
    /// and `log_errored` [`create_dci`](Self::create_dci) accepts (on a NIC,
    /// `mlx5dv_query_device`'s `dci_streams_caps`; zero and zero where the
    /// device has none).
    pub fn dci_stream_caps(&self) -> Result<DciStreams, DeviceError> {
        backend!(self,
            Sim(_) => Ok(DCI_STREAM_CAPS),
            Hw(c) => Ok(dc_capable(c)?.dci_stream_caps()?),
        )
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
        backend!(self,
            Sim(_) => {
                pd.sim_part()?;
                Ok(AddressVector::lid_gid_route(lid, gid))
            },
            Hw(c) => Ok(pd.hw_part()?.dc_route(dc_capable(c)?, lid, gid)?),
        )
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
        backend!(self,
            Sim(c) => {
                let (p, s, q) = (pd.sim_part()?, srq.sim_part()?, recv_cq.sim_part()?);
                Ok(Dct::Sim(c.create_dct(p, s, q, attr)?))
            },
            Hw(c) => {
                let (p, s, q) = (pd.hw_part()?, srq.hw_part()?, recv_cq.hw_part()?);
                Ok(Dct::Hw(p.create_dct(dc_capable(c)?, s, q, attr)?))
            }
        )
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
        backend!(self,
            Sim(c) => {
                let (p, s) = (pd.sim_part()?, send_cq.sim_part()?);
                Ok(Qp::Sim(c.create_dci(p, s, caps, streams)?))
            },
            Hw(c) => {
                let (p, s) = (pd.hw_part()?, send_cq.hw_part()?);
                check_streams(c.name(), streams, dc_capable(c)?.dci_stream_caps()?)?;
                Ok(Qp::Hw(HwQpHandle::new(p.create_dci(s, caps, streams)?, c)))
            }
        )
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
    #[cfg(feature = "sim")]
    Sim(SimDct),
    /// An mlx5 NIC (never run on one yet: see `hw::dc`).
    Hw(HwDct),
}

impl Dct {
    /// The DCT number, which a DCI's WQE names.
    pub fn number(&self) -> u32 {
        backend!(self, d => d.number())
    }

    /// The access key a DCI's WQE must carry.
    pub fn key(&self) -> u64 {
        backend!(self, d => d.key())
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
    #[cfg(feature = "sim")]
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
        let cqn = backend!(self, Sim(c) => c.wait(timeout), Hw(c) => c.wait(timeout)?);
        Ok(cqn.map(|cqn| CqEvent { cqn }))
    }

    /// Takes a wake that no wait has taken yet: whether there was one. For a
    /// thread that learnt of the wake by other means and will not wait for
    /// it.
    pub fn take_wake(&self) -> bool {
        backend!(self, c => c.take_wake())
    }

    /// A handle that ends this channel's wait early, from any thread (a
    /// thread that hands work to the waiter by other means than the CQs).
    pub fn waker(&self) -> ChannelWaker {
        backend!(self,
            Sim(c) => ChannelWaker::Sim(c.waker()),
            Hw(c) => ChannelWaker::Hw(c.waker()),
        )
    }
}

/// Ends a [`CompletionChannel::wait`] from another thread.
#[derive(Clone, Debug)]
pub enum ChannelWaker {
    /// The software device: a flag and the channel's futex word.
    #[cfg(feature = "sim")]
    Sim(SimWaker),
    /// An RDMA device: an eventfd the wait polls beside the channel.
    Hw(HwWaker),
}

impl ChannelWaker {
    /// Ends the channel's current wait, or the next one if none is under
    /// way. Wakes do not pile up: several before a wait end that one wait.
    pub fn wake(&self) {
        backend!(self, w => w.wake())
    }
}

/// A protection domain.
#[derive(Clone, Debug)]
pub enum Pd {
    /// Software device.
    #[cfg(feature = "sim")]
    Sim(SimPd),
    /// NIC.
    Hw(HwPd),
}

impl Pd {
    /// Allocates `len` zeroed bytes registered with `access` (on the software
    /// device: shared memory any process of the fabric can reach).
    pub fn alloc_mr(&self, len: usize, access: u32) -> Result<Mr, DeviceError> {
        Ok(backend!(self,
            Sim(p) => Mr::Sim(p.alloc_mr(len, access)?),
            Hw(p) => Mr::Hw(p.alloc_mr(len, access, false)?),
        ))
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
        Ok(backend!(self,
            Sim(p) => Mr::Sim(p.alloc_mr(len, access)?),
            Hw(p) => Mr::Hw(p.alloc_mr(len, access, true)?),
        ))
    }

    /// Registers memory of this process.
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay valid until the MR is dropped, and the NIC
    /// may write it whenever its access flags allow.
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: u32) -> Result<Mr, DeviceError> {
        Ok(backend!(self,
            // SAFETY: the caller's guarantee, forwarded unchanged.
            Sim(p) => Mr::Sim(unsafe { p.reg_mr(addr, len, access) }?),
            // SAFETY: as above.
            Hw(p) => Mr::Hw(unsafe { p.reg_mr(addr, len, access) }?),
        ))
    }
}

/// A memory region.
#[derive(Clone)]
pub enum Mr {
    /// Software device.
    #[cfg(feature = "sim")]
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
        backend!(self, m => m.lkey())
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        backend!(self, m => m.rkey())
    }
    /// Address in this process (what SGEs and remote addresses use).
    pub fn addr(&self) -> u64 {
        backend!(self, m => m.addr())
    }
    /// Length.
    pub fn len(&self) -> usize {
        backend!(self, m => m.len())
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
        backend!(self, Sim(_) => false, Hw(m) => m.is_huge())
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
    #[cfg(feature = "sim")]
    Sim(SimCq),
    /// NIC.
    Hw(HwCq),
}

impl Cq {
    /// CQ number.
    pub fn cqn(&self) -> u32 {
        backend!(self, Sim(c) => c.cqn(), Hw(c) => c.cqn().unwrap_or(0))
    }
    /// Whether the software device found the CQ full (hardware reports an
    /// overrun as an asynchronous event, which this API does not read yet).
    pub fn overrun(&self) -> bool {
        backend!(self, Sim(c) => c.overrun(), Hw(_) => false)
    }
    /// The consumer side for the data path (once on the software device).
    pub fn ring(&self) -> Result<CqRing, DeviceError> {
        Ok(backend!(self, c => c.ring()?))
    }

    /// The verbs data path's consumer side (devices opened through rdma-core).
    pub fn verbs(&self) -> Result<VerbsCq, DeviceError> {
        backend!(self, Sim(_) => Err(no_verbs()), Hw(c) => Ok(VerbsCq::new(c)?))
    }
}

/// The software device asked for the verbs data path.
#[cfg(feature = "sim")]
fn no_verbs() -> DeviceError {
    DeviceError::Invalid("the software device has the direct (mlx5) data path only".into())
}

/// A shared receive queue.
#[derive(Clone, Debug)]
pub enum SrqHandle {
    /// Software device.
    #[cfg(feature = "sim")]
    Sim(SimSrq),
    /// NIC.
    Hw(HwSrq),
}

impl SrqHandle {
    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        backend!(self, Sim(s) => s.srqn(), Hw(s) => s.srqn().unwrap_or(0))
    }
    /// The posting side for the data path.
    pub fn srq<T: SrqTopology>(&self) -> Result<Srq<T>, DeviceError> {
        Ok(backend!(self, s => s.srq()?))
    }

    /// The verbs data path's posting side (devices opened through rdma-core).
    pub fn verbs(&self) -> Result<VerbsSrq, DeviceError> {
        backend!(self, Sim(_) => Err(no_verbs()), Hw(s) => Ok(VerbsSrq::new(s)?))
    }
}

/// An RC queue pair (or a DC initiator).
#[derive(Clone)]
pub enum Qp {
    /// Software device.
    #[cfg(feature = "sim")]
    Sim(SimQp),
    /// NIC, with the context it was created on.
    Hw(HwQpHandle),
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn())
            .field("state", &self.state())
            .finish()
    }
}

impl Qp {
    /// QP number.
    pub fn qpn(&self) -> u32 {
        backend!(self, q => q.qpn())
    }

    /// Current state (the NIC moves a QP to ERR on its own after an error).
    pub fn state(&self) -> QpState {
        backend!(self, q => q.state())
    }

    /// What the peer needs to connect.
    pub fn conn_info(&self) -> ConnInfo {
        backend!(self, q => q.conn_info())
    }

    /// RESET → INIT.
    pub fn to_init(&self) -> Result<(), DeviceError> {
        backend!(self, q => q.to_init())
    }

    /// INIT → RTR: connect to `attr.remote`, accept `attr.access` remote operations.
    pub fn to_rtr(&self, attr: &RtrAttr) -> Result<(), DeviceError> {
        backend!(self, q => q.to_rtr(attr))
    }

    /// RTR → RTS.
    pub fn to_rts(&self, attr: &RtsAttr) -> Result<(), DeviceError> {
        backend!(self, q => q.to_rts(attr))
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
        backend!(self, q => q.to_rtr_dci())
    }

    /// RTS → RTS of a DCI with a stream id (`mlx5dv_dci_stream_id_reset`):
    /// an errored `stream` runs again. Refused on a QP that is not a DCI,
    /// a stream it does not have, or a DCI not in RTS.
    pub fn reset_dci_stream(&self, stream: u16) -> Result<(), DeviceError> {
        backend!(self, q => q.reset_dci_stream(stream))
    }

    /// RESET → INIT → RTR → RTS of a DCI: ready to send to any DCT.
    pub fn ready_dci(&self, rts: &RtsAttr) -> Result<(), DeviceError> {
        self.to_init()?;
        self.to_rtr_dci()?;
        self.to_rts(rts)
    }

    /// Any state → ERR: every outstanding WQE completes with WR_FLUSH_ERR.
    pub fn to_err(&self) -> Result<(), DeviceError> {
        backend!(self, q => q.to_err())
    }

    /// The send queue for the data path.
    pub fn send_queue<T: SendTable>(&self, cfg: SqConfig) -> Result<SendQueue<T>, DeviceError> {
        Ok(backend!(self, Sim(q) => q.send_queue(cfg)?, Hw(q) => q.qp.send_queue(cfg)?))
    }

    /// The QP's own receive queue for the data path.
    pub fn recv_queue<T: RecvTable>(&self) -> Result<RecvQueue<T>, DeviceError> {
        Ok(backend!(self, Sim(q) => q.recv_queue()?, Hw(q) => q.qp.recv_queue()?))
    }

    /// Both queues on the verbs data path (devices opened through rdma-core).
    pub fn verbs(&self) -> Result<VerbsQp, DeviceError> {
        backend!(self, Sim(_) => Err(no_verbs()), Hw(q) => Ok(VerbsQp::new(&q.qp)?))
    }
}

/// A QP on a NIC as the device API sees it: the rdma-core QP, the context it
/// was created on (port, GID and MTU for RTR), and the last state this API
/// moved it to (rdma-core answers for the current one when it can).
#[derive(Clone)]
pub struct HwQpHandle {
    qp: HwQp,
    ctx: HwContext,
    state: Arc<AtomicU32>,
}

impl std::fmt::Debug for HwQpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwQpHandle")
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

/// The hardware side of [`Qp`]'s methods, named as the software device's.
impl HwQpHandle {
    fn new(qp: HwQp, ctx: &HwContext) -> Self {
        HwQpHandle {
            qp,
            ctx: ctx.clone(),
            state: Arc::new(AtomicU32::new(hw::ffi::qp_state::RESET)),
        }
    }

    fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    fn state(&self) -> QpState {
        hw_state(
            self.qp
                .query_state()
                .unwrap_or(self.state.load(Ordering::Relaxed)),
        )
    }

    fn conn_info(&self) -> ConnInfo {
        self.qp.conn_info(&self.ctx, 0)
    }

    /// Records state `v` once the transition `r` went through.
    fn step(&self, v: u32, r: Result<(), HwError>) -> Result<(), DeviceError> {
        r?;
        self.state.store(v, Ordering::Relaxed);
        Ok(())
    }

    fn to_init(&self) -> Result<(), DeviceError> {
        self.step(hw::ffi::qp_state::INIT, self.qp.to_init(0))
    }

    fn to_rtr(&self, attr: &RtrAttr) -> Result<(), DeviceError> {
        if self.qp.is_dci() {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is a DCI: it has no peer to connect (to_rtr_dci)",
                self.qp.qpn()
            )));
        }
        self.step(hw::ffi::qp_state::RTR, self.qp.to_rtr(&self.ctx, attr))
    }

    fn to_rts(&self, attr: &RtsAttr) -> Result<(), DeviceError> {
        self.step(hw::ffi::qp_state::RTS, self.qp.to_rts(attr))
    }

    fn to_rtr_dci(&self) -> Result<(), DeviceError> {
        if !self.qp.is_dci() {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is not a DCI: connect it with to_rtr",
                self.qp.qpn()
            )));
        }
        self.step(hw::ffi::qp_state::RTR, self.qp.to_rtr_dci(&self.ctx))
    }

    fn reset_dci_stream(&self, stream: u16) -> Result<(), DeviceError> {
        if !self.qp.is_dci() {
            return Err(DeviceError::Invalid(format!(
                "QP {:#x} is not a DCI: it has no streams",
                self.qp.qpn()
            )));
        }
        Ok(self.qp.reset_dci_stream(stream)?)
    }

    fn to_err(&self) -> Result<(), DeviceError> {
        self.step(hw::ffi::qp_state::ERR, self.qp.to_err())
    }
}

#[cfg(all(test, not(feature = "sim")))]
mod tests {
    use super::*;

    #[test]
    fn without_the_software_device_its_names_are_a_clear_error() {
        for r in [
            Context::open("sim0"),
            Context::open_in("f", "sim1"),
            Context::open_in_mode("f", "sim2", ExecMode::Inline),
        ] {
            match r {
                Err(e @ DeviceError::NoSoftwareDevice(_)) => {
                    assert!(e.to_string().contains("`sim` feature"), "{e}")
                }
                other => panic!("{other:?}"),
            }
        }
        // `auto` finds a NIC, or says why there is none and no fallback.
        match Context::open("auto") {
            Ok(c) => assert!(!c.is_software()),
            Err(e) => assert!(matches!(e, DeviceError::NoSoftwareDevice(_)), "{e}"),
        }
    }
}
