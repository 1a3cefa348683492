//! The simulated NIC's execution: after a doorbell, read WQEs from SQ memory as
//! hardware would (up to the doorbell record's counter), check them with verbs
//! semantics (keys, bounds, access rights, PDs, QP states), move the bytes, and
//! write CQEs.
//!
//! All state the execution touches lives in the fabric's shared memory, so the
//! process that rings a doorbell executes its own QP's work against a peer in
//! another process.

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::cqe_out::{self, FlushReport, PendingCqe};
use super::fabric::{in_segment, Fabric};
use super::fast_path;
use super::registry::{
    qp_state, slot_of, MrEntry, QpEntry, LIVE, MAX_MRS, MAX_QPS, MAX_SRQS, NO_SEG,
};
use super::sched;
use super::shm::{my_pid, pid_alive};
use crate::device::access;
use crate::doorbell::load_dbrec;
use crate::prm::{
    ctrl_flags, AtomicSeg, Cqe64, CqeOpcode, CtrlSeg, DataSeg, ErrCqe, InlineSeg, RaddrSeg,
    SrqNextSeg, Syndrome, WqeOpcode, INVALID_LKEY, RCV_DBR, SND_DBR, WQE_SEG_UNIT,
};

/// Largest message the simulated port carries (as `max_msg_sz` on ConnectX).
pub const MAX_MSG: u64 = 1 << 30;
/// Vendor syndrome the simulator puts in error CQEs caused by a memory region
/// of ordinary (non-shared) memory that another process tried to reach.
pub const VENDOR_NOT_SHARED: u8 = 0xe1;

/// The NIC's clock during one run of a send queue.
#[derive(Debug)]
pub enum Clock<'a> {
    /// Deferred mode: the scheduler's logical time (ns).
    Logical(u64),
    /// Inline mode: real time since the NIC's origin, read at most once per run
    /// and only when a retry timer needs it (a clock read per doorbell was a
    /// seventh of the simulated NIC's time).
    Real(&'a Instant, Cell<Option<u64>>),
}

impl<'a> Clock<'a> {
    /// Real time since `origin`, read lazily.
    pub fn real(origin: &'a Instant) -> Self {
        Clock::Real(origin, Cell::new(None))
    }

    /// Now, in ns.
    fn ns(&self) -> u64 {
        match self {
            Clock::Logical(t) => *t,
            Clock::Real(origin, c) => c.get().unwrap_or_else(|| {
                let t = origin.elapsed().as_nanos() as u64;
                c.set(Some(t));
                t
            }),
        }
    }

    /// A cheap timestamp (ns) for the peer-liveness check: in inline mode the
    /// kernel's coarse clock, which the vDSO reads without the time-stamp
    /// counter (a tick's resolution is plenty for a millisecond period).
    pub(super) fn peer_stamp(&self) -> u64 {
        match self {
            Clock::Logical(t) => *t,
            Clock::Real(..) => coarse_ns(),
        }
    }
}

/// `CLOCK_MONOTONIC_COARSE` in ns.
fn coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant
    // every Linux kernel since 2.6.32 knows.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// The result of running a QP's send queue.
#[derive(Debug, Default)]
pub struct RunResult {
    /// WQEs executed (completed, failed or flushed).
    pub executed: usize,
    /// Work is waiting on a receive WQE at the peer (RNR) or on an unreachable
    /// peer (transport retry); retry after `retry_after_us`.
    pub stalled: Option<Stall>,
    /// CQs that overran.
    pub overrun: Vec<u32>,
}

/// Why a send queue stopped with work left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
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

pub(super) enum Fail {
    /// Error CQE on the requester with this syndrome; `remote_err` moves the
    /// responder QP to ERR as well.
    Err {
        syndrome: Syndrome,
        vendor: u8,
        remote_err: Option<usize>,
    },
    /// Retry the WQE after `delay_us` (an RNR NAK, or no answer from the peer).
    Retry { kind: RetryKind, delay_us: u32 },
}

#[derive(Clone, Copy)]
pub(super) enum RetryKind {
    Rnr,
    Transport,
}

impl Fail {
    fn rnr(delay_us: u32) -> Fail {
        Fail::Retry {
            kind: RetryKind::Rnr,
            delay_us,
        }
    }
    fn transport(timeout_us: u32) -> Fail {
        Fail::Retry {
            kind: RetryKind::Transport,
            delay_us: timeout_us,
        }
    }
}

struct Sg {
    ptr: *mut u8,
    len: u64,
}

/// Most entries of a scatter/gather list.
const MAX_SG: usize = 64;

/// Local scatter/gather list resolved to pointers (at most [`MAX_SG`] entries).
/// The array is left uninitialized: two lists per WQE, zeroed, cost the
/// simulated NIC ~75 instructions of `memset` per WQE (callgrind).
struct SgList {
    items: [MaybeUninit<Sg>; MAX_SG],
    n: usize,
    total: u64,
}

impl SgList {
    fn new() -> Self {
        Self {
            items: [const { MaybeUninit::uninit() }; MAX_SG],
            n: 0,
            total: 0,
        }
    }
    fn push(&mut self, ptr: *mut u8, len: u64) -> bool {
        if self.n == MAX_SG {
            return false;
        }
        self.items[self.n].write(Sg { ptr, len });
        self.n += 1;
        self.total += len;
        true
    }
    /// Entry `i` (panics past the entries pushed).
    fn get(&self, i: usize) -> &Sg {
        assert!(i < self.n, "scatter/gather entry {i} of {}", self.n);
        // SAFETY: entries below `n` were written by `push`.
        unsafe { self.items[i].assume_init_ref() }
    }
}

