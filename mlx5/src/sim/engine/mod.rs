//! The simulated NIC's execution: after a doorbell, read WQEs from SQ memory as
//! hardware would (up to the doorbell record's counter), check them with verbs
//! semantics (keys, bounds, access rights, PDs, QP states), move the bytes, and
//! write CQEs.
//!
//! All state the execution touches lives in the fabric's shared memory, so the
//! process that rings a doorbell executes its own QP's work against a peer in
//! another process. Everything else a run needs — clock, armed faults, the CQE
//! batch — comes in its [`Exec`].
//!
//! | module | holds |
//! |---|---|
//! | this one | the run of a send queue, QP views, the entry points |
//! | `requester` | each opcode's execution on the requester's side |
//! | `responder` | reaching the peer QP, taking its receive WQEs, its CQEs |
//! | `errors` | failed WQEs, retries (RNR, transport), flushes, ERR |
//! | `answer` | answers lost on the way back (a path cut one way) |
//! | `memory` | keys resolved to memory, scatter/gather lists, copies |
//! | `fast_path` | WRITE / WRITE_IMM with one gather entry, the common case |

mod answer;
mod errors;
mod fast_path;
mod memory;
mod requester;
mod responder;
mod reveal;
mod rq;
mod streams;
mod tm;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use super::cqe_out::FlushReport;
use super::exec::Exec;
use super::fabric::{in_segment, Fabric};
use super::registry::{qp_kind, qp_state, slot_of, QpEntry, LIVE, MAX_CQS, MAX_DEVS, MAX_QPS};
use crate::doorbell::load_dbrec;
use crate::prm::{
    ctrl_flags, Cqe64, CqeOpcode, CtrlSeg, DatagramSeg, Syndrome, WqeOpcode, SND_DBR, WQE_SEG_UNIT,
};
use errors::{Fail, Failure, Tries, Unanswered};

pub(crate) use errors::move_to_err;
pub(crate) use streams::{
    init as init_dci_streams, reset_stream as reset_dci_stream, state_len as dci_state_len,
    ResetError as StreamResetError, STATE_AFTER_DBREC as DCI_STATE_AFTER_DBREC,
};

/// The result of running a QP's send queue.
#[derive(Debug, Default)]
pub(crate) struct RunResult {
    /// WQEs executed (completed, failed or flushed).
    pub(crate) executed: usize,
    /// Work is waiting on a receive WQE at the peer (RNR) or on an unreachable
    /// peer (transport retry).
    pub(crate) stalled: Option<Stall>,
}

/// Why a send queue stopped with work left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    /// The peer had no receive WQE.
    Rnr {
        /// The delay the responder asked for.
        retry_after_us: u32,
    },
    /// The peer did not answer.
    Transport {
        /// Timeout of one try.
        retry_after_us: u32,
    },
}

/// A WQE that completed: its CQE's byte count, and when the link model lets
/// the CQE appear.
struct Done {
    byte_cnt: u32,
    reveal: Option<u64>,
}

impl Done {
    /// Completed, to be seen at once.
    fn now(byte_cnt: u32) -> Done {
        Done {
            byte_cnt,
            reveal: None,
        }
    }

    /// Completed, to be seen no earlier than `reveal`.
    fn at(byte_cnt: u32, reveal: Option<u64>) -> Done {
        Done { byte_cnt, reveal }
    }
}

/// A QP entry by number, if live.
pub(crate) fn qp_by_num(fab: &Fabric, qpn: u32) -> Option<(usize, &QpEntry)> {
    let slot = slot_of(qpn, MAX_QPS);
    let e = &fab.reg().qps[slot];
    (e.state.load(Ordering::Acquire) == LIVE && e.qpn.load(Ordering::Relaxed) == qpn)
        .then_some((slot, e))
}

/// A QP's registry entry with its queues resolved in this process.
#[derive(Clone, Copy)]
struct Qp<'a> {
    e: &'a QpEntry,
    qpn: u32,
    pd: u32,
    dev: u32,
    sq: NonNull<u8>,
    sq_cnt: u32,
    dbrec: NonNull<u8>,
    rq: Option<NonNull<u8>>,
    /// Whether it is a DCI.
    dci: bool,
    /// A DCI's peer for the WQE being run, from its address vector.
    dest: Option<Dest>,
}

/// The DCT a DCI's WQE names: its number, the key the WQE carries, and the
/// device its route leads to.
#[derive(Clone, Copy)]
struct Dest {
    dct: u32,
    key: u64,
    dev: u32,
    /// The WQE's SOLICITED flag (its body, rebased past the address,
    /// no longer starts with its control segment).
    solicited: bool,
    /// The WQE's stream last reached another DCT (or none): the link
    /// model charges the connect packet's latency first.
    connect: bool,
}

