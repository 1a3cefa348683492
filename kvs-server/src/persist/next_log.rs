//! The next log, made ready off the worker's thread before a snapshot
//! begins.
//!
//! A snapshot begins at a turn's end by switching the worker to a new log.
//! Both halves of the switch used to stall the worker's turn on the disk:
//! making the new file durably (written beside, flushed, renamed, the
//! directory flushed, its space held) and flushing the old log whole (it
//! must be on disk before the new one takes writes: a recovery reads the
//! logs in order). So a thread makes the new log ready while the worker
//! serves on, and under `everysec` the log's flushing thread is asked to
//! flush the old log now; the switch then flushes only what was written
//! meanwhile.
//!
//! A crash between the two leaves the new log empty after the old one;
//! recovery takes an old log's torn tail for the end of the writes when
//! only empty logs follow it.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, TryRecvError};

use kvs_wal::{Log, WalError, Writer};

use super::{files, FORMAT};

/// The new log, once its thread is done: open for appending, and whether
/// its disk space is held up to `upto` bytes.
pub(super) struct Ready {
    pub writer: Writer,
    /// [`Writer::reserve`]'s answer for the space up to `upto`.
    pub reserved: Result<bool, WalError>,
    pub upto: u64,
}

/// A new log being made ready.
pub(super) struct NextLog {
    /// Its generation.
    pub gen: u64,
    /// The old log must be on disk up to here before the switch (its end
    /// when the flush was asked for).
    pub flush_to: u64,
    /// Its file, for errors.
    path: PathBuf,
    rx: Receiver<Result<Ready, WalError>>,
}

impl std::fmt::Debug for NextLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NextLog").field("gen", &self.gen).finish()
    }
}

impl NextLog {
    /// Starts making log `gen` of worker `worker` in `dir`, its space held
    /// `reserve` bytes ahead; `flush_to` is the old log's end now.
    pub fn start(
        dir: &Path,
        worker: u16,
        gen: u64,
        reserve: u64,
        flush_to: u64,
    ) -> std::io::Result<NextLog> {
        let (tx, rx) = mpsc::sync_channel(1);
        let path = files::log_path(dir, worker, gen);
        let made_at = path.clone();
        std::thread::Builder::new()
            .name(format!("kvs-nextlog-{worker}"))
            .spawn(move || {
                let made = Log::open(&made_at, FORMAT)
                    .and_then(|log| log.replay(&mut |_: u8, _: &[u8], _: u64| Ok(())))
                    .and_then(|replayed| replayed.append())
                    .map(|mut writer| {
                        let upto = writer.end() + reserve;
                        let reserved = writer.reserve(upto);
                        Ready {
                            writer,
                            reserved,
                            upto,
                        }
                    });
                // The worker may be gone: the empty log stays, which a
                // recovery reads as nothing.
                let _ = tx.send(made);
            })?;
        Ok(NextLog {
            gen,
            flush_to,
            path,
            rx,
        })
    }

    /// The new log, once ready (or why it could not be made).
    pub fn take(&mut self) -> Option<Result<Ready, WalError>> {
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(WalError::Io {
                path: self.path.clone(),
                source: std::io::Error::other("the thread making the next log stopped"),
            })),
        }
    }
}
