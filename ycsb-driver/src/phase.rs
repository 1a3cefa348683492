//! What a phase is and how it runs: load or run, the settings, the counters
//! the status lines read, and why a phase could not start. The runner
//! ([`crate::runner`]) and every driver thread ([`crate::driver`]) share
//! these.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use copyrpc::IdlePolicy;

use crate::measure::Measurements;

/// Load or run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Insert the records.
    Load,
    /// The operation mix.
    Run,
}

/// Settings of one phase.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Driver threads.
    pub threads: usize,
    /// Operations each thread keeps in flight (1: Java YCSB's closed loop).
    pub depth: usize,
    /// Total operations per second to aim at (None: as fast as possible).
    pub target_ops: Option<f64>,
    /// Check every value read (Java's `dataintegrity`): values are a
    /// deterministic function of key and field.
    pub verify: bool,
    /// What a driver thread does while waiting for answers (kvs-server
    /// only): spin, then sleep (default), or spin only
    /// (`kvs.busy_poll=true`).
    pub idle: IdlePolicy,
    /// Seed of the threads' random streams.
    pub seed: u64,
    /// Java's `maxexecutiontime`: after this long, no new operation starts;
    /// those in flight finish (None: until the operation count is done).
    pub max_time: Option<Duration>,
    /// Set (by Ctrl-C) to end the phase early in the same way.
    pub interrupt: Arc<AtomicBool>,
    /// Status lines are printed: the threads hand their interval
    /// measurements over to [`Progress::interval`] (otherwise they keep run
    /// totals only, and record each sample once).
    pub status: bool,
}

/// Counters the status reporter reads while a phase runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Operations completed, all threads.
    pub done: AtomicU64,
    /// Interval measurements the threads hand over (about once a second).
    pub interval: Mutex<Measurements>,
    /// Set when every thread has finished.
    pub finished: AtomicBool,
}

/// How long threads stopping after a lost connection wait for their
/// operations in flight before they give up on them.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Why a phase could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A driver thread could not connect.
    #[error("driver thread {thread}: {why}")]
    Connect {
        /// Which thread.
        thread: usize,
        /// Why.
        why: String,
    },
}
