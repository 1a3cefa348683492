//! Completion queues ([`Cq`]) and the consumer sides they hand out.

use super::seam::{backend, backend_parts};
#[cfg(feature = "sim")]
use super::seam::{mixed, no_verbs};
use crate::cq::CqRing;
use crate::hw::{HwCq, VerbsCq};
#[cfg(feature = "sim")]
use crate::sim::device::SimCq;
use crate::types::error::DeviceError;

// Without the `sim` feature the `Sim*` type is never resolved: the
// function that names it is configured out first.
backend_parts!(Cq, SimCq, HwCq);

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
