//! Long pipelined runs: thousands of transfers with many in flight. The SRQ
//! water marks keep ahead of the peer (no RNR ever), and in deferred mode,
//! under delays and RNR faults, nothing is lost, duplicated or corrupted.

mod support;

use mlx5::device::{ExecMode, FaultPlan};
use mpib::{Buffer, Config, PolicyKind, Request};
use support::*;

const WINDOW: usize = 16;
const MAX_LEN: usize = 16 * 1024;

struct Flight {
    send: Option<Request>,
    recv: Request,
    k: u64,
    lens: Vec<usize>,
    sent: bool,
    got: bool,
}

/// Sizes of transfer `k`: 1 to 3 buffers of varied sizes (some 0, some
/// multiples of 128, some filling their buffer).
fn lens_of(rng: &mut Rng, grouped: bool) -> Vec<usize> {
    let n = if grouped {
        1 + rng.below(3) as usize
    } else {
        1
    };
    (0..n)
        .map(|_| match rng.below(6) {
            0 => 0,
            1 => 128 * (1 + rng.below(42) as usize),
            2 => MAX_LEN / 3,
            _ => rng.below(MAX_LEN as u64 / 3) as usize,
        })
        .collect()
}

/// Runs `count` transfers from `w.a` to `w.b` with up to `window` in flight,
/// checking every byte and size; `each` runs after every isend.
fn pipeline(
    w: &mut World,
    seed: u64,
    count: u64,
    window: usize,
    grouped: bool,
    mut each: impl FnMut(&World),
) {
    let mut rng = Rng(seed);
    // Per window slot: 3 source and 3 destination buffers.
    let src: Vec<Vec<Buffer>> = (0..window)
        .map(|_| {
            (0..3)
                .map(|_| w.a.alloc_buffer(MAX_LEN / 3).unwrap())
                .collect()
        })
        .collect();
    let dst: Vec<Vec<Buffer>> = (0..window)
        .map(|_| {
            (0..3)
                .map(|_| w.b.alloc_buffer(MAX_LEN / 3).unwrap())
                .collect()
        })
        .collect();
    let mut flights: Vec<Option<Flight>> = (0..window).map(|_| None).collect();
    let (mut next, mut done) = (0u64, 0u64);
    let mut steps = 0usize;
    while done < count {
        steps += 1;
        assert!(steps < STEPS, "seed {seed}: stuck at {done} of {count}");
        // Start new transfers into free window slots.
        for (i, f) in flights.iter_mut().enumerate() {
            if f.is_some() || next >= count {
                continue;
            }
            let lens = lens_of(&mut rng, grouped);
            let rspans: Vec<_> = dst[i].iter().take(lens.len()).map(|b| b.all()).collect();
            for b in &dst[i] {
                b.write(0, &vec![0xee; MAX_LEN / 3]).unwrap();
            }
            let Some(recv) = w.b.irecv(&rspans, next as u32).unwrap() else {
                break;
            };
            for (j, &l) in lens.iter().enumerate() {
                src[i][j]
                    .write(0, &pattern(next * 8 + j as u64, l))
                    .unwrap();
            }
            *f = Some(Flight {
                send: None,
                recv,
                k: next,
                lens,
                sent: false,
                got: false,
            });
            next += 1;
        }
        // Sends go out in the order the receives were posted.
        let mut order: Vec<usize> = (0..window).filter(|&i| flights[i].is_some()).collect();
        order.sort_by_key(|&i| flights[i].as_ref().map(|f| f.k));
        for i in order {
            let f = flights[i].as_mut().unwrap();
            if f.send.is_some() {
                continue;
            }
            let spans: Vec<_> = f
                .lens
                .iter()
                .enumerate()
                .map(|(j, &l)| src[i][j].span(0, l as u64).unwrap())
                .collect();
            match w.a.isend(&spans, f.k as u32).unwrap() {
                Some(r) => {
                    f.send = Some(r);
                    each(w);
                }
                None => break,
            }
        }
        // Test everything in flight.
        for (i, slot) in flights.iter_mut().enumerate() {
            let Some(f) = slot else { continue };
            if let (Some(s), false) = (&f.send, f.sent) {
                if let Some(sz) =
                    w.a.test(s)
                        .unwrap_or_else(|e| panic!("seed {seed}: send {}: {e}", f.k))
                {
                    assert_eq!(sz.len(), f.lens.len());
                    f.sent = true;
                }
            }
            if !f.got {
                if let Some(sz) =
                    w.b.test(&f.recv)
                        .unwrap_or_else(|e| panic!("seed {seed}: recv {}: {e}", f.k))
                {
                    let want: Vec<u32> = f.lens.iter().map(|&l| l as u32).collect();
                    assert_eq!(&*sz, &want[..], "seed {seed}: transfer {} sizes", f.k);
                    for (j, &l) in f.lens.iter().enumerate() {
                        let got = dst[i][j].to_vec(0, MAX_LEN / 3).unwrap();
                        assert!(
                            got[..l] == pattern(f.k * 8 + j as u64, l)[..],
                            "seed {seed}: transfer {} buffer {j}: bytes",
                            f.k
                        );
                        assert!(
                            got[l..].iter().all(|&x| x == 0xee),
                            "seed {seed}: transfer {} buffer {j}: written past its size",
                            f.k
                        );
                    }
                    f.got = true;
                }
            }
            if f.sent && f.got {
                *slot = None;
                done += 1;
            }
        }
    }
    assert_eq!(
        w.a.stats().sends,
        count,
        "seed {seed}: each transfer sent once"
    );
    assert_eq!(w.b.stats().recvs, count);
}

#[test]
fn thousands_of_transfers_never_meet_an_empty_srq() {
    let c = Config {
        policy: PolicyKind::Adaptive,
        depth: 32,
        qps_per_rail: 2,
        ..Config::default()
    };
    let mut w = world("long", ExecMode::Inline, 2, &c);
    // In inline mode a WRITE_WITH_IMM that finds the SRQ empty leaves its QP
    // stalled on RNR, and `progress` reports it still waiting: the receiver
    // only refills inside its own calls, which do not run in between.
    let mut sends = 0;
    pipeline(&mut w, 7, 4000, WINDOW, true, |w| {
        sends += 1;
        let stalled = w.devs[0].progress() + w.devs[1].progress();
        assert_eq!(stalled, 0, "send {sends} met an empty SRQ (RNR)");
    });
    let (a, b) = (w.a.stats(), w.b.stats());
    for r in 0..2 {
        assert_eq!(
            b.srq_consumed[r], a.signals[r],
            "rail {r}: one receive per immediate"
        );
        assert!(b.srq_min_outstanding[r] > 0, "rail {r}: SRQ ran dry");
        assert!(
            b.srq_posted[r] >= b.srq_consumed[r] + 32,
            "rail {r}: low mark kept"
        );
        assert!(a.signals[r] > 1000, "rail {r} carried traffic");
    }
    assert!(a.fast_path > 500 && a.record_path > 500, "{a:?}");
    // Every CTS QP got completions often enough to keep its queue short.
    assert_eq!(b.cts_signaled, b.cts);
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
            pipeline(&mut w, seed, 12, 4, true, |_| {});
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
    pipeline(&mut w, 3, 20, 4, false, |_| {});
    let st = w.devs[0].sched_stats();
    assert!(st.rnr > 0 && st.delays > 0, "{st:?}");
}
