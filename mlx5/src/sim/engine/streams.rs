//! DCI streams: a DCI's WQEs are ordered within a stream (the control
//! segment's `dci_stream_channel_id`) and independent across streams. A WQE
//! that stalls (RNR, no answer) holds its stream's later WQEs only; a WQE
//! that fails for good errors its stream alone, whose later WQEs are then
//! flushed, while the other streams go on. The DCI goes to ERR once
//! `1 << log_errored` streams have errored (at the first error when it has
//! no streams or survives none), and an RTS → RTS modify
//! (`mlx5dv_dci_stream_id_reset`) lets an errored stream run again.
//!
//! The NIC keeps its per-stream state in the DCI's segment, after the
//! doorbell record, where software never looks ([`DciState`]): each
//! stream's retry state, the last DCT it sent to (the link model's connect
//! latency), which streams have errored, and a bitmap of the SQ's basic
//! blocks that marks WQEs completed while an earlier WQE (of another
//! stream) was still waiting, so that they do not run twice. The NIC's
//! consumer counter `sq_ci` advances over the completed prefix only.
//!
//! This models what rdma-core and the PRM say of streams (docs/architecture.md);
//! it has never been compared with a ConnectX.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::errors::{self, err_cqe, Fail, Tries};
use super::{execute_dc, req_cqe, Qp, RunResult, Wqe};
use crate::prm::{ctrl_flags, CtrlSeg, Syndrome};
use crate::sim::cqe_out::FlushReport;
use crate::sim::exec::Exec;
use crate::sim::fabric::{in_segment, Fabric};
use crate::sim::registry::{qp_state, QpEntry, NO_RETRY};

/// Streams a DCI may have (2^`DCI_STREAM_CAPS.log_concurrent`).
pub(crate) const MAX_STREAMS: usize = 16;

/// Where a DCI's stream state starts, after its doorbell record.
pub(crate) const STATE_AFTER_DBREC: u64 = 64;

/// [`StreamState::last_dct`] of a stream that sent to no DCT yet (DCT
/// numbers are never 0).
const NO_DCT: u32 = 0;

/// One stream's state in the NIC's memory.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct StreamState {
    /// SQ counter of the WQE the stream is stalled at ([`NO_RETRY`]: none).
    retry_wqe: AtomicU32,
    /// RNR NAKs that WQE received.
    rnr_tries: AtomicU32,
    /// Its transport tries that no acknowledgement answered.
    ack_tries: AtomicU32,
    /// The DCT the stream last reached ([`NO_DCT`]: none): a WQE to
    /// another one connects first.
    last_dct: AtomicU32,
    /// The clock (ns) before which the stalled WQE is not tried again.
    retry_due_ns: AtomicU64,
    /// The stalled WQE's CQE byte count + 1 once the DCT executed it and
    /// only the answer was lost (0: it was not executed).
    answer_lost: AtomicU32,
    _pad: u32,
    /// What the DCT keeps to answer that WQE's duplicates.
    replay: AtomicU64,
}

impl StreamState {
    fn tries(&self) -> Tries<'_> {
        Tries {
            wqe: &self.retry_wqe,
            rnr: &self.rnr_tries,
            ack: &self.ack_tries,
            due_ns: &self.retry_due_ns,
            answer_lost: &self.answer_lost,
            replay: &self.replay,
        }
    }

    /// As a new stream: no stall, no connection.
    fn clear(&self) {
        self.retry_wqe.store(NO_RETRY, Ordering::Relaxed);
        self.rnr_tries.store(0, Ordering::Relaxed);
        self.ack_tries.store(0, Ordering::Relaxed);
        self.last_dct.store(NO_DCT, Ordering::Relaxed);
        self.retry_due_ns.store(0, Ordering::Relaxed);
        self.answer_lost.store(0, Ordering::Relaxed);
        self.replay.store(0, Ordering::Relaxed);
    }
}

/// A DCI's NIC-private state; the done bitmap (one bit per basic block of
/// the SQ, in 64-bit words) follows it.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct DciState {
    /// Errored streams, one bit each.
    errored: AtomicU32,
    _pad: [u32; 15],
    streams: [StreamState; MAX_STREAMS],
}

const _: () = assert!(std::mem::size_of::<DciState>() == 64 + 40 * MAX_STREAMS);

/// Bytes of a DCI's stream state with an SQ of `sq_cnt` basic blocks.
pub(crate) fn state_len(sq_cnt: u32) -> u64 {
    (std::mem::size_of::<DciState>() + 8 * (sq_cnt as usize).div_ceil(64)) as u64
}

/// A DCI's stream state, resolved in this process.
struct Streams<'a> {
    st: &'a DciState,
    done: &'a [AtomicU64],
    /// Streams it has (a power of two).
    count: u16,
    /// Errored streams that move it to ERR.
    limit: u32,
}

