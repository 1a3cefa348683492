//! Transfers on two software devices per side: every split, grouped
//! receives, both size paths, one rail, and the rail-selection rules.

mod support;

use mlx5::device::ExecMode;
use mpib::policy::Static;
use mpib::{Config, PolicyKind};
use support::*;

fn cfg(policy: PolicyKind) -> Config {
    Config {
        policy,
        ..Config::default()
    }
}

#[test]
fn every_split_delivers_every_byte() {
    for (name, frac, want) in [
        ("all on rail 0", 1.0, [true, false]),
        ("all on rail 1", 0.0, [false, true]),
        ("even", 0.5, [true, true]),
        ("uneven", 0.3, [true, true]),
    ] {
        let mut w = world("split", ExecMode::Inline, 2, &cfg(PolicyKind::Static(frac)));
        for (k, len) in [1usize, 64, 100, 4096, 65_536, 1_000_003]
            .into_iter()
            .enumerate()
        {
            let before = w.a.stats();
            let d = pattern(k as u64, len);
            transfer(&mut w.a, &mut w.b, &[d], &[len + 512], k as u32);
            let after = w.a.stats();
            let moved = [
                after.rail_bytes[0] - before.rail_bytes[0],
                after.rail_bytes[1] - before.rail_bytes[1],
            ];
            assert_eq!(moved[0] + moved[1], len as u64, "{name}, {len} B: bytes");
            for r in 0..2 {
                let signaled = after.signals[r] > before.signals[r];
                // No immediate on a rail that moves nothing.
                assert_eq!(signaled, moved[r] > 0, "{name}, {len} B: rail {r}");
                if len >= 4096 {
                    assert_eq!(signaled, want[r], "{name}, {len} B: rail {r} used");
                }
            }
            if len >= 4096 {
                let share = moved[0] as f64 / len as f64;
                assert!(
                    (share - frac).abs() < 0.02,
                    "{name}, {len} B: share {share}"
                );
            }
        }
        // The other direction too: a communicator is bidirectional.
        let d = pattern(99, 10_000);
        transfer(&mut w.b, &mut w.a, &[d], &[10_000], 3);
    }
}

#[test]
fn zero_byte_transfers_signal_on_rail_0() {
    for frac in [0.0, 0.5, 1.0] {
        let mut w = world("zero", ExecMode::Inline, 2, &cfg(PolicyKind::Static(frac)));
        let got = transfer(&mut w.a, &mut w.b, &[vec![]], &[256], 1);
        assert_eq!(&*got, &[0]);
        let s = w.a.stats();
        assert_eq!(s.signals, [1, 0], "rail 0 forced active");
        assert_eq!(s.fast_path, 1);
        // Grouped, all empty.
        let got = transfer(&mut w.a, &mut w.b, &[vec![], vec![]], &[16, 16], 2);
        assert_eq!(&*got, &[0, 0]);
        assert_eq!(w.a.stats().signals, [2, 0]);
        assert_eq!(w.a.stats().data_writes, [0, 0]);
    }
}

#[test]
fn grouped_receives_return_each_size_exactly() {
    let mut w = world("group", ExecMode::Inline, 2, &cfg(PolicyKind::Static(0.5)));
    for n in 1..=8usize {
        let data: Vec<Vec<u8>> = (0..n)
            .map(|i| pattern((n * 10 + i) as u64, 1 + i * 1000 + n * 37))
            .collect();
        let posted: Vec<usize> = data.iter().map(|d| d.len() + 300).collect();
        let got = transfer(&mut w.a, &mut w.b, &data, &posted, n as u32);
        let want: Vec<u32> = data.iter().map(|d| d.len() as u32).collect();
        assert_eq!(&*got, &want[..], "nreqs {n}");
    }
    let s = w.a.stats();
    // nreqs 1 of 38 bytes into 338: not a multiple of 128 nor a full buffer,
    // so the record carries it; every grouped send goes by record.
    assert_eq!(s.record_path, 8);
    assert_eq!(s.fast_path, 0);
}

#[test]
fn fast_path_is_one_wr_per_active_rail() {
    let mut w = world("fast", ExecMode::Inline, 2, &cfg(PolicyKind::Static(0.5)));
    // Multiple of the granularity into a bigger buffer, and a full buffer.
    transfer(&mut w.a, &mut w.b, &[pattern(1, 8192)], &[16384], 1);
    transfer(&mut w.a, &mut w.b, &[pattern(2, 1000)], &[1000], 2);
    let s = w.a.stats();
    assert_eq!(s.fast_path, 2);
    assert_eq!(s.record_path, 0);
    assert_eq!(s.signals, [2, 2]);
    assert_eq!(s.data_writes, [0, 0], "the WRITE_WITH_IMM carries the data");
    // A size the immediate would round: the record path, exact size back.
    let got = transfer(&mut w.a, &mut w.b, &[pattern(3, 1000)], &[4096], 3);
    assert_eq!(&*got, &[1000]);
    assert_eq!(w.a.stats().record_path, 1);
}

