//! The responder's side of a WQE: reaching the peer QP (connected, ready,
//! its process alive), checking access there, taking a receive WQE from its
//! RQ or SRQ (or answering RNR), scattering into it, and its receive CQEs.

use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::errors::{err_cqe, Fail};
use super::memory::{resolve, sg_copy, SgList};
use super::{qp_by_num, Qp};
use crate::doorbell::load_dbrec;
use crate::prm::{
    ctrl_flags, op_own, Cqe64, CqeOpcode, CtrlSeg, DataSeg, SrqNextSeg, Syndrome, INVALID_LKEY,
};
use crate::sim::cqe_out::{FlushReport, PendingCqe};
use crate::sim::exec::Exec;
use crate::sim::fabric::{in_segment, Fabric};
use crate::sim::link;
use crate::sim::registry::{
    qp_kind, qp_state, slot_of, QpEntry, SrqEntry, CQ_SCATTER_TO_CQE, LIVE, MAX_CQS, MAX_SRQS,
};
use crate::types::access;

/// How often a requester checks that its peer's process is alive.
const PEER_CHECK_NS: u64 = 1_000_000;

/// The responder QP of `qp` if it is connected back to `qp` and ready to
/// receive (RTR or RTS); for a DCI, the DCT its WQE names, if that DCT is on
/// the device the route leads to and the WQE carries its key. A DCT
/// answers no packet with another key (it counts a key violation), so the
/// DCI sees no answer, as from a DCT that does not exist.
#[inline]
pub(super) fn connected_peer<'a>(fab: &'a Fabric, qp: &Qp<'_>) -> Option<(usize, &'a QpEntry)> {
    if let Some(d) = qp.dest {
        let (slot, r) = qp_by_num(fab, d.dct)?;
        return (r.kind.load(Ordering::Relaxed) == qp_kind::DCT
            && r.dev.load(Ordering::Relaxed) == d.dev
            && r.dc_key.load(Ordering::Relaxed) == d.key
            && r.qp_state.load(Ordering::Acquire) == qp_state::RTR)
            .then_some((slot, r));
    }
    let (slot, r) = qp_by_num(fab, qp.e.remote_qpn.load(Ordering::Relaxed))?;
    let st = r.qp_state.load(Ordering::Acquire);
    (r.dev.load(Ordering::Relaxed) == qp.e.remote_dev.load(Ordering::Relaxed)
        && r.remote_qpn.load(Ordering::Relaxed) == qp.qpn
        && (st == qp_state::RTR || st == qp_state::RTS))
        .then_some((slot, r))
}

/// The DCT (by registry slot) a DCI's WQE reached with another key, if
/// that is why no peer answered.
#[cold]
fn key_violated(fab: &Fabric, qp: &Qp<'_>) -> Option<usize> {
    let d = qp.dest?;
    let (slot, r) = qp_by_num(fab, d.dct)?;
    (r.kind.load(Ordering::Relaxed) == qp_kind::DCT
        && r.dev.load(Ordering::Relaxed) == d.dev
        && r.dc_key.load(Ordering::Relaxed) != d.key)
        .then_some(slot)
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

/// The responder QP of `qp`, checked as the transport would: a request whose
/// way there is broken (a port down, the path cut that way) never arrives,
/// and a peer that is gone or not ready to receive does not answer. (Whether
/// the answer comes back is `answer`'s business.)
pub(super) fn responder<'a>(x: &mut Exec<'a>, qp: &Qp<'_>) -> Result<(usize, &'a QpEntry), Fail> {
    let timeout_us = qp.e.timeout_us.load(Ordering::Relaxed);
    if x.faults.take_peer() || (x.paths_down && request_lost(x.fab, qp)) {
        return Err(Fail::transport(timeout_us));
    }
    let Some((slot, r)) = connected_peer(x.fab, qp) else {
        return Err(match key_violated(x.fab, qp) {
            Some(dct) => Fail::key_violation(timeout_us, dct),
            None => Fail::transport(timeout_us),
        });
    };
    let now = x.clock.peer_stamp();
    if peer_check_due(qp, now) {
        if !x.fab.member().alive(r.owner.load(Ordering::Relaxed)) {
            return Err(Fail::transport(timeout_us));
        }
        qp.e.peer_seen.store(now, Ordering::Relaxed);
    }
    Ok((slot, r))
}

