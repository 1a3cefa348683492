//! Endpoint removal: slots are reused under new ids, stale ids and handles are
//! refused, pending calls fail, and the peer of a removed endpoint sees it close
//! while the other endpoints carry on.

#[macro_use]
mod support;

use copyrpc::transport::Transport;
use copyrpc::{CallError, ContextBuilder};
use mlx5::device::ExecMode;
use support::*;

/// Connect, call, remove — more times than the endpoint table holds.
fn churn_reuses_slots_under_new_ids_on<T: Transport>() {
    let mut w = world_t::<T>(
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
on_rc_and_dc!(
    churn_reuses_slots_under_new_ids_on,
    churn_reuses_slots_under_new_ids,
    churn_reuses_slots_under_new_ids_over_dc
);

/// Removing an endpoint with calls in flight fails them through the callback;
/// a handle of a removed endpoint cannot be answered; the peer's endpoint
/// closes and a neighbouring pair is not disturbed.
fn remove_with_work_in_flight_on<T: Transport>() {
    let mut w = world_t::<T>("inflight", ExecMode::Inline, ContextBuilder::new(), 2);
    remove_in_flight(&mut w);
}
on_rc_and_dc!(
    remove_with_work_in_flight_on,
    remove_with_work_in_flight,
    remove_with_work_in_flight_over_dc
);
