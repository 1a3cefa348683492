//! An opened device ([`Context`]): opening by name, the device's address,
//! and creating the objects of the RC transport (PDs, CQs, completion
//! channels, SRQs, QPs) on it.

use super::channel::CompletionChannel;
use super::cq::Cq;
use super::pd::Pd;
use super::qp::{HwQpHandle, Qp};
use super::seam::backend;
use super::srq::SrqHandle;
use crate::hw::{self, HwContext};
#[cfg(feature = "sim")]
use crate::sim::device::SimContext;
use crate::types::error::DeviceError;
use crate::types::{CqAttr, ExecMode, QpCaps, SchedStats};

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
    /// [`VerbsCq::req_notify`](crate::hw::VerbsCq::req_notify)) arrive there, and
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
