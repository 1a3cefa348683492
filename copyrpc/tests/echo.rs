//! Echo through the public API, every byte verified, in inline and deferred
//! mode; wrap across ring and message sizes; out-of-order replies.

#[macro_use]
mod support;

use copyrpc::transport::Transport;
use copyrpc::{CallError, ContextBuilder};
use mlx5::device::{ExecMode, FaultPlan};
use support::*;

fn modes() -> [(&'static str, ExecMode); 2] {
    [
        ("i", ExecMode::Inline),
        (
            "d",
            ExecMode::Deferred {
                seed: 5,
                faults: FaultPlan::default(),
            },
        ),
    ]
}

fn echo_every_byte_verified_on<T: Transport>() {
    for (m, mode) in modes() {
        let mut w = world_t::<T>(
            &format!("echo-{m}"),
            mode,
            ContextBuilder::new().ring_size(1 << 16),
            1,
        );
        echo_run(&mut w, 3000, |i| (i as usize * 97) % 1500);
        let st = w.client.stats(w.pairs[0].0);
        assert_eq!(st.calls, 3000);
        assert_eq!(st.responses, 3000);
        assert!(
            st.batches < 3000,
            "calls were batched ({} batches)",
            st.batches
        );
    }
}
on_rc_and_dc!(
    echo_every_byte_verified_on,
    echo_every_byte_verified,
    echo_every_byte_verified_over_dc
);

fn wrap_across_ring_and_message_sizes_on<T: Transport>() {
    // Property: for every ring size and message-size distribution, every echo
    // comes back intact, and the ring wrapped.
    let mut rng = Rng(0xfeed);
    for ring in [256u64, 512, 1024, 4096, 16384] {
        for max_len in [0usize, 8, 20, 21, 52, 53, 100] {
            // The largest message and allowance the ring admits: C/4 - 44 bytes.
            let max_len = max_len.min((ring / 4 - 44) as usize);
            let tag = format!("wrap-{ring}-{max_len}");
            let mut w = world_t::<T>(
                &tag,
                ExecMode::Inline,
                ContextBuilder::new().ring_size(ring),
                1,
            );
            let seed = rng.next();
            let sizes =
                move |i: u64| ((seed ^ i.wrapping_mul(0x9e37)) % (max_len as u64 + 1)) as usize;
            // Enough traffic to go around the ring several times.
            echo_run(&mut w, 400.max(3 * ring / 32), sizes);
            let st = w.client.stats(w.pairs[0].0);
            assert!(st.wraps > 0, "{tag}: the ring wrapped");
        }
    }
}
on_rc_and_dc!(
    wrap_across_ring_and_message_sizes_on,
    wrap_across_ring_and_message_sizes,
    wrap_across_ring_and_message_sizes_over_dc
);

fn out_of_order_replies_on<T: Transport>() {
    for (m, mode) in modes() {
        let mut w = world_t::<T>(
            &format!("ooo-{m}"),
            mode,
            ContextBuilder::new().ring_size(1 << 14),
            1,
        );
        out_of_order(&mut w);
    }
}
on_rc_and_dc!(
    out_of_order_replies_on,
    out_of_order_replies,
    out_of_order_replies_over_dc
);

fn request_data_is_released_by_the_next_poll_on<T: Transport>() {
    let mut w = world_t::<T>(
        "epoch",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(4096),
        1,
    );
    let (c, _) = w.pairs[0];
    w.client.call(c, b"abc", 8, 1).unwrap();
    w.client.poll();
    w.server.poll();
    let h = w.server.recv().unwrap();
    assert_eq!(w.server.request(&h), Some(&b"abc"[..]));
    w.server.poll();
    assert_eq!(w.server.request(&h), None, "stale after the next poll");
    // Replying is still fine.
    w.server.reply(h, b"ok").unwrap();
    w.until_responses(1, 100);
}
on_rc_and_dc!(
    request_data_is_released_by_the_next_poll_on,
    request_data_is_released_by_the_next_poll,
    request_data_is_released_by_the_next_poll_over_dc
);

fn limits_are_clear_errors_on<T: Transport>() {
    let mut w = world_t::<T>(
        "limits",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(4096),
        1,
    );
    let (c, _) = w.pairs[0];
    match w.client.call(c, &[0; 4096], 8, 7) {
        Err(CallError::TooLarge(u, _)) => assert_eq!(u, 7),
        other => panic!("{other:?}"),
    }
    match w.client.call(c, b"x", 100_000, 8) {
        Err(CallError::TooLarge(u, _)) => assert_eq!(u, 8),
        other => panic!("{other:?}"),
    }
    // A reply larger than the caller allowed.
    w.client.call(c, b"x", 10, 9).unwrap();
    w.client.poll();
    w.server.poll();
    let h = w.server.recv().unwrap();
    assert!(h.max_response() >= 10);
    let too_big = vec![0; h.max_response() + 1];
    assert!(w.server.reply(h, &too_big).is_err());
}
on_rc_and_dc!(
    limits_are_clear_errors_on,
    limits_are_clear_errors,
    limits_are_clear_errors_over_dc
);

#[test]
fn huge_pages_on_the_software_device_allocate_as_usual() {
    // The setting is accepted end to end; the software device has no huge
    // pages, so the rings are ordinary ones and the echo is the usual one.
    let b = ContextBuilder::new().ring_size(1 << 14).huge_pages(true);
    let mut w = world("huge", ExecMode::Inline, b, 2);
    echo_run(&mut w, 500, |i| (i as usize * 31) % 1000);
    assert_eq!(w.client.stats(w.pairs[0].0).responses, 500);
    assert_eq!(w.client.endpoints(), 2);
    assert_eq!(w.client.huge_page_rings(), 0);
    assert_eq!(w.server.huge_page_rings(), 0);
}

#[test]
fn requests_carry_their_endpoints_tag() {
    // Two endpoints, one tagged: each request says which it came on
    // without a look-up, and an untagged endpoint's tag is 0.
    let mut w = world(
        "tag",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(4096),
        2,
    );
    let ((c0, s0), (c1, _)) = (w.pairs[0], w.pairs[1]);
    assert!(w.server.set_tag(s0, 7));
    w.client.call(c0, b"a", 8, 1).unwrap();
    w.client.call(c1, b"b", 8, 2).unwrap();
    w.client.poll();
    w.server.poll();
    let mut tags = Vec::new();
    while let Some(h) = w.server.recv() {
        tags.push((w.server.request(&h).unwrap().to_vec(), h.tag()));
        w.server.reply(h, b"ok").unwrap();
    }
    tags.sort();
    assert_eq!(tags, [(b"a".to_vec(), 7), (b"b".to_vec(), 0)]);
    w.until_responses(2, 100);
    // A removed endpoint's id is unknown.
    w.server.remove(s0);
    assert!(!w.server.set_tag(s0, 1));
}
