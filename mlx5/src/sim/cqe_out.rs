//! The NIC's side of a CQ: writing CQEs into CQ memory in PRM format, with the
//! owner bit (or, in the enhanced compression layout, the iteration count) set
//! last; compressing runs of similar CQEs when the CQ asks for it; and refusing
//! to overwrite CQEs software has not consumed (overrun).
//!
//! CQEs are produced into a [`CqeBatch`] that the caller owns and written per
//! CQ when the batch is flushed, so that a burst of work can be compressed as
//! a NIC compresses a burst of completions.
//!
//! Events: a CQ armed through its doorbell ([`arm`]) raises one completion
//! event when a CQE it asked for is made visible (solicited-only arms: a CQE
//! of a solicited WQE, or an error CQE), or at once when such a CQE is
//! already there, unconsumed as of the arm's consumer index. Raising it
//! disarms the CQ, counts the event in its registry entry and wakes the
//! waiters of its completion channel (a futex in the registry).
//!
//! Producers (the NICs of every process that completes work into the CQ)
//! serialise among themselves with the CQ's lock. The consumer never takes
//! it: a process may be stopped anywhere in its consumer path (`SIGSTOP`, a
//! debugger, a descheduled VM), and a paused host does not stop a NIC that
//! delivers into its memory. Polling only writes the consumer index to the
//! doorbell record, which producers read; arming publishes the armed state
//! in the arm word (after the arm's consumer index) and then looks at the
//! producer index, while a producer publishes its producer index and then
//! looks at the arm word. Each side does its store and its load
//! sequentially consistent, so at least one of them sees the other's store;
//! both ask the same question (is a CQE the arm wants there, not consumed as
//! of the arm's consumer index?), and whichever takes the arm word from
//! armed to disarmed (a compare-exchange) raises the event: one per arm,
//! exactly when the arm asks for it. A CQ on no completion channel cannot be
//! armed; its producers skip all of this and pay nothing for it.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU8, Ordering};

use super::fabric::{in_segment, Fabric};
use super::registry::{
    slot_of, CqEntry, ARMED_NEXT, ARMED_SOLICITED, CQ_UAR_AFTER_DBREC, LIVE, MAX_CHANS, MAX_CQS,
};
use super::sync::futex_wake;
use crate::doorbell::load_dbrec;
use crate::prm::{
    op_own, ArmCmd, CqDoorbell, Cqe64, CqeOpcode, MiniCqe, CQ_DOORBELL, CQ_SET_CI,
    MINI_PER_BASIC_SLOT, MINI_PER_ENHANCED_SLOT,
};

/// Bytes of a CQE (and of the scatter-to-CQE half before it in 128-byte CQEs).
const CQE_LEN: usize = Cqe64::<()>::LEN;
/// Where the validity bytes start: everything before is copied plainly.
const SIGNATURE: usize = Cqe64::<()>::SIGNATURE_OFFSET;
/// The owner/opcode byte.
const OP_OWN: usize = Cqe64::<()>::OP_OWN_OFFSET;

/// A CQE waiting to be written: the 64-byte CQE, and for 128-byte CQEs the
/// 64 bytes that precede it (scatter-to-CQE data).
#[derive(Clone, Copy)]
pub(crate) struct PendingCqe {
    /// Target CQ number.
    pub(crate) cqn: u32,
    /// The CQE (op_own's owner bit and byte 62 are filled in when written).
    pub(crate) cqe: [u8; 64],
    /// Data for the first half of a 128-byte CQE.
    pub(crate) pre: Option<[u8; 64]>,
    /// Written plain even if the CQ compresses (an injected fault).
    pub(crate) plain: bool,
}

/// CQEs a batch holds at most before it is written.
const BATCH_MAX: usize = 64;

/// CQEs produced and not yet written, in production order. It lives on the
/// stack of a send queue's run (inline mode) or in the deferred scheduler
/// (held across steps); nothing in it is allocated.
pub(crate) struct CqeBatch {
    /// While held, [`flush`] leaves CQEs queued (up to the batch size), so
    /// that completions of several scheduler steps are written — and
    /// compressed — together, as a NIC coalesces completions that queue up.
    hold: bool,
    len: usize,
    items: [MaybeUninit<PendingCqe>; BATCH_MAX],
}

