//! Shared receive queues ([`SrqHandle`]) and the posting sides they hand
//! out.

use super::seam::{backend, backend_parts};
#[cfg(feature = "sim")]
use super::seam::{mixed, no_verbs};
use crate::hw::{HwSrq, VerbsSrq};
use crate::rq::{Srq, SrqTopology};
#[cfg(feature = "sim")]
use crate::sim::device::SimSrq;
use crate::types::error::DeviceError;

// Without the `sim` feature the `Sim*` type is never resolved: the
// function that names it is configured out first.
backend_parts!(SrqHandle, SimSrq, HwSrq);

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
