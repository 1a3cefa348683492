//! Long pipelined runs: thousands of transfers with many in flight. The SRQ
//! water marks keep ahead of the peer (no RNR ever), and in deferred mode,
//! under delays and RNR faults, nothing is lost, duplicated or corrupted. The
//! run itself is shared with `tests/rxe.rs` (`tests/support/pipeline.rs`).

mod support;

use mlx5::device::{ExecMode, FaultPlan};
use mpib::{Config, PolicyKind};
use support::pipeline::{self, Run};
use support::*;

#[test]
fn thousands_of_transfers_never_meet_an_empty_srq() {
    let mut w = world("long", ExecMode::Inline, 2, &pipeline::srq_config());
    let World { a, b, devs, .. } = &mut w;
    // In inline mode a WRITE_WITH_IMM that finds the SRQ empty leaves its QP
    // stalled on RNR, and `progress` reports it still waiting: the receiver
    // only refills inside its own calls, which do not run in between.
    let mut sends = 0;
    let (a, _) = pipeline::never_meet_an_empty_srq(a, b, 4000, SIM_PATIENCE, || {
        sends += 1;
        let stalled = devs[0].progress() + devs[1].progress();
        assert_eq!(stalled, 0, "send {sends} met an empty SRQ (RNR)");
    });
    for r in 0..2 {
        assert!(a.signals[r] > 1000, "rail {r} carried traffic");
    }
    assert!(a.fast_path > 500 && a.record_path > 500, "{a:?}");
}

/// Thousands of pipelined transfers, eager ones (one buffer up to the
/// threshold, over tag matching, no CTS) among CTS ones, every byte checked:
/// both paths carry traffic, and messages that beat their receive are
/// parked and delivered.
#[test]
fn eager_and_cts_transfers_interleave() {
    let c = Config {
        eager_max: mpib::SUGGESTED_EAGER_MAX,
        ..pipeline::srq_config()
    };
    let mut w = world("eager", ExecMode::Inline, 2, &c);
    let run = Run {
        seed: 11,
        count: 3000,
        window: pipeline::WINDOW,
        grouped: true,
        patience: SIM_PATIENCE,
    };
    pipeline::pipeline(&mut w.a, &mut w.b, &run, || {});
    let (a, b) = (w.a.stats(), w.b.stats());
    assert!(a.eager_sends > 500 && a.record_path > 500, "{a:?}");
    assert_eq!(b.eager_recvs, a.eager_sends, "{b:?}");
}

/// A short run in `w`: `count` transfers, `window` in flight.
fn short_run(w: &mut World, seed: u64, count: u64, window: usize, grouped: bool) {
    let run = Run {
        seed,
        count,
        window,
        grouped,
        patience: SIM_PATIENCE,
    };
    pipeline::pipeline(&mut w.a, &mut w.b, &run, || {});
}

/// Runs `seeds` in deferred mode with delays and RNR faults; a failing run
/// names its seed.
fn deferred_runs(seeds: std::ops::Range<u64>) {
    for seed in seeds {
        let mut rng = Rng(seed ^ 0x5eed);
        let rails = if rng.below(4) == 0 { 1 } else { 2 };
        let policy = match rng.below(4) {
            0 => PolicyKind::Static(1.0),
            1 => PolicyKind::Static(0.0),
            2 => PolicyKind::Static(0.4),
            _ => PolicyKind::Adaptive,
        };
        let c = Config {
            policy,
            depth: 4 + rng.below(5) as usize,
            qps_per_rail: 1 + rng.below(2) as usize,
            granularity: [1u32, 128, 4096][rng.below(3) as usize],
            // No eager transfers, some, or most (over tag matching).
            eager_max: [0, 1024, mpib::SUGGESTED_EAGER_MAX][rng.below(3) as usize],
            ..Config::default()
        };
        let mode = ExecMode::Deferred {
            seed,
            faults: FaultPlan {
                delay: 200,
                rnr: 100,
                ..FaultPlan::default()
            },
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut w = world("defer", mode, rails, &c);
            short_run(&mut w, seed, 12, 4, true);
            w.devs[0].sched_stats()
        }));
        match r {
            Ok(st) => assert!(st.steps > 0, "seed {seed}: the scheduler ran"),
            Err(e) => {
                eprintln!("deferred run failed: seed {seed} (rails {rails}, {c:?})");
                std::panic::resume_unwind(e);
            }
        }
    }
}

#[test]
fn deferred_seeds_0_to_100() {
    deferred_runs(0..100);
}

#[test]
fn deferred_seeds_100_to_200() {
    deferred_runs(100..200);
}

#[test]
fn deferred_runs_meet_rnr_faults() {
    // The fault plan really injects: one seed's statistics.
    let mode = ExecMode::Deferred {
        seed: 3,
        faults: FaultPlan {
            delay: 200,
            rnr: 100,
            ..FaultPlan::default()
        },
    };
    let mut w = world("defer-stats", mode, 2, &Config::default());
    short_run(&mut w, 3, 20, 4, false);
    let st = w.devs[0].sched_stats();
    assert!(st.rnr > 0 && st.delays > 0, "{st:?}");
}
