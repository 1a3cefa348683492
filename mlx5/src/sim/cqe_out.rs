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
//! waiters of its completion channel (a futex in the registry). Writing CQEs
//! costs one extra load for this: the armed state, once per write.

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
    cq.e.pi.store(next, Ordering::Release);
    let notable = is_notable(oo);
    if notable {
        cq.e.notable_pi.store(next, Ordering::Relaxed);
    }
    match cq.e.arm.load(Ordering::Relaxed) {
        0 => {}
        ARMED_SOLICITED if !notable => {}
        _ => raise(cq.fab, cq.e),
    }
    true
}

/// Whether a CQE with `op_own` `oo` fires an arm for solicited events: the
/// solicited bit, or an error opcode.
#[inline(always)]
fn is_notable(oo: u8) -> bool {
    oo & op_own::SE_MASK != 0 || matches!(oo >> 4, 13 | 14)
}

/// Raises CQ `e`'s event: disarms it, counts the event and wakes the waiters
/// of its channel. Called with the CQ's lock held.
#[cold]
#[inline(never)]
fn raise(fab: &Fabric, e: &CqEntry) {
    e.arm.store(0, Ordering::Relaxed);
    e.events.fetch_add(1, Ordering::Release);
    let ch = e.chan.load(Ordering::Relaxed) as usize;
    if ch == 0 || ch > MAX_CHANS {
        return;
    }
    let c = &fab.reg().chans[ch - 1];
    c.seq.fetch_add(1, Ordering::Release);
    futex_wake(&c.seq);
}

/// The software device's side of [`CqRing::arm`](crate::cq::CqRing::arm): reads the
/// CQ doorbell from the CQ's UAR page and arms the CQ, or raises its event at
/// once when a CQE the arm asks for is already there, unconsumed as of the
/// arm's consumer index. A doorbell naming another CQ, or with an unknown
/// command, is ignored, as is an arm of a CQ in error.
pub(crate) fn arm(fab: &Fabric, cqn: u32) {
    let Some(cq) = view(fab, cqn) else {
        return;
    };
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
    let _g = cq.e.lock.lock(fab.member());
    if cq.e.overrun.load(Ordering::Relaxed) != 0 {
        return;
    }
    cq.e.arm_sn.store(word.sn(), Ordering::Relaxed);
    let pi = cq.e.pi.load(Ordering::Relaxed);
    let ci = word.ci();
    // CQEs software had not consumed when it armed.
    let unconsumed = pi.wrapping_sub(ci) & 0x00ff_ffff;
    let fire = unconsumed != 0
        && match cmd {
            ArmCmd::Next => true,
            ArmCmd::Solicited => {
                let d = cq.e.notable_pi.load(Ordering::Relaxed).wrapping_sub(ci) & 0x00ff_ffff;
                d != 0 && d <= unconsumed
            }
        };
    if fire {
        raise(fab, cq.e);
    } else {
        let armed = match cmd {
            ArmCmd::Next => ARMED_NEXT,
            ArmCmd::Solicited => ARMED_SOLICITED,
        };
        cq.e.arm.store(armed, Ordering::Relaxed);
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
    cq.e.pi.store(pi, Ordering::Release);
    match cq.e.arm.load(Ordering::Relaxed) {
        0 => {}
        _ if pi == start => {}
        ARMED_SOLICITED => {
            // A solicited or error CQE among those just written.
            let d = cq.e.notable_pi.load(Ordering::Relaxed).wrapping_sub(start);
            if d != 0 && d <= pi.wrapping_sub(start) {
                raise(fab, cq.e);
            }
        }
        _ => raise(fab, cq.e),
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