/// Largest write whose cache lines the device demotes after writing them.
const DEMOTE_MAX: usize = 256;

/// Moves what the device just wrote towards the shared cache, as DDIO places
/// DMA writes, so that a poller on another core finds the lines there instead of
/// snooping them out of this one. Only for short writes: `cldemote` costs about
/// 18 ns a line on the machine this was measured on (a 4 KiB copy: 135 ns, its
/// 64 demotes: 1 µs), while the lines a receiver waits on are a message's first few; a long
/// payload the receiver streams in behind the hardware prefetcher.
#[inline(always)]
pub(super) fn demote_written(p: *const u8, len: usize) {
    if len <= DEMOTE_MAX {
        crate::barrier::demote_range(p, len);
    }
}

/// Copies `len` bytes from a gather list into a scatter list.
///
/// # Safety
/// Every entry must point to memory valid for its length; ranges may belong to
/// other processes' shared segments, never overlapping Rust references.
unsafe fn sg_copy(src: &SgList, dst: &SgList, len: u64) {
    let (mut si, mut so, mut di, mut doff) = (0usize, 0u64, 0usize, 0u64);
    let mut left = len;
    while left > 0 && si < src.n && di < dst.n {
        let s = src.get(si);
        let d = dst.get(di);
        let n = (s.len - so).min(d.len - doff).min(left);
        // SAFETY: within both entries (caller contract).
        unsafe { std::ptr::copy(s.ptr.add(so as usize), d.ptr.add(doff as usize), n as usize) };
        demote_written(d.ptr.wrapping_add(doff as usize), n as usize);
        so += n;
        doff += n;
        left -= n;
        if so == s.len {
            si += 1;
            so = 0;
        }
        if doff == d.len {
            di += 1;
            doff = 0;
        }
    }
}

/// Resolves `[addr, addr+len)` under `key` for a user of PD `pd` on device
/// `dev` needing `need` access. Returns a pointer valid in this process.
pub(super) fn resolve(
    fab: &Fabric,
    key: u32,
    pd: u32,
    dev: u32,
    addr: u64,
    len: u64,
    need: u32,
) -> Result<*mut u8, u8> {
    let e: &MrEntry = &fab.reg().mrs[slot_of(key >> 8, MAX_MRS)];
    if e.state.load(Ordering::Acquire) != LIVE
        || e.key.load(Ordering::Relaxed) != key
        || e.pd.load(Ordering::Relaxed) != pd
        || e.dev.load(Ordering::Relaxed) != dev
        || e.access.load(Ordering::Relaxed) & need != need
    {
        return Err(0);
    }
    let va = e.va.load(Ordering::Relaxed);
    let mlen = e.len.load(Ordering::Relaxed);
    let end = addr.checked_add(len).ok_or(0u8)?;
    if addr < va || end > va + mlen {
        return Err(0);
    }
    let seg = e.seg.load(Ordering::Relaxed);
    if seg == NO_SEG {
        if e.pid.load(Ordering::Relaxed) != my_pid() {
            return Err(VENDOR_NOT_SHARED);
        }
        return Ok(addr as *mut u8);
    }
    fab.seg_ptr(seg, e.off.load(Ordering::Relaxed) + (addr - va), len)
        .map(|p| p.as_ptr())
        .ok_or(0)
}

/// Resolves `[addr, addr+len)` under `rkey` in the responder QP `r`'s PD and
/// device, needing the remote access `need`.
#[inline]
pub(super) fn resolve_remote(
    fab: &Fabric,
    r: &QpEntry,
    rkey: u32,
    addr: u64,
    len: u64,
    need: u32,
) -> Result<*mut u8, u8> {
    let pd = r.pd.load(Ordering::Relaxed);
    let dev = r.dev.load(Ordering::Relaxed);
    resolve(fab, rkey, pd, dev, addr, len, need)
}

/// A QP entry by number, if live.
pub fn qp_by_num(fab: &Fabric, qpn: u32) -> Option<(usize, &QpEntry)> {
    let slot = slot_of(qpn, MAX_QPS);
    let e = &fab.reg().qps[slot];
    (e.state.load(Ordering::Acquire) == LIVE && e.qpn.load(Ordering::Relaxed) == qpn)
        .then_some((slot, e))
}

pub(super) struct Qp<'a> {
    pub(super) e: &'a QpEntry,
    pub(super) qpn: u32,
    pub(super) pd: u32,
    pub(super) dev: u32,
    sq: NonNull<u8>,
    sq_cnt: u32,
    dbrec: NonNull<u8>,
    rq: Option<NonNull<u8>>,
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
    })
}

fn req_cqe(qpn: u32, wqe_counter: u16, wqe_opcode: u8, byte_cnt: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut b[..]);
    c.set_sop_drop_qpn((u32::from(wqe_opcode) << 24) | qpn);
    c.set_wqe_counter(wqe_counter);
    c.set_byte_cnt(byte_cnt);
    c.set_op_own((CqeOpcode::Req as u8) << 4);
    b
}

