//! Test hooks (the `test-hooks` feature): what the crate's own tests reach
//! into the fabric for, and nothing a user of the device needs.

use std::sync::atomic::Ordering;

use super::SimContext;
use crate::sim::registry::{self, LIVE, MAX_CQS};

/// Device-wide counters for tests: live QPs of this process in the fabric.
pub fn live_qps(ctx: &SimContext) -> usize {
    let me = ctx.d.fab.token();
    ctx.d
        .fab
        .reg()
        .qps
        .iter()
        .filter(|e| {
            e.state.load(Ordering::Acquire) == LIVE && e.owner.load(Ordering::Relaxed) == me
        })
        .count()
}

/// Test support: takes the shared lock of CQ `cqn` (any process's CQ of the
/// fabric) as this process's NIC takes it to write CQEs, and never releases
/// it, as a process killed in the middle of writing a CQE leaves it. Tests of
/// the takeover by a survivor call it and then let the process die. False if
/// the fabric has no such CQ.
pub fn hold_cq_lock_forever(ctx: &SimContext, cqn: u32) -> bool {
    let fab = &ctx.d.fab;
    let e = &fab.reg().cqs[registry::slot_of(cqn, MAX_CQS)];
    if e.state.load(Ordering::Acquire) != LIVE || e.cqn.load(Ordering::Relaxed) != cqn {
        return false;
    }
    std::mem::forget(e.lock.lock(fab.member()));
    true
}

/// Test support: the next arm of a CQ ([`CqRing::arm`](crate::cq::CqRing::arm))
/// in this process stops the process (`SIGSTOP` to itself) halfway through,
/// as a `SIGSTOP` from outside may land there, until another process sends
/// `SIGCONT`. Tests of a consumer paused in its consumer path call it.
pub fn stop_in_next_arm() {
    crate::sim::cqe_out::stop_in_next_arm();
}
