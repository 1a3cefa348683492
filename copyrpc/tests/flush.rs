//! `Context::flush`: one endpoint's messages sent before the others', which
//! wait for the next poll; `Context::flush_unheld`: the endpoints no held
//! reply holds back.

#[macro_use]
mod support;

use copyrpc::transport::Transport;
use copyrpc::ContextBuilder;
use mlx5::device::ExecMode;
use support::*;

/// Responses the client has, by user data, sorted.
fn answered<T: Transport>(w: &World<T>) -> Vec<u64> {
    let mut v: Vec<u64> = w.log.borrow().iter().map(|(u, _)| *u).collect();
    v.sort_unstable();
    v
}

fn flush_sends_one_endpoint_and_the_poll_the_rest_on<T: Transport>() {
    let mut w = world_t::<T>(
        "flush",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(1 << 14),
        2,
    );
    let ((c0, s0), (c1, s1)) = (w.pairs[0], w.pairs[1]);
    // Nothing written: nothing waits.
    assert!(w.server.flush(s0));
    // A call on each endpoint; the server takes both.
    w.client.call(c0, b"zero", 16, 0).unwrap();
    w.client.call(c1, b"one", 16, 1).unwrap();
    w.client.poll();
    w.server.poll();
    let mut reqs = Vec::new();
    while let Some(h) = w.server.recv() {
        reqs.push(h);
    }
    assert_eq!(reqs.len(), 2);
    for h in reqs {
        let d = transform(w.server.request(&h).unwrap());
        w.server.reply(h, &d).unwrap();
    }
    // Only endpoint 1's reply leaves with its flush.
    assert!(w.server.flush(s1));
    for _ in 0..4 {
        w.client.poll();
    }
    assert_eq!(answered(&w), [1]);
    assert_eq!(w.log.borrow()[0].1.as_deref().unwrap(), b"pof");
    // The server's next poll sends endpoint 0's; endpoint 1 has nothing
    // more to send.
    w.server.poll();
    for _ in 0..4 {
        w.client.poll();
    }
    assert_eq!(answered(&w), [0, 1]);
    assert_eq!(w.server.stats(s1).batches, 1);
    // Calls are flushed too, and an endpoint that is not open says so.
    w.client.call(c0, b"again", 16, 2).unwrap();
    assert!(w.client.flush(c0));
    w.server.poll();
    assert!(w.server.recv().is_some());
    check(&w);
    w.client.close(c1);
    assert!(!w.client.flush(c1));
}
on_rc_and_dc!(
    flush_sends_one_endpoint_and_the_poll_the_rest_on,
    flush_sends_one_endpoint_and_the_poll_the_rest,
    flush_sends_one_endpoint_and_the_poll_the_rest_over_dc
);

/// Three endpoints, a call on each, answered while the server holds
/// replies: endpoint 0's held, endpoint 1's early, endpoint 2's held then
/// early.
fn flush_unheld_leaves_the_held_endpoints_to_the_poll_on<T: Transport>() {
    let mut w = world_t::<T>(
        "flush-unheld",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(1 << 14),
        3,
    );
    let (c, s): (Vec<_>, Vec<_>) = w.pairs.iter().copied().unzip();
    for (u, &ep) in c.iter().enumerate() {
        w.client.call(ep, b"ask", 16, u as u64).unwrap();
        w.client.call(ep, b"ask", 16, 10 + u as u64).unwrap();
    }
    w.client.poll();
    w.server.poll();
    let mut reqs = Vec::new();
    while let Some(h) = w.server.recv() {
        reqs.push(h);
    }
    assert_eq!(reqs.len(), 6);
    w.server.set_hold_replies(true);
    for h in reqs {
        let ep = s.iter().position(|&e| e == h.endpoint()).unwrap();
        let first = w.server.stats(s[ep]).replies == 0;
        match (ep, first) {
            (0, _) | (2, true) => w.server.reply(h, b"held").unwrap(),
            // An early reply behind a held one waits with it.
            _ => w.server.reply_early(h, b"early").unwrap(),
        }
    }
    w.server.flush_unheld();
    for _ in 0..4 {
        w.client.poll();
    }
    assert_eq!(answered(&w), [1, 11]);
    // The poll sends the held ones; after it nothing is held.
    w.server.poll();
    for _ in 0..4 {
        w.client.poll();
    }
    assert_eq!(answered(&w), [0, 1, 2, 10, 11, 12]);
    w.client.call(c[0], b"again", 16, 20).unwrap();
    w.client.poll();
    w.server.poll();
    let h = w.server.recv().unwrap();
    w.server.set_hold_replies(false);
    w.server.reply(h, b"free").unwrap();
    w.server.flush_unheld();
    for _ in 0..4 {
        w.client.poll();
    }
    assert_eq!(answered(&w).len(), 7);
    check(&w);
}
on_rc_and_dc!(
    flush_unheld_leaves_the_held_endpoints_to_the_poll_on,
    flush_unheld_leaves_the_held_endpoints_to_the_poll,
    flush_unheld_leaves_the_held_endpoints_to_the_poll_over_dc
);
