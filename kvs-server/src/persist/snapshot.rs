//! A snapshot: a worker's slots copied to a file while it keeps serving,
//! so that its logs can shed what the copy holds.
//!
//! Snapshot `gen` begins at a turn's end, when the worker starts log
//! `gen` (every change from then on goes there). Then, at the end of each
//! turn, the worker copies the next slots (about [`STEP_BYTES`] of them,
//! at least one whole slot: a slot is copied as it stands at one moment)
//! as changes that make them again ([`Store::copy_slot`]), and leaves a
//! mark in its log journal at that point ([`Copied`]): a replay from this
//! snapshot skips a slot's changes before its mark and applies those
//! after. A thread of the snapshot's writes the copies to the file beside
//! the old snapshot and, once every slot is copied, flushes it, puts it
//! in place, and removes the logs before `gen`. A crash before that
//! leaves the old snapshot and every log: recovery replays log `gen` whole.
//!
//! The copies are made on the worker's thread, a step per turn, so a
//! snapshot costs the turn a copy of about `STEP_BYTES` (a slot larger
//! than that is copied in one step: the pause grows with the slot), and
//! the disk's writes happen on the other thread. When that thread falls
//! behind (a slow disk), the worker copies nothing until it catches up.
//! The steps are paced to `snapshot_rate` bytes a second (a step's worth
//! ahead at most), so that a snapshot's cost to the worker's turns and to
//! the disk is spread over its length rather than taken at once.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvs_wal::{Batch, Replacement, WalError};

use super::files;
use super::records::{self, Copied, End, Head};
use super::SNAPSHOT_FORMAT;
use crate::store::Store;

/// About how many bytes of records a step copies.
pub(super) const STEP_BYTES: usize = 64 << 10;

/// Copies the writer thread may have waiting before the worker waits for
/// it.
const QUEUE: usize = 8;

/// What the worker sends the snapshot's thread.
enum ToWriter {
    /// Copies of slots, to append.
    Copies(Batch),
    /// Every slot was copied: `records` changes in all.
    End { records: u64 },
}

/// What the snapshot's thread sends back.
enum FromWriter {
    /// A batch written, to fill again.
    Spare(Batch),
    /// The snapshot is in place; the logs before it were removed.
    Finished { bytes: u64, removed: u64 },
    /// It could not be written; the old snapshot and the logs stay.
    Failed(WalError),
}

/// How a snapshot ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// In place: its size, the bytes of the logs it let go, how long it
    /// took, and its generation.
    Finished {
        gen: u64,
        bytes: u64,
        removed: u64,
        took: Duration,
    },
    /// It failed; nothing changed on disk but the new log it began.
    Failed { gen: u64, why: WalError },
}

/// A snapshot under way, as its worker sees it.
pub(super) struct Snapshot {
    gen: u64,
    slots: u32,
    /// The next slot to copy.
    next: u32,
    /// Changes copied so far.
    records: u64,
    /// Batches the thread wrote and sent back, to gather copies in again.
    spares: Vec<Batch>,
    /// What the thread had no room for yet, in order.
    outbox: VecDeque<ToWriter>,
    /// Every slot is copied: only the thread's answer is awaited.
    copied: bool,
    /// The thread's last word, once it came.
    last: Option<FromWriter>,
    to_writer: SyncSender<ToWriter>,
    from_writer: Receiver<FromWriter>,
    thread: Option<JoinHandle<()>>,
    /// The snapshot's file, for errors.
    path: PathBuf,
    started: Instant,
    /// The pace: the most bytes of copies a second (0: none).
    rate: u64,
    /// Bytes of copies made so far.
    bytes: u64,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("gen", &self.gen)
            .field("next", &self.next)
            .field("slots", &self.slots)
            .finish()
    }
}