impl std::fmt::Debug for CqeBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqeBatch")
            .field("hold", &self.hold)
            .field("len", &self.len)
            .finish()
    }
}

impl CqeBatch {
    /// An empty batch; `hold` keeps CQEs queued until [`flush_now`].
    #[inline]
    pub(crate) fn new(hold: bool) -> Self {
        CqeBatch {
            hold,
            len: 0,
            items: [const { MaybeUninit::uninit() }; BATCH_MAX],
        }
    }

    fn queued(&mut self) -> &mut [PendingCqe] {
        // SAFETY: the first `len` items were written by `push_item`, and
        // `PendingCqe` is `Copy` (nothing to drop).
        unsafe { std::slice::from_raw_parts_mut(self.items.as_mut_ptr().cast(), self.len) }
    }

    /// Queues `c`; true when the batch is full.
    fn push_item(&mut self, c: PendingCqe) -> bool {
        self.items[self.len].write(c);
        self.len += 1;
        self.len == BATCH_MAX
    }
}

/// What became of a batch: CQs that overran (their CQEs were dropped, and the
/// CQ is in error).
#[derive(Debug, Default)]
pub(crate) struct FlushReport {
    /// CQNs found full.
    pub(crate) overrun: Vec<u32>,
}

/// Queues a CQE; writes the batch when it is full. A CQE for a CQ without
/// compression is written at once (there is nothing to coalesce), unless CQEs
/// are being held for a burst.
pub(crate) fn push(fab: &Fabric, b: &mut CqeBatch, c: PendingCqe, report: &mut FlushReport) {
    if !b.hold {
        let e = &fab.reg().cqs[slot_of(c.cqn, MAX_CQS)];
        if e.zip.load(Ordering::Relaxed) == 0 {
            // Earlier queued CQEs of this CQ keep their order.
            let queued = b.len != 0 && b.queued().iter().any(|q| q.cqn == c.cqn);
            if !queued {
                if !write_one(fab, c.cqn, &c.cqe, c.pre.as_ref()) {
                    report.overrun.push(c.cqn);
                }
                return;
            }
        }
    }
    if b.push_item(c) {
        flush_now(fab, b, report);
    }
}

/// Queues a 64-byte CQE, or writes it at once when nothing is held or queued
/// and the CQ does not compress: the common case, without building a
/// [`PendingCqe`]. `plain` writes it uncompressed whatever the CQ asks. A CQ
/// found full is added to `report`.
#[inline]
pub(crate) fn push_cqe(
    fab: &Fabric,
    b: &mut CqeBatch,
    cqn: u32,
    cqe: &[u8; 64],
    plain: bool,
    report: &mut FlushReport,
) {
    if let Some(cq) = lock_for_one(fab, b, cqn) {
        if !cq.write(cqe) {
            report.overrun.push(cqn);
        }
        return;
    }
    let c = PendingCqe {
        cqn,
        cqe: *cqe,
        pre: None,
        plain,
    };
    push(fab, b, c, report);
}

/// Writes every queued CQE (unless the batch is held).
#[inline]
pub(crate) fn flush(fab: &Fabric, b: &mut CqeBatch, report: &mut FlushReport) {
    if b.len == 0 || b.hold {
        return;
    }
    flush_now(fab, b, report);
}

/// Writes every queued CQE, held or not.
pub(crate) fn flush_now(fab: &Fabric, b: &mut CqeBatch, report: &mut FlushReport) {
    let q = b.queued();
    // Per CQ, each CQ's CQEs in production order (a NIC orders completions per
    // CQ, not across CQs): group the batch by CQ in place, stably, and write
    // each group as one run.
    let mut start = 0;
    while start < q.len() {
        let cqn = q[start].cqn;
        let mut end = start + 1;
        for j in start + 1..q.len() {
            if q[j].cqn == cqn {
                q[end..=j].rotate_right(1);
                end += 1;
            }
        }
        if !write_run(fab, cqn, &q[start..end]) {
            report.overrun.push(cqn);
        }
        start = end;
    }
    b.len = 0;
}