fn err_cqe(
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

/// Runs QP `qpn`'s send queue: every WQE between the NIC's consumer counter and
/// the doorbell record, at most `max` of them. `now_ns` is the caller's clock
/// (real time in inline mode, logical time in deferred mode); a head WQE that
/// stalled on RNR or an unreachable peer is retried once its delay has passed,
/// and fails after `rnr_retry` (7: never) or `retry_cnt` tries.
pub fn run_sq(fab: &Fabric, qpn: u32, max: usize, clock: &Clock<'_>) -> RunResult {
    let mut res = RunResult::default();
    let mut report = FlushReport::default();
    let Some((_, e)) = qp_by_num(fab, qpn) else {
        return res;
    };
    let _g = e.exec_lock.lock();
    let Some(qp) = qp_view(fab, e) else {
        return res;
    };
    let st = e.qp_state.load(Ordering::Acquire);
    if st == qp_state::ERR {
        res.executed = flush_locked(fab, &qp, &mut report);
        cqe_out::flush(fab, &mut report);
        res.overrun = report.overrun;
        return res;
    }
    if st != qp_state::RTS {
        return res;
    }
    // SAFETY: the doorbell record lies in the QP's segment.
    let pi = unsafe { load_dbrec(qp.dbrec, SND_DBR) } as u16;
    let mut ci = e.sq_ci.load(Ordering::Relaxed);
    let send_cqn = e.send_cqn.load(Ordering::Relaxed);
    while ci as u16 != pi && res.executed < max {
        let wqe = qp
            .sq
            .as_ptr()
            .wrapping_add(((ci & (qp.sq_cnt - 1)) as usize) * 64);
        // SAFETY: 16 bytes at the start of a BB inside the SQ.
        let ctrl = CtrlSeg::new_unchecked(unsafe { std::slice::from_raw_parts(wqe, 16) });
        let (opcode, ds, flags, imm, idx) = (
            ctrl.opcode_raw(),
            ctrl.ds(),
            ctrl.fm_ce_se(),
            ctrl.imm(),
            ctrl.wqe_index(),
        );
        let bbs = (u32::from(ds).max(1)).div_ceil(4);
        let in_bounds = (ci & (qp.sq_cnt - 1)) + bbs <= qp.sq_cnt;
        let out = if ds == 0 || !in_bounds {
            Err(Fail::Err {
                syndrome: Syndrome::LocalQpOp,
                vendor: 0,
                remote_err: None,
            })
        } else {
            // SAFETY: the WQE's ds*16 bytes lie inside the SQ (checked above).
            let body = unsafe { std::slice::from_raw_parts(wqe, usize::from(ds) * WQE_SEG_UNIT) };
            let fast = if opcode == WqeOpcode::RdmaWriteImm as u8 {
                fast_path::write(fab, &qp, body, true, imm, clock)
            } else if opcode == WqeOpcode::RdmaWrite as u8 {
                fast_path::write(fab, &qp, body, false, 0, clock)
            } else {
                None
            };
            match fast {
                Some(n) => Ok(n),
                None => execute(fab, &qp, body, opcode, imm, flags, clock),
            }
        };
        // What the WQE's error CQE reports, if it failed for good.
        let (syndrome, vendor) = match out {
            Ok(byte_cnt) => {
                if flags & ctrl_flags::CQ_UPDATE != 0 {
                    let c = req_cqe(qp.qpn, idx, opcode, byte_cnt);
                    cqe_out::push_cqe(fab, send_cqn, &c, &mut report);
                }
                ci = ci.wrapping_add(bbs);
                res.executed += 1;
                if e.retry_tries.load(Ordering::Relaxed) != 0 {
                    e.retry_tries.store(0, Ordering::Relaxed);
                }
                continue;
            }
            Err(Fail::Retry { kind, delay_us }) => {
                // RNR NAK or no answer: retry the head WQE after the delay,
                // until the QP's retry budget is used up (rnr_retry 7: never).
                let (limit, forever, syndrome, stall) = match kind {
                    RetryKind::Rnr => {
                        let l = e.rnr_retry.load(Ordering::Relaxed);
                        (
                            l,
                            l == 7,
                            Syndrome::RnrRetryExc,
                            Stall::Rnr {
                                retry_after_us: delay_us,
                            },
                        )
                    }
                    RetryKind::Transport => (
                        e.retry_cnt.load(Ordering::Relaxed),
                        false,
                        Syndrome::TransportRetryExc,
                        Stall::Transport {
                            retry_after_us: delay_us,
                        },
                    ),
                };
                res.stalled = Some(stall);
                // Tries count for the WQE at the head only.
                let tries = if e.retry_wqe.load(Ordering::Relaxed) == ci {
                    e.retry_tries.load(Ordering::Relaxed)
                } else {
                    e.retry_wqe.store(ci, Ordering::Relaxed);
                    e.retry_tries.store(0, Ordering::Relaxed);
                    0
                };
                let now_ns = clock.ns();
                if tries > 0 && now_ns < e.retry_due_ns.load(Ordering::Relaxed) {
                    break;
                }
                e.retry_tries.store(tries + 1, Ordering::Relaxed);
                e.retry_due_ns
                    .store(now_ns + u64::from(delay_us) * 1000, Ordering::Relaxed);
                if forever || tries < limit {
                    break;
                }
                res.stalled = None;
                (syndrome, 0)
            }
            Err(Fail::Err {
                syndrome,
                vendor,
                remote_err,
            }) => {
                if let Some(slot) = remote_err {
                    let r = &fab.reg().qps[slot];
                    move_to_err(fab, r, &mut report);
                }
                (syndrome, vendor)
            }
        };
        let f = Failure {
            idx,
            bbs,
            opcode,
            syndrome,
            vendor,
            ci: &mut ci,
            send_cqn,
            res: &mut res,
            report: &mut report,
        };
        fail(fab, &qp, f);
        break;
    }
    e.sq_ci.store(ci, Ordering::Release);
    cqe_out::flush(fab, &mut report);
    if report.overrun.contains(&send_cqn) {
        // Its own completion could not be delivered: the QP cannot go on.
        e.qp_state.store(qp_state::ERR, Ordering::Release);
    }
    res.overrun = report.overrun;
    res
}

/// A failed WQE, what its error CQE reports, and the send queue run it ends.
struct Failure<'a> {
    /// The WQE's index (the CQE's wqe_counter) and size in basic blocks.
    idx: u16,
    bbs: u32,
    opcode: u8,
    syndrome: Syndrome,
    vendor: u8,
    /// The run's consumer index.
    ci: &'a mut u32,
    send_cqn: u32,
    res: &'a mut RunResult,
    report: &'a mut FlushReport,
}

