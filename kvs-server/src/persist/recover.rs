//! A worker's start from its files: the snapshot loaded, then the logs
//! from its generation on replayed, in order, with the progress logged.
//!
//! In the snapshot's own log, a change to a slot before the mark the
//! snapshot left there ([`Copied`]) is skipped: the snapshot's copy of the
//! slot holds it. A later log (a snapshot that never finished began it)
//! is replayed whole, and its marks ignored.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kvs_wal::{Damage, Log, Reason, Visit, WalError, Writer};

use super::files;
use super::progress::{Progress, RecoveryCounters};
use super::records::{self, Copied, End, Head};
use super::{FORMAT, SNAPSHOT_FORMAT};
use crate::store::change::Change;
use crate::store::Store;

/// What a recovery found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// Changes the snapshot held.
    pub snapshot_changes: u64,
    /// Changes replayed from the logs (those a snapshot held not counted).
    pub changes: u64,
    /// Bytes read: snapshot and logs.
    pub bytes: u64,
    /// Bytes of a torn last write cut off the newest log.
    pub torn_bytes: u64,
    /// How long the recovery took.
    pub took: Duration,
}

/// A worker's files opened: its store as they hold it, and the newest
/// log open for appending.
#[derive(Debug)]
pub(crate) struct Opened {
    pub store: Store,
    pub writer: Writer,
    /// The newest log's generation.
    pub gen: u64,
    /// The snapshot's generation (0: no snapshot).
    pub snap_gen: u64,
    /// The snapshot's size in bytes (0: none).
    pub snapshot_bytes: u64,
    /// The logs' sizes, summed.
    pub log_bytes: u64,
    pub found: Recovered,
}