#[test]
fn beyond_size_q_takes_the_record_path() {
    // Granularity 1: size_q covers sizes below 4 MiB only.
    let c = Config {
        granularity: 1,
        policy: PolicyKind::Static(0.5),
        ..Config::default()
    };
    let mut w = world("big", ExecMode::Inline, 2, &c);
    let max = mpib::imm::max_encodable(1) as usize;
    let got = transfer(&mut w.a, &mut w.b, &[pattern(1, max)], &[max + 4096], 1);
    assert_eq!(got[0] as usize, max);
    assert_eq!((w.a.stats().fast_path, w.a.stats().record_path), (1, 0));
    for len in [max + 1, max + 4000] {
        let got = transfer(
            &mut w.a,
            &mut w.b,
            &[pattern(len as u64, len)],
            &[len + 4096],
            2,
        );
        assert_eq!(got[0] as usize, len);
    }
    assert_eq!((w.a.stats().fast_path, w.a.stats().record_path), (1, 2));
    // One rail only (rail 1 idle): the leader is rail 1.
    w.a.set_policy(Box::new(Static::new(0.0)));
    let len = max + 77;
    let got = transfer(&mut w.a, &mut w.b, &[pattern(5, len)], &[len], 3);
    assert_eq!(got[0] as usize, len);
}

#[test]
fn one_rail() {
    let mut w = world("one", ExecMode::Inline, 1, &Config::default());
    assert_eq!(w.a.nrails(), 1);
    for k in 0..200u64 {
        let n = 1 + (k % 3) as usize;
        let data: Vec<Vec<u8>> = (0..n)
            .map(|i| pattern(k * 8 + i as u64, (k as usize * 97 + i * 5) % 5000))
            .collect();
        let posted: Vec<usize> = data.iter().map(|d| d.len() + 1).collect();
        transfer(&mut w.a, &mut w.b, &data, &posted, k as u32);
    }
    let s = w.b.stats();
    assert_eq!(s.cts[1], 0);
    // Every other CTS is signaled with one rail.
    assert_eq!(s.cts[0], 200);
    assert_eq!(s.cts_signaled[0], 100);
    assert_eq!(w.a.stats().signals[1], 0);
}

#[test]
fn cts_alternates_devices_and_signals_by_parity() {
    let mut w = world("cts", ExecMode::Inline, 2, &Config::default());
    for k in 0..10u64 {
        transfer(&mut w.a, &mut w.b, &[pattern(k, 300)], &[300], 0);
    }
    let s = w.b.stats();
    assert_eq!(s.cts, [5, 5]);
    assert_eq!(s.cts_signaled, [5, 5]);
}

#[test]
fn data_qps_round_robin_one_per_request() {
    // With 3 QPs per rail, many requests in flight complete in order of
    // posting per QP and every byte lands: a request is never striped.
    let c = Config {
        qps_per_rail: 3,
        depth: 16,
        ..Config::default()
    };
    let mut w = world("rr", ExecMode::Inline, 2, &c);
    let srcs: Vec<_> = (0..16)
        .map(|k| {
            let b = w.a.alloc_buffer(3000).unwrap();
            b.write(0, &pattern(k, 3000)).unwrap();
            b
        })
        .collect();
    let dsts: Vec<_> = (0..16).map(|_| w.b.alloc_buffer(3000).unwrap()).collect();
    let mut rr = Vec::new();
    for d in &dsts {
        rr.push(post_recv(&mut w.b, &mut w.a, &[d.all()], 9));
    }
    let mut ss = Vec::new();
    for s in &srcs {
        ss.push(post_send(&mut w.a, &mut w.b, &[s.all()], 9));
    }
    for (s, r) in ss.iter().zip(&rr) {
        wait_both(&mut w.a, s, &mut w.b, r);
    }
    for (k, d) in dsts.iter().enumerate() {
        assert_eq!(d.to_vec(0, 3000).unwrap(), pattern(k as u64, 3000));
    }
    // A second test of a finished request is an error, not a hang.
    assert!(matches!(w.a.test(&ss[0]), Err(mpib::Error::UnknownRequest)));
    assert!(matches!(w.b.test(&rr[0]), Err(mpib::Error::UnknownRequest)));
    assert!(
        matches!(w.a.test(&rr[0]), Err(mpib::Error::UnknownRequest)),
        "another comm's handle"
    );
}