impl Snapshot {
    /// Starts snapshot `gen` of worker `worker`'s `slots` slots, into
    /// `dir`; its log `gen` must have begun. `Err`: its thread could not
    /// start.
    /// `rate`: the most bytes of copies a second (0: no limit).
    pub fn start(
        dir: PathBuf,
        worker: u16,
        gen: u64,
        slots: u32,
        rate: u64,
    ) -> std::io::Result<Snapshot> {
        let (to_writer, rx) = mpsc::sync_channel(QUEUE);
        let (tx, from_writer) = mpsc::channel();
        let path = files::snapshot_path(&dir, worker);
        let thread = std::thread::Builder::new()
            .name(format!("kvs-snap-{worker}"))
            .spawn(move || {
                let msg = match write(&dir, worker, gen, slots, &rx, &tx) {
                    Ok(Some((bytes, removed))) => FromWriter::Finished { bytes, removed },
                    // The worker went away: the partial file is removed.
                    Ok(None) => return,
                    Err(e) => FromWriter::Failed(e),
                };
                let _ = tx.send(msg);
            })?;
        Ok(Snapshot {
            gen,
            slots,
            next: 0,
            records: 0,
            spares: Vec::new(),
            outbox: VecDeque::new(),
            copied: false,
            last: None,
            to_writer,
            from_writer,
            thread: Some(thread),
            path,
            started: Instant::now(),
            rate,
            bytes: 0,
        })
    }

    /// How far it got: slots copied, of how many.
    pub fn progress(&self) -> (u32, u32) {
        (self.next, self.slots)
    }

    /// Whether a step would copy something now (else it waits for the
    /// thread, or for its pace).
    pub fn has_work(&self) -> bool {
        self.outbox.is_empty() && !self.copied && self.paced_for().is_zero()
    }

    /// How long until the pace allows the next step (zero: now): the
    /// copies may be a step ahead of `rate` bytes a second since the start.
    pub fn paced_for(&self) -> Duration {
        pace(self.bytes, self.rate, self.started.elapsed())
    }

    /// One step, at a turn's end (the turn's changes handed to the log):
    /// the next slots copied from `store` and marked in its journal, handed
    /// to the thread; or, once every slot is copied, the thread's answer
    /// if it came.
    pub fn step(&mut self, store: &mut Store) -> Option<Outcome> {
        self.hear();
        self.flush();
        if self.last.is_none() && self.has_work() {
            let copies = self.copy(store);
            self.outbox.push_back(ToWriter::Copies(copies));
            if self.next == self.slots {
                self.copied = true;
                self.outbox.push_back(ToWriter::End {
                    records: self.records,
                });
            }
            self.flush();
        }
        self.outcome()
    }

    /// Copies slots from `next` on until about [`STEP_BYTES`] are gathered,
    /// and marks them in the store's journal; the copies.
    fn copy(&mut self, store: &mut Store) -> Batch {
        let mut chunk = self
            .spares
            .pop()
            .unwrap_or_else(|| Batch::new(SNAPSHOT_FORMAT));
        let first = self.next;
        let before = chunk.len();
        while self.next < self.slots && chunk.len() < STEP_BYTES {
            self.records += store.copy_slot(self.next, &mut chunk);
            self.next += 1;
        }
        self.bytes += (chunk.len() - before) as u64;
        if let Some(j) = store.journal() {
            let mark = Copied {
                gen: self.gen,
                slots: first..self.next,
            };
            j.push_with(records::COPIED, |b| mark.encode(b))
                .expect("a mark fits a log record");
        }
        chunk
    }

