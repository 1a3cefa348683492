//! Tag-matching SRQs ([`TmSrqHandle`]): the device's capabilities, and an
//! SRQ with a tag list and the command QP that changes it. The data path
//! over them is [`crate::tm::TmSrq`].

use super::context::Context;
use super::cq::Cq;
use super::pd::Pd;
use super::seam::backend;
use super::srq::SrqHandle;
use crate::hw::HwTmSrq;
#[cfg(feature = "sim")]
use crate::sim::device::SimTmSrq;
use crate::sq::SqConfig;
use crate::tm::{CommandQueue, TmSrq};
use crate::types::error::DeviceError;
use crate::types::{TmCaps, TmSrqAttr};

impl Context {
    /// The device's tag-matching capabilities (all zero without: kernel
    /// soft-RoCE, a ConnectX without the offload).
    pub fn tm_caps(&self) -> Result<TmCaps, DeviceError> {
        Ok(backend!(self, Sim(c) => c.tm_caps(), Hw(c) => c.tm_caps()?))
    }

    /// Creates a tag-matching SRQ on `pd` whose completions (its list
    /// commands' and its messages') go to `cq`, with its command QP. QPs
    /// that receive tagged messages are created on
    /// [`TmSrqHandle::srq`]. A device without tag matching refuses with
    /// [`DeviceError::NoTagMatching`]; attributes beyond its
    /// [`tm_caps`](Self::tm_caps) with [`DeviceError::Invalid`].
    pub fn create_tm_srq(
        &self,
        pd: &Pd,
        cq: &Cq,
        attr: &TmSrqAttr,
    ) -> Result<TmSrqHandle, DeviceError> {
        attr.check(self.name(), &self.tm_caps()?)?;
        Ok(backend!(self,
            Sim(c) => TmSrqHandle::Sim(c.create_tm_srq(pd.sim_part()?, cq.sim_part()?, attr)?),
            Hw(c) => TmSrqHandle::Hw(c.create_tm_srq(pd.hw_part()?, cq.hw_part()?, attr)?),
        ))
    }
}

/// A tag-matching SRQ and its command QP.
#[derive(Clone, Debug)]
pub enum TmSrqHandle {
    /// Software device.
    #[cfg(feature = "sim")]
    Sim(SimTmSrq),
    /// NIC.
    Hw(HwTmSrq),
}

impl TmSrqHandle {
    /// The SRQ: create the receiving QPs on it, and take its posting side
    /// (an unordered table) for the buffers of unexpected messages.
    pub fn srq(&self) -> SrqHandle {
        backend!(self,
            Sim(t) => SrqHandle::Sim(t.srq().clone()),
            Hw(t) => SrqHandle::Hw(t.srq().clone()),
        )
    }

    /// Tags the list holds.
    pub fn max_num_tags(&self) -> u32 {
        backend!(self, t => t.max_num_tags())
    }

    /// The command QP's send queue (once).
    pub fn command_queue(&self) -> Result<CommandQueue, DeviceError> {
        // Commands ask for their CQEs themselves: no signal interval.
        let cfg = SqConfig {
            signal_interval: 0,
            ..SqConfig::default()
        };
        Ok(backend!(self,
            Sim(t) => t.cmd_qp().send_queue(cfg)?,
            Hw(t) => t.cmd_qp().send_queue(cfg)?,
        ))
    }

    /// Software's side of the tag list, on the command queue (once).
    pub fn tm_srq<U>(&self) -> Result<TmSrq<U>, DeviceError> {
        let tags = u16::try_from(self.max_num_tags())
            .map_err(|_| DeviceError::Invalid("a tag list of more than 65534 tags".into()))?;
        Ok(TmSrq::new(self.command_queue()?, tags))
    }
}
