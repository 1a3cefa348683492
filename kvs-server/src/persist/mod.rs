//! A worker's records on disk: a log of every change to its store
//! ([`Change`]), in the workspace's log format ([`kvs_wal`]) with this
//! log's own magic, and now and then a snapshot that lets the log shed
//! what it holds ([`snapshot`]); the files are in `data_dir/data`
//! ([`files`]).
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
//!   and the members holding copies take over. The turn's writes to the
//!   backups leave before the commit, so the backups log them while this
//!   worker does; a client's answer still waits for both. So do the
//!   replies that need nothing of the commit: reads of what earlier
//!   commits hold, and the answers to writes of earlier turns that their
//!   backups acked (`copyrpc::Context::flush_unheld`, in the worker's
//!   `wait`). Under `everysec` the same order puts the turn's changes in
//!   the page cache before the replies that depend on them leave: a crash
//!   of the process alone loses no acknowledged write.
//!
//! At start the worker loads its snapshot and replays its logs into an
//! empty store before it serves ([`recover()`]), logging its progress
//! about once a second and counting it where the member's status reads it
//! meanwhile ([`RecoveryCounters`]); a torn last write is cut off and
//! reported, damage elsewhere stops the start naming the file and the
//! byte.
//!
//! A snapshot begins when the logs hold `auto_snapshot_percentage` of the
//! last snapshot's size and at least `auto_snapshot_min_size`, or when
//! `kvs-admin snapshot` asks ([`WorkerLog::request_snapshot`]).
//!
//! [`Change`]: crate::store::change::Change
//! [`Store::journal`]: crate::store::Store::journal

mod files;
mod next_log;
mod progress;
mod records;
mod recover;
mod snapshot;
mod syncer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvs_wal::{FlushTimes, Format, WalError, Writer};

use crate::config::{Config, Durability};
use crate::store::Store;

use next_log::{NextLog, Ready};
pub(crate) use progress::RecoveryCounters;
pub(crate) use recover::{recover, Recovered};
use snapshot::{Outcome, Snapshot};
use syncer::Syncer;

/// The data logs' format: their magic, and records as large as a bulk
/// batch (a change holds one record; a pulled one came in a batch).
pub(crate) const FORMAT: Format = Format::new(*b"KVSDATA\x01", crate::bulk::BATCH as u32);

/// The snapshots' format: the same records (changes that make the slots
/// again), between a head and an end.
pub(crate) const SNAPSHOT_FORMAT: Format = Format::new(*b"KVSSNAP\x01", crate::bulk::BATCH as u32);

/// How long after a failed snapshot (or a log that could not begin) the
/// next is tried.
const RETRY: Duration = Duration::from_secs(60);

/// How far past its end a log's disk space is held ([`Writer::reserve`]),
/// and how little of it may be left before more is asked for: a turn's
/// changes must fit in what is left when the disk fills.
const RESERVE_AHEAD: u64 = 16 << 20;
const RESERVE_LOW: u64 = 8 << 20;

/// How often a full disk is looked at again.
const FULL_RETRY: Duration = Duration::from_secs(1);

/// Worker `worker`'s store and log at its start: `None` without
/// durability, else the store its files hold, journaling its changes from
/// now on (the slots its map no longer gives it are dropped next, and
/// that is logged too), and the log. `Err`: why the files cannot be read
/// (damage names the file and the byte). The recovery's progress is
/// counted in `counters` as it reads.
pub(crate) fn open(
    cfg: &Config,
    slots: u32,
    worker: u16,
    counters: &RecoveryCounters,
) -> Result<Option<(Store, WorkerLog)>, WalError> {
    let Some(data_dir) = cfg
        .data_dir
        .as_deref()
        .filter(|_| cfg.durability != Durability::None)
    else {
        return Ok(None);
    };
    let dir = files::dir(data_dir);
    let opened = recover(&dir, slots, worker, counters)?;
    let found = opened.found;
    tracing::info!(
        "worker {worker}: {} changes from snapshot {} and {} from the logs ({} bytes) \
         recovered from {} in {:.3} s",
        found.snapshot_changes,
        opened.snap_gen,
        found.changes,
        found.bytes,
        dir.display(),
        found.took.as_secs_f64()
    );
    let mut store = opened.store;
    store.keep_journal(FORMAT);
    // The logs before the newest; the newest is the writer's.
    let older = opened.log_bytes - opened.writer.end();
    let log = WorkerLog {
        _syncer: syncer_for(&opened.writer, cfg.durability, worker),
        writer: opened.writer,
        durability: cfg.durability,
        failing: false,
        worker,
        dir,
        slots,
        gen: opened.gen,
        older,
        snapshot_bytes: opened.snapshot_bytes,
        auto_percentage: cfg.auto_snapshot_percentage,
        auto_min: cfg.auto_snapshot_min_size,
        snapshot_rate: cfg.snapshot_rate,
        snapshot: None,
        next: None,
        requested: false,
        pending_ask: 0,
        answering: 0,
        answered: 0,
        asked: false,
        not_before: None,
        snapshots: 0,
        recovered: found,
        reserved: 0,
        full: None,
        full_changed: false,
        flushed: FlushTimes::default(),
    };
    let mut log = log;
    log.reserve();
    Ok(Some((store, log)))
}

