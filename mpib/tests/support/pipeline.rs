//! The pipelined run, written once against a connected pair (`a` sends, `b`
//! receives) and run on the software device (`tests/pipeline.rs`) and on
//! soft-RoCE (`tests/rxe.rs`).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use mpib::{Buffer, Comm, Config, PolicyKind, Request, Stats};

use super::{pattern, Rng};

pub const WINDOW: usize = 16;
pub const MAX_LEN: usize = 16 * 1024;

/// One pipelined run.
pub struct Run {
    pub seed: u64,
    /// Transfers in all.
    pub count: u64,
    /// Transfers in flight at the most.
    pub window: usize,
    /// 1 to 3 buffers per transfer, else 1.
    pub grouped: bool,
    /// How long the run may go without a transfer completing before it
    /// counts as stuck.
    pub patience: Duration,
}

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

/// Runs `run.count` transfers from `a` to `b` with up to `run.window` in
/// flight, checking every byte and size; `each` runs after every isend.
pub fn pipeline(a: &mut Comm, b: &mut Comm, run: &Run, mut each: impl FnMut()) {
    let Run {
        seed,
        count,
        window,
        grouped,
        patience,
    } = *run;
    let mut rng = Rng(seed);
    // Per window slot: 3 source and 3 destination buffers.
    let bufs = |c: &Comm| -> Vec<Vec<Buffer>> {
        (0..window)
            .map(|_| {
                (0..3)
                    .map(|_| c.alloc_buffer(MAX_LEN / 3).unwrap())
                    .collect()
            })
            .collect()
    };
    let (src, dst) = (bufs(a), bufs(b));
    let mut flights: Vec<Option<Flight>> = (0..window).map(|_| None).collect();
    let (mut next, mut done) = (0u64, 0u64);
    // When `done` last moved.
    let mut last = (Instant::now(), 0u64);
    while done < count {
        if done != last.1 {
            last = (Instant::now(), done);
        }
        assert!(
            last.0.elapsed() < patience,
            "seed {seed}: stuck at {done} of {count}"
        );
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
            let Some(recv) = b.irecv(&rspans, next as u32).unwrap() else {
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
            match a.isend(&spans, f.k as u32).unwrap() {
                Some(r) => {
                    f.send = Some(r);
                    each();
                }
                None => break,
            }
        }
        // Test everything in flight.
        for (i, slot) in flights.iter_mut().enumerate() {
            let Some(f) = slot else { continue };
            if let (Some(s), false) = (&f.send, f.sent) {
                if let Some(sz) = a
                    .test(s)
                    .unwrap_or_else(|e| panic!("seed {seed}: send {}: {e}", f.k))
                {
                    assert_eq!(sz.len(), f.lens.len());
                    f.sent = true;
                }
            }
            if !f.got {
                if let Some(sz) = b
                    .test(&f.recv)
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
        a.stats().sends,
        count,
        "seed {seed}: each transfer sent once"
    );
    assert_eq!(b.stats().recvs, count);
}

/// The configuration of the long pipelined run: adaptive split, a 32-deep
/// FIFO, two data QPs per rail.
pub fn srq_config() -> Config {
    Config {
        policy: PolicyKind::Adaptive,
        depth: 32,
        qps_per_rail: 2,
        // The immediates' SRQ is what this watches: every transfer takes
        // the CTS path.
        eager_max: 0,
        ..Config::default()
    }
}

/// `count` pipelined transfers (seed 7, grouped, `WINDOW` in flight) on a
/// pair of `srq_config`; `each` runs after every isend. The SRQ water marks
/// keep ahead of the peer: every immediate found a receive, no SRQ ran dry,
/// the low mark held, and every CTS QP got completions often enough to keep
/// its queue short. Returns both sides' statistics, for the caller's traffic
/// checks.
pub fn never_meet_an_empty_srq(
    a: &mut Comm,
    b: &mut Comm,
    count: u64,
    patience: Duration,
    each: impl FnMut(),
) -> (Stats, Stats) {
    let run = Run {
        seed: 7,
        count,
        window: WINDOW,
        grouped: true,
        patience,
    };
    let t = Instant::now();
    pipeline(a, b, &run, each);
    eprintln!(
        "{count} pipelined transfers in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let (a, b) = (a.stats(), b.stats());
    eprintln!(
        "signals per rail {:?}, fast path {}, record path {}, fewest receives left {:?}",
        a.signals, a.fast_path, a.record_path, b.srq_min_outstanding
    );
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
    }
    // Every CTS QP got completions often enough to keep its queue short.
    assert_eq!(b.cts_signaled, b.cts);
    (a, b)
}
