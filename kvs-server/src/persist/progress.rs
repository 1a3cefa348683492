//! How far a worker's recovery got: counted as it reads its files, logged
//! about once a second, and shared ([`RecoveryCounters`]) with whoever
//! answers for the member while it recovers (its status, answered by
//! `serving::recovering`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kvs_proto::control::RecoveryProgress;

/// How often a long recovery says how far it got.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// A worker's recovery as others see it: bytes read of the total. The
/// worker stores, anyone loads; the two loads are not one snapshot, so a
/// load clamps what was read to the total.
#[derive(Debug, Default)]
pub struct RecoveryCounters {
    total: AtomicU64,
    read: AtomicU64,
}

impl RecoveryCounters {
    /// How far the recovery got (zero of zero before it began).
    pub fn progress(&self) -> RecoveryProgress {
        let total = self.total.load(Ordering::Acquire);
        let read = self.read.load(Ordering::Acquire);
        RecoveryProgress {
            read: read.min(total),
            total,
        }
    }

    fn publish(&self, read: u64, total: u64) {
        self.total.store(total, Ordering::Release);
        self.read.store(read.min(total), Ordering::Release);
    }
}

/// Recovery's progress, across its files: bytes of the files read whole,
/// and of the one being read.
pub(super) struct Progress<'a> {
    worker: u16,
    total: u64,
    /// Bytes of the files read before the current one.
    before: u64,
    /// Bytes of the current file read so far.
    current: u64,
    started: Instant,
    reported: Instant,
    shared: &'a RecoveryCounters,
}

impl<'a> Progress<'a> {
    /// A recovery of worker `worker` that began at `started` with `total`
    /// bytes to read, published in `shared`.
    pub(super) fn new(
        worker: u16,
        total: u64,
        started: Instant,
        shared: &'a RecoveryCounters,
    ) -> Progress<'a> {
        shared.publish(0, total);
        Progress {
            worker,
            total,
            before: 0,
            current: 0,
            started,
            reported: started,
            shared,
        }
    }

    /// Bytes read so far.
    pub(super) fn read_so_far(&self) -> u64 {
        (self.before + self.current).min(self.total)
    }

    /// The bytes to read.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// `read` bytes of the current file have been read; logged if the
    /// last line is [`REPORT_EVERY`] old.
    pub(super) fn read(&mut self, read: u64) {
        self.current = read;
        self.shared.publish(self.read_so_far(), self.total);
        if self.reported.elapsed() >= REPORT_EVERY {
            self.reported = Instant::now();
            tracing::info!(
                "{}",
                line(
                    self.worker,
                    self.read_so_far(),
                    self.total,
                    self.started.elapsed()
                )
            );
        }
    }

    /// The current file, of `bytes` bytes, was read whole.
    pub(super) fn done(&mut self, bytes: u64) {
        self.before += bytes;
        self.current = 0;
        self.shared.publish(self.read_so_far(), self.total);
    }

    /// A file of `bytes` bytes that was counted will not be read (a log
    /// the snapshot holds, removed).
    pub(super) fn skipped(&mut self, bytes: u64) {
        self.total = self.total.saturating_sub(bytes);
        self.shared.publish(self.read_so_far(), self.total);
    }

    /// A file of `bytes` bytes that was not counted will be read (a fresh
    /// log made).
    pub(super) fn added(&mut self, bytes: u64) {
        self.total += bytes;
        self.shared.publish(self.read_so_far(), self.total);
    }
}

/// The progress line: `worker W: recovering, N of M bytes (P%)`, and the
/// seconds so far.
pub(super) fn line(worker: u16, read: u64, total: u64, took: Duration) -> String {
    let p = RecoveryProgress { read, total };
    format!(
        "worker {worker}: recovering, {} of {total} bytes ({}%) after {} s",
        p.read,
        p.percent(),
        took.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(c: &RecoveryCounters) -> (u64, u64) {
        let p = c.progress();
        (p.read, p.total)
    }

    #[test]
    fn progress_counts_across_files_and_never_passes_the_total() {
        let c = RecoveryCounters::default();
        assert_eq!(at(&c), (0, 0));
        let mut p = Progress::new(3, 1000, Instant::now(), &c);
        assert_eq!(at(&c), (0, 1000));
        // A snapshot of 400 bytes, read in chunks.
        p.read(100);
        assert_eq!(at(&c), (100, 1000));
        p.read(400);
        p.done(400);
        assert_eq!(at(&c), (400, 1000));
        // A log of 200 the snapshot holds is removed, not read.
        p.skipped(200);
        assert_eq!(at(&c), (400, 800));
        // The log that follows: its chunks count on top of the snapshot.
        p.read(250);
        assert_eq!(at(&c), (650, 800));
        p.done(400);
        assert_eq!(at(&c), (800, 800));
        // A fresh log made for an empty dir is counted once it exists.
        p.added(8);
        assert_eq!(at(&c), (800, 808));
        p.read(8);
        p.done(8);
        assert_eq!((p.read_so_far(), p.total()), (808, 808));
        // A file that grew after it was counted (or a miscount) never
        // shows more read than there is.
        p.read(50);
        assert_eq!(at(&c), (808, 808));
    }

    #[test]
    fn a_load_between_the_two_stores_is_clamped() {
        let c = RecoveryCounters::default();
        c.read.store(90, Ordering::Relaxed);
        c.total.store(60, Ordering::Relaxed);
        assert_eq!(at(&c), (60, 60));
    }

    #[test]
    fn the_line_says_worker_bytes_and_percent() {
        assert_eq!(
            line(1, 350, 1000, Duration::from_millis(2500)),
            "worker 1: recovering, 350 of 1000 bytes (35%) after 2 s"
        );
        assert_eq!(
            line(0, 0, 0, Duration::ZERO),
            "worker 0: recovering, 0 of 0 bytes (100%) after 0 s"
        );
    }
}