/// `everysec`: the thread that flushes `writer`'s log.
fn syncer_for(writer: &Writer, durability: Durability, worker: u16) -> Option<Syncer> {
    (durability == Durability::Everysec).then(|| Syncer::start(writer.sync_handle(), worker))
}

/// A worker's records on disk: its log, open for appending after the
/// recovery, and its snapshots.
pub(crate) struct WorkerLog {
    writer: Writer,
    durability: Durability,
    /// `everysec`: the thread that flushes the log (stops when dropped).
    _syncer: Option<Syncer>,
    /// The last write failed (`everysec`): its records wait in the batch
    /// for the next turn's try.
    failing: bool,
    worker: u16,
    /// Where the files are.
    dir: PathBuf,
    slots: u32,
    /// The newest log's generation (the writer's).
    gen: u64,
    /// Bytes of the logs before the newest, kept until a snapshot holds
    /// them.
    older: u64,
    /// The last snapshot's size.
    snapshot_bytes: u64,
    auto_percentage: u32,
    auto_min: u64,
    /// `snapshot_rate`: a snapshot's pace.
    snapshot_rate: u64,
    /// The snapshot under way.
    snapshot: Option<Snapshot>,
    /// The log the next snapshot begins, being made ready.
    next: Option<NextLog>,
    /// `kvs-admin snapshot` asked for one.
    requested: bool,
    /// The snapshot under way was asked for.
    asked: bool,
    /// The last `kvs-admin snapshot` request not yet under way, the last
    /// one the snapshot under way answers, and the last one a snapshot in
    /// place answered (the member's request numbers).
    pending_ask: u64,
    answering: u64,
    answered: u64,
    /// No snapshot begins before this (one failed).
    not_before: Option<Instant>,
    /// Snapshots put in place since the start.
    snapshots: u64,
    /// What the start recovered.
    recovered: Recovered,
    /// The log's disk space is held up to this byte (`u64::MAX`: the
    /// filesystem cannot hold space; 0: not yet).
    reserved: u64,
    /// The disk is full: writes are refused.
    full: Option<Full>,
    /// `full` changed since [`WorkerLog::disk_full_changed`] was asked.
    full_changed: bool,
    /// The flushes of the logs before the newest.
    flushed: FlushTimes,
}

/// A full disk, as the worker refuses writes for it.
#[derive(Debug)]
struct Full {
    /// What a refused write is told.
    message: Arc<str>,
    /// When the space is asked for again.
    retry_at: Instant,
}

impl std::fmt::Debug for WorkerLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerLog")
            .field("path", &self.writer.path())
            .field("end", &self.writer.end())
            .field("durability", &self.durability)
            .field("snapshot", &self.snapshot)
            .finish()
    }
}

/// What a worker's records on disk look like, for its counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogStatus {
    /// Bytes of the logs kept.
    pub log_bytes: u64,
    /// The last snapshot's size.
    pub snapshot_bytes: u64,
    /// Snapshots put in place since the start.
    pub snapshots: u64,
    /// The snapshot under way: slots copied, of how many.
    pub snapshotting: Option<(u32, u32)>,
    /// What the start recovered.
    pub recovered: Recovered,
    /// The disk is full: writes are refused.
    pub disk_full: bool,
    /// The last `kvs-admin snapshot` request a snapshot in place answers.
    pub answered: u64,
    /// How long the logs' flushes took.
    pub fsync: FlushTimes,
}