/// Completes a failed WQE with an error CQE, moves its QP to ERR and flushes
/// the rest of its send queue.
fn fail(fab: &Fabric, qp: &Qp<'_>, f: Failure<'_>) {
    let Failure {
        idx,
        bbs,
        opcode,
        syndrome,
        vendor,
        ci,
        send_cqn,
        res,
        report,
    } = f;
    let c = err_cqe(true, qp.qpn, idx, opcode, syndrome, vendor, 0);
    cqe_out::push_cqe(fab, send_cqn, &c, report);
    *ci = ci.wrapping_add(bbs);
    res.executed += 1;
    qp.e.sq_ci.store(*ci, Ordering::Release);
    qp.e.qp_state.store(qp_state::ERR, Ordering::Release);
    res.executed += flush_locked(fab, qp, report);
    *ci = qp.e.sq_ci.load(Ordering::Relaxed);
}

/// Moves a QP (possibly another process's) to ERR and flushes its receive
/// queue; its send queue is flushed by its owner's next run.
pub fn move_to_err(fab: &Fabric, e: &QpEntry, report: &mut FlushReport) {
    e.qp_state.store(qp_state::ERR, Ordering::Release);
    if let Some(qp) = qp_view(fab, e) {
        flush_rq(fab, &qp, report);
    }
}

/// Flushes (WR_FLUSH_ERR) every posted WQE of the SQ and the RQ of a QP in ERR.
/// The caller holds the QP's exec lock.
fn flush_locked(fab: &Fabric, qp: &Qp<'_>, report: &mut FlushReport) -> usize {
    let e = qp.e;
    // SAFETY: the doorbell record lies in the QP's segment.
    let pi = unsafe { load_dbrec(qp.dbrec, SND_DBR) } as u16;
    let mut ci = e.sq_ci.load(Ordering::Relaxed);
    let cqn = e.send_cqn.load(Ordering::Relaxed);
    let mut n = 0;
    while ci as u16 != pi {
        let wqe = qp
            .sq
            .as_ptr()
            .wrapping_add(((ci & (qp.sq_cnt - 1)) as usize) * 64);
        // SAFETY: a BB inside the SQ.
        let ctrl = CtrlSeg::new_unchecked(unsafe { std::slice::from_raw_parts(wqe, 16) });
        let c = err_cqe(
            true,
            qp.qpn,
            ctrl.wqe_index(),
            ctrl.opcode_raw(),
            Syndrome::WrFlush,
            0,
            0,
        );
        cqe_out::push_cqe(fab, cqn, &c, report);
        ci = ci.wrapping_add(u32::from(ctrl.ds().max(1)).div_ceil(4));
        n += 1;
    }
    e.sq_ci.store(ci, Ordering::Release);
    n + flush_rq(fab, qp, report)
}

/// Flushes posted, unconsumed WQEs of a QP's own RQ (an SRQ is not flushed).
fn flush_rq(fab: &Fabric, qp: &Qp<'_>, report: &mut FlushReport) -> usize {
    let e = qp.e;
    if qp.rq.is_none() {
        return 0;
    }
    let _g = e.rq_lock.lock();
    // SAFETY: the doorbell record lies in the QP's segment.
    let pi = unsafe { load_dbrec(qp.dbrec, RCV_DBR) } as u16;
    let mut ci = e.rq_ci.load(Ordering::Relaxed);
    let cqn = e.recv_cqn.load(Ordering::Relaxed);
    let mut n = 0;
    while ci as u16 != pi {
        let c = err_cqe(false, qp.qpn, ci as u16, 0, Syndrome::WrFlush, 0, 0);
        cqe_out::push_cqe(fab, cqn, &c, report);
        ci = ci.wrapping_add(1);
        n += 1;
    }
    e.rq_ci.store(ci, Ordering::Release);
    n
}

/// Gathers the data segments (or inline data) of a WQE body from `off`.
fn gather(
    fab: &Fabric,
    qp: &Qp<'_>,
    body: &[u8],
    mut off: usize,
    need: u32,
    list: &mut SgList,
) -> Result<(), Fail> {
    let local = |vendor| Fail::Err {
        syndrome: Syndrome::LocalProt,
        vendor,
        remote_err: None,
    };
    const INL: usize = InlineSeg::<()>::LEN;
    const DATA: usize = DataSeg::<()>::LEN;
    while off + DATA <= body.len() {
        let inl = InlineSeg::new_unchecked(&body[off..off + INL]);
        if inl.is_inline() {
            let len = inl.len() as usize;
            let total = InlineSeg::wqe_bytes(len);
            if off + total > body.len() || need & access::LOCAL_WRITE != 0 {
                return Err(Fail::Err {
                    syndrome: Syndrome::LocalQpOp,
                    vendor: 0,
                    remote_err: None,
                });
            }
            // The WQE bytes themselves are the source.
            list.push(body[off + INL..].as_ptr() as *mut u8, len as u64);
            off += total;
            continue;
        }
        let d = DataSeg::new_unchecked(&body[off..off + DATA]);
        let (bc, lkey, addr) = (d.byte_count(), d.lkey(), d.addr());
        off += DATA;
        if lkey == INVALID_LKEY && bc == 0 {
            break;
        }
        // A byte count of 0 means 2 GiB.
        let len = if bc == 0 {
            1u64 << 31
        } else {
            u64::from(bc & 0x7fff_ffff)
        };
        let p = resolve(fab, lkey, qp.pd, qp.dev, addr, len, need).map_err(local)?;
        if !list.push(p, len) {
            return Err(Fail::Err {
                syndrome: Syndrome::LocalLength,
                vendor: 0,
                remote_err: None,
            });
        }
    }
    if list.total > MAX_MSG {
        return Err(Fail::Err {
            syndrome: Syndrome::LocalLength,
            vendor: 0,
            remote_err: None,
        });
    }
    Ok(())
}

