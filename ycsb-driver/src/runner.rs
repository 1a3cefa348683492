//! A phase (load or run) across the driver threads: each thread drives its
//! share against the store (`driver.rs`); their measurements are merged.
//!
//! A lost connection to the store ends the phase: the thread that sees it
//! stops issuing, the others stop too, each waits (at most [`DRAIN_LIMIT`])
//! for the operations it has in flight, and the phase reports what completed
//! together with the loss ([`PhaseResult::lost`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use copyrpc::clock::Clock;

pub use crate::phase::{Phase, Progress, RunError, RunOptions, DRAIN_LIMIT};

use crate::db::{Lost, Target};
use crate::driver::{drive, Job, ThreadResult};
use crate::measure::Measurements;
use crate::workload::CoreWorkload;

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
