//! WQEs that do not complete: the reasons ([`Fail`]), the retry of a WQE the
//! peer could not take yet (RNR, no answer), the error CQE of a WQE that failed
//! for good, and the QP's move to ERR with every outstanding WQE flushed.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{Qp, RunResult, Stall, Wqe};
use crate::prm::{CqeOpcode, ErrCqe, Syndrome};
use crate::sim::cqe_out::FlushReport;
use crate::sim::exec::Exec;
use crate::sim::registry::{qp_state, QpEntry, NO_RETRY};

/// Why a WQE did not complete.
pub(super) enum Fail {
    /// Error CQE on the requester with this syndrome; `remote_err` moves the
    /// responder QP (by registry slot) to ERR as well.
    Err {
        syndrome: Syndrome,
        vendor: u8,
        remote_err: Option<usize>,
    },
    /// Retry the WQE after `delay_us` (an RNR NAK, or no answer from the peer).
    Retry {
        kind: RetryKind,
        delay_us: u32,
        /// The DCT (by registry slot) that dropped the try because it
        /// carried another key: it counts the try when the try counts.
        key_violation: Option<usize>,
        /// The responder executed the WQE, and only its answer was lost:
        /// its tries from now on are duplicates (`answer`).
        unanswered: Option<Unanswered>,
    },
}

/// A WQE the responder executed whose answer was lost on the way back: what
/// the answer would have told the requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Unanswered {
    /// The requester's CQE byte count.
    pub(super) byte_cnt: u32,
    /// An atomic's old value, which the responder keeps to answer a
    /// duplicate with (0 for other opcodes).
    pub(super) replay: u64,
}

/// What a retried WQE waits for.
#[derive(Clone, Copy)]
pub(super) enum RetryKind {
    /// A receive WQE at the responder (RNR NAK).
    Rnr,
    /// An answer from the responder (transport retry).
    Transport,
}

impl Fail {
    /// A local error: the requester alone goes to ERR.
    pub(super) fn local(syndrome: Syndrome) -> Fail {
        Fail::Err {
            syndrome,
            vendor: 0,
            remote_err: None,
        }
    }

    /// An error the responder detected: both QPs go to ERR.
    pub(super) fn remote(syndrome: Syndrome, vendor: u8, responder_slot: usize) -> Fail {
        Fail::Err {
            syndrome,
            vendor,
            remote_err: Some(responder_slot),
        }
    }

    /// An RNR NAK asking for `delay_us`.
    pub(super) fn rnr(delay_us: u32) -> Fail {
        Fail::Retry {
            kind: RetryKind::Rnr,
            delay_us,
            key_violation: None,
            unanswered: None,
        }
    }

    /// No answer within `timeout_us`.
    pub(super) fn transport(timeout_us: u32) -> Fail {
        Fail::Retry {
            kind: RetryKind::Transport,
            delay_us: timeout_us,
            key_violation: None,
            unanswered: None,
        }
    }

    /// No answer within `timeout_us`, although the responder executed the
    /// WQE (`u`): the answer was lost on the way back.
    pub(super) fn unanswered(timeout_us: u32, u: Unanswered) -> Fail {
        Fail::Retry {
            kind: RetryKind::Transport,
            delay_us: timeout_us,
            key_violation: None,
            unanswered: Some(u),
        }
    }

    /// No answer within `timeout_us`: DCT `dct_slot` dropped the packet for
    /// its key.
    pub(super) fn key_violation(timeout_us: u32, dct_slot: usize) -> Fail {
        Fail::Retry {
            kind: RetryKind::Transport,
            delay_us: timeout_us,
            key_violation: Some(dct_slot),
            unanswered: None,
        }
    }
}

/// Where the retry state of a stalled WQE lives: an RC QP keeps one for the
/// WQE at its SQ head (in its [`QpEntry`]), a DCI one per stream (in its
/// NIC-private stream state, `streams`). The limits (`rnr_retry`,
/// `retry_cnt`, the ACK timeout) are the QP's either way.
pub(super) struct Tries<'a> {
    /// SQ counter of the WQE the tries are for ([`NO_RETRY`]: none).
    pub(super) wqe: &'a AtomicU32,
    /// RNR NAKs it received.
    pub(super) rnr: &'a AtomicU32,
    /// Its transport tries that no acknowledgement answered.
    pub(super) ack: &'a AtomicU32,
    /// The clock (ns) before which it is not tried again.
    pub(super) due_ns: &'a AtomicU64,
    /// Its CQE's byte count + 1 once the responder executed it and only the
    /// answer was lost; 0 until then.
    pub(super) answer_lost: &'a AtomicU32,
    /// What the responder keeps to answer its duplicates (an atomic's old
    /// value).
    pub(super) replay: &'a AtomicU64,
}

