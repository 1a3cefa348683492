//! A worker's durable log: every change to its store ([`Change`]), in the
//! workspace's log format ([`kvs_wal`]) with this log's own magic, one
//! file per worker in `data_dir` (`data/worker-W.log`).
//!
//! The store journals each change as it makes it ([`Store::journal`]); at
//! the end of each turn, before the replies the turn wrote leave (the next
//! [`copyrpc::Context::wait`] flushes them), the worker hands the journal
//! to its log ([`WorkerLog::commit`]): one write(2) for the turn's changes
//! (group commit), and by `durability`:
//! - `everysec`: a thread of the log's fsyncs it once a second, off the
//!   worker's thread; a crash of every copy loses at most about the last
//!   second of acknowledged writes;
//! - `always`: fsync before the turn's replies leave, so an acknowledged
//!   write is on disk. A failed write or fsync stops the process (as
//!   Redis does under `appendfsync always`): its replies must not leave,
//!   and the members holding copies take over.
//!
//! At start the worker replays its log into an empty store before it
//! serves ([`recover`]), logging its progress; a torn last write is cut
//! off and reported, damage elsewhere stops the start naming the file and
//! the byte.
//!
//! [`Change`]: crate::store::change::Change
//! [`Store::journal`]: crate::store::Store::journal

mod recover;
mod syncer;

use std::path::{Path, PathBuf};

use kvs_wal::{Format, WalError, Writer};

use crate::config::Durability;
use crate::store::Store;

pub(crate) use recover::recover;
use syncer::Syncer;

/// The data logs' format: their magic, and records as large as a bulk
/// batch (a change holds one record; a pulled one came in a batch).
pub(crate) const FORMAT: Format = Format::new(*b"KVSDATA\x01", crate::bulk::BATCH as u32);

/// Where worker `worker` of the member whose data dir is `data_dir` keeps
/// its log.
pub(crate) fn log_path(data_dir: &Path, worker: u16) -> PathBuf {
    data_dir.join("data").join(format!("worker-{worker}.log"))
}

/// Worker `worker`'s store and log at its start: `None` without
/// durability, else the store its log holds, journaling its changes from
/// now on (the slots its map no longer gives it are dropped next, and
/// that is logged too), and the log. `Err`: why the log cannot be read (damage names the file and
/// the byte).
pub(crate) fn open(
    cfg: &crate::config::Config,
    slots: u32,
    worker: u16,
) -> Result<Option<(Store, WorkerLog)>, WalError> {
    let Some(dir) = cfg
        .data_dir
        .as_deref()
        .filter(|_| cfg.durability != Durability::None)
    else {
        return Ok(None);
    };
    let path = log_path(dir, worker);
    let (mut store, writer, found) = recover(&path, slots, worker)?;
    store.keep_journal(FORMAT);
    tracing::info!(
        "worker {worker}: {} changes ({} bytes) replayed from {} in {:.3} s",
        found.changes,
        found.bytes,
        path.display(),
        found.took.as_secs_f64()
    );
    Ok(Some((
        store,
        WorkerLog::new(writer, cfg.durability, worker),
    )))
}

/// A worker's log, open for appending after its replay.
pub(crate) struct WorkerLog {
    writer: Writer,
    durability: Durability,
    /// `everysec`: the thread that fsyncs the log (stops when dropped).
    _syncer: Option<Syncer>,
    /// The last write failed (`everysec`): its records wait in the batch
    /// for the next turn's try.
    failing: bool,
}

impl std::fmt::Debug for WorkerLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerLog")
            .field("path", &self.writer.path())
            .field("end", &self.writer.end())
            .field("durability", &self.durability)
            .finish()
    }
}

impl WorkerLog {
    /// The log `writer` appends to, flushed as `durability` says.
    pub(crate) fn new(writer: Writer, durability: Durability, worker: u16) -> WorkerLog {
        let syncer = (durability == Durability::Everysec)
            .then(|| Syncer::start(writer.sync_handle(), worker));
        WorkerLog {
            writer,
            durability,
            _syncer: syncer,
            failing: false,
        }
    }

    /// The turn's end: the store's journal is written to the log (one
    /// write), and under `always` flushed to disk, before the turn's
    /// replies leave. Under `always` a failure stops the process (see the
    /// module's docs); under `everysec` it is logged, the records stay to
    /// be written at the next turn, and the log says when it writes again.
    pub(crate) fn commit(&mut self, store: &mut Store, worker: u16) {
        if let Some(j) = store.journal() {
            if !j.is_empty() {
                self.writer.adopt(j);
            }
        }
        if self.writer.pending() == 0 {
            return;
        }
        let r = match self.durability {
            Durability::Always => self.writer.commit(),
            _ => self.writer.write(),
        };
        match r {
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::warn!("worker {worker}: the log takes writes again");
            }
            Ok(()) => {}
            Err(e) if self.durability == Durability::Always => fatal(worker, &e),
            Err(e) => {
                if !self.failing {
                    tracing::error!(
                        "worker {worker}: {e}; acknowledged writes are in memory only until \
                         the log takes them"
                    );
                }
                self.failing = true;
            }
        }
    }
}

/// Under `always`, a write that cannot be made durable: the process stops
/// before any reply of the turn leaves.
#[cold]
fn fatal(worker: u16, e: &WalError) -> ! {
    tracing::error!(
        "worker {worker}: {e}; durability = \"always\" cannot acknowledge the turn's writes: \
         stopping (the members holding copies take over)"
    );
    std::process::abort();
}