impl Qp<'_> {
    /// The device the QP's packets go to: a DCI's WQE names it, an RC QP
    /// was connected to it.
    fn remote_dev(&self) -> u32 {
        match self.dest {
            Some(d) => d.dev,
            None => self.e.remote_dev.load(Ordering::Relaxed),
        }
    }

    /// Whether the WQE being run connects to its DCT first (a DCI's stream
    /// that last reached another DCT).
    fn connects(&self) -> bool {
        self.dest.is_some_and(|d| d.connect)
    }
}

fn qp_view<'a>(fab: &'a Fabric, e: &'a QpEntry) -> Option<Qp<'a>> {
    let seg = fab.segment(e.seg.load(Ordering::Relaxed))?;
    let sq_cnt = e.sq_cnt.load(Ordering::Relaxed);
    let rq_cnt = e.rq_cnt.load(Ordering::Relaxed);
    let stride = e.rq_stride.load(Ordering::Relaxed);
    Some(Qp {
        e,
        qpn: e.qpn.load(Ordering::Relaxed),
        pd: e.pd.load(Ordering::Relaxed),
        dev: e.dev.load(Ordering::Relaxed),
        sq: in_segment(
            seg,
            e.sq_off.load(Ordering::Relaxed),
            u64::from(sq_cnt) * 64,
        )?,
        sq_cnt,
        dbrec: in_segment(seg, e.dbrec_off.load(Ordering::Relaxed), 8)?,
        rq: if rq_cnt > 0 {
            Some(in_segment(
                seg,
                e.rq_off.load(Ordering::Relaxed),
                u64::from(rq_cnt) * u64::from(stride),
            )?)
        } else {
            None
        },
        dci: e.kind.load(Ordering::Relaxed) == qp_kind::DCI,
        dest: None,
    })
}

/// A WQE of a send queue, as its control segment describes it.
struct Wqe<'q> {
    opcode: u8,
    flags: u8,
    imm: u32,
    /// The WQE's index (its CQE's wqe_counter).
    idx: u16,
    /// Its size in basic blocks.
    bbs: u32,
    /// Its `ds` × 16 bytes; `None` when `ds` is 0 or the WQE runs past the
    /// ring's end (a malformed WQE).
    body: Option<&'q [u8]>,
}

impl<'a> Qp<'a> {
    /// The producer counter software last wrote to the SQ doorbell record.
    fn sq_posted(&self) -> u16 {
        // SAFETY: the doorbell record lies in the QP's segment.
        unsafe { load_dbrec(self.dbrec, SND_DBR) as u16 }
    }

    /// The WQE starting at basic block `ci`.
    fn wqe(&self, ci: u32) -> Wqe<'a> {
        let first = ci & (self.sq_cnt - 1);
        let p = self.sq.as_ptr().wrapping_add(first as usize * 64);
        // SAFETY: 16 bytes at the start of a BB inside the SQ.
        let ctrl = CtrlSeg::new_unchecked(unsafe { std::slice::from_raw_parts(p, 16) });
        let ds = ctrl.ds();
        let bbs = u32::from(ds.max(1)).div_ceil(4);
        let body = (ds != 0 && first + bbs <= self.sq_cnt).then(|| {
            // SAFETY: the WQE's ds × 16 bytes lie inside the SQ (checked).
            unsafe { std::slice::from_raw_parts(p, usize::from(ds) * WQE_SEG_UNIT) }
        });
        Wqe {
            opcode: ctrl.opcode_raw(),
            flags: ctrl.fm_ce_se(),
            imm: ctrl.imm(),
            idx: ctrl.wqe_index(),
            bbs,
            body,
        }
    }
}

/// Runs QP `qpn`'s send queue: every WQE between the NIC's consumer counter and
/// the doorbell record, at most `max` of them. A head WQE that stalled on RNR
/// or an unreachable peer (gone, or behind a port that is down) is retried
/// once its delay has passed on `x`'s clock, and fails after `rnr_retry` (7:
/// never) RNR retries, or when the ACK timer of its last transport try (the
/// first and `retry_cnt` retries) expires. A DCI does the same per stream
/// (`streams`). A QP in ERR has its queues flushed.
pub(crate) fn run_sq(x: &mut Exec<'_>, qpn: u32, max: usize) -> RunResult {
    let mut res = RunResult::default();
    let mut report = FlushReport::default();
    let Some((_, e)) = qp_by_num(x.fab, qpn) else {
        return res;
    };
    let _g = e.exec_lock.lock(x.fab.member());
    let Some(qp) = qp_view(x.fab, e) else {
        return res;
    };
    match e.qp_state.load(Ordering::Acquire) {
        qp_state::RTS if qp.dci => streams::run(x, &qp, max, &mut res, &mut report),
        qp_state::RTS => run_wqes(x, &qp, max, &mut res, &mut report),
        qp_state::ERR if qp.dci => res.executed = streams::flush_sq(x, &qp, &mut report),
        qp_state::ERR => res.executed = errors::flush_locked(x, &qp, &mut report),
        _ => return res,
    }
    x.flush(&mut report);
    if report.overrun.contains(&e.send_cqn.load(Ordering::Relaxed)) {
        // Its own completion could not be delivered: the QP cannot go on.
        e.qp_state.store(qp_state::ERR, Ordering::Release);
    }
    res
}