struct CqView<'a> {
    fab: &'a Fabric,
    e: &'a CqEntry,
    buf: *mut u8,
    dbrec: core::ptr::NonNull<u8>,
    cnt: u32,
    size: usize,
    zip: u32,
    /// The CQ is on a completion channel: it may be armed.
    armable: bool,
}

impl CqView<'_> {
    fn cqe64(&self, n: u32) -> *mut u8 {
        // SAFETY: (n & (cnt-1)) * size + size - 64 is inside the CQ buffer.
        unsafe {
            self.buf
                .add(((n & (self.cnt - 1)) as usize) * self.size + self.size - 64)
        }
    }
    fn pass(&self, n: u32) -> u32 {
        n / self.cnt
    }
    /// Slots free at producer index `pi`, at least `need` if that many are: the
    /// consumer's doorbell record (a cache line it writes on every poll) is read
    /// only when the last value seen leaves fewer than `need`.
    fn free(&self, pi: u32, need: u32) -> u32 {
        let used = |ci: u32| (pi.wrapping_sub(ci)) & 0x00ff_ffff;
        let seen = self.e.ci_seen.load(Ordering::Relaxed);
        let f = self.cnt.saturating_sub(used(seen));
        if f >= need {
            return f;
        }
        // SAFETY: the doorbell record lies in the CQ's segment.
        let ci = unsafe { load_dbrec(self.dbrec, CQ_SET_CI) } & 0x00ff_ffff;
        self.e.ci_seen.store(ci, Ordering::Relaxed);
        self.cnt.saturating_sub(used(ci))
    }
    /// Publishes producer index `pi` (the CQEs before it are written), with
    /// the CQ's lock held; returns the arm word as it is after that (0 if
    /// the CQ cannot be armed), for [`fire_if_wanted`].
    #[inline(always)]
    fn publish(&self, pi: u32) -> u32 {
        if !self.armable {
            // Release: producers that take the lock next read `pi` after
            // the CQEs it covers (the lock orders them anyway); no consumer
            // arms this CQ, so there is no arm word to look at.
            self.e.pi.store(pi, Ordering::Release);
            return 0;
        }
        // SeqCst store, then SeqCst load: the producer's half of the
        // handshake with `arm`, which stores the arm word and then loads
        // `pi`, both SeqCst. In the single order of SeqCst operations one
        // store comes first, so either this load sees the arm or the arm's
        // load sees this `pi`: an arm and a CQE that race are never both
        // missed. (Release/acquire alone would allow exactly that: each
        // load may pass the other side's store.) The store is also a
        // release: the CQEs and `notable_pi` written before it are seen by
        // an arm that reads this `pi`.
        self.e.pi.store(pi, Ordering::SeqCst);
        self.e.arm.load(Ordering::SeqCst)
    }

    /// Writes 64 bytes (plus the preceding half for 128-byte CQEs), validity
    /// bytes last.
    fn write(&self, n: u32, cqe: &[u8; 64], pre: Option<&[u8; 64]>, op_own: u8) {
        let p = self.cqe64(n);
        // SAFETY: a CQE slot the consumer has released (checked by the caller
        // through `free`); the validity bytes are stored atomically last.
        unsafe {
            if let (Some(d), 128) = (pre, self.size) {
                std::ptr::copy_nonoverlapping(d.as_ptr(), p.sub(CQE_LEN), CQE_LEN);
                crate::barrier::demote(p.sub(CQE_LEN));
            }
            std::ptr::copy_nonoverlapping(cqe.as_ptr(), p, SIGNATURE);
            let sig = &*(p.add(SIGNATURE) as *const AtomicU8);
            let oo = &*(p.add(OP_OWN) as *const AtomicU8);
            if self.zip == 1 {
                oo.store(op_own, Ordering::Relaxed);
                sig.store(self.pass(n) as u8, Ordering::Release);
            } else {
                sig.store(cqe[SIGNATURE], Ordering::Relaxed);
                oo.store(op_own, Ordering::Release);
            }
            // Into the shared cache, as DDIO places DMA writes.
            crate::barrier::demote(p);
        }
    }
}

