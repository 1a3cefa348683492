//! The `everysec` policy's thread: it flushes one worker's log to disk
//! once a second, off the worker's thread.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use kvs_wal::SyncHandle;

/// How often the log is flushed.
const EVERY: Duration = Duration::from_secs(1);

/// The flushing thread; dropping it stops the thread after a last flush.
pub(super) struct Syncer {
    /// A message asks for a flush now; dropped, the thread stops.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts flushing the log `h` syncs, for worker `worker`.
    pub(super) fn start(h: SyncHandle, worker: u16) -> Syncer {
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("kvs-sync-{worker}"))
            .spawn(move || {
                let mut failed = false;
                loop {
                    // A message asks for a flush now; the channel's close,
                    // for a last one.
                    let last =
                        matches!(rx.recv_timeout(EVERY), Err(RecvTimeoutError::Disconnected));
                    match h.sync() {
                        Ok(_) => failed = false,
                        Err(e) if !failed => {
                            failed = true;
                            tracing::error!("worker {worker}: {e}");
                        }
                        Err(_) => {}
                    }
                    if last {
                        break;
                    }
                }
            })
            .ok();
        if thread.is_none() {
            tracing::error!(
                "worker {worker}: cannot start the thread that flushes the log every second"
            );
        }
        Syncer {
            stop: Some(tx),
            thread,
        }
    }
}

impl Syncer {
    /// Asks for a flush now, not at the second's end (the caller watches
    /// the log's durable length for it).
    pub(super) fn sync_now(&self) {
        if let Some(tx) = &self.stop {
            let _ = tx.send(());
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