/// Executes the posted WQEs of an RC QP in RTS, in order, until one stalls
/// or fails.
fn run_wqes(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    max: usize,
    res: &mut RunResult,
    report: &mut FlushReport,
) {
    let e = qp.e;
    let pi = qp.sq_posted();
    let mut ci = e.sq_ci.load(Ordering::Relaxed);
    let send_cqn = e.send_cqn.load(Ordering::Relaxed);
    // A head WQE whose transport tries are all spent is not sent again: it
    // waits for its last ACK timer, then fails. One the responder executed
    // (its answer lost) is sent again as a duplicate.
    let mut head = None;
    let mut again = None;
    if ci as u16 != pi {
        let t = Tries::of_head(e);
        match errors::last_try_expired(x, qp, &t, ci) {
            Some(Ok(stall)) => {
                res.stalled = Some(stall);
                return;
            }
            Some(Err(syndrome)) => head = Some(Fail::local(syndrome)),
            None => again = t.unanswered(ci),
        }
    }
    while ci as u16 != pi && res.executed < max {
        let w = qp.wqe(ci);
        let outcome = match (head.take(), again.take()) {
            (Some(fail), _) => Err(fail),
            (None, Some(u)) => match w.body {
                Some(body) => requester::again(x, qp, body, w.opcode, u),
                None => Err(Fail::local(Syndrome::LocalQpOp)),
            },
            (None, None) => execute_wqe(x, qp, &w),
        };
        // What the WQE's error CQE reports, if it failed for good.
        let (syndrome, vendor) = match outcome {
            Ok(done) => {
                // A tag-matching command asks for its CQE in its own
                // segment, and wrote it (see `tm`).
                if w.flags & ctrl_flags::CQ_UPDATE != 0 && w.opcode != WqeOpcode::TagMatching as u8
                {
                    let c = req_cqe(qp.qpn, w.idx, w.opcode, done.byte_cnt);
                    x.push_cqe_at(send_cqn, &c, done.reveal, report);
                }
                ci = ci.wrapping_add(w.bbs);
                res.executed += 1;
                errors::clear_tries(&Tries::of_head(e));
                continue;
            }
            Err(Fail::Retry {
                kind,
                delay_us,
                key_violation,
                unanswered,
            }) => match errors::retry(
                x,
                qp,
                &Tries::of_head(e),
                ci,
                (kind, delay_us, key_violation, unanswered),
            ) {
                Ok(stall) => {
                    res.stalled = Some(stall);
                    break;
                }
                Err(syndrome) => (syndrome, 0),
            },
            Err(Fail::Err {
                syndrome,
                vendor,
                remote_err,
            }) => {
                // A responder QP that refused goes to ERR with the
                // requester; a DCT, which serves every DCI, does not.
                if let Some(slot) = remote_err {
                    let r = &x.fab.reg().qps[slot];
                    if r.kind.load(Ordering::Relaxed) != qp_kind::DCT {
                        move_to_err(x, r, report);
                    }
                }
                (syndrome, vendor)
            }
        };
        let f = Failure {
            wqe: &w,
            syndrome,
            vendor,
            ci: &mut ci,
            send_cqn,
            res: &mut *res,
            report: &mut *report,
        };
        errors::fail(x, qp, f);
        break;
    }
    e.sq_ci.store(ci, Ordering::Release);
}

/// Executes one WQE, on the fast path when it can take it; returns the byte
/// count for its CQE.
#[inline]
fn execute_wqe(x: &mut Exec<'_>, qp: &Qp<'_>, w: &Wqe<'_>) -> Result<Done, Fail> {
    let Some(body) = w.body else {
        return Err(Fail::local(Syndrome::LocalQpOp));
    };
    let fast = if w.opcode == WqeOpcode::RdmaWriteImm as u8 {
        fast_path::write(x, qp, body, Some(w.imm))
    } else if w.opcode == WqeOpcode::RdmaWrite as u8 {
        fast_path::write(x, qp, body, None)
    } else if w.opcode == WqeOpcode::TagMatching as u8 {
        // A command for the NIC itself: nothing crosses the wire.
        return tm::command(x, qp, body, w.idx);
    } else {
        None
    };
    match fast {
        Some(n) => Ok(Done::now(n)),
        None => {
            let out = requester::execute(x, qp, body, w.opcode, w.imm);
            answer::as_seen(x, qp, w.opcode, out)
        }
    }
}