impl<'a> Tries<'a> {
    /// The retry state of an RC QP's SQ head.
    #[inline(always)]
    pub(super) fn of_head(e: &'a QpEntry) -> Tries<'a> {
        Tries {
            wqe: &e.retry_wqe,
            rnr: &e.retry_tries,
            ack: &e.ack_tries,
            due_ns: &e.retry_due_ns,
            answer_lost: &e.answer_lost,
            replay: &e.replay,
        }
    }

    /// What the responder answered the WQE at `ci` with, if it executed it
    /// and the answer was lost: its tries are duplicates then.
    #[inline]
    pub(super) fn unanswered(&self, ci: u32) -> Option<Unanswered> {
        let bc = self.answer_lost.load(Ordering::Relaxed);
        (bc != 0 && self.wqe.load(Ordering::Relaxed) == ci).then(|| Unanswered {
            byte_cnt: bc - 1,
            replay: self.replay.load(Ordering::Relaxed),
        })
    }
}

/// Counts a try of the stalled WQE at `ci` (whose retry state is `t`) that
/// the peer could not take. `Ok`: the WQE waits and is tried again after
/// `delay_us`; `Err`: the QP's retry budget is used up, and the WQE fails
/// with that syndrome.
///
/// The two kinds count apart, as a NIC's two retry counters do:
/// - RNR: the NAK comes back at once; after `rnr_retry` retries (7: never)
///   the next NAK fails the WQE.
/// - Transport: silence, known only when the local ACK timer (`delay_us`)
///   expires. The first try and `retry_cnt` retries each wait for it, so the
///   last try still stalls, and the WQE fails when its timer expires
///   ([`last_try_expired`]), `retry_cnt` + 1 timeouts after the first try
///   (IB spec; rxe's `COMPST_ERROR_RETRY` counts the same way).
///
/// A try the responder executed (`unanswered`) is remembered, due or not:
/// the WQE is not executed again.
pub(super) fn retry(
    x: &Exec<'_>,
    qp: &Qp<'_>,
    t: &Tries<'_>,
    ci: u32,
    (kind, delay_us, key_violation, unanswered): (
        RetryKind,
        u32,
        Option<usize>,
        Option<Unanswered>,
    ),
) -> Result<Stall, Syndrome> {
    let e = qp.e;
    let retry_after_us = delay_us;
    let (count, limit, stall) = match kind {
        RetryKind::Rnr => (
            t.rnr,
            e.rnr_retry.load(Ordering::Relaxed),
            Stall::Rnr { retry_after_us },
        ),
        RetryKind::Transport => (
            t.ack,
            e.retry_cnt.load(Ordering::Relaxed),
            Stall::Transport { retry_after_us },
        ),
    };
    // Tries count for the stalled WQE only.
    if t.wqe.load(Ordering::Relaxed) != ci {
        t.wqe.store(ci, Ordering::Relaxed);
        t.rnr.store(0, Ordering::Relaxed);
        t.ack.store(0, Ordering::Relaxed);
        t.answer_lost.store(0, Ordering::Relaxed);
    }
    if let Some(u) = unanswered {
        t.replay.store(u.replay, Ordering::Relaxed);
        t.answer_lost.store(u.byte_cnt + 1, Ordering::Relaxed);
    }
    let tried = t.rnr.load(Ordering::Relaxed) | t.ack.load(Ordering::Relaxed);
    let now_ns = x.clock.ns();
    if tried != 0 && now_ns < t.due_ns.load(Ordering::Relaxed) {
        // Not due yet: this wait is not a try.
        return Ok(stall);
    }
    let tries = count.load(Ordering::Relaxed);
    count.store(tries + 1, Ordering::Relaxed);
    if let Some(slot) = key_violation {
        x.fab.reg().qps[slot]
            .key_violations
            .fetch_add(1, Ordering::Relaxed);
    }
    t.due_ns
        .store(now_ns + u64::from(delay_us) * 1000, Ordering::Relaxed);
    match kind {
        RetryKind::Rnr if limit == 7 || tries < limit => Ok(stall),
        RetryKind::Rnr => Err(Syndrome::RnrRetryExc),
        // The last try (tries == limit) waits for its timer too.
        RetryKind::Transport if tries <= limit => Ok(stall),
        RetryKind::Transport => Err(Syndrome::TransportRetryExc),
    }
}

/// The stalled WQE at `ci` (retry state `t`) after its last transport try,
/// if it has had it: `Ok` (a stall) while that try's ACK timer runs, `Err`
/// with TRANSPORT_RETRY_EXC_ERR once it expired. `None`: the WQE has tries
/// left and runs as usual.
pub(super) fn last_try_expired(
    x: &Exec<'_>,
    qp: &Qp<'_>,
    t: &Tries<'_>,
    ci: u32,
) -> Option<Result<Stall, Syndrome>> {
    let e = qp.e;
    let tries = t.ack.load(Ordering::Relaxed);
    if tries == 0
        || tries <= e.retry_cnt.load(Ordering::Relaxed)
        || t.wqe.load(Ordering::Relaxed) != ci
    {
        return None;
    }
    if x.clock.ns() < t.due_ns.load(Ordering::Relaxed) {
        let retry_after_us = e.timeout_us.load(Ordering::Relaxed);
        return Some(Ok(Stall::Transport { retry_after_us }));
    }
    Some(Err(Syndrome::TransportRetryExc))
}

/// Forgets the tries of a stalled WQE (it completed, or failed for good).
#[inline]
pub(super) fn clear_tries(t: &Tries<'_>) {
    if t.wqe.load(Ordering::Relaxed) != NO_RETRY {
        t.wqe.store(NO_RETRY, Ordering::Relaxed);
        t.rnr.store(0, Ordering::Relaxed);
        t.ack.store(0, Ordering::Relaxed);
        t.answer_lost.store(0, Ordering::Relaxed);
    }
}

/// A WQE that failed for good, what its error CQE reports, and the send queue
/// run it ends.
pub(super) struct Failure<'a> {
    pub(super) wqe: &'a Wqe<'a>,
    pub(super) syndrome: Syndrome,
    pub(super) vendor: u8,
    /// The run's consumer index.
    pub(super) ci: &'a mut u32,
    pub(super) send_cqn: u32,
    pub(super) res: &'a mut RunResult,
    pub(super) report: &'a mut FlushReport,
}

