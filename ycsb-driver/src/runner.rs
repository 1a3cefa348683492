//! A phase (load or run) across the driver threads: each thread drives its
//! share against the store ([`crate::driver`]); their measurements are merged.
//!
//! A lost connection to the store ends the phase: the thread that sees it
//! stops issuing, the others stop too, each waits (at most [`DRAIN_LIMIT`])
//! for the operations it has in flight, and the phase reports what completed
//! together with the loss ([`PhaseResult::lost`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use copyrpc::clock::Clock;
use copyrpc::IdlePolicy;

use crate::db::{Lost, Target};
use crate::driver::{drive, Job, ThreadResult};
use crate::measure::Measurements;
use crate::workload::CoreWorkload;

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

/// What a phase produced.
#[derive(Debug)]
pub struct PhaseResult {
    /// All threads' measurements, merged.
    pub measurements: Measurements,
    /// Operations completed.
    pub operations: u64,
    /// Wall time of the phase.
    pub runtime: Duration,
    /// The lost connection that ended the phase early, if one did (the
    /// measurements cover what completed before).
    pub lost: Option<ConnectionLost>,
    /// The newest shard-map version a driver thread ended with (kvs-server).
    pub map_version: Option<u32>,
}

/// A driver thread's connection to the server was lost (the server died, or
/// closed or broke the connection).
#[derive(Debug, Clone, thiserror::Error)]
#[error("driver thread {thread} lost its connection to the server: {why}")]
pub struct ConnectionLost {
    /// Which thread saw it first.
    pub thread: usize,
    /// What its request met.
    pub why: Lost,
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

/// Runs `phase` of `wl` with `opts.threads` threads against `target`.
pub fn run_phase(
    wl: &Arc<CoreWorkload>,
    phase: Phase,
    target: &Target,
    opts: &RunOptions,
    progress: &Arc<Progress>,
) -> Result<PhaseResult, RunError> {
    let threads = opts.threads.max(1);
    let total = match phase {
        Phase::Load => wl.load_count(),
        Phase::Run => wl.operation_count(),
    };
    let start = Instant::now();
    let clock = Clock::new();
    // Set by a thread that lost its connection or could not connect: the
    // others stop too.
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let n = crate::workload::ops_for_thread(total, t, threads);
            let (wl, target, opts, progress, stop) = (
                wl.clone(),
                target.clone(),
                opts.clone(),
                progress.clone(),
                stop.clone(),
            );
            std::thread::Builder::new()
                .name(format!("ycsb-{t}"))
                .spawn(move || {
                    let job = Job {
                        wl: &wl,
                        phase,
                        opts: &opts,
                        thread: t,
                        threads,
                        count: n,
                        progress: &progress,
                        stop: &stop,
                        clock,
                    };
                    let r = drive(job, &target);
                    if !matches!(&r, Ok(ThreadResult { lost: None, .. })) {
                        stop.store(true, Ordering::Release);
                    }
                    r
                })
                .expect("spawn a driver thread")
        })
        .collect();
    let mut merged = Measurements::new();
    let mut ops = 0;
    let mut err = None;
    let mut lost = None;
    let mut map_version = None;
    for (t, h) in handles.into_iter().enumerate() {
        match h.join().expect("a driver thread panicked") {
            Ok(r) => {
                merged.merge(&r.m);
                ops += r.ops;
                if lost.is_none() {
                    lost = r.lost.map(|why| ConnectionLost { thread: t, why });
                }
                map_version = map_version.max(r.map_version);
            }
            Err(e) => err = Some(e),
        }
    }
    progress.finished.store(true, Ordering::Release);
    if let Some(e) = err {
        return Err(e);
    }
    Ok(PhaseResult {
        measurements: merged,
        operations: ops,
        runtime: start.elapsed(),
        lost,
        map_version,
    })
}