impl WorkerLog {
    /// The turn's end: the store's journal is written to the log (one
    /// write), and under `always` flushed to disk, before the turn's
    /// replies leave. Under `always` a failure stops the process (see the
    /// module's docs); under `everysec` it is logged, the records stay to
    /// be written at the next turn, and the log says when it writes again.
    pub(crate) fn commit(&mut self, store: &mut Store) {
        if let Some(j) = store.journal() {
            if !j.is_empty() {
                self.writer.adopt(j);
            }
        }
        if self.writer.pending() == 0 {
            return;
        }
        let worker = self.worker;
        let r = match self.durability {
            Durability::Always => self.writer.commit(),
            _ => self.writer.write(),
        };
        match r {
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::warn!("worker {worker}: the log takes writes again");
            }
            Ok(()) => {
                if self.writer.end() + RESERVE_LOW > self.reserved && self.full.is_none() {
                    self.reserve();
                }
            }
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

    /// After the turn's [`commit`](Self::commit): the snapshot under way
    /// takes its step, or one begins if it is due or was asked for.
    #[inline]
    pub(crate) fn tend(&mut self, store: &mut Store) {
        if self
            .full
            .as_ref()
            .is_some_and(|f| Instant::now() >= f.retry_at)
        {
            self.reserve();
        }
        if self.failing {
            return;
        }
        if let Some(s) = self.snapshot.as_mut() {
            if let Some(o) = s.step(store) {
                self.snapshot = None;
                self.ended(o);
            }
        } else if let Some(n) = self.next.as_mut() {
            // The old log flushed as far as it was when asked (the
            // switch flushes the rest), and the new one made.
            if self.writer.durable() >= n.flush_to {
                if let Some(made) = n.take() {
                    let gen = n.gen;
                    self.next = None;
                    match made {
                        Ok(r) => self.begin(gen, r),
                        Err(e) => self.failed(gen, &e),
                    }
                }
            }
        } else if (self.requested || (self.full.is_none() && self.due()))
            && self.not_before.is_none_or(|t| Instant::now() >= t)
        {
            // An automatic snapshot waits for room; one asked for is tried
            // (and tried again after a failure, until one is in place).
            self.prepare();
        }
    }

    /// Asks for a snapshot at the next turn's end; false if one is under
    /// way already (or being readied: it answers this one too).
    pub(crate) fn request_snapshot(&mut self, ask: u64) -> bool {
        if self.snapshot.is_some() {
            // The one under way answers it.
            self.answering = self.answering.max(ask);
            return false;
        }
        // The one being readied begins after this request: it answers it.
        self.pending_ask = self.pending_ask.max(ask);
        if self.next.is_some() {
            return false;
        }
        self.requested = true;
        self.not_before = None;
        true
    }

    /// How soon the worker should come back when idle: `Some(ZERO)` while
    /// a snapshot has slots to copy, a millisecond while it waits for its
    /// thread, `None` with no snapshot under way.
    pub(crate) fn tick(&self) -> Option<Duration> {
        if self.next.is_some() {
            return Some(Duration::from_millis(1));
        }
        self.snapshot.as_ref().map(|s| {
            if s.has_work() {
                Duration::ZERO
            } else {
                s.paced_for()
                    .clamp(Duration::from_micros(100), Duration::from_millis(1))
            }
        })
    }

    /// The counters' view.
    pub(crate) fn status(&self) -> LogStatus {
        LogStatus {
            log_bytes: self.log_bytes(),
            snapshot_bytes: self.snapshot_bytes,
            snapshots: self.snapshots,
            snapshotting: self.snapshot.as_ref().map(Snapshot::progress),
            recovered: self.recovered,
            disk_full: self.full.is_some(),
            answered: self.answered,
            fsync: {
                let mut t = self.flushed;
                t.add(&self.writer.flush_times());
                t
            },
        }
    }

    /// When the disk filled or has room again since the last call: what
    /// a refused write is told (`None`: writes are taken).
    #[inline]
    pub(crate) fn disk_full_changed(&mut self) -> Option<Option<Arc<str>>> {
        if !std::mem::take(&mut self.full_changed) {
            return None;
        }
        Some(self.full.as_ref().map(|f| f.message.clone()))
    }

    /// Holds the log's disk space [`RESERVE_AHEAD`] past its end; a full
    /// disk makes the worker refuse writes until it has room again.
    #[cold]
    fn reserve(&mut self) {
        let worker = self.worker;
        let upto = self.writer.end() + RESERVE_AHEAD;
        match self.writer.reserve(upto) {
            Ok(held) => {
                self.reserved = if held { upto } else { u64::MAX };
                if self.full.take().is_some() {
                    self.full_changed = true;
                    tracing::warn!(
                        "worker {worker}: {} has room again: writes are taken",
                        self.writer.path().display()
                    );
                }
            }
            Err(e) if e.is_disk_full() => {
                let retry_at = Instant::now() + FULL_RETRY;
                if let Some(f) = self.full.as_mut() {
                    f.retry_at = retry_at;
                    return;
                }
                // Short, to fit a write's answer; the server's log says more.
                let path = self.writer.path();
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                let message = format!("disk full at {name}: writes refused until there is room");
                tracing::error!(
                    "worker {worker}: {e}: the disk of its log is full; writes are refused \
                     (durability = \"{}\") and reads go on until it has room",
                    self.durability.name()
                );
                self.full = Some(Full {
                    message: message.into(),
                    retry_at,
                });
                self.full_changed = true;
            }
            Err(e) => {
                // Not a full disk: writes go on, and the next write says
                // whether the disk takes them.
                tracing::warn!("worker {worker}: holding disk space for the log: {e}");
                self.reserved = upto;
            }
        }
    }

    /// Bytes of the logs kept.
    fn log_bytes(&self) -> u64 {
        self.older + self.writer.end()
    }

    /// Whether the logs have grown enough for a snapshot.
    #[inline]
    fn due(&self) -> bool {
        if self.auto_percentage == 0 {
            return false;
        }
        let grown = self
            .snapshot_bytes
            .saturating_mul(u64::from(self.auto_percentage))
            / 100;
        self.log_bytes() >= grown.max(self.auto_min)
    }

    /// Readies a snapshot's begin off the worker's thread: the next log
    /// made, and (`everysec`) the log flushed now.
    #[cold]
    fn prepare(&mut self) {
        let gen = self.gen + 1;
        let flush_to = self.writer.end();
        if let Some(s) = &self._syncer {
            s.sync_now();
        }
        match NextLog::start(&self.dir, self.worker, gen, RESERVE_AHEAD, flush_to) {
            Ok(n) => self.next = Some(n),
            Err(e) => self.failed(
                gen,
                &WalError::Io {
                    path: files::log_path(&self.dir, self.worker, gen),
                    source: e,
                },
            ),
        }
    }

    /// Begins snapshot `gen` on its log, made ready: the old log flushed
    /// whole (what was written since [`prepare`](Self::prepare) asked),
    /// the new one takes the writes, the snapshot's thread started.
    #[cold]
    fn begin(&mut self, gen: u64, next: Ready) {
        // Kept until the snapshot is in place: a failed one asked for is
        // tried again.
        self.asked = std::mem::take(&mut self.requested);
        // Any snapshot that begins now answers the requests before it.
        self.answering = self.answering.max(self.pending_ask);
        let worker = self.worker;
        // The log must be whole on disk before the next one takes writes:
        // a recovery reads them in order.
        if let Err(e) = self.writer.sync() {
            return self.failed(gen, &e);
        }
        self.older += self.writer.end();
        self.flushed.add(&self.writer.flush_times());
        self.writer = next.writer;
        self.gen = gen;
        self.reserved = match next.reserved {
            Ok(true) => next.upto,
            Ok(false) => u64::MAX,
            // The worker asks again, and a full disk is dealt with there.
            Err(_) => 0,
        };
        if self.reserved == 0 {
            self.reserve();
        }
        // The old thread's last flush is of a flushed log.
        self._syncer = syncer_for(&self.writer, self.durability, worker);
        match Snapshot::start(
            self.dir.clone(),
            worker,
            gen,
            self.slots,
            self.snapshot_rate,
        ) {
            Ok(s) => {
                tracing::info!(
                    "worker {worker}: snapshot {gen} begins ({} bytes of logs; the last \
                     snapshot is {} bytes)",
                    self.older,
                    self.snapshot_bytes
                );
                self.snapshot = Some(s);
            }
            Err(e) => self.failed(
                gen,
                &WalError::Io {
                    path: files::snapshot_path(&self.dir, worker),
                    source: e,
                },
            ),
        }
    }

    /// The snapshot under way ended.
    #[cold]
    fn ended(&mut self, o: Outcome) {
        let worker = self.worker;
        match o {
            Outcome::Finished {
                gen,
                bytes,
                removed,
                took,
            } => {
                self.asked = false;
                self.answered = self.answering;
                self.snapshot_bytes = bytes;
                self.older = self.older.saturating_sub(removed);
                self.snapshots += 1;
                tracing::info!(
                    "worker {worker}: snapshot {gen} in place: {bytes} bytes in {:.3} s; \
                     {removed} bytes of logs before it removed",
                    took.as_secs_f64()
                );
            }
            Outcome::Failed { gen, why } => self.failed(gen, &why),
        }
    }

    #[cold]
    fn failed(&mut self, gen: u64, why: &WalError) {
        self.requested |= std::mem::take(&mut self.asked);
        tracing::error!(
            "worker {}: snapshot {gen} failed: {why}; the logs are kept, and the next snapshot \
             is tried in {} s",
            self.worker,
            RETRY.as_secs()
        );
        self.not_before = Some(Instant::now() + RETRY);
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