/// Executes a DCI's WQE: its address vector (after the control segment)
/// names the DCT, and the segments after it are an RC WQE's, run against
/// that DCT as the responder. `last_dct` is the last DCT the WQE's stream
/// reached: a WQE to another one connects first (which the link model
/// charges), and the DCT is the stream's last once it answered (data or an
/// RNR NAK). A NOP goes nowhere and has no address. A WQE too short for its
/// address vector is a local QP operation error. A WQE the DCT executed
/// already, its answer lost (`again`), goes as a duplicate.
fn execute_dc(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    w: &Wqe<'_>,
    (body, again): (&[u8], Option<Unanswered>),
    last_dct: &AtomicU32,
) -> Result<Done, Fail> {
    const AV: usize = DatagramSeg::<()>::LEN;
    if w.opcode == WqeOpcode::Nop as u8 {
        return Ok(Done::now(0));
    }
    let ctrl = CtrlSeg::<()>::LEN;
    let Some(av) = body.get(ctrl..ctrl + AV) else {
        return Err(Fail::local(Syndrome::LocalQpOp));
    };
    let av = DatagramSeg::new_unchecked(av);
    // A LID that names no device routes nowhere: no answer comes.
    let dev = u32::from(av.rlid()).wrapping_sub(1);
    let dev = if (dev as usize) < MAX_DEVS {
        dev
    } else {
        u32::MAX
    };
    let dct = av.dqp_dct();
    let q = Qp {
        dest: Some(Dest {
            dct,
            key: av.key(),
            dev,
            solicited: w.flags & ctrl_flags::SOLICITED != 0,
            connect: last_dct.load(Ordering::Relaxed) != dct,
        }),
        ..*qp
    };
    // The RC executors read segments from offset 16 on: start the body 48
    // bytes further, so that the segment after the address sits there.
    let rest = &body[AV..];
    if let Some(u) = again {
        return requester::again(x, &q, rest, w.opcode, u);
    }
    let fast = if w.opcode == WqeOpcode::RdmaWriteImm as u8 {
        fast_path::write(x, &q, rest, Some(w.imm))
    } else if w.opcode == WqeOpcode::RdmaWrite as u8 {
        fast_path::write(x, &q, rest, None)
    } else {
        None
    };
    let out = match fast {
        Some(n) => Ok(Done::now(n)),
        None => {
            let out = requester::execute(x, &q, rest, w.opcode, w.imm);
            answer::as_seen(x, &q, w.opcode, out)
        }
    };
    if matches!(
        out,
        Ok(_)
            | Err(Fail::Retry {
                kind: errors::RetryKind::Rnr,
                ..
            })
    ) {
        last_dct.store(dct, Ordering::Relaxed);
    }
    out
}

/// The requester's CQE of a WQE that completed.
fn req_cqe(qpn: u32, wqe_counter: u16, wqe_opcode: u8, byte_cnt: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut b[..]);
    c.set_sop_drop_qpn((u32::from(wqe_opcode) << 24) | qpn);
    c.set_wqe_counter(wqe_counter);
    c.set_byte_cnt(byte_cnt);
    c.set_op_own((CqeOpcode::Req as u8) << 4);
    b
}

/// Moves this process's QPs whose send CQ is `cqn` to ERR (after that CQ
/// overran).
pub(crate) fn fail_qps_of_cq(fab: &Fabric, cqn: u32) {
    let me = fab.token();
    // A QP's CQs are its owner's: when another process's CQ overran (a
    // receive CQ this NIC completed into), no QP here names it, and the
    // walk of the whole table is not needed.
    let cq = &fab.reg().cqs[slot_of(cqn, MAX_CQS)];
    if cq.owner.load(Ordering::Relaxed) != me || cq.cqn.load(Ordering::Relaxed) != cqn {
        return;
    }
    for e in fab.reg().qps.iter() {
        if e.state.load(Ordering::Acquire) == LIVE
            && e.owner.load(Ordering::Relaxed) == me
            && e.send_cqn.load(Ordering::Relaxed) == cqn
        {
            e.qp_state.store(qp_state::ERR, Ordering::Release);
        }
    }
}

/// Flushes a QP's queues after it entered ERR through a verb (modify to ERR),
/// with the QP's exec lock taken.
pub(crate) fn flush_qp(x: &mut Exec<'_>, qpn: u32) -> usize {
    let Some((_, e)) = qp_by_num(x.fab, qpn) else {
        return 0;
    };
    let _g = e.exec_lock.lock(x.fab.member());
    let Some(qp) = qp_view(x.fab, e) else {
        return 0;
    };
    let mut report = FlushReport::default();
    let n = errors::flush_locked(x, &qp, &mut report);
    x.flush(&mut report);
    n
}