impl<'a> Streams<'a> {
    /// The stream state of DCI `e`, if its segment holds it.
    fn of(fab: &'a Fabric, e: &QpEntry) -> Option<Streams<'a>> {
        let seg = fab.segment(e.seg.load(Ordering::Relaxed))?;
        let sq_cnt = e.sq_cnt.load(Ordering::Relaxed);
        let off = e.dbrec_off.load(Ordering::Relaxed) + STATE_AFTER_DBREC;
        let p = in_segment(seg, off, state_len(sq_cnt))?;
        let words = (sq_cnt as usize).div_ceil(64);
        // SAFETY: the range lies in the DCI's segment, which stays mapped
        // while the fabric lives; it is 64-byte aligned (the doorbell
        // record's offset is) and made only of atomics, valid for any
        // bytes.
        let (st, done) = unsafe {
            let st = &*(p.as_ptr() as *const DciState);
            let d = p.as_ptr().add(std::mem::size_of::<DciState>()) as *const AtomicU64;
            (st, std::slice::from_raw_parts(d, words))
        };
        let packed = e.dci_streams.load(Ordering::Relaxed);
        let (log_c, log_e) = (packed & 0xff, (packed >> 8) & 0xff);
        let count = 1u16 << log_c.min(4);
        // Without streams, or surviving none, the first error stops the DCI.
        let limit = if log_c == 0 { 1 } else { 1 << log_e.min(4) };
        Some(Streams {
            st,
            done,
            count,
            limit,
        })
    }

    /// The stream of the WQE at `ci`: its control segment's stream id,
    /// modulo the DCI's streams (a DCI without streams has stream 0).
    fn stream_of(&self, qp: &Qp<'_>, ci: u32) -> usize {
        let first = ci & (qp.sq_cnt - 1);
        // SAFETY: 16 bytes at the start of a BB inside the SQ.
        let ctrl =
            unsafe { std::slice::from_raw_parts(qp.sq.as_ptr().add(first as usize * 64), 16) };
        usize::from(CtrlSeg::new_unchecked(ctrl).dci_stream_channel_id() & (self.count - 1))
    }

    fn bit(&self, qp: &Qp<'_>, ci: u32) -> (&AtomicU64, u64) {
        let b = (ci & (qp.sq_cnt - 1)) as usize;
        (&self.done[b / 64], 1 << (b % 64))
    }

    /// Whether the WQE at `ci` completed out of order; forgets it if
    /// `take` (the consumer counter passes it).
    fn done(&self, qp: &Qp<'_>, ci: u32, take: bool) -> bool {
        let (w, m) = self.bit(qp, ci);
        let was = w.load(Ordering::Relaxed) & m != 0;
        if was && take {
            w.fetch_and(!m, Ordering::Relaxed);
        }
        was
    }

    fn set_done(&self, qp: &Qp<'_>, ci: u32) {
        let (w, m) = self.bit(qp, ci);
        w.fetch_or(m, Ordering::Relaxed);
    }

    fn errored(&self, s: usize) -> bool {
        self.st.errored.load(Ordering::Relaxed) & (1 << s) != 0
    }
}

/// What became of one WQE of the walk.
enum Step {
    /// It completed (with success or an error CQE).
    Done,
    /// It waits: its stream's later WQEs wait behind it.
    Held,
    /// It failed, and the DCI has now as many errored streams as it survives.
    Fatal,
}

/// Runs a DCI in RTS: walks its WQEs from the NIC's consumer counter to the
/// doorbell record's, at most `max` of them run. WQEs that completed
/// earlier are passed over; a WQE whose stream has an earlier WQE waiting
/// in this walk is held; a WQE of an errored stream is flushed; the others
/// run. The consumer counter moves over the completed prefix.
pub(super) fn run(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    max: usize,
    res: &mut RunResult,
    report: &mut FlushReport,
) {
    let e = qp.e;
    let Some(s) = Streams::of(x.fab, e) else {
        return;
    };
    let pi = qp.sq_posted();
    let mut ci = e.sq_ci.load(Ordering::Relaxed);
    let mut pos = ci;
    // Streams with a WQE waiting in this walk.
    let mut held = 0u32;
    while pos as u16 != pi {
        let w = qp.wqe(pos);
        let next = pos.wrapping_add(w.bbs);
        if s.done(qp, pos, pos == ci) {
            if pos == ci {
                ci = next;
            }
            pos = next;
            continue;
        }
        if res.executed >= max {
            break;
        }
        let sid = s.stream_of(qp, pos);
        if held & (1 << sid) == 0 {
            match step(x, qp, &s, (&w, pos, sid), res, report) {
                Step::Held => held |= 1 << sid,
                Step::Done if pos == ci => ci = next,
                Step::Done => s.set_done(qp, pos),
                Step::Fatal => {
                    if pos == ci {
                        ci = next;
                    } else {
                        s.set_done(qp, pos);
                    }
                    e.sq_ci.store(ci, Ordering::Release);
                    e.qp_state.store(qp_state::ERR, Ordering::Release);
                    res.executed += flush_sq(x, qp, report);
                    return;
                }
            }
        }
        pos = next;
    }
    e.sq_ci.store(ci, Ordering::Release);
}

/// Runs, retries, fails or flushes the WQE `w` at `pos` of stream `sid`.
fn step(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    s: &Streams<'_>,
    (w, pos, sid): (&Wqe<'_>, u32, usize),
    res: &mut RunResult,
    report: &mut FlushReport,
) -> Step {
    let cqn = qp.e.send_cqn.load(Ordering::Relaxed);
    if s.errored(sid) {
        let c = err_cqe(true, qp.qpn, w.idx, w.opcode, Syndrome::WrFlush, 0, 0);
        x.push_cqe(cqn, &c, report);
        res.executed += 1;
        return Step::Done;
    }
    let st = &s.st.streams[sid];
    let t = st.tries();
    let outcome = match errors::last_try_expired(x, qp, &t, pos) {
        Some(Ok(stall)) => {
            res.stalled = Some(stall);
            return Step::Held;
        }
        Some(Err(syndrome)) => Err(Fail::local(syndrome)),
        None => match w.body {
            Some(body) => execute_dc(x, qp, w, (body, t.unanswered(pos)), &st.last_dct),
            None => Err(Fail::local(Syndrome::LocalQpOp)),
        },
    };
    let (syndrome, vendor) = match outcome {
        Ok(done) => {
            if w.flags & ctrl_flags::CQ_UPDATE != 0 {
                let c = req_cqe(qp.qpn, w.idx, w.opcode, done.byte_cnt);
                x.push_cqe_at(cqn, &c, done.reveal, report);
            }
            res.executed += 1;
            errors::clear_tries(&t);
            return Step::Done;
        }
        Err(Fail::Retry {
            kind,
            delay_us,
            key_violation,
            unanswered,
        }) => match errors::retry(x, qp, &t, pos, (kind, delay_us, key_violation, unanswered)) {
            Ok(stall) => {
                res.stalled = Some(stall);
                return Step::Held;
            }
            Err(syndrome) => (syndrome, 0),
        },
        // The responder is a DCT, which serves every DCI: it never goes to
        // ERR for one DCI's error.
        Err(Fail::Err {
            syndrome, vendor, ..
        }) => (syndrome, vendor),
    };
    let c = err_cqe(true, qp.qpn, w.idx, w.opcode, syndrome, vendor, 0);
    x.push_cqe(cqn, &c, report);
    res.executed += 1;
    st.clear();
    let errored = s.st.errored.fetch_or(1 << sid, Ordering::Relaxed) | (1 << sid);
    if errored.count_ones() >= s.limit {
        Step::Fatal
    } else {
        Step::Done
    }
}

/// Flushes (WR_FLUSH_ERR) every posted WQE of a DCI in ERR that has not
/// completed; returns how many. The caller holds the DCI's exec lock.
pub(super) fn flush_sq(x: &mut Exec<'_>, qp: &Qp<'_>, report: &mut FlushReport) -> usize {
    let e = qp.e;
    let Some(s) = Streams::of(x.fab, e) else {
        return 0;
    };
    let pi = qp.sq_posted();
    let mut ci = e.sq_ci.load(Ordering::Relaxed);
    let cqn = e.send_cqn.load(Ordering::Relaxed);
    let mut n = 0;
    while ci as u16 != pi {
        let w = qp.wqe(ci);
        if !s.done(qp, ci, true) {
            let c = err_cqe(true, qp.qpn, w.idx, w.opcode, Syndrome::WrFlush, 0, 0);
            x.push_cqe(cqn, &c, report);
            n += 1;
        }
        ci = ci.wrapping_add(w.bbs);
    }
    e.sq_ci.store(ci, Ordering::Release);
    n
}

/// Makes a new DCI's stream state: no stream stalled, errored or connected,
/// no WQE done. False if its segment does not hold it.
pub(crate) fn init(fab: &Fabric, e: &QpEntry) -> bool {
    let Some(s) = Streams::of(fab, e) else {
        return false;
    };
    s.st.errored.store(0, Ordering::Relaxed);
    s.st.streams.iter().for_each(StreamState::clear);
    s.done.iter().for_each(|w| w.store(0, Ordering::Relaxed));
    true
}

/// Why a stream reset was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResetError {
    /// The stream id is not below the DCI's stream count (given).
    Range(u16),
    /// The DCI's stream state is not where its segment should hold it.
    NoState,
}

/// Lets DCI `e`'s errored `stream` run again (an RTS → RTS modify with
/// the stream id): it is no longer errored, stalled or connected. The
/// caller holds the DCI's exec lock and has checked it is a DCI in RTS.
pub(crate) fn reset_stream(fab: &Fabric, e: &QpEntry, stream: u16) -> Result<(), ResetError> {
    let s = Streams::of(fab, e).ok_or(ResetError::NoState)?;
    if stream >= s.count {
        return Err(ResetError::Range(s.count));
    }
    s.st.streams[usize::from(stream)].clear();
    s.st.errored.fetch_and(!(1 << stream), Ordering::Relaxed);
    Ok(())
}
