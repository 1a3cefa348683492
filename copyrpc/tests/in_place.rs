//! Answers written where they are sent from (`reply_with`) and read where
//! they arrive (`poll_with`, `wait_with`), across ring wraps: every byte
//! checked, nothing delivered to the context's own callback.

#[macro_use]
mod support;

use copyrpc::transport::Transport;
use std::time::Duration;

use copyrpc::{ContextBuilder, ReplyError};
use mlx5::device::ExecMode;
use support::*;

fn replies_written_in_place_arrive_in_place_on<T: Transport>() {
    let mut w = world_t::<T>(
        "in-place",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(4096),
        1,
    );
    let (c, _) = w.pairs[0];
    let count = 600u64;
    let size = |i: u64| (i as usize * 13) % 900;
    let (mut sent, mut got) = (0u64, vec![false; count as usize]);
    let mut steps = 0;
    while got.iter().any(|g| !g) {
        while sent < count {
            match w.client.call(c, &sent.to_le_bytes(), size(sent), sent) {
                Ok(()) => sent += 1,
                Err(e) if e.is_retryable() => break,
                Err(e) => panic!("call {sent}: {e}"),
            }
        }
        // Responses go to the given callback, borrowed from the ring.
        let mut seen = |tag: u64, r: Result<&[u8], copyrpc::CallFailed>| {
            let b = r.expect("no failures");
            assert_eq!(b, &payload(tag ^ 0xff, size(tag))[..], "call {tag}");
            assert!(!got[tag as usize], "call {tag} answered twice");
            got[tag as usize] = true;
        };
        if steps % 2 == 0 {
            w.client.poll_with(&mut seen);
        } else {
            w.client.wait_with(Duration::ZERO, &mut seen).expect("wait");
        }
        w.server.poll();
        while let Some(h) = w.server.recv() {
            // The request is its call's number.
            let tag = u64::from_le_bytes(w.server.request(&h).unwrap()[..8].try_into().unwrap());
            let want = payload(tag ^ 0xff, size(tag));
            // The server writes the answer into its send ring.
            w.server
                .reply_with(h, want.len(), |out| out.copy_from_slice(&want))
                .unwrap();
        }
        steps += 1;
        assert!(steps < 100_000, "stuck");
    }
    assert!(
        w.log.borrow().is_empty(),
        "the context's own callback saw nothing"
    );
    assert!(w.client.stats(c).wraps > 0, "the ring wrapped");
}
on_rc_and_dc!(
    replies_written_in_place_arrive_in_place_on,
    replies_written_in_place_arrive_in_place,
    replies_written_in_place_arrive_in_place_over_dc
);

fn an_answer_longer_than_its_allowance_is_refused_unwritten_on<T: Transport>() {
    let mut w = world_t::<T>(
        "in-place-long",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(4096),
        1,
    );
    let (c, _) = w.pairs[0];
    w.client.call(c, b"x", 16, 1).unwrap();
    w.client.poll();
    w.server.poll();
    let h = w.server.recv().expect("the request");
    let mut filled = false;
    let r = w.server.reply_with(h, 4000, |_| filled = true);
    assert!(
        matches!(r, Err(ReplyError::TooLarge { len: 4000, .. })),
        "{r:?}"
    );
    assert!(!filled, "nothing written for a refused reply");
}
on_rc_and_dc!(
    an_answer_longer_than_its_allowance_is_refused_unwritten_on,
    an_answer_longer_than_its_allowance_is_refused_unwritten,
    an_answer_longer_than_its_allowance_is_refused_unwritten_over_dc
);