    /// Takes what the thread sent: batches to reuse, and its last word.
    fn hear(&mut self) {
        loop {
            match self.from_writer.try_recv() {
                Ok(FromWriter::Spare(b)) => self.spares.push(b),
                Ok(m) => self.last = Some(m),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    if self.last.is_none() {
                        self.last = Some(FromWriter::Failed(WalError::Io {
                            path: self.path.clone(),
                            source: std::io::Error::other("the snapshot's thread stopped"),
                        }));
                    }
                    return;
                }
            }
        }
    }

    /// Hands the thread what it has room for, in order.
    fn flush(&mut self) {
        while let Some(m) = self.outbox.pop_front() {
            match self.to_writer.try_send(m) {
                Ok(()) => {}
                Err(TrySendError::Full(m)) => {
                    self.outbox.push_front(m);
                    return;
                }
                // The thread ended: its last word says why.
                Err(TrySendError::Disconnected(_)) => {
                    self.outbox.clear();
                    return;
                }
            }
        }
    }

    /// How it ended, once the thread said.
    fn outcome(&mut self) -> Option<Outcome> {
        let last = self.last.take()?;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        Some(match last {
            FromWriter::Finished { bytes, removed } => Outcome::Finished {
                gen: self.gen,
                bytes,
                removed,
                took: self.started.elapsed(),
            },
            FromWriter::Failed(why) => Outcome::Failed { gen: self.gen, why },
            FromWriter::Spare(_) => unreachable!("a spare is never kept as the last word"),
        })
    }
}

/// How long after `elapsed` a copy that has made `bytes` may make its next
/// step at `rate` bytes a second (0: no limit), a step ahead at most.
fn pace(bytes: u64, rate: u64, elapsed: Duration) -> Duration {
    if rate == 0 {
        return Duration::ZERO;
    }
    let due = bytes.saturating_sub(STEP_BYTES as u64) as f64 / rate as f64;
    Duration::from_secs_f64(due).saturating_sub(elapsed)
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // The thread sees the channel close and removes its partial file.
        let (tx, _) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.to_writer, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The snapshot's thread: writes snapshot `gen` of worker `worker` into
/// `dir` from the copies it receives, puts it in place, removes the logs
/// before it; `Ok(None)`: the worker went away first.
fn write(
    dir: &std::path::Path,
    worker: u16,
    gen: u64,
    slots: u32,
    rx: &Receiver<ToWriter>,
    tx: &mpsc::Sender<FromWriter>,
) -> Result<Option<(u64, u64)>, WalError> {
    let path = files::snapshot_path(dir, worker);
    let mut file = Replacement::create(&path, SNAPSHOT_FORMAT)?;
    let mut b = Batch::new(SNAPSHOT_FORMAT);
    let head = Head { gen, slots };
    b.push_with(records::HEAD, |o| head.encode(o))
        .expect("a head fits a record");
    file.write(&mut b)?;
    for msg in rx {
        match msg {
            ToWriter::Copies(mut copies) => {
                file.write(&mut copies)?;
                let _ = tx.send(FromWriter::Spare(copies));
            }
            ToWriter::End { records: count } => {
                let end = End {
                    gen,
                    records: count,
                };
                b.push_with(records::END, |o| end.encode(o))
                    .expect("an end fits a record");
                file.write(&mut b)?;
                let bytes = file.finish()?;
                let mut removed = 0;
                for (g, p) in files::logs(dir, worker)? {
                    if g < gen {
                        removed += files::remove(&p)?;
                    }
                }
                return Ok(Some((bytes, removed)));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_lets_a_step_ahead_then_holds_to_the_rate() {
        let step = STEP_BYTES as u64;
        let ms = Duration::from_millis;
        // No limit, and the first step of any pace, go at once.
        assert_eq!(pace(1 << 40, 0, ms(0)), Duration::ZERO);
        assert_eq!(pace(0, 1 << 20, ms(0)), Duration::ZERO);
        assert_eq!(pace(step, 1 << 20, ms(0)), Duration::ZERO);
        // At 1 MiB/s, a step more than one ahead waits for its time.
        let rate = 1 << 20;
        let wait = pace(step + (1 << 20), rate, ms(0));
        assert!((wait.as_secs_f64() - 1.0).abs() < 1e-9, "{wait:?}");
        let wait = pace(step + (1 << 20), rate, ms(400));
        assert!((wait.as_secs_f64() - 0.6).abs() < 1e-9, "{wait:?}");
        assert_eq!(pace(step + (1 << 20), rate, ms(1000)), Duration::ZERO);
        assert_eq!(pace(step + (1 << 20), rate, ms(5000)), Duration::ZERO);
    }
}
