//! Live migration of slots between members, target-driven as RAMCloud's
//! Rocksteady does it.
//!
//! The control group ([`kvs_control::Migration`], part of the replicated
//! state) moves slots in *chunks*: consecutive slots with one source, at most
//! an eighth of the map's slots and no fewer than 64
//! ([`kvs_control::chunk_slots`]). For each chunk:
//!
//! 1. **Handover.** A committed map gives the chunk to the target, marked as
//!    imported from the source. Installing it, the source's workers take the
//!    chunk's records out of their stores ([`source_slots`]: frozen, read-only)
//!    and redirect its keys to the target. The target's workers answer
//!    `TRY_AGAIN` for the chunk until the source holds it frozen (its first
//!    pull ticket says so): no write can land at the source after the
//!    records it ships were frozen, and the chunk never has two owners that
//!    take writes.
//! 2. **Pull.** Each of the target's workers that gained slots runs an
//!    importer ([`import`]) that pulls their records from the source over
//!    mpib, both rails, in 1 MiB batches ([`wire`]), in parallel with the
//!    others; the source streams them from its frozen copy ([`export`]).
//!    A worker's imports from one source run in one session ([`session`]),
//!    which keeps its bulk connection from chunk to chunk. A
//!    read, delete or partial update of a key that has not arrived waits
//!    while the worker fetches that key from the source at once
//!    ([`puller`], the priority pull). A key written or deleted at the
//!    target is never overwritten by a pulled copy.
//! 3. **Finish.** Each importer tells the group's leader when its slots are
//!    all in, until the committed map ends the import; the entry that
//!    completes the chunk ends it, and the source frees the frozen copy.
//!
//! **The rule when a migration cannot finish: once handed over, a chunk only
//! rolls forward.** The target owns it from the handover on and every write
//! it acknowledged is in its store; the source keeps the frozen copy until
//! the target has all of it. So:
//! - a failed bulk connection (a rail that went down, a QP in error, a
//!   peer's TCP liveness channel closed) is set up again, on the rails that
//!   still work, and the pull resumes from the first slot not complete;
//!   records sent twice are dropped as stale;
//! - `kvs-admin` is only a client: killing it changes nothing;
//! - `cancel` stops the migration after the chunk being pulled: that chunk
//!   finishes, the chunks not yet handed over stay with their owners;
//! - the leader's death changes nothing: the migration is in the log;
//! - a target that restarts mid-chunk has lost what it held (memory only,
//!   as any server that crashes), but the map still says it imports the
//!   chunk, so it pulls the whole chunk again from the source's frozen copy;
//! - a source that cannot be reached is tried again for as long as it
//!   takes: no record is given up on a timeout. Records are given up only
//!   when the source restarted after the handover (they died with it, and
//!   it says so) or is forgotten (`kvs-admin forget --force`).

pub(crate) mod copy_in;
pub(crate) mod export;
pub(crate) mod import;
pub(crate) mod pull_conn;
pub(crate) mod puller;
pub(crate) mod session;
pub(crate) mod source_slots;
pub(crate) mod waiting;
pub(crate) mod wire;

use copyrpc::transport::DeviceSpec;
use mlx5::device::Context as Device;

use crate::config::Config;
use crate::transfer_error::TransferError;

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
