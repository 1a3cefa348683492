//! Appending to a log: records gathered into a batch, the batch written
//! with one write(2), flushed with fdatasync; and replacing the log whole.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::batch::Batch;
use crate::error::{TooLarge, WalError};
use crate::files;
use crate::format::Format;
use crate::sync::{Shared, SyncHandle};

/// A log open for appending, after its replay
/// ([`Replayed::append`](crate::Replayed::append)).
#[derive(Debug)]
pub struct Writer {
    file: File,
    format: Format,
    batch: Batch,
    /// Where the log ends: after the last record written whole. Bytes of
    /// the file past it (a failed write's) are not part of the log.
    end: u64,
    /// A failed write's bytes may lie past `end`: cut them off before the
    /// next write.
    cut: bool,
    shared: Arc<Shared>,
}

impl Writer {
    /// The writer of `file`, a log whose records end at `end`, flushed.
    pub(crate) fn new(
        path: PathBuf,
        file: File,
        format: Format,
        end: u64,
    ) -> Result<Writer, WalError> {
        let shared = Shared::new(clone(&file, &path)?, path, end);
        Ok(Writer {
            file,
            format,
            batch: Batch::new(format),
            end,
            cut: false,
            shared: Arc::new(shared),
        })
    }

    /// Adds a record of `kind` holding `payload` to the batch; returns the
    /// log's length once the batch is written (the record's end).
    pub fn push(&mut self, kind: u8, payload: &[u8]) -> Result<u64, WalError> {
        let r = self.batch.push(kind, payload);
        self.pushed(r)
    }