fn view(fab: &Fabric, cqn: u32) -> Option<CqView<'_>> {
    let e = &fab.reg().cqs[slot_of(cqn, MAX_CQS)];
    if e.state.load(Ordering::Acquire) != LIVE || e.cqn.load(Ordering::Relaxed) != cqn {
        return None;
    }
    let seg = fab.segment(e.seg.load(Ordering::Relaxed))?;
    let cnt = e.cqe_cnt.load(Ordering::Relaxed);
    let size = e.cqe_size.load(Ordering::Relaxed) as usize;
    let buf = in_segment(
        seg,
        e.buf_off.load(Ordering::Relaxed),
        u64::from(cnt) * size as u64,
    )?;
    let dbrec = in_segment(seg, e.dbrec_off.load(Ordering::Relaxed), 8)?;
    Some(CqView {
        fab,
        e,
        buf: buf.as_ptr(),
        dbrec,
        cnt,
        size,
        zip: e.zip.load(Ordering::Relaxed),
        // Relaxed: set before the entry went LIVE, which the Acquire load
        // of `state` above ordered before this load.
        armable: e.chan.load(Ordering::Relaxed) != 0,
    })
}

fn is_compressible(c: &PendingCqe) -> bool {
    let v = Cqe64::new_unchecked(&c.cqe[..]);
    let op = v.opcode_raw();
    // A solicited CQE stays whole: a mini CQE has no solicited bit.
    !c.plain && c.pre.is_none() && v.op_own() & 0x0e == 0 && matches!(op, 0..=3)
}

/// Whether `c` can be expanded from a mini CQE under `title`, as the `k`-th
/// (1-based) responder CQE after it (enhanced) or the `k`-th of a session
/// (basic, 0-based).
fn fits_title(title: &[u8], c: &PendingCqe, responder_step: u32) -> bool {
    let t = Cqe64::new_unchecked(title);
    let v = Cqe64::new_unchecked(&c.cqe[..]);
    if !is_compressible(c) || t.opcode_raw() != v.opcode_raw() || t.qpn() != v.qpn() {
        return false;
    }
    if v.opcode_raw() == CqeOpcode::Req as u8 {
        return true;
    }
    t.srqn_uidx() == v.srqn_uidx()
        && v.wqe_counter() == t.wqe_counter().wrapping_add(responder_step as u16)
}

fn mini_of(c: &PendingCqe, out: &mut [u8]) {
    let v = Cqe64::new_unchecked(&c.cqe[..]);
    let mut m = MiniCqe::new_unchecked(out);
    if v.opcode_raw() == CqeOpcode::Req as u8 {
        m.set_requester(v.wqe_counter(), v.s_wqe_opcode(), v.byte_cnt());
    } else {
        m.set_responder_hash(0, v.byte_cnt());
    }
}

/// A CQ locked ahead of a CQE that will be written straight into it (see
/// [`lock_for_one`]).
pub(crate) struct LockedCq<'a> {
    cq: CqView<'a>,
    _g: super::sync::ShmGuard<'a>,
}

/// Locks CQ `cqn` for one CQE written straight into it, when the CQ does not
/// compress and no CQE is held or queued (otherwise `None`: use
/// [`push_cqe`]). The engine takes the lock before it moves a message's data,
/// so that no locked instruction stands between the data's stores and the
/// CQE's: the CPU then gains ownership of both cache lines at once.
#[inline]
pub(crate) fn lock_for_one<'a>(fab: &'a Fabric, b: &CqeBatch, cqn: u32) -> Option<LockedCq<'a>> {
    if b.hold || b.len != 0 {
        return None;
    }
    let cq = view(fab, cqn)?;
    if cq.zip != 0 {
        return None;
    }
    let g = cq.e.lock.lock(fab.member());
    Some(LockedCq { cq, _g: g })
}

impl LockedCq<'_> {
    /// Writes the CQE and unlocks; false when the CQ overran (it is then in
    /// error and the CQE is dropped).
    #[inline]
    pub(crate) fn write(self, cqe: &[u8; 64]) -> bool {
        write_plain_held(&self.cq, cqe, None)
    }
}

