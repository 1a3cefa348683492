//! WQE tables driven directly: retirement across unsignaled ranges, error
//! completions, stray CQEs, and the 16-bit counter wrap.

mod support;

use mlx5::cq::Completion;
use mlx5::prm::{CqeOpcode, ErrCqe};
use mlx5::wqe_table::{
    OrderedDense, OrderedRecv, OrderedSparse, RecvTable, SendTable, UnorderedRecv,
};
use support::req_cqe;

fn retire<T: SendTable>(t: &mut T, b: &[u8; 64]) -> Vec<(T::Output, bool)> {
    let c = Completion::new(b, &[]);
    let mut v = Vec::new();
    t.retire(&c, |u, c| v.push((u, c.is_some())));
    v
}

#[test]
fn dense_retires_ranges_across_the_16_bit_wrap() {
    let mut t = OrderedDense::<u32>::with_capacity(64);
    // Walk the counter from 0 past 65535 several times with WQEs of 1..=3 BBs;
    // one signaled WQE every 5.
    let mut pi: u16 = 0;
    let mut expect = Vec::new();
    let mut got = Vec::new();
    let mut rng = support::Rng(5);
    for (next_tag, i) in (0..200_000u32).enumerate() {
        let next_tag = next_tag as u32;
        let bbs = 1 + rng.below(3) as u16;
        if !t.has_room(pi, bbs) {
            panic!("table full: signaled WQEs must have freed room");
        }
        let end = pi.wrapping_add(bbs);
        t.record(pi, end, Some(next_tag), i % 5 == 4);
        expect.push(next_tag);
        if i % 5 == 4 {
            got.extend(retire(&mut t, &req_cqe(1, pi)));
            assert_eq!(t.outstanding(), 0);
        }
        pi = end;
    }
    assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), expect);
    // Exactly every 5th was handed out with its CQE.
    assert!(got.iter().enumerate().all(|(i, x)| x.1 == (i % 5 == 4)));
}

#[test]
fn dense_skips_padding_and_ignores_stray_counters() {
    let mut t = OrderedDense::<char>::with_capacity(16);
    t.record(0, 2, Some('a'), false);
    t.record(2, 4, None, false); // NOP padding
    t.record(4, 5, Some('b'), true);
    // A CQE naming a counter that is not the start of an outstanding WQE.
    assert!(retire(&mut t, &req_cqe(1, 1)).is_empty());
    assert!(retire(&mut t, &req_cqe(1, 9)).is_empty());
    assert_eq!(t.outstanding(), 5);
    assert_eq!(
        retire(&mut t, &req_cqe(1, 4)),
        vec![('a', false), ('b', true)]
    );
    assert_eq!(t.outstanding(), 0);
    // Already retired.
    assert!(retire(&mut t, &req_cqe(1, 4)).is_empty());
}

#[test]
fn sparse_hands_out_only_signaled_data_but_frees_everything() {
    let mut t = OrderedSparse::<u8>::with_capacity(8);
    let mut pi = 65530u16;
    // Start near the wrap: counters 65530.. through 0.
    let mut t2 = OrderedSparse::<u8>::with_capacity(8);
    for (i, sig) in [false, false, true, false, true].into_iter().enumerate() {
        assert!(t2.has_room(pi.wrapping_sub(65530), 1));
        t.record(pi, pi.wrapping_add(1), Some(sig.then_some(i as u8)), sig);
        t2.record(pi.wrapping_sub(65530), pi.wrapping_sub(65529), None, false);
        pi = pi.wrapping_add(1);
    }
    assert!(OrderedSparse::<u8>::wants_signal(&Some(1)));
    assert!(!OrderedSparse::<u8>::wants_signal(&None));
    assert_eq!(retire(&mut t, &req_cqe(1, 65532)), vec![(2, true)]);
    assert_eq!(t.outstanding(), 2);
    assert_eq!(retire(&mut t, &req_cqe(1, 65534)), vec![(4, true)]);
    assert_eq!(t.outstanding(), 0);
}

#[test]
fn error_completion_retires_like_a_normal_one() {
    let mut t = OrderedDense::<u32>::with_capacity(8);
    t.record(0, 1, Some(10), false);
    t.record(1, 2, Some(11), true);
    let mut b = [0u8; 64];
    let mut e = ErrCqe::new_unchecked(&mut b[..]);
    e.set_syndrome(0x13);
    e.set_s_wqe_opcode_qpn(9, 1);
    e.set_wqe_counter(1);
    e.set_op_own((CqeOpcode::ReqErr as u8) << 4);
    let c = Completion::new(&b, &[]);
    let mut seen = Vec::new();
    t.retire(&c, |u, c| seen.push((u, c.map(|c| c.syndrome_raw()))));
    assert_eq!(seen, vec![(10, None), (11, Some(Some(0x13)))]);
}

#[test]
fn ordered_recv_counts_exactly() {
    let mut t = OrderedRecv::<u32>::with_capacity(4);
    for i in 0..4 {
        assert!(t.is_free(i));
        t.insert(i, u32::from(i) * 10);
    }
    assert_eq!(t.free(), 0);
    assert!(!t.is_free(4), "index 4 is slot 0");
    assert_eq!(t.take(1), Some(10));
    assert_eq!(t.take(1), None);
    assert_eq!(t.free(), 1);
    assert_eq!(t.outstanding(), 3);
}

#[test]
fn unordered_recv_generation_tags() {
    let mut t = UnorderedRecv::<u32>::with_capacity(4);
    t.insert(2, 1);
    let first = t.ticket(2);
    assert!(t.is_pending(first));
    assert_eq!(t.take(2), Some(1));
    assert!(!t.is_pending(first));
    t.insert(2, 2);
    let second = t.ticket(2);
    assert!(t.is_pending(second));
    assert!(
        !t.is_pending(first),
        "a reused slot does not revive the old ticket"
    );
}
