//! A QP's own receive queue, claimed one WQE at a time by the NICs that
//! take from it: the peer's, which delivers a SEND or a WRITE with
//! immediate into it, and the owner's, which flushes it when the QP goes
//! to ERR. No lock: a process stopped in either must not hold up the other.

use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use crate::doorbell::load_dbrec;
use crate::prm::RCV_DBR;
use crate::sim::registry::QpEntry;

/// Claims the next posted WQE of QP `r`'s own RQ, whose doorbell record is
/// `db`: its counter, or `None` if software has posted no more.
///
/// A compare-exchange on `rq_ci` and no lock: the peer's NIC takes receives
/// while the QP's owner may flush them (a verb that moves the QP to ERR, a
/// receive posted to a QP in ERR), and a process stopped in the middle of
/// either must not hold up the other, as a NIC's RQ does not wait for its
/// host's CPU. Each WQE is claimed by exactly one of them.
pub(super) fn claim_rq_wqe(r: &QpEntry, db: NonNull<u8>) -> Option<u32> {
    loop {
        // Acquire: pairs with the Release exchange of the last claim, so
        // the doorbell record read next is no older than the one that claim
        // checked against: a counter `ci` read here is never past `posted`.
        let ci = r.rq_ci.load(Ordering::Acquire);
        // SAFETY: the QP doorbell record (an Acquire load: the WQEs software
        // posted before writing it are seen).
        let posted = unsafe { load_dbrec(db, RCV_DBR) } as u16;
        if ci as u16 == posted {
            return None;
        }
        // Release: see the load above. Relaxed on failure: the loop loads
        // again.
        if r.rq_ci
            .compare_exchange_weak(ci, ci.wrapping_add(1), Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return Some(ci);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::NonNull;
    use std::sync::Barrier;

    use super::super::{qp_by_num, qp_view};
    use super::claim_rq_wqe;
    use crate::doorbell::store_dbrec;
    use crate::prm::RCV_DBR;
    use crate::sim::device::SimContext;
    use crate::sim::fabric::Fabric;
    use crate::types::{CqAttr, ExecMode, QpCaps};

    /// Two NICs that claim receives of one RQ at once (the peer's taking
    /// them, the owner's flushing them) claim each posted WQE exactly once,
    /// and none that was not posted, across the 16-bit wrap of the
    /// doorbell record's counter.
    #[test]
    fn racing_claims_take_each_posted_receive_once() {
        const ROUNDS: u32 = 300;
        const PER_ROUND: u32 = 1000;
        let fabric = format!("rqclaim-{}", std::process::id());
        let ctx = SimContext::open_in_mode(&fabric, "sim0", ExecMode::Inline).unwrap();
        let pd = ctx.alloc_pd();
        let cq = ctx.create_cq(&CqAttr::default()).unwrap();
        let caps = QpCaps {
            rq_wqe_cnt: 1024,
            ..QpCaps::default()
        };
        let qp = ctx.create_qp(&pd, &cq, &cq, None, &caps).unwrap();
        let fab = ctx.fabric();
        let (_, e) = qp_by_num(fab, qp.qpn()).unwrap();
        let db = qp_view(fab, e).unwrap().dbrec;
        // A raw pointer is not Send: the other thread gets the address.
        let at = db.as_ptr() as usize;
        let start = Barrier::new(2);
        let claims = |db: NonNull<u8>| {
            let mut got = Vec::new();
            for _ in 0..ROUNDS {
                start.wait();
                while let Some(ci) = claim_rq_wqe(e, db) {
                    got.push(ci);
                }
                start.wait();
            }
            got
        };
        let (mut all, theirs) = std::thread::scope(|s| {
            let other = s.spawn(|| claims(NonNull::new(at as *mut u8).unwrap()));
            let mut mine = Vec::new();
            for round in 1..=ROUNDS {
                // Software posts a round's receives (only the counter
                // matters to a claim), then both NICs race for them.
                // SAFETY: the QP's doorbell record, valid while `qp` lives.
                unsafe { store_dbrec(db, RCV_DBR, (round * PER_ROUND) & 0xffff) };
                start.wait();
                while let Some(ci) = claim_rq_wqe(e, db) {
                    mine.push(ci);
                }
                start.wait();
            }
            (mine, other.join().unwrap())
        });
        all.extend(theirs);
        all.sort_unstable();
        assert_eq!(all, (0..ROUNDS * PER_ROUND).collect::<Vec<_>>());
        drop((qp, cq, pd, ctx));
        Fabric::remove_if_unused(&fabric);
    }
}