/// How often a requester checks that its peer's process is alive.
const PEER_CHECK_NS: u64 = 1_000_000;

/// The responder QP of `qp` if it is connected back to `qp` and ready to
/// receive (RTR or RTS).
#[inline]
pub(super) fn connected_peer<'a>(fab: &'a Fabric, qp: &Qp<'_>) -> Option<(usize, &'a QpEntry)> {
    let (slot, r) = qp_by_num(fab, qp.e.remote_qpn.load(Ordering::Relaxed))?;
    let st = r.qp_state.load(Ordering::Acquire);
    (r.dev.load(Ordering::Relaxed) == qp.e.remote_dev.load(Ordering::Relaxed)
        && r.remote_qpn.load(Ordering::Relaxed) == qp.qpn
        && (st == qp_state::RTR || st == qp_state::RTS))
        .then_some((slot, r))
}

/// Whether `qp`'s peer process is due for its liveness check at `now`. A peer
/// process that died leaves its queues behind in the registry; the kernel is
/// asked whether it lives at most once per millisecond of this NIC's clock (a
/// system call per message would dominate the simulation).
#[inline]
pub(super) fn peer_check_due(qp: &Qp<'_>, now: u64) -> bool {
    let seen = qp.e.peer_seen.load(Ordering::Relaxed);
    now.wrapping_sub(seen) > PEER_CHECK_NS || seen > now
}

/// The responder QP of `qp`, checked as the transport would: a peer that is gone
/// or not ready to receive does not answer.
fn responder<'a>(
    fab: &'a Fabric,
    qp: &Qp<'_>,
    clock: &Clock<'_>,
) -> Result<(usize, &'a QpEntry), Fail> {
    let timeout_us = qp.e.timeout_us.load(Ordering::Relaxed);
    if sched::take_peer_fault() {
        return Err(Fail::transport(timeout_us));
    }
    let Some((slot, r)) = connected_peer(fab, qp) else {
        return Err(Fail::transport(timeout_us));
    };
    let now = clock.peer_stamp();
    if peer_check_due(qp, now) {
        if !pid_alive(r.pid.load(Ordering::Relaxed)) {
            return Err(Fail::transport(timeout_us));
        }
        qp.e.peer_seen.store(now, Ordering::Relaxed);
    }
    Ok((slot, r))
}

/// An injected access fault, checked where the responder validates the rkey.
fn access_fault(slot: usize) -> Result<(), Fail> {
    if sched::take_access_fault() {
        return Err(remote_access(slot, 0));
    }
    Ok(())
}

fn remote_access(slot: usize, vendor: u8) -> Fail {
    Fail::Err {
        syndrome: Syndrome::RemoteAccess,
        vendor,
        remote_err: Some(slot),
    }
}