/// Writes one CQE into a CQ that does not compress. False when the CQ
/// overran (or is gone).
fn write_one(fab: &Fabric, cqn: u32, cqe: &[u8; 64], pre: Option<&[u8; 64]>) -> bool {
    let Some(cq) = view(fab, cqn) else {
        return false;
    };
    let _g = cq.e.lock.lock(fab.member());
    write_plain_held(&cq, cqe, pre)
}

/// Writes one plain CQE with the CQ's lock held. False when the CQ overran.
#[inline(always)]
fn write_plain_held(cq: &CqView<'_>, cqe: &[u8; 64], pre: Option<&[u8; 64]>) -> bool {
    if cq.e.overrun.load(Ordering::Relaxed) != 0 {
        return false;
    }
    let pi = cq.e.pi.load(Ordering::Relaxed);
    if cq.free(pi, 1) < 1 {
        cq.e.overrun.store(1, Ordering::Release);
        return false;
    }
    let oo = cqe[OP_OWN];
    cq.write(
        pi,
        cqe,
        pre,
        (oo & !op_own::OWNER_MASK) | (cq.pass(pi) & 1) as u8,
    );
    let next = pi.wrapping_add(1);
    if is_notable(oo) {
        // Relaxed: published by the store of `pi` that follows (a release).
        cq.e.notable_pi.store(next, Ordering::Relaxed);
    }
    let armed = cq.publish(next);
    if armed & ARM_CMD != 0 {
        fire_if_wanted(cq.fab, cq.e, armed, next);
    }
    true
}

/// Whether a CQE with `op_own` `oo` fires an arm for solicited events: the
/// solicited bit, or an error opcode.
#[inline(always)]
fn is_notable(oo: u8) -> bool {
    oo & op_own::SE_MASK != 0 || matches!(oo >> 4, 13 | 14)
}

/// The command bits of [`CqEntry::arm`] ([`ARMED_NEXT`],
/// [`ARMED_SOLICITED`]; 0: not armed). The bits above count arms.
const ARM_CMD: u32 = 0b11;
/// One arm, in the count of [`CqEntry::arm`].
const ARM_ONE: u32 = ARM_CMD + 1;

/// Whether CQ `e`, with producer index `pi`, holds a CQE that an arm
/// (`cmd`: [`ARMED_NEXT`] or [`ARMED_SOLICITED`]) asks for and that was not
/// consumed as of the arm's consumer index `ci`.
fn wanted(e: &CqEntry, cmd: u32, ci: u32, pi: u32) -> bool {
    let unconsumed = pi.wrapping_sub(ci) & 0x00ff_ffff;
    if unconsumed == 0 || cmd == ARMED_NEXT {
        return unconsumed != 0;
    }
    // Relaxed: a producer wrote it under the lock this producer holds, or
    // the arm reads it after its SeqCst (so acquire) load of `pi`, which
    // the store of `pi` that published it released. A value newer than
    // that `pi` belongs to a producer that stored `pi` after the arm in the
    // SeqCst order, and so sees the arm and asks this itself.
    let d = e.notable_pi.load(Ordering::Relaxed).wrapping_sub(ci) & 0x00ff_ffff;
    d != 0 && d <= unconsumed
}

/// A producer that found CQ `e` armed (arm word `armed`) after publishing
/// producer index `pi`: raises the event if a CQE the arm asks for is
/// there, unconsumed as of the arm's consumer index. A CQE the consumer
/// took before it armed raises nothing, as on a NIC, which compares the
/// arm's consumer index with its producer index.
#[cold]
#[inline(never)]
fn fire_if_wanted(fab: &Fabric, e: &CqEntry, armed: u32, pi: u32) {
    // Relaxed: the consumer stored it before the arm word, and the SeqCst
    // load that read `armed` is an acquire of that store: this is the
    // arm's index or a later arm's (whose arm word then differs from
    // `armed`, so `fire` does nothing; that arm asks for itself).
    let ci = e.arm_ci.load(Ordering::Relaxed);
    if wanted(e, armed & ARM_CMD, ci, pi) {
        fire(fab, e, armed);
    }
}