    /// Adds a record of `kind` whose payload `encode` appends straight into
    /// the batch's buffer ([`Batch::push_with`]); returns the record's end
    /// as [`push`](Self::push) does.
    pub fn push_with<F>(&mut self, kind: u8, encode: F) -> Result<u64, WalError>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        let r = self.batch.push_with(kind, encode);
        self.pushed(r)
    }

    fn pushed(&self, r: Result<(), TooLarge>) -> Result<u64, WalError> {
        r.map_err(|source| WalError::TooLarge {
            path: self.shared.path.clone(),
            source,
        })?;
        Ok(self.end + self.batch.len() as u64)
    }

    /// Adds the records of `batch` (built elsewhere, in this log's
    /// format) to the batch, leaving `batch` empty; returns the log's
    /// length once the batch is written, as [`push`](Self::push) does.
    /// When the writer's own batch is empty the two buffers trade places:
    /// nothing is copied.
    pub fn adopt(&mut self, batch: &mut Batch) -> u64 {
        if self.batch.is_empty() {
            std::mem::swap(&mut self.batch, batch);
        } else {
            self.batch.extend(batch);
            batch.clear();
        }
        self.end + self.batch.len() as u64
    }

    /// Bytes pushed and not yet written.
    pub fn pending(&self) -> usize {
        self.batch.len()
    }

    /// Drops the records pushed and not yet written.
    pub fn discard(&mut self) {
        self.batch.clear();
    }

    /// Writes the batch at the log's end with one write(2) (more only if
    /// the kernel takes part of it). On failure ([`WalError::Write`]) the
    /// log still ends where it did: what part of the batch reached the
    /// file is cut off (or, if even that fails, before the next write), and
    /// the batch is kept for another try or [`discard`](Self::discard).
    pub fn write(&mut self) -> Result<(), WalError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.shared.check()?;
        let write_err = |w: &Writer, source| WalError::Write {
            path: w.shared.path.clone(),
            at: w.end,
            source,
        };
        if self.cut {
            self.file
                .set_len(self.end)
                .map_err(|e| write_err(self, e))?;
            self.cut = false;
        }
        if let Err(e) = self.file.write_all_at(self.batch.bytes(), self.end) {
            self.cut = self.file.set_len(self.end).is_err();
            return Err(write_err(self, e));
        }
        self.end += self.batch.len() as u64;
        self.batch.clear();
        self.shared.written.store(self.end, Ordering::Release);
        Ok(())
    }

    /// Flushes what was written to disk (fdatasync): the log's first
    /// [`end`](Self::end) bytes survive a crash once this returns. A
    /// failure stops the log taking writes ([`WalError::SyncFailed`]).
    /// Nothing is flushed when a [`SyncHandle`](crate::SyncHandle)'s
    /// flush already covered the end.
    pub fn sync(&mut self) -> Result<(), WalError> {
        self.shared.check()?;
        if self.shared.durable.load(Ordering::Acquire) >= self.end {
            return Ok(());
        }
        self.shared.flush(&self.file, self.end).map(|_| ())
    }

    /// [`write`](Self::write), then [`sync`](Self::sync): one group
    /// commit.
    pub fn commit(&mut self) -> Result<(), WalError> {
        self.write()?;
        self.sync()
    }

    /// Where the log ends: its length in bytes, magic and records written
    /// (flushed or not).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The bytes of the log known to be on disk (by this writer's
    /// [`sync`](Self::sync) or a [`SyncHandle`]'s).
    pub fn durable(&self) -> u64 {
        self.shared.durable.load(Ordering::Acquire)
    }

    /// How long this log's flushes took (its writer's and its sync
    /// handles').
    pub fn flush_times(&self) -> crate::FlushTimes {
        self.shared.flushes.read()
    }

    /// A handle another thread flushes this log with.
    pub fn sync_handle(&self) -> SyncHandle {
        SyncHandle::new(self.shared.clone())
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Has the filesystem set aside the log's blocks up to byte `upto`
    /// (fallocate with `FALLOC_FL_KEEP_SIZE`: the file's length does not
    /// change, and a replay reads no further than before), so that writes
    /// up to there do not fail for want of space. A full disk is an error
    /// ([`WalError::is_disk_full`]) before any write needs the space:
    /// what holds the log can refuse new work while the writes already
    /// taken still fit. `Ok(false)`: the filesystem cannot set space aside
    /// (nothing is held).
    pub fn reserve(&mut self, upto: u64) -> Result<bool, WalError> {
        if upto <= self.end {
            return Ok(true);
        }
        // Offsets and lengths are off_t (i64): a log never nears 2^63.
        let (off, len) = (self.end as i64, (upto - self.end) as i64);
        match fallocate_keep_size(&self.file, off, len) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(false),
            Err(source) => Err(WalError::Io {
                path: self.shared.path.clone(),
                source,
            }),
        }
    }

    /// Replaces the log with one holding just the records `fill` pushes
    /// (how a log sheds what a snapshot covers); records pushed here and
    /// not written are dropped.
    ///
    /// The new log is written beside the old one (as `.partial`),
    /// flushed, renamed over it, and the directory flushed: a crash at any
    /// point leaves the old log whole (and perhaps part of the new one
    /// beside it, which [`Log::open`](crate::Log::open) removes) or the new
    /// one whole. Sync handles follow the new file. A successful rewrite
    /// clears an earlier fsync failure, since the new file holds nothing
    /// of the old.
    pub fn rewrite<F>(&mut self, fill: F) -> Result<(), WalError>
    where
        F: FnOnce(&mut Batch) -> Result<(), TooLarge>,
    {
        let path = self.shared.path.clone();
        let mut b = Batch::new(self.format);
        fill(&mut b).map_err(|source| WalError::TooLarge {
            path: path.clone(),
            source,
        })?;
        let (file, tmp) = files::write_partial(&path, &[self.format.magic(), b.bytes()])?;
        let second = clone(&file, &tmp)?;
        std::fs::rename(&tmp, &path).map_err(|source| WalError::Io {
            path: path.clone(),
            source,
        })?;
        // The new file was opened before the rename, so that appends go to
        // the file the path names even if flushing the directory fails.
        let len = (self.format.magic().len() + b.len()) as u64;
        {
            let mut shared = self.shared.file();
            *shared = second;
            self.shared.written.store(len, Ordering::Release);
            self.shared.durable.store(len, Ordering::Release);
            self.shared.failed.store(false, Ordering::Release);
        }
        self.file = file;
        self.end = len;
        self.cut = false;
        self.batch.clear();
        files::sync_dir(&path)
    }
}

/// fallocate(2) of `len` bytes of `file` from `off`, keeping its size.
#[allow(unsafe_code)]
fn fallocate_keep_size(file: &File, off: i64, len: i64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate takes a descriptor, which `file` keeps open for
    // the call, and two integers; it touches no memory of ours.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, off, len) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A second descriptor of `file` (the log at `path`), for sync handles.
fn clone(file: &File, path: &Path) -> Result<File, WalError> {
    file.try_clone().map_err(|source| WalError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests;