/// Executes one WQE; returns the byte count for its CQE.
fn execute(
    fab: &Fabric,
    qp: &Qp<'_>,
    body: &[u8],
    opcode: u8,
    imm: u32,
    flags: u8,
    clock: &Clock<'_>,
) -> Result<u32, Fail> {
    let op = WqeOpcode::from_u8(opcode).ok_or(Fail::Err {
        syndrome: Syndrome::LocalQpOp,
        vendor: 0,
        remote_err: None,
    })?;
    let _ = flags;
    match op {
        WqeOpcode::Nop => Ok(0),
        WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm => {
            let raddr_seg = RaddrSeg::new_unchecked(body.get(16..32).ok_or(qp_op())?);
            let (raddr, rkey) = (raddr_seg.raddr(), raddr_seg.rkey());
            let mut src = SgList::new();
            gather(fab, qp, body, 32, 0, &mut src)?;
            let (rslot, r) = responder(fab, qp, clock)?;
            access_fault(rslot)?;
            let len = src.total;
            if r.access.load(Ordering::Relaxed) & access::REMOTE_WRITE == 0 {
                return Err(remote_access(rslot, 0));
            }
            let dst_ptr = if len == 0 {
                std::ptr::null_mut()
            } else {
                resolve_remote(fab, r, rkey, raddr, len, access::REMOTE_WRITE)
                    .map_err(|v| remote_access(rslot, v))?
            };
            let recv = if op == WqeOpcode::RdmaWriteImm {
                Some(take_recv(fab, r)?)
            } else {
                None
            };
            let mut dst = SgList::new();
            dst.push(dst_ptr, len);
            // SAFETY: both lists were resolved against live regions.
            unsafe { sg_copy(&src, &dst, len) };
            if let Some(rv) = recv {
                let done = RecvDone {
                    opcode: CqeOpcode::RespWrImm,
                    byte_cnt: len as u32,
                    imm,
                    src_qpn: qp.qpn,
                    scatter: None,
                };
                complete_recv(fab, r, rv, done);
            }
            Ok(len as u32)
        }
        WqeOpcode::Send | WqeOpcode::SendImm => {
            let mut src = SgList::new();
            gather(fab, qp, body, 16, 0, &mut src)?;
            let (rslot, r) = responder(fab, qp, clock)?;
            let rv = take_recv(fab, r)?;
            let len = src.total;
            let mut dst = SgList::new();
            let cap = recv_sges(fab, r, &rv, &mut dst);
            let cap = match cap {
                Ok(c) => c,
                Err(()) => {
                    // The receive WQE names memory the responder cannot write.
                    complete_recv_err(fab, r, &rv, Syndrome::LocalProt, qp.qpn);
                    return Err(Fail::Err {
                        syndrome: Syndrome::RemoteOp,
                        vendor: 0,
                        remote_err: Some(rslot),
                    });
                }
            };
            if len > cap {
                complete_recv_err(fab, r, &rv, Syndrome::LocalLength, qp.qpn);
                return Err(Fail::Err {
                    syndrome: Syndrome::RemoteInvalReq,
                    vendor: 0,
                    remote_err: Some(rslot),
                });
            }
            let scatter = scatter_to_cqe(fab, r, &rv, &src, len);
            if scatter.is_none() {
                // SAFETY: resolved regions.
                unsafe { sg_copy(&src, &dst, len) };
            }
            let opc = if op == WqeOpcode::SendImm {
                CqeOpcode::RespSendImm
            } else {
                CqeOpcode::RespSend
            };
            let done = RecvDone {
                opcode: opc,
                byte_cnt: len as u32,
                imm: if op == WqeOpcode::SendImm { imm } else { 0 },
                src_qpn: qp.qpn,
                scatter,
            };
            complete_recv(fab, r, rv, done);
            Ok(len as u32)
        }
        WqeOpcode::RdmaRead => {
            let raddr_seg = RaddrSeg::new_unchecked(body.get(16..32).ok_or(qp_op())?);
            let (raddr, rkey) = (raddr_seg.raddr(), raddr_seg.rkey());
            let mut dst = SgList::new();
            gather(fab, qp, body, 32, access::LOCAL_WRITE, &mut dst)?;
            let (rslot, r) = responder(fab, qp, clock)?;
            access_fault(rslot)?;
            let len = dst.total;
            if r.access.load(Ordering::Relaxed) & access::REMOTE_READ == 0 {
                return Err(remote_access(rslot, 0));
            }
            if len > 0 {
                let p = resolve_remote(fab, r, rkey, raddr, len, access::REMOTE_READ)
                    .map_err(|v| remote_access(rslot, v))?;
                let mut src = SgList::new();
                src.push(p, len);
                // SAFETY: resolved regions.
                unsafe { sg_copy(&src, &dst, len) };
            }
            Ok(len as u32)
        }
        WqeOpcode::AtomicCs | WqeOpcode::AtomicFa => {
            let raddr_seg = RaddrSeg::new_unchecked(body.get(16..32).ok_or(qp_op())?);
            let (raddr, rkey) = (raddr_seg.raddr(), raddr_seg.rkey());
            let a = AtomicSeg::new_unchecked(body.get(32..48).ok_or(qp_op())?);
            let (swap_add, compare) = (a.swap_add(), a.compare());
            let mut dst = SgList::new();
            gather(fab, qp, body, 48, access::LOCAL_WRITE, &mut dst)?;
            if dst.total != 8 || dst.n != 1 {
                return Err(Fail::Err {
                    syndrome: Syndrome::LocalLength,
                    vendor: 0,
                    remote_err: None,
                });
            }
            let (rslot, r) = responder(fab, qp, clock)?;
            access_fault(rslot)?;
            if r.access.load(Ordering::Relaxed) & access::REMOTE_ATOMIC == 0 {
                return Err(remote_access(rslot, 0));
            }
            if raddr % 8 != 0 {
                return Err(Fail::Err {
                    syndrome: Syndrome::RemoteInvalReq,
                    vendor: 0,
                    remote_err: Some(rslot),
                });
            }
            let p = resolve_remote(fab, r, rkey, raddr, 8, access::REMOTE_ATOMIC)
                .map_err(|v| remote_access(rslot, v))?;
            // SAFETY: an 8-byte aligned word inside a live region; other
            // processes access it atomically too. mlx5 treats the target as
            // big-endian and returns the old value big-endian.
            let w = unsafe { &*(p as *const AtomicU64) };
            let old = if op == WqeOpcode::AtomicCs {
                match w.compare_exchange(
                    compare.to_be(),
                    swap_add.to_be(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(v) | Err(v) => v,
                }
            } else {
                let mut cur = w.load(Ordering::Acquire);
                loop {
                    let new = u64::from_be(cur).wrapping_add(swap_add).to_be();
                    match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => break cur,
                        Err(v) => cur = v,
                    }
                }
            };
            // SAFETY: the 8-byte local destination resolved above.
            unsafe { std::ptr::copy_nonoverlapping(old.to_ne_bytes().as_ptr(), dst.get(0).ptr, 8) };
            Ok(8)
        }
        _ => Err(qp_op()),
    }
}

fn qp_op() -> Fail {
    Fail::Err {
        syndrome: Syndrome::LocalQpOp,
        vendor: 0,
        remote_err: None,
    }
}

/// A receive WQE taken from the responder's RQ or SRQ.
pub(super) struct Recv {
    /// WQE index (RQ: counter; SRQ: index).
    idx: u16,
    /// The WQE's data segments.
    segs: *const u8,
    seg_bytes: usize,
    srqn: u32,
}