/// Whether `qp`'s requests are lost on the way to its remote device (the
/// one the QP was connected to at RTR, as the packets' address names it): a
/// port down at either end, or the path cut that way.
#[cold]
fn request_lost(fab: &Fabric, qp: &Qp<'_>) -> bool {
    link::lost(fab.reg(), qp.dev, qp.remote_dev())
}

/// An injected access fault, checked where the responder validates the rkey.
pub(super) fn access_fault(x: &mut Exec<'_>, slot: usize) -> Result<(), Fail> {
    if x.faults.take_access() {
        return Err(remote_access(slot, 0));
    }
    Ok(())
}

/// The responder refused access (key, bounds, rights, PD): both QPs to ERR.
pub(super) fn remote_access(slot: usize, vendor: u8) -> Fail {
    Fail::remote(Syndrome::RemoteAccess, vendor, slot)
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

impl Recv {
    /// The WQE's index: its CQE's `wqe_counter`.
    pub(super) fn idx(&self) -> u16 {
        self.idx
    }
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

/// An SRQ's WQE buffer and doorbell record, resolved in this process.
pub(super) struct SrqMem {
    buf: NonNull<u8>,
    db: NonNull<u8>,
    cnt: u32,
    stride: usize,
}

impl SrqMem {
    /// SRQ `s`'s memory, if its segment is there.
    pub(super) fn of(fab: &Fabric, s: &SrqEntry) -> Option<SrqMem> {
        let cnt = s.cnt.load(Ordering::Relaxed);
        let stride = s.stride.load(Ordering::Relaxed) as usize;
        let (buf, db) = queue_mem(
            fab,
            s.seg.load(Ordering::Relaxed),
            s.buf_off.load(Ordering::Relaxed),
            cnt,
            stride,
            s.dbrec_off.load(Ordering::Relaxed),
        )?;
        Some(SrqMem {
            buf,
            db,
            cnt,
            stride,
        })
    }

    /// Takes the next WQE software posted to SRQ `s` (number `srqn`), with
    /// the SRQ's lock held; `None` if there is none.
    pub(super) fn take(&self, s: &SrqEntry, srqn: u32) -> Option<Recv> {
        let (buf, cnt, stride) = (self.buf, self.cnt, self.stride);
        // SAFETY: the SRQ doorbell record.
        let posted = unsafe { load_dbrec(self.db, 0) } as u16;
        let consumed = s.consumed.load(Ordering::Relaxed);
        if consumed as u16 == posted {
            return None;
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
        Some(Recv {
            idx,
            // SAFETY: after the next segment, inside the WQE.
            segs: unsafe { wqe.add(SrqNextSeg::<()>::LEN) },
            seg_bytes: stride - SrqNextSeg::<()>::LEN,
            srqn,
        })
    }
}

/// Takes the next receive WQE of responder `r` (its SRQ's or its own RQ's),
/// or answers RNR with the responder's delay.
pub(super) fn take_recv(x: &mut Exec<'_>, r: &QpEntry) -> Result<Recv, Fail> {
    let fab = x.fab;
    let delay_us = r.min_rnr_us.load(Ordering::Relaxed);
    if x.faults.take_rnr() {
        return Err(Fail::rnr(delay_us));
    }
    let srqn = r.srqn.load(Ordering::Relaxed);
    let seg = r.seg.load(Ordering::Relaxed);
    if srqn != u32::MAX {
        let s = &fab.reg().srqs[slot_of(srqn, MAX_SRQS)];
        if s.state.load(Ordering::Acquire) != LIVE || s.srqn.load(Ordering::Relaxed) != srqn {
            return Err(Fail::rnr(delay_us));
        }
        let m = SrqMem::of(fab, s).ok_or(Fail::rnr(delay_us))?;
        let _g = s.lock.lock(fab.member());
        m.take(s, srqn).ok_or(Fail::rnr(delay_us))
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
        let Some(ci) = super::rq::claim_rq_wqe(r, db) else {
            return Err(Fail::rnr(delay_us));
        };
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
pub(super) fn recv_sges(fab: &Fabric, r: &QpEntry, rv: &Recv, dst: &mut SgList) -> Result<u64, ()> {
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
pub(super) fn scatter_to_cqe(
    fab: &Fabric,
    r: &QpEntry,
    rv: &Recv,
    src: &SgList,
    len: u64,
) -> Option<(u8, [u8; 64])> {
    let cqn = r.recv_cqn.load(Ordering::Relaxed);
    let e = &fab.reg().cqs[slot_of(cqn, MAX_CQS)];
    if rv.srqn != u32::MAX || e.flags.load(Ordering::Relaxed) & CQ_SCATTER_TO_CQE == 0 || len == 0 {
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

/// Whether `qp`'s WQE whose first bytes are `body` asked for a solicited
/// event at the responder (its control segment's SOLICITED flag): its
/// receive CQE then has the solicited bit. A DCI's body starts past its
/// address vector; its flag came with the address.
#[inline(always)]
pub(super) fn solicited(qp: &Qp<'_>, body: &[u8]) -> bool {
    if let Some(d) = qp.dest {
        return d.solicited;
    }
    body.get(..CtrlSeg::<()>::LEN)
        .is_some_and(|c| CtrlSeg::new_unchecked(c).fm_ce_se() & ctrl_flags::SOLICITED != 0)
}

/// The responder CQE of a receive WQE `rv` of QP `r` (no scatter-to-CQE),
/// with the solicited bit if `se`.
#[inline]
pub(super) fn recv_cqe(
    r: &QpEntry,
    rv: &Recv,
    opcode: CqeOpcode,
    byte_cnt: u32,
    imm: u32,
    src_qpn: u32,
    se: bool,
) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut b[..]);
    c.set_sop_drop_qpn(r.qpn.load(Ordering::Relaxed));
    c.set_wqe_counter(rv.idx);
    c.set_byte_cnt(byte_cnt);
    c.set_imm_inval_pkey(imm);
    c.set_flags_rqpn(src_qpn & 0x00ff_ffff);
    c.set_srqn_uidx(if rv.srqn == u32::MAX { 0 } else { rv.srqn });
    c.set_op_own(((opcode as u8) << 4) | if se { op_own::SE_MASK } else { 0 });
    b
}

/// What a receive completion reports.
pub(super) struct RecvDone {
    pub(super) opcode: CqeOpcode,
    pub(super) byte_cnt: u32,
    pub(super) imm: u32,
    /// The requester's QP.
    pub(super) src_qpn: u32,
    /// Data scattered to the CQE: its format and bytes.
    pub(super) scatter: Option<(u8, [u8; 64])>,
    /// When the link model lets the CQE appear.
    pub(super) reveal: Option<u64>,
    /// The requester asked for a solicited event.
    pub(super) solicited: bool,
}

/// Writes the receive CQE of `rv` on the responder `r`.
pub(super) fn complete_recv(x: &mut Exec<'_>, r: &QpEntry, rv: Recv, done: RecvDone) {
    let RecvDone {
        opcode,
        byte_cnt,
        imm,
        src_qpn,
        scatter,
        reveal,
        solicited,
    } = done;
    let mut pre = None;
    let mut b = recv_cqe(r, &rv, opcode, byte_cnt, imm, src_qpn, solicited);
    {
        let mut c = Cqe64::new_unchecked(&mut b[..]);
        let mut oo = c.op_own();
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
        None => x.push_cqe_at(cqn, &b, reveal, &mut report),
        Some(_) => {
            let c = PendingCqe {
                cqn,
                cqe: b,
                pre,
                plain: false,
            };
            x.push(c, reveal, &mut report)
        }
    }
}

/// Completes receive WQE `rv` of responder `r` in error.
pub(super) fn complete_recv_err(x: &mut Exec<'_>, r: &QpEntry, rv: &Recv, syndrome: Syndrome) {
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
    x.push_cqe(r.recv_cqn.load(Ordering::Relaxed), &c, &mut report);
}