/// Loads worker `worker`'s snapshot and replays its logs (in `dir`; a
/// fresh log is made if there is none) into a store of `slots` slots with
/// no memory limit (what was taken once is taken again). Logs older than
/// the snapshot (a crash kept them from being removed) are removed. Damage
/// stops the recovery with an error naming the file and the byte.
///
/// How far it got is logged about once a second and kept in `counters`
/// as it reads: bytes read of the snapshot's and logs' total, which ends
/// read whole.
pub(crate) fn recover(
    dir: &Path,
    slots: u32,
    worker: u16,
    counters: &RecoveryCounters,
) -> Result<Opened, WalError> {
    std::fs::create_dir_all(dir).map_err(|source| WalError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let t = Instant::now();
    files::adopt_unnumbered(dir, worker)?;
    let snap = files::snapshot_path(dir, worker);
    kvs_wal::remove_partial(&snap)?;
    let snap_size = std::fs::metadata(&snap).map(|m| m.len()).ok();
    let mut logs = files::logs(dir, worker)?;
    let total = snap_size.unwrap_or(0) + logs.iter().map(|(_, p)| size(p)).sum::<u64>();
    let mut store = Store::new(slots, usize::MAX);
    // Built once at the end: see `store::reindex`.
    store.defer_index();
    let mut v = Replay {
        store,
        skip: None,
        changes: 0,
        progress: Progress::new(worker, total, t, counters),
    };
    let mut found = Recovered::default();
    let (snap_gen, snapshot_bytes) = match snap_size {
        Some(bytes) => {
            let (head, changes) = load_snapshot(&snap, bytes, &mut v)?;
            found.snapshot_changes = changes;
            v.skip = Some(Skip {
                gen: head.gen,
                copied: vec![false; slots as usize],
            });
            (head.gen, bytes)
        }
        None => (0, 0),
    };
    logs_after(dir, worker, (snap_gen, &snap), &mut logs, &mut v.progress)?;
    let mut log_bytes = 0;
    let last = logs.len() - 1;
    let mut writer = None;
    for (i, (gen, path)) in logs.iter().enumerate() {
        if v.skip.as_ref().is_some_and(|s| s.gen != *gen) {
            // A later log: replayed whole.
            v.skip = None;
        }
        let log = Log::open(path, FORMAT)?;
        let replayed = log.replay(&mut v)?;
        v.progress.done(replayed.end() + replayed.torn_bytes());
        log_bytes += replayed.end();
        let torn = replayed.torn_bytes();
        if torn > 0 {
            // A log is flushed whole before the next one takes writes, so
            // only the last log with writes can be torn; empty ones after
            // it were made ready for a snapshot that did not begin.
            if !logs[i + 1..].iter().all(|(_, p)| size(p) <= EMPTY) {
                return Err(cut(path, replayed.end()));
            }
            found.torn_bytes = torn;
            tracing::warn!(
                "worker {worker}: {}: a torn last write of {torn} bytes cut off (a crash during \
                 the write; nothing it held was acknowledged under durability = \"always\")",
                path.display(),
            );
        }
        if i < last {
            if torn > 0 {
                // Cut off here too: the next writes go to the newest log.
                drop(replayed.append()?);
            }
            continue;
        }
        writer = Some((*gen, replayed.append()?));
    }
    let (gen, writer) = writer.expect("at least one log");
    v.store.build_index();
    found.changes = v.changes;
    found.bytes = v.progress.total();
    found.took = t.elapsed();
    Ok(Opened {
        store: v.store,
        writer,
        gen,
        snap_gen,
        snapshot_bytes,
        log_bytes,
        found,
    })
}

/// The size of a log that holds no record: its magic alone.
const EMPTY: u64 = FORMAT.magic().len() as u64;

/// A file's size (0 if it cannot be read: its reading says why).
fn size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Leaves in `logs` (worker `worker`'s in `dir`, in order) those to
/// replay after snapshot `snap` of generation `snap_gen` (0: none): the
/// logs before the snapshot's are obsolete, and removed; the snapshot's
/// own must be there (it was started before the snapshot was). With
/// neither snapshot nor log, a fresh log is made. `progress` counts what
/// is left to read.
fn logs_after(
    dir: &Path,
    worker: u16,
    (snap_gen, snap): (u64, &Path),
    logs: &mut Vec<(u64, PathBuf)>,
    progress: &mut Progress<'_>,
) -> Result<(), WalError> {
    while logs.first().is_some_and(|(g, _)| *g < snap_gen) {
        let (_, p) = logs.remove(0);
        progress.skipped(size(&p));
        files::remove(&p)?;
        tracing::info!(
            "worker {worker}: {} removed: the snapshot holds it",
            p.display()
        );
    }
    match logs.first() {
        None if snap_gen == 0 => {
            let p = files::log_path(dir, worker, 0);
            Log::open(&p, FORMAT)?;
            progress.added(size(&p));
            logs.push((0, p));
            Ok(())
        }
        Some((g, _)) if *g == snap_gen => Ok(()),
        _ => Err(missing_log(dir, worker, snap_gen, snap)),
    }
}

/// Loads the snapshot at `path`, of `snapshot_bytes` bytes, into the
/// replay's store: its head, and the changes it held.
fn load_snapshot(
    path: &Path,
    snapshot_bytes: u64,
    v: &mut Replay<'_>,
) -> Result<(Head, u64), WalError> {
    let mut s = LoadSnapshot {
        replay: v,
        head: None,
        end: None,
        changes: 0,
        slot: None,
        slots_before: 0,
        snapshot_bytes,
    };
    let replayed = Log::open(path, SNAPSHOT_FORMAT)?.replay(&mut s)?;
    let end = replayed.end();
    s.replay.progress.done(end + replayed.torn_bytes());
    match (s.head, s.end, replayed.torn_bytes()) {
        (Some(head), Some(_), 0) => Ok((head, s.changes)),
        _ => Err(cut(path, end)),
    }
}

/// A complete file (a snapshot, or a log a later one follows) cut short
/// at byte `at`.
fn cut(path: &Path, at: u64) -> WalError {
    WalError::Corrupt {
        path: path.to_path_buf(),
        offset: at,
        why: Damage::Cut,
    }
}

/// The log a snapshot needs is not there: the files were not all kept.
fn missing_log(dir: &Path, worker: u16, gen: u64, snap: &Path) -> WalError {
    let p: PathBuf = files::log_path(dir, worker, gen);
    WalError::Io {
        path: p,
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "missing: it holds the writes after {} (generation {gen}); were the data dir's \
                 files copied or restored in part?",
                if gen == 0 {
                    "the start".to_string()
                } else {
                    snap.display().to_string()
                }
            ),
        ),
    }
}

/// Which slots' changes a replay of snapshot `gen`'s log applies: those
/// after the slot's mark.
struct Skip {
    gen: u64,
    /// By slot: its mark was read.
    copied: Vec<bool>,
}