/// Completes a failed WQE with an error CQE, moves its QP (not a DCI: its
/// streams fail alone) to ERR and flushes the rest of its send queue.
pub(super) fn fail(x: &mut Exec<'_>, qp: &Qp<'_>, f: Failure<'_>) {
    let Failure {
        wqe,
        syndrome,
        vendor,
        ci,
        send_cqn,
        res,
        report,
    } = f;
    let c = err_cqe(true, qp.qpn, wqe.idx, wqe.opcode, syndrome, vendor, 0);
    x.push_cqe(send_cqn, &c, report);
    *ci = ci.wrapping_add(wqe.bbs);
    res.executed += 1;
    qp.e.sq_ci.store(*ci, Ordering::Release);
    qp.e.qp_state.store(qp_state::ERR, Ordering::Release);
    res.executed += flush_locked(x, qp, report);
    *ci = qp.e.sq_ci.load(Ordering::Relaxed);
}

/// Moves a QP (possibly another process's) to ERR and flushes its receive
/// queue; its send queue is flushed by its owner's next run.
pub(crate) fn move_to_err(x: &mut Exec<'_>, e: &QpEntry, report: &mut FlushReport) {
    e.qp_state.store(qp_state::ERR, Ordering::Release);
    if let Some(qp) = super::qp_view(x.fab, e) {
        flush_rq(x, &qp, report);
    }
}

/// Flushes (WR_FLUSH_ERR) every posted WQE of the SQ and the RQ of a QP in
/// ERR that is not a DCI (a DCI's WQEs may have completed out of order:
/// `streams::flush_sq`). The caller holds the QP's exec lock.
pub(super) fn flush_locked(x: &mut Exec<'_>, qp: &Qp<'_>, report: &mut FlushReport) -> usize {
    debug_assert!(!qp.dci, "a DCI is flushed by its streams");
    let e = qp.e;
    let pi = qp.sq_posted();
    let mut ci = e.sq_ci.load(Ordering::Relaxed);
    let cqn = e.send_cqn.load(Ordering::Relaxed);
    let mut n = 0;
    while ci as u16 != pi {
        let w = qp.wqe(ci);
        let c = err_cqe(true, qp.qpn, w.idx, w.opcode, Syndrome::WrFlush, 0, 0);
        x.push_cqe(cqn, &c, report);
        ci = ci.wrapping_add(w.bbs);
        n += 1;
    }
    e.sq_ci.store(ci, Ordering::Release);
    n + flush_rq(x, qp, report)
}

/// Flushes posted, unconsumed WQEs of a QP's own RQ (an SRQ is not flushed).
fn flush_rq(x: &mut Exec<'_>, qp: &Qp<'_>, report: &mut FlushReport) -> usize {
    let e = qp.e;
    if qp.rq.is_none() {
        return 0;
    }
    let cqn = e.recv_cqn.load(Ordering::Relaxed);
    let mut n = 0;
    // One WQE at a time, each claimed as the peer's NIC claims a receive
    // (no lock: see `claim_rq_wqe`).
    while let Some(ci) = super::rq::claim_rq_wqe(e, qp.dbrec) {
        let c = err_cqe(false, qp.qpn, ci as u16, 0, Syndrome::WrFlush, 0, 0);
        x.push_cqe(cqn, &c, report);
        n += 1;
    }
    n
}

/// An error CQE: the requester's (`req`) or the responder's.
pub(super) fn err_cqe(
    req: bool,
    qpn: u32,
    wqe_counter: u16,
    wqe_opcode: u8,
    syndrome: Syndrome,
    vendor: u8,
    srqn: u32,
) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut e = ErrCqe::new_unchecked(&mut b[..]);
    e.set_srqn(srqn);
    e.set_syndrome(syndrome as u8);
    e.set_vendor_err_synd(vendor);
    e.set_s_wqe_opcode_qpn(wqe_opcode, qpn);
    e.set_wqe_counter(wqe_counter);
    let op = if req {
        CqeOpcode::ReqErr
    } else {
        CqeOpcode::RespErr
    };
    e.set_op_own((op as u8) << 4);
    b
}