/// A receive queue's WQE buffer (`cnt` × `stride` bytes) and doorbell record
/// in segment `seg`, resolved in this process.
fn queue_mem(
    fab: &Fabric,
    seg: u32,
    buf_off: u64,
    cnt: u32,
    stride: usize,
    dbrec_off: u64,
) -> Option<(NonNull<u8>, NonNull<u8>)> {
    let seg = fab.segment(seg)?;
    Some((
        in_segment(seg, buf_off, u64::from(cnt) * stride as u64)?,
        in_segment(seg, dbrec_off, 8)?,
    ))
}

pub(super) fn take_recv(fab: &Fabric, r: &QpEntry) -> Result<Recv, Fail> {
    let delay_us = r.min_rnr_us.load(Ordering::Relaxed);
    if sched::take_rnr_fault() {
        return Err(Fail::rnr(delay_us));
    }
    let srqn = r.srqn.load(Ordering::Relaxed);
    let seg = r.seg.load(Ordering::Relaxed);
    if srqn != u32::MAX {
        let s = &fab.reg().srqs[slot_of(srqn, MAX_SRQS)];
        if s.state.load(Ordering::Acquire) != LIVE || s.srqn.load(Ordering::Relaxed) != srqn {
            return Err(Fail::rnr(delay_us));
        }
        let cnt = s.cnt.load(Ordering::Relaxed);
        let stride = s.stride.load(Ordering::Relaxed) as usize;
        let (buf, db) = queue_mem(
            fab,
            s.seg.load(Ordering::Relaxed),
            s.buf_off.load(Ordering::Relaxed),
            cnt,
            stride,
            s.dbrec_off.load(Ordering::Relaxed),
        )
        .ok_or(Fail::rnr(delay_us))?;
        let _g = s.lock.lock();
        // SAFETY: the SRQ doorbell record.
        let posted = unsafe { load_dbrec(db, 0) } as u16;
        let consumed = s.consumed.load(Ordering::Relaxed);
        if consumed as u16 == posted {
            return Err(Fail::rnr(delay_us));
        }
        let idx = (s.head.load(Ordering::Relaxed) & (cnt - 1)) as u16;
        // SAFETY: WQE `idx` inside the SRQ buffer.
        let wqe = unsafe { buf.as_ptr().add(usize::from(idx) * stride) };
        // SAFETY: the next segment of that WQE.
        let next = SrqNextSeg::new_unchecked(unsafe { std::slice::from_raw_parts(wqe, 16) })
            .next_wqe_index();
        s.head.store(u32::from(next), Ordering::Relaxed);
        s.consumed
            .store(consumed.wrapping_add(1), Ordering::Relaxed);
        // Fetch the next receive WQE now, as a NIC keeps receive WQEs cached
        // ahead of the messages that consume them: software wrote its line,
        // and the next message should not wait for that line to move.
        crate::barrier::prefetch(
            buf.as_ptr()
                .wrapping_add((u32::from(next) & (cnt - 1)) as usize * stride),
        );
        Ok(Recv {
            idx,
            // SAFETY: after the next segment, inside the WQE.
            segs: unsafe { wqe.add(SrqNextSeg::<()>::LEN) },
            seg_bytes: stride - SrqNextSeg::<()>::LEN,
            srqn,
        })
    } else {
        let cnt = r.rq_cnt.load(Ordering::Relaxed);
        if cnt == 0 {
            return Err(Fail::rnr(delay_us));
        }
        let stride = r.rq_stride.load(Ordering::Relaxed) as usize;
        let (buf, db) = queue_mem(
            fab,
            seg,
            r.rq_off.load(Ordering::Relaxed),
            cnt,
            stride,
            r.dbrec_off.load(Ordering::Relaxed),
        )
        .ok_or(Fail::rnr(delay_us))?;
        let _g = r.rq_lock.lock();
        // SAFETY: the QP doorbell record.
        let posted = unsafe { load_dbrec(db, RCV_DBR) } as u16;
        let ci = r.rq_ci.load(Ordering::Relaxed);
        if ci as u16 == posted {
            return Err(Fail::rnr(delay_us));
        }
        r.rq_ci.store(ci.wrapping_add(1), Ordering::Relaxed);
        let slot = (ci & (cnt - 1)) as usize;
        Ok(Recv {
            idx: ci as u16,
            // SAFETY: WQE `slot` inside the RQ buffer.
            segs: unsafe { buf.as_ptr().add(slot * stride) },
            seg_bytes: stride,
            srqn: u32::MAX,
        })
    }
}

/// Resolves a receive WQE's scatter list; returns its capacity.
fn recv_sges(fab: &Fabric, r: &QpEntry, rv: &Recv, dst: &mut SgList) -> Result<u64, ()> {
    let pd = r.pd.load(Ordering::Relaxed);
    let dev = r.dev.load(Ordering::Relaxed);
    let mut off = 0;
    const DATA: usize = DataSeg::<()>::LEN;
    while off + DATA <= rv.seg_bytes {
        // SAFETY: inside the receive WQE.
        let d =
            DataSeg::new_unchecked(unsafe { std::slice::from_raw_parts(rv.segs.add(off), DATA) });
        let (bc, lkey, addr) = (d.byte_count(), d.lkey(), d.addr());
        if lkey == INVALID_LKEY {
            break;
        }
        let len = if bc == 0 {
            1u64 << 31
        } else {
            u64::from(bc & 0x7fff_ffff)
        };
        let p = resolve(fab, lkey, pd, dev, addr, len, access::LOCAL_WRITE).map_err(|_| ())?;
        if !dst.push(p, len) {
            return Err(());
        }
        off += 16;
    }
    Ok(dst.total)
}