/// Raises CQ `e`'s event for the arm whose arm word is `armed`, unless
/// someone did already: the consumer's [`arm`] and every producer that saw
/// the arm may try, and the one whose compare-exchange disarms it raises
/// the event. The count in the word's high bits makes the exchange fail for
/// an arm that was taken and armed again since `armed` was read (the count
/// would have to wrap, 2^30 arms, in between).
#[cold]
#[inline(never)]
fn fire(fab: &Fabric, e: &CqEntry, armed: u32) {
    // Relaxed: the exchange only decides who raises; what the event
    // publishes (the CQEs) is ordered by the release increments in `raise`.
    if e.arm
        .compare_exchange(
            armed,
            armed & !ARM_CMD,
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .is_ok()
    {
        raise(fab, e);
    }
}

/// Raises CQ `e`'s event (disarmed by [`fire`]): counts the event and
/// wakes the waiters of its channel.
fn raise(fab: &Fabric, e: &CqEntry) {
    // Release: a waiter that reads the new count (Acquire) sees the CQEs
    // written before it.
    e.events.fetch_add(1, Ordering::Release);
    let ch = e.chan.load(Ordering::Relaxed) as usize;
    if ch == 0 || ch > MAX_CHANS {
        return;
    }
    let c = &fab.reg().chans[ch - 1];
    // Release: a waiter that sees the channel's word move looks at the
    // CQs' event counts next, and must see this one's.
    c.seq.fetch_add(1, Ordering::Release);
    futex_wake(&c.seq);
}

/// The software device's side of [`CqRing::arm`](crate::cq::CqRing::arm): reads the
/// CQ doorbell from the CQ's UAR page and arms the CQ, or raises its event at
/// once when a CQE the arm asks for is already there, unconsumed as of the
/// arm's consumer index. A doorbell naming another CQ, or with an unknown
/// command, is ignored, as is an arm of a CQ in error or on no channel.
///
/// This is the consumer's side: it takes no lock, so a process stopped
/// anywhere in here holds up no producer (see the module's notes).
pub(crate) fn arm(fab: &Fabric, cqn: u32) {
    let Some(cq) = view(fab, cqn) else {
        return;
    };
    if !cq.armable {
        return;
    }
    let Some(seg) = fab.segment(cq.e.seg.load(Ordering::Relaxed)) else {
        return;
    };
    let at = cq.e.dbrec_off.load(Ordering::Relaxed) + CQ_UAR_AFTER_DBREC + CQ_DOORBELL as u64;
    let Some(reg) = in_segment(seg, at, 8) else {
        return;
    };
    // SAFETY: 8 bytes inside the CQ's segment, 8-byte aligned (the UAR page
    // follows the 64-byte aligned doorbell record); software wrote them with
    // one 64-bit store before ringing.
    let raw =
        unsafe { (*(reg.as_ptr() as *const std::sync::atomic::AtomicU64)).load(Ordering::Acquire) };
    let bytes = raw.to_ne_bytes();
    let db = CqDoorbell::new_unchecked(&bytes[..]);
    let (word, to) = (db.arm(), db.cqn());
    let Some(cmd) = word.cmd() else {
        return;
    };
    if to & 0x00ff_ffff != cqn & 0x00ff_ffff {
        return;
    }
    // Relaxed: only the flag matters. An overrun that races with this arm
    // leaves a CQ in error armed (no producer writes into it again), or
    // raises the event for CQEs already in it: either as if the arm had come
    // just before the overrun.
    if cq.e.overrun.load(Ordering::Relaxed) != 0 {
        return;
    }
    // Relaxed: kept for inspection only; nothing orders on it.
    cq.e.arm_sn.store(word.sn(), Ordering::Relaxed);
    let ci = word.ci();
    // Relaxed: published by the SeqCst (so release) update of the arm word
    // below, to the producers whose load of the arm word reads it.
    cq.e.arm_ci.store(ci, Ordering::Relaxed);
    let cmd_bits = match cmd {
        ArmCmd::Next => ARMED_NEXT,
        ArmCmd::Solicited => ARMED_SOLICITED,
    };
    // SeqCst: the consumer's half of the handshake with `CqView::publish`
    // (store the arm word, then load `pi`, both SeqCst). An arm replaces one
    // still pending, and counts one more arm in the high bits, which a
    // producer's clearing of the command bits leaves alone.
    let next = |v: u32| (v & !ARM_CMD).wrapping_add(ARM_ONE) | cmd_bits;
    let prev =
        cq.e.arm
            .fetch_update(Ordering::SeqCst, Ordering::Relaxed, |v| Some(next(v)));
    let armed = next(match prev {
        Ok(v) | Err(v) => v,
    });
    stop_here_if_asked();
    // SeqCst: see above. Also an acquire: a producer's CQEs and
    // `notable_pi` written before the `pi` it reads are seen by `wanted`.
    let pi = cq.e.pi.load(Ordering::SeqCst);
    if wanted(cq.e, cmd_bits, ci, pi) {
        fire(fab, cq.e, armed);
    }
}

/// Writes a run of CQEs for one CQ. False when the CQ overran (or is gone).
fn write_run(fab: &Fabric, cqn: u32, run: &[PendingCqe]) -> bool {
    let Some(cq) = view(fab, cqn) else {
        return false;
    };
    let _g = cq.e.lock.lock(fab.member());
    if cq.e.overrun.load(Ordering::Relaxed) != 0 {
        return false;
    }
    let start = cq.e.pi.load(Ordering::Relaxed);
    let mut pi = start;
    let mut i = 0;
    let mut ok = true;
    while i < run.len() {
        let compress = !run[i].plain;
        let used = match cq.zip {
            1 if compress => write_enhanced(&cq, &mut pi, &run[i..]),
            1 => {
                // Plain, but still in the enhanced layout's ownership format;
                // it ends any title a later block could share.
                cq.e.title.store(u32::MAX, Ordering::Relaxed);
                write_plain(&cq, &mut pi, &run[i])
            }
            2 if compress => write_basic(&cq, &mut pi, &run[i..]),
            _ => write_plain(&cq, &mut pi, &run[i]),
        };
        match used {
            Some(n) => i += n,
            None => {
                cq.e.overrun.store(1, Ordering::Release);
                ok = false;
                break;
            }
        }
    }
    let armed = cq.publish(pi);
    if armed & ARM_CMD != 0 && pi != start {
        fire_if_wanted(fab, cq.e, armed, pi);
    }
    ok
}

fn op_own_of(cq: &CqView<'_>, n: u32, c: &PendingCqe) -> u8 {
    (c.cqe[OP_OWN] & !op_own::OWNER_MASK) | (cq.pass(n) & 1) as u8
}

fn write_plain(cq: &CqView<'_>, pi: &mut u32, c: &PendingCqe) -> Option<usize> {
    if cq.free(*pi, 1) < 1 {
        return None;
    }
    cq.write(*pi, &c.cqe, c.pre.as_ref(), op_own_of(cq, *pi, c));
    *pi = pi.wrapping_add(1);
    if is_notable(c.cqe[OP_OWN]) {
        // Relaxed: published by the store of `pi` at the end of the run (a
        // release).
        cq.e.notable_pi.store(*pi, Ordering::Relaxed);
    }
    Some(1)
}

/// Enhanced layout: a CQE that fits the current title joins a compressed block
/// (up to 7 mini CQEs per slot, one CQ index per mini CQE); otherwise it is
/// written plain and becomes the title.
fn write_enhanced(cq: &CqView<'_>, pi: &mut u32, run: &[PendingCqe]) -> Option<usize> {
    let title_at = cq.e.title.load(Ordering::Relaxed);
    let since = cq.e.since_title.load(Ordering::Relaxed);
    // The title is usable only if nothing but its blocks were written after it.
    let title_ok = title_at != u32::MAX && title_at.wrapping_add(1).wrapping_add(since) == *pi;
    if title_ok {
        // SAFETY: the title slot holds a CQE this CQ wrote; software does not
        // modify plain CQEs.
        let title: [u8; 64] = unsafe { *(cq.cqe64(title_at) as *const [u8; 64]) };
        let mut k = 0usize;
        while k < run.len()
            && k < MINI_PER_ENHANCED_SLOT
            && fits_title(&title, &run[k], since + k as u32 + 1)
        {
            k += 1;
        }
        if k > 0 {
            if cq.free(*pi, k as u32) < k as u32 {
                return None;
            }
            let mut block = [0u8; 64];
            for (j, c) in run[..k].iter().enumerate() {
                mini_of(c, &mut block[j * 8..j * 8 + 8]);
            }
            let op_own = (((k - 1) as u8) << 4) | 0x0c | (cq.pass(*pi) & 1) as u8;
            cq.write(*pi, &block, None, op_own);
            *pi = pi.wrapping_add(k as u32);
            cq.e.since_title.store(since + k as u32, Ordering::Relaxed);
            return Some(k);
        }
    }
    let c = &run[0];
    write_plain(cq, pi, c)?;
    if is_compressible(c) {
        cq.e.title.store(pi.wrapping_sub(1), Ordering::Relaxed);
        cq.e.since_title.store(0, Ordering::Relaxed);
    } else {
        cq.e.title.store(u32::MAX, Ordering::Relaxed);
    }
    Some(1)
}

/// Basic layout: a run of at least two CQEs that fit the first becomes a
/// session: a compressed title whose byte count is the session size, mini CQE
/// arrays at the next slot and every 8th slot after.
fn write_basic(cq: &CqView<'_>, pi: &mut u32, run: &[PendingCqe]) -> Option<usize> {
    let first = &run[0];
    let mut n = 1usize;
    if is_compressible(first) {
        while n < run.len() && n < 256 && fits_title(&first.cqe, &run[n], n as u32) {
            n += 1;
        }
    }
    if n < 2 {
        return write_plain(cq, pi, first);
    }
    if cq.free(*pi, n as u32) < n as u32 {
        return None;
    }
    let t = *pi;
    let groups = n.div_ceil(MINI_PER_BASIC_SLOT);
    for g in 0..groups {
        let slot = if g == 0 { t + 1 } else { t + (8 * g) as u32 };
        let mut arr = [0u8; 64];
        for (j, c) in run[g * 8..n.min(g * 8 + 8)].iter().enumerate() {
            mini_of(c, &mut arr[j * 8..j * 8 + 8]);
        }
        // Array slots are not ownership-checked by software; byte 63 is data.
        // SAFETY: a released slot of this session.
        unsafe { std::ptr::copy_nonoverlapping(arr.as_ptr(), cq.cqe64(slot), 64) };
        crate::barrier::demote(cq.cqe64(slot));
    }
    let mut title = first.cqe;
    Cqe64::new_unchecked(&mut title[..]).set_byte_cnt(n as u32);
    let op_own = (first.cqe[OP_OWN] & op_own::OPCODE_MASK)
        | op_own::FORMAT_COMPRESSED
        | (cq.pass(t) & 1) as u8;
    std::sync::atomic::fence(Ordering::Release);
    cq.write(t, &title, None, op_own);
    *pi = pi.wrapping_add(n as u32);
    Some(n)
}

/// Set by [`stop_in_next_arm`]: the next [`arm`] stops this process halfway.
#[cfg(any(test, feature = "test-hooks"))]
static STOP_IN_ARM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Test support: the next arm of a CQ by this process stops the process
/// (`SIGSTOP` to itself) halfway through, as a scheduler or a debugger may
/// stop it anywhere in its consumer path, until another process sends
/// `SIGCONT`.
#[cfg(any(test, feature = "test-hooks"))]
pub(crate) fn stop_in_next_arm() {
    // Relaxed: only the flag's own value matters; nothing is published
    // with it.
    STOP_IN_ARM.store(true, Ordering::Relaxed);
}

/// Stops this process if `stop_in_next_arm` asked for it (with test hooks).
#[inline(always)]
fn stop_here_if_asked() {
    #[cfg(any(test, feature = "test-hooks"))]
    // Relaxed: see `stop_in_next_arm`.
    if STOP_IN_ARM.swap(false, Ordering::Relaxed) {
        // SAFETY: raise(3) has no preconditions; SIGSTOP cannot be caught,
        // and the process resumes here on SIGCONT.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }
}
