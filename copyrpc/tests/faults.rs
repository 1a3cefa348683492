//! Seeded fault runs on the deferred software device: 1000 runs, each with its
//! own seed for the NIC's scheduling and faults, and its own traffic. No RPC may
//! be lost, duplicated or corrupted; calls on an endpoint that a fatal fault
//! closed fail explicitly, exactly once.

mod support;

use std::collections::HashMap;

use copyrpc::transport::{Dc, Mlx5, Transport};
use copyrpc::ContextBuilder;
use mlx5::cq::Compression;
use mlx5::device::{ExecMode, FaultPlan};
use support::*;

/// CQE compression the runs cycle through: on DC the receive CQ keeps full
/// CQEs (the immediate names the endpoint).
const ZIPS: [Compression; 3] = [Compression::Off, Compression::Enhanced, Compression::Basic];

fn run<T: Transport>(seed: u64, fatal: bool, zips: &[Compression]) -> (usize, usize) {
    let faults = FaultPlan {
        delay: 200,
        rnr: 150,
        no_compress: 300,
        access: if fatal { 3 } else { 0 },
        peer_loss: if fatal { 3 } else { 0 },
    };
    let zip = zips[seed as usize % zips.len()];
    let b = ContextBuilder::new()
        .ring_size(1024)
        .srq_size(16)
        .compression(zip);
    let mut w = world_t::<T>(
        &format!("f{seed}-{}", fatal as u8),
        ExecMode::Deferred { seed, faults },
        b,
        2,
    );
    let mut rng = Rng(seed ^ 0xabcdef);
    let total = 30u64;
    let mut sent: HashMap<u64, usize> = HashMap::new();
    let mut next = 0u64;
    for _ in 0..200_000 {
        if next < total {
            let k = rng.below(2) as usize;
            let len = rng.below(120) as usize;
            match w.client.call(w.pairs[k].0, &payload(next, len), len, next) {
                Ok(()) => {
                    sent.insert(next, len);
                    next += 1;
                }
                Err(e) if e.is_retryable() => {}
                Err(_) => next += 1, // endpoint closed by a fatal fault: never sent
            }
        }
        w.step();
        // The liveness channel (a TCP connection per endpoint pair, in
        // deployments): when either side's endpoint dies, the other side's is
        // torn down and its pending calls fail.
        for &(c, s) in &w.pairs.clone() {
            if w.server.closed(s).is_some() && w.client.closed(c).is_none() {
                w.client.close(c);
            }
            if w.client.closed(c).is_some() && w.server.closed(s).is_none() {
                w.server.close(s);
            }
        }
        let done = w.log.borrow().len();
        if next == total && done == sent.len() {
            break;
        }
    }
    let log = w.log.borrow();
    assert_eq!(
        log.len(),
        sent.len(),
        "seed {seed}: every sent call answered or failed"
    );
    let (mut ok, mut failed) = (0, 0);
    let mut seen = std::collections::HashSet::new();
    for (t, r) in log.iter() {
        assert!(seen.insert(*t), "seed {seed}: call {t} completed twice");
        match r {
            Ok(d) => {
                assert_eq!(
                    d,
                    &transform(&payload(*t, sent[t])),
                    "seed {seed}: call {t} corrupted"
                );
                ok += 1;
            }
            Err(_) => {
                assert!(fatal, "seed {seed}: a failure without a fatal fault");
                failed += 1;
            }
        }
    }
    (ok, failed)
}

#[test]
fn a_thousand_seeded_fault_runs() {
    let mut total_ok = 0;
    for seed in 0..1000 {
        let (ok, _) = run::<Mlx5>(seed, false, &ZIPS);
        assert_eq!(ok, 30, "seed {seed}");
        total_ok += ok;
    }
    assert_eq!(total_ok, 30_000);
}

#[test]
fn a_thousand_seeded_fault_runs_over_dc() {
    let mut total_ok = 0;
    for seed in 0..1000 {
        let (ok, _) = run::<Dc>(seed, false, &ZIPS[..1]);
        assert_eq!(ok, 30, "seed {seed}");
        total_ok += ok;
    }
    assert_eq!(total_ok, 30_000);
}

#[test]
fn fatal_faults_fail_calls_explicitly() {
    fatal_faults::<Mlx5>(&ZIPS);
}

#[test]
fn fatal_faults_fail_calls_explicitly_over_dc() {
    fatal_faults::<Dc>(&ZIPS[..1]);
}

fn fatal_faults<T: Transport>(zips: &[Compression]) {
    let (mut ok, mut failed) = (0, 0);
    for seed in 0..200 {
        let (o, f) = run::<T>(seed, true, zips);
        ok += o;
        failed += f;
    }
    assert!(
        ok > 0 && failed > 0,
        "both outcomes happened: {ok} ok, {failed} failed"
    );
}