/// With scatter-to-CQE enabled on the responder QP (own RQ only), small
/// messages land in the CQE: up to 32 bytes in a 64-byte CQE (format 1), up
/// to 64 bytes in the first half of a 128-byte CQE (format 2).
fn scatter_to_cqe(
    fab: &Fabric,
    r: &QpEntry,
    rv: &Recv,
    src: &SgList,
    len: u64,
) -> Option<(u8, [u8; 64])> {
    let cqn = r.recv_cqn.load(Ordering::Relaxed);
    let e = &fab.reg().cqs[slot_of(cqn, super::registry::MAX_CQS)];
    if rv.srqn != u32::MAX
        || e.flags.load(Ordering::Relaxed) & super::registry::CQ_SCATTER_TO_CQE == 0
        || len == 0
    {
        return None;
    }
    let size = e.cqe_size.load(Ordering::Relaxed);
    let (fmt, cap) = if size == 128 {
        (2u8, 64u64)
    } else {
        (1u8, 32u64)
    };
    if len > cap {
        return None;
    }
    let mut data = [0u8; 64];
    let mut dst = SgList::new();
    dst.push(data.as_mut_ptr(), cap);
    // SAFETY: `data` is a local buffer of `cap` bytes; the sources are resolved.
    unsafe { sg_copy(src, &dst, len) };
    Some((fmt, data))
}

/// The responder CQE of a receive WQE `rv` of QP `r` (no scatter-to-CQE).
#[inline]
pub(super) fn recv_cqe(
    r: &QpEntry,
    rv: &Recv,
    opcode: CqeOpcode,
    byte_cnt: u32,
    imm: u32,
    src_qpn: u32,
) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut b[..]);
    c.set_sop_drop_qpn(r.qpn.load(Ordering::Relaxed));
    c.set_wqe_counter(rv.idx);
    c.set_byte_cnt(byte_cnt);
    c.set_imm_inval_pkey(imm);
    c.set_flags_rqpn(src_qpn & 0x00ff_ffff);
    c.set_srqn_uidx(if rv.srqn == u32::MAX { 0 } else { rv.srqn });
    c.set_op_own((opcode as u8) << 4);
    b
}

/// What a receive completion reports.
struct RecvDone {
    opcode: CqeOpcode,
    byte_cnt: u32,
    imm: u32,
    /// The requester's QP.
    src_qpn: u32,
    /// Data scattered to the CQE: its format and bytes.
    scatter: Option<(u8, [u8; 64])>,
}

/// Writes the receive CQE of `rv` on the responder `r`.
fn complete_recv(fab: &Fabric, r: &QpEntry, rv: Recv, done: RecvDone) {
    let RecvDone {
        opcode,
        byte_cnt,
        imm,
        src_qpn,
        scatter,
    } = done;
    let mut pre = None;
    let mut b = recv_cqe(r, &rv, opcode, byte_cnt, imm, src_qpn);
    {
        let mut c = Cqe64::new_unchecked(&mut b[..]);
        let mut oo = (opcode as u8) << 4;
        if let Some((fmt, data)) = scatter {
            oo |= fmt << 2;
            if fmt == 1 {
                let dst = c.inline32_mut();
                let n = dst.len();
                dst.copy_from_slice(&data[..n]);
            } else {
                pre = Some(data);
            }
        }
        c.set_op_own(oo);
    }
    // A responder CQ that overruns goes to error on its own; the requester's
    // WQE still completed.
    let mut report = FlushReport::default();
    let cqn = r.recv_cqn.load(Ordering::Relaxed);
    match pre {
        None => cqe_out::push_cqe(fab, cqn, &b, &mut report),
        Some(_) => cqe_out::push(fab, PendingCqe { cqn, cqe: b, pre }, &mut report),
    }
}

fn complete_recv_err(fab: &Fabric, r: &QpEntry, rv: &Recv, syndrome: Syndrome, _src_qpn: u32) {
    let c = err_cqe(
        false,
        r.qpn.load(Ordering::Relaxed),
        rv.idx,
        0,
        syndrome,
        0,
        if rv.srqn == u32::MAX { 0 } else { rv.srqn },
    );
    let mut report = FlushReport::default();
    cqe_out::push_cqe(fab, r.recv_cqn.load(Ordering::Relaxed), &c, &mut report);
}

/// Moves this process's QPs whose send CQ is `cqn` to ERR (after that CQ
/// overran).
pub fn fail_qps_of_cq(fab: &Fabric, cqn: u32) {
    let me = my_pid();
    for e in fab.reg().qps.iter() {
        if e.state.load(Ordering::Acquire) == LIVE
            && e.pid.load(Ordering::Relaxed) == me
            && e.send_cqn.load(Ordering::Relaxed) == cqn
        {
            e.qp_state.store(qp_state::ERR, Ordering::Release);
        }
    }
}

/// Flushes a QP's RQ after it entered ERR through a verb (modify to ERR), with
/// the QP's exec lock taken.
pub fn flush_qp(fab: &Fabric, qpn: u32) -> usize {
    let Some((_, e)) = qp_by_num(fab, qpn) else {
        return 0;
    };
    let _g = e.exec_lock.lock();
    let Some(qp) = qp_view(fab, e) else { return 0 };
    let mut report = FlushReport::default();
    let n = flush_locked(fab, &qp, &mut report);
    cqe_out::flush(fab, &mut report);
    n
}
