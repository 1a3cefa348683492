//! The software device behind the device API: contexts, PDs, MRs, CQs, SRQs and
//! RC QPs whose memory lives in the fabric's shared segments, and the doorbell
//! hook that makes the simulated NIC execute work.
//!
//! This module holds the context (opening a device, its address and port,
//! the NIC's execution mode); each object has a file of its own, as `dct`
//! does: `pd`, `mr`, `cq`, `srq` and `qp` (RC QPs and DCIs). The test hooks
//! (`hooks`: `live_qps`, `hold_cq_lock_forever`, `stop_in_next_arm`) exist
//! with the `test-hooks` feature only, which this crate's own tests turn on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::channel::SimChannel;
use super::fabric::{fabric_name_from_env, Fabric};
use super::registry::MAX_DEVS;
use super::sched::Nic;
use crate::doorbell::DeviceNotify;
use crate::types::error::DeviceError;
use crate::types::{DciStreams, ExecMode, SchedStats};

mod cq;
#[cfg(any(test, feature = "test-hooks"))]
mod hooks;
mod mr;
mod pd;
mod qp;
mod srq;
mod tm;

pub use cq::SimCq;
#[cfg(any(test, feature = "test-hooks"))]
pub use hooks::{hold_cq_lock_forever, live_qps, stop_in_next_arm};
pub use mr::SimMr;
pub use pd::SimPd;
pub use qp::SimQp;
pub use srq::SimSrq;
pub use tm::{SimTmSrq, SIM_TM_CAPS};

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
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn f<T: Send + Sync>() {}
    f::<AtomicU32>();
}