/// The logs' visitor: each change applied to the store, unless a snapshot
/// holds it.
struct Replay<'a> {
    store: Store,
    skip: Option<Skip>,
    changes: u64,
    progress: Progress<'a>,
}

impl Visit for Replay<'_> {
    fn record(&mut self, kind: u8, payload: &[u8], _offset: u64) -> Result<(), Reason> {
        if kind == records::COPIED {
            let c = Copied::decode(payload)?;
            if let Some(s) = self.skip.as_mut().filter(|s| s.gen == c.gen) {
                let slots = c.slots.start as usize..c.slots.end as usize;
                s.copied
                    .get_mut(slots)
                    .ok_or("a mark of slots past the store's")?
                    .fill(true);
            }
            return Ok(());
        }
        let c = Change::decode(kind, payload)?;
        if let Some(s) = &self.skip {
            if !s.copied.get(c.slot() as usize).copied().unwrap_or(true) {
                return Ok(());
            }
        }
        c.apply(&mut self.store)?;
        self.changes += 1;
        Ok(())
    }

    fn progress(&mut self, read: u64, _size: u64) {
        self.progress.read(read);
    }
}

/// The snapshot's visitor: its head first, then changes, its end last.
struct LoadSnapshot<'a, 'b> {
    replay: &'a mut Replay<'b>,
    head: Option<Head>,
    end: Option<End>,
    changes: u64,
    /// The slot of the last change.
    slot: Option<u32>,
    /// Slots seen (the last one's changes may go on).
    slots_before: u32,
    /// The snapshot's size.
    snapshot_bytes: u64,
}

/// Changes a snapshot's load reads before it guesses slots' sizes.
const GUESS_AFTER: u64 = 1024;

impl LoadSnapshot<'_, '_> {
    /// A snapshot holds its slots one after another: at a slot's first
    /// change, room is made in its table for the records it will likely
    /// hold once the logs are replayed too, guessed from the slots before
    /// it (slots are hashed, so their sizes are even), scaled by the bytes
    /// of snapshot and logs over the snapshot's. The guess saves the
    /// table's growths; a wrong one costs memory for the table alone (its
    /// buckets, not records).
    fn expect(&mut self, slot: u32) {
        if self.slot.replace(slot) == Some(slot) {
            return;
        }
        self.slots_before += 1;
        if self.changes < GUESS_AFTER || self.slots_before < 2 || self.snapshot_bytes == 0 {
            return;
        }
        let total = self.replay.progress.total() as f64;
        let per_slot = self.changes as f64 / f64::from(self.slots_before - 1);
        let logs_too = total / self.snapshot_bytes as f64;
        self.replay
            .store
            .reserve(slot, (per_slot * logs_too) as usize);
    }
}

impl Visit for LoadSnapshot<'_, '_> {
    fn record(&mut self, kind: u8, payload: &[u8], _offset: u64) -> Result<(), Reason> {
        let slots = self.replay.store.slots();
        match (kind, self.head, self.end) {
            (_, _, Some(_)) => Err("a record after the snapshot's end".into()),
            (records::HEAD, None, _) => {
                let h = Head::decode(payload)?;
                if h.slots != slots {
                    return Err(format!(
                        "a snapshot of a map of {} slots, not this cluster's {slots}",
                        h.slots
                    )
                    .into());
                }
                self.head = Some(h);
                Ok(())
            }
            (_, None, _) => Err("the snapshot does not start with its head".into()),
            (records::END, Some(h), None) => {
                let e = End::decode(payload)?;
                if e.gen != h.gen || e.records != self.changes {
                    return Err(format!(
                        "the snapshot's end says generation {} and {} changes, \
                         its head generation {} and {} were read",
                        e.gen, e.records, h.gen, self.changes
                    )
                    .into());
                }
                self.end = Some(e);
                Ok(())
            }
            _ => {
                let c = Change::decode(kind, payload)?;
                c.apply(&mut self.replay.store)?;
                self.expect(c.slot());
                self.changes += 1;
                Ok(())
            }
        }
    }

    fn progress(&mut self, read: u64, _size: u64) {
        self.replay.progress.read(read);
    }
}

#[cfg(test)]
mod tests;
