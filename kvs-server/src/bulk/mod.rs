//! Bulk transfers between members over mpib, on one or two rails: what a
//! migration's target pulls from its source ([`crate::migration`]) and what a
//! new backup pulls from its primary ([`crate::replication::copy_in`]).
//!
//! - [`wire`]: the pull's setup record and its batches of records;
//! - [`source_slots`]: what a source holds for pullers: the slots it froze
//!   for a migration and the snapshots a copy ticket opens;
//! - [`export`]: the source's side, streaming batches from what it holds;
//! - [`pull_conn`]: the puller's side, a connection kept from pull to pull;
//! - [`error`]: why a transfer failed.
//!
//! The helpers here open the rails and pace a transfer's wait for its peer.

pub(crate) mod error;
pub(crate) mod export;
pub(crate) mod pull_conn;
pub(crate) mod source_slots;
pub(crate) mod wire;

pub(crate) use error::{BatchError, PullError, TicketError, TransferError};

use copyrpc::transport::DeviceSpec;
use mlx5::device::Context as Device;

use crate::config::Config;

/// Bytes of one batch (and of each receive buffer): the largest record a
/// configuration allows ([`crate::config::MAX_RECORD`]) and a batch header.
pub(crate) const BATCH: usize = crate::config::MAX_RECORD + 64;

/// Batches in flight per transfer.
pub(crate) const DEPTH: usize = 4;

/// The bulk transfer's rails: `bulk_devices`, or, when that is empty, two
/// software devices (`sim2`, `sim3`) next to a software worker device, or
/// the worker device alone on hardware.
pub(crate) fn rail_names(cfg: &Config) -> Vec<String> {
    if !cfg.bulk_devices.is_empty() {
        return cfg.bulk_devices.clone();
    }
    let spec = cfg.device_spec();
    match spec.open() {
        Ok(d) if !d.is_software() => vec![d.name().to_string()],
        _ => vec!["sim2".into(), "sim3".into()],
    }
}

/// Opens the rails `mask` selects (bit i: rail i) of `names`.
pub(crate) fn open_rails(
    cfg: &Config,
    names: &[String],
    mask: u8,
) -> Result<Vec<Device>, TransferError> {
    let mut out = Vec::new();
    for (i, n) in names.iter().enumerate().take(2) {
        if mask & (1 << i) == 0 {
            continue;
        }
        let spec = DeviceSpec {
            name: n,
            fabric: cfg.fabric.as_deref(),
            software: n,
        };
        out.push(spec.open().map_err(|source| TransferError::Rail {
            index: i,
            name: n.clone(),
            source,
        })?);
    }
    if out.is_empty() {
        return Err(TransferError::NoRail);
    }
    Ok(out)
}

/// How long a bulk transfer may make no progress before either end gives
/// up on it (the target sets up a new one, or fails its copy).
const STALL: std::time::Duration = std::time::Duration::from_secs(30);

/// One turn of a bulk transfer's wait for its peer, which began at
/// `since`: mpib's progress, then a yield for the first 50 µs and a 20 µs
/// sleep after, so that the transfers' threads leave the cores to the
/// workers (a batch takes hundreds of microseconds to cross, so polling
/// more often gains nothing). An error once the server stops or the wait
/// passes [`STALL`].
pub(crate) fn idle(
    comm: &mut mpib::Comm,
    since: std::time::Instant,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(), TransferError> {
    comm.progress();
    if stop.load(std::sync::atomic::Ordering::Acquire) {
        return Err(TransferError::Stopping);
    }
    if since.elapsed() > STALL {
        return Err(TransferError::Stalled(STALL));
    }
    if since.elapsed() < std::time::Duration::from_micros(50) {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
    Ok(())
}

/// The mask of every rail of `names`.
pub(crate) fn all_rails(names: &[String]) -> u8 {
    if names.len() >= 2 {
        0b11
    } else {
        0b01
    }
}
