//! Endpoint removal: slots are reused under new ids, stale ids and handles are
//! refused, pending calls fail, and the peer of a removed endpoint sees it close
//! while the other endpoints carry on.

mod support;

use copyrpc::{CallError, CallFailed, CloseReason, ContextBuilder, ReplyError};
use mlx5::device::ExecMode;
use support::*;

/// Connect, call, remove — more times than the endpoint table holds.
#[test]
fn churn_reuses_slots_under_new_ids() {
    let mut w = world(
        "churn",
        ExecMode::Inline,
        ContextBuilder::new().max_endpoints(4).ring_size(1024),
        0,
    );
    let mut seen_ids = std::collections::HashSet::new();
    let mut answered = 0;
    for round in 0..20u64 {
        let (c, ci) = w.client.create_endpoint().unwrap();
        let (s, si) = w.server.create_endpoint().unwrap();
        w.client.connect(c, &si).unwrap();
        w.server.connect(s, &ci).unwrap();
        assert!(seen_ids.insert(c), "id {c:?} handed out twice");
        assert!(c.index() < 4);
        w.client.call(c, &payload(round, 32), 32, round).unwrap();
        answered += 1;
        w.until_responses(answered, 1000);
        let log = w.log.borrow();
        let (u, r) = log.last().unwrap();
        assert_eq!(*u, round);
        assert_eq!(r.as_ref().unwrap(), &transform(&payload(round, 32)));
        drop(log);
        assert!(w.client.remove(c));
        assert!(w.server.remove(s));
        // A stale id is refused everywhere.
        assert!(!w.client.remove(c));
        assert!(matches!(
            w.client.call(c, b"x", 8, 99),
            Err(CallError::NoEndpoint(99))
        ));
        assert!(w.client.flow_state(c).is_none());
        assert_eq!(w.client.endpoints(), 0);
    }
}

/// Removing an endpoint with calls in flight fails them through the callback;
/// a handle of a removed endpoint cannot be answered; the peer's endpoint
/// closes and a neighbouring pair is not disturbed.
#[test]
fn remove_with_work_in_flight() {
    let mut w = world("inflight", ExecMode::Inline, ContextBuilder::new(), 2);
    let (c0, s0) = w.pairs[0];
    let (c1, s1) = w.pairs[1];
    // Server-side handle taken, then the server removes the endpoint.
    w.client.call(c0, &payload(1, 64), 64, 1).unwrap();
    w.client.poll();
    w.server.poll();
    let h = w.server.recv().expect("request delivered");
    assert_eq!(h.endpoint(), s0);
    assert!(w.server.remove(s0));
    assert!(w.server.request(&h).is_none());
    assert!(matches!(
        w.server.reply(h, b"late"),
        Err(ReplyError::Closed(CloseReason::Local))
    ));
    // A new endpoint takes the slot; the stale id does not reach it.
    let (s_new, _) = w.server.create_endpoint().unwrap();
    assert_eq!(s_new.index(), s0.index());
    assert_ne!(s_new, s0);
    assert!(w.server.flow_state(s0).is_none());
    assert!(w.server.flow_state(s_new).is_some());

    // The client's call on the removed pair fails once its QP gives up on the
    // silent peer (transport retries: ACK timeout 14 × 7 retries, about half
    // a second); calls on the other pair keep working meanwhile.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut k = 0u64;
    let _ = w.client.call(c0, b"more", 8, 100);
    while w.client.closed(c0).is_none() && std::time::Instant::now() < deadline {
        w.client.call(c1, &payload(k, 16), 16, 1000 + k).unwrap();
        while !w.log.borrow().iter().any(|(u, _)| *u == 1000 + k) {
            w.step();
        }
        k += 1;
    }
    assert!(
        w.client.closed(c0).is_some(),
        "the peer of a removed endpoint must close"
    );
    let log = w.log.borrow();
    let call1 = log.iter().find(|(u, _)| *u == 1).expect("call 1 finished");
    assert!(matches!(call1.1, Err(CallFailed(_))));
    for (u, r) in log.iter().filter(|(u, _)| *u >= 1000) {
        assert_eq!(r.as_ref().unwrap(), &transform(&payload(u - 1000, 16)));
    }
    assert!(w.server.closed(s1).is_none());
    drop(log);

    // Client removes its side with the call still pending: it fails locally.
    let (c2, c2i) = w.client.create_endpoint().unwrap();
    let (s2, s2i) = w.server.create_endpoint().unwrap();
    w.client.connect(c2, &s2i).unwrap();
    w.server.connect(s2, &c2i).unwrap();
    w.client.call(c2, b"pending", 8, 7).unwrap();
    assert!(w.client.remove(c2));
    let log = w.log.borrow();
    let r = &log.iter().find(|(u, _)| *u == 7).unwrap().1;
    assert_eq!(r, &Err(CallFailed(CloseReason::Local)));
}
