//! Flushing a log from another thread than its writer's, and the counts
//! the two share.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::error::WalError;
use crate::flush_times::FlushRecorder;

/// What a writer and its sync handles share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub path: PathBuf,
    /// The log's file (a second descriptor of the writer's), replaced when
    /// the log is rewritten. Held while a handle flushes it.
    pub file: Mutex<File>,
    /// The log's length: bytes written whole. Stored after each write.
    pub written: AtomicU64,
    /// Bytes known to be on disk.
    pub durable: AtomicU64,
    /// An fsync failed: nothing written since can be trusted to the disk.
    pub failed: AtomicBool,
    /// How long the flushes took.
    pub flushes: FlushRecorder,
}

impl Shared {
    pub fn new(file: File, path: PathBuf, len: u64) -> Shared {
        Shared {
            path,
            file: Mutex::new(file),
            written: AtomicU64::new(len),
            durable: AtomicU64::new(len),
            failed: AtomicBool::new(false),
            flushes: FlushRecorder::default(),
        }
    }

    pub fn file(&self) -> MutexGuard<'_, File> {
        self.file.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The error for a log whose fsync failed, if one did.
    pub fn check(&self) -> Result<(), WalError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(WalError::SyncFailed {
                path: self.path.clone(),
                durable: self.durable.load(Ordering::Acquire),
            });
        }
        Ok(())
    }

    /// Flushes `file` (the log's) to disk; on success the first `upto`
    /// bytes are durable, on failure the log takes no more writes.
    pub fn flush(&self, file: &File, upto: u64) -> Result<u64, WalError> {
        self.check()?;
        let t = Instant::now();
        let r = file.sync_data();
        self.flushes.record(t.elapsed());
        match r {
            Ok(()) => Ok(self.durable.fetch_max(upto, Ordering::AcqRel).max(upto)),
            Err(source) => {
                self.failed.store(true, Ordering::Release);
                Err(WalError::Io {
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }
}

/// A way to flush a log from another thread than its writer's (an
/// `everysec` policy's timer thread, say): `fdatasync` of the same file,
/// and the durable length the writer reads too. It follows the log
/// through [`Writer::rewrite`](crate::Writer::rewrite).
#[derive(Debug, Clone)]
pub struct SyncHandle {
    shared: Arc<Shared>,
}

impl SyncHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> SyncHandle {
        SyncHandle { shared }
    }

    /// Flushes to disk what the writer has written so far; returns the
    /// bytes now known durable. A failure stops the log taking writes
    /// ([`WalError::SyncFailed`]).
    pub fn sync(&self) -> Result<u64, WalError> {
        let file = self.shared.file();
        // Read under the lock: a rewrite swaps file and length together.
        let upto = self.shared.written.load(Ordering::Acquire);
        self.shared.flush(&file, upto)
    }

    /// The bytes of the log known to be on disk.
    pub fn durable(&self) -> u64 {
        self.shared.durable.load(Ordering::Acquire)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }
}
