//! The transfer tests' bodies, written once against a connected pair (`a`
//! sends, `b` receives) and run on the software device (`tests/transfer.rs`)
//! and on soft-RoCE (`tests/rxe.rs`).
#![allow(dead_code)]

use mpib::policy::Static;
use mpib::{Comm, Error};

use super::{pattern, post_recv, post_send, transfer, wait_both};

/// Every split (all on rail 0, all on rail 1, even, uneven) of each of
/// `sizes`: every byte lands, no immediate on a rail that moves nothing, each
/// rail's share within 2% of the policy's; then a transfer the other way.
pub fn every_split(a: &mut Comm, b: &mut Comm, sizes: &[usize]) {
    for (name, frac, want) in [
        ("all on rail 0", 1.0, [true, false]),
        ("all on rail 1", 0.0, [false, true]),
        ("even", 0.5, [true, true]),
        ("uneven", 0.3, [true, true]),
    ] {
        a.set_policy(Box::new(Static::new(frac)));
        for (k, &len) in sizes.iter().enumerate() {
            let before = a.stats();
            let d = pattern(k as u64, len);
            transfer(a, b, &[d], &[len + 512], k as u32);
            let after = a.stats();
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
        transfer(b, a, &[d], &[10_000], 3);
    }
}

/// A 0-byte transfer, alone and grouped, forces rail 0 active (whatever the
/// policy) and writes no data.
pub fn zero_bytes_on_rail_0(a: &mut Comm, b: &mut Comm) {
    let got = transfer(a, b, &[vec![]], &[256], 1);
    assert_eq!(&*got, &[0]);
    let s = a.stats();
    assert_eq!(s.signals, [1, 0], "rail 0 forced active");
    assert_eq!(s.fast_path, 1);
    // Grouped, all empty.
    let got = transfer(a, b, &[vec![], vec![]], &[16, 16], 2);
    assert_eq!(&*got, &[0, 0]);
    assert_eq!(a.stats().signals, [2, 0]);
    assert_eq!(a.stats().data_writes, [0, 0]);
}

/// Grouped receives of 1 to 8 buffers return each size exactly, through the
/// completion record.
pub fn grouped_sizes_exact(a: &mut Comm, b: &mut Comm) {
    let before = a.stats();
    for n in 1..=8usize {
        let data: Vec<Vec<u8>> = (0..n)
            .map(|i| pattern((n * 10 + i) as u64, 1 + i * 1000 + n * 37))
            .collect();
        let posted: Vec<usize> = data.iter().map(|d| d.len() + 300).collect();
        let got = transfer(a, b, &data, &posted, n as u32);
        let want: Vec<u32> = data.iter().map(|d| d.len() as u32).collect();
        assert_eq!(&*got, &want[..], "nreqs {n}");
    }
    let s = a.stats();
    // nreqs 1 of 38 bytes into 338: not a multiple of 128 nor a full buffer,
    // so the record carries it; every grouped send goes by record.
    assert_eq!(s.record_path - before.record_path, 8);
    assert_eq!(s.fast_path - before.fast_path, 0);
}

/// Sizes the immediate carries exactly take one WR per active rail; a size it
/// would round takes the record path and comes back exact (a fresh pair,
/// split 50/50).
pub fn fast_path_one_wr_per_rail(a: &mut Comm, b: &mut Comm) {
    // Multiple of the granularity into a bigger buffer, and a full buffer.
    transfer(a, b, &[pattern(1, 8192)], &[16384], 1);
    transfer(a, b, &[pattern(2, 1000)], &[1000], 2);
    let s = a.stats();
    assert_eq!(s.fast_path, 2);
    assert_eq!(s.record_path, 0);
    assert_eq!(s.signals, [2, 2]);
    assert_eq!(s.data_writes, [0, 0], "the WRITE_WITH_IMM carries the data");
    // A size the immediate would round: the record path, exact size back.
    let got = transfer(a, b, &[pattern(3, 1000)], &[4096], 3);
    assert_eq!(&*got, &[1000]);
    assert_eq!(a.stats().record_path, 1);
}

/// Sizes beyond `size_q`'s range go by completion record, also when rail 1
/// leads (a fresh pair with granularity 1, split 50/50).
pub fn beyond_size_q(a: &mut Comm, b: &mut Comm) {
    let max = mpib::imm::max_encodable(1) as usize;
    let got = transfer(a, b, &[pattern(1, max)], &[max + 4096], 1);
    assert_eq!(got[0] as usize, max);
    assert_eq!((a.stats().fast_path, a.stats().record_path), (1, 0));
    for len in [max + 1, max + 4000] {
        let got = transfer(a, b, &[pattern(len as u64, len)], &[len + 4096], 2);
        assert_eq!(got[0] as usize, len);
    }
    assert_eq!((a.stats().fast_path, a.stats().record_path), (1, 2));
    // One rail only (rail 0 idle): the leader is rail 1.
    a.set_policy(Box::new(Static::new(0.0)));
    let len = max + 77;
    let got = transfer(a, b, &[pattern(5, len)], &[len], 3);
    assert_eq!(got[0] as usize, len);
    let s = a.stats();
    assert_eq!(s.record_path, 3);
    assert_eq!(s.signals, [3, 4], "the last send used rail 1 alone");
}

/// `count` transfers of 1 to 3 buffers over one rail: every CTS on rail 0,
/// every other one signaled.
pub fn one_rail(a: &mut Comm, b: &mut Comm, count: u64) {
    assert_eq!(a.nrails(), 1);
    for k in 0..count {
        let n = 1 + (k % 3) as usize;
        let data: Vec<Vec<u8>> = (0..n)
            .map(|i| pattern(k * 8 + i as u64, (k as usize * 97 + i * 5) % 5000))
            .collect();
        let posted: Vec<usize> = data.iter().map(|d| d.len() + 1).collect();
        transfer(a, b, &data, &posted, k as u32);
    }
    let s = b.stats();
    assert_eq!(s.cts[1], 0);
    assert_eq!(s.cts[0], count);
    assert_eq!(s.cts_signaled[0], count / 2);
    assert_eq!(a.stats().signals[1], 0);
}

/// The CTS of slot s goes on rail s % 2 and is signaled by slot parity.
pub fn cts_by_parity(a: &mut Comm, b: &mut Comm) {
    for k in 0..10u64 {
        transfer(a, b, &[pattern(k, 300)], &[300], 0);
    }
    let s = b.stats();
    assert_eq!(s.cts, [5, 5]);
    assert_eq!(s.cts_signaled, [5, 5]);
}

/// 16 requests in flight over 3 QPs per rail (a pair with `qps_per_rail` 3
/// and depth 16) all land whole: a request is never striped across QPs. A
/// finished or foreign request is an error, not a hang.
pub fn round_robin_whole_requests(a: &mut Comm, b: &mut Comm) {
    let srcs: Vec<_> = (0..16)
        .map(|k| {
            let buf = a.alloc_buffer(3000).unwrap();
            buf.write(0, &pattern(k, 3000)).unwrap();
            buf
        })
        .collect();
    let dsts: Vec<_> = (0..16).map(|_| b.alloc_buffer(3000).unwrap()).collect();
    let mut rr = Vec::new();
    for d in &dsts {
        rr.push(post_recv(b, a, &[d.all()], 9));
    }
    let mut ss = Vec::new();
    for s in &srcs {
        ss.push(post_send(a, b, &[s.all()], 9));
    }
    for (s, r) in ss.iter().zip(&rr) {
        wait_both(a, s, b, r);
    }
    for (k, d) in dsts.iter().enumerate() {
        assert_eq!(d.to_vec(0, 3000).unwrap(), pattern(k as u64, 3000));
    }
    assert!(matches!(a.test(&ss[0]), Err(Error::UnknownRequest)));
    assert!(matches!(b.test(&rr[0]), Err(Error::UnknownRequest)));
    assert!(
        matches!(a.test(&rr[0]), Err(Error::UnknownRequest)),
        "another comm's handle"
    );
}
