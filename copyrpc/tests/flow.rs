//! Flow control: the invariant and credits under random interleavings with both
//! sides calling each other; the READ fallback; many endpoints.

#[macro_use]
mod support;

use copyrpc::transport::Transport;
use copyrpc::ContextBuilder;
use mlx5::device::ExecMode;
use support::*;

/// Property: over random interleavings of call / reply / poll on both sides
/// (each side both a client and a server), stepped in one thread, the invariant
/// holds after every step, credits never go negative (u64 arithmetic would
/// panic in debug builds), and every call is answered exactly once with the
/// right bytes.
fn random_interleavings_keep_the_invariant_on<T: Transport>() {
    for seed in 1..=40u64 {
        let ring = [256u64, 1024, 4096][(seed % 3) as usize];
        let mut w = world_t::<T>(
            &format!("prop-{seed}"),
            ExecMode::Inline,
            ContextBuilder::new().ring_size(ring),
            1,
        );
        interleave(&mut w, seed, ring, 300);
    }
}
on_rc_and_dc!(
    random_interleavings_keep_the_invariant_on,
    random_interleavings_keep_the_invariant,
    random_interleavings_keep_the_invariant_over_dc
);

fn read_fallback_refreshes_a_stale_consumer_position_on<T: Transport>() {
    // The server consumes requests but sends nothing (it holds its replies), so
    // no batch carries its consumer position back: the client must READ it.
    let mut w = world_t::<T>(
        "read",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(16384),
        1,
    );
    read_fallback(&mut w);
}
on_rc_and_dc!(
    read_fallback_refreshes_a_stale_consumer_position_on,
    read_fallback_refreshes_a_stale_consumer_position,
    read_fallback_refreshes_a_stale_consumer_position_over_dc
);

fn a_thousand_endpoints_on_one_context_on<T: Transport>() {
    let b = ContextBuilder::new()
        .ring_size(1024)
        .sq_size(16)
        .cq_size(8192)
        .srq_size(2048);
    let mut w = world_t::<T>("1024", ExecMode::Inline, b, 1024);
    for (k, &(c, _)) in w.pairs.iter().enumerate() {
        for j in 0..2u64 {
            let tag = (k as u64) << 8 | j;
            w.client.call(c, &payload(tag, 40), 40, tag).unwrap();
        }
    }
    w.until_responses(2048, 10_000);
    let log = w.log.borrow();
    let mut seen = std::collections::HashSet::new();
    for (t, r) in log.iter() {
        assert!(seen.insert(*t));
        assert_eq!(r.as_ref().unwrap(), &transform(&payload(*t, 40)));
    }
    for &(c, _) in &w.pairs {
        assert_eq!(w.client.stats(c).responses, 2);
    }
}
on_rc_and_dc!(
    a_thousand_endpoints_on_one_context_on,
    a_thousand_endpoints_on_one_context,
    a_thousand_endpoints_on_one_context_over_dc
);
