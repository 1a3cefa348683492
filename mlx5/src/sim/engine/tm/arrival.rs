//! Messages that arrive on a QP on a tag-matching SRQ: a SEND (or SEND with
//! immediate) whose first 16 bytes are a tag-matching header (`Tmh`).
//!
//! Under the SRQ's lock, as rdma-core's `Documentation/tag_matching.md`
//! describes the NIC:
//! - NO_TAG (and FIN, and a message too short for a header): the whole
//!   message lands in the SRQ's next WQE; CQE `app_op` NO_TAG.
//! - EAGER and RNDV: the earliest appended entry that may match (see
//!   `commands` on the unexpected count) and whose tag agrees with the
//!   message's on the entry's mask takes it; the entry is consumed.
//!   - EAGER: the payload (after the header) lands in the entry's buffer.
//!     A message of one packet (here: header and payload within
//!     [`SINGLE_PACKET`]) completes with one CQE, CONSUMED_MSG; a longer
//!     one with CONSUMED (opcode NO_PACKET, when the header matched) and
//!     EXPECTED (when the data is in). Both name the entry in `app_info`;
//!     the first carries the header in the CQE.
//!   - RNDV whose length fits the buffer: CONSUMED, then the receiving QP
//!     READs the sender's buffer that the `Rvh` names into the entry's
//!     buffer, then EXPECTED with the length read, then the receiving QP
//!     sends the FIN (the request's header, opcode FIN) into the sender's
//!     receive queue.
//!   - RNDV longer than the buffer: CONSUMED_MSG_SW_RDNV, the request
//!     itself (header, `Rvh`, any data) in the buffer as far as it fits;
//!     software reads the data and sends the FIN.
//! - EAGER or RNDV that matches nothing: unexpected. The whole message
//!   lands in the SRQ's next WQE, CQE UNEXPECTED, and the NIC counts it
//!   (`tm_hw_cnt`).
//!
//! Receive CQEs of a TM-SRQ go to its CQ, whatever the QP's receive CQ.
//!
//! Where no document says what a ConnectX does, this device chooses:
//! - an EAGER payload longer than the buffer is cut to the buffer and its
//!   CQE reports the whole length (software sees the excess);
//! - the FIN is the 16-byte header;
//! - a rendezvous whose FIN finds no receive posted at the sender is
//!   answered RNR after the data moved: the sender's WQE is retried until
//!   the FIN lands, and completes then (a NIC would retry its FIN instead);
//! - a rendezvous READ the sender's QP does not allow (no REMOTE_READ), or
//!   whose key does not resolve, fails the request with a remote access
//!   error before the entry is consumed.

use std::sync::atomic::Ordering;

use super::super::errors::{err_cqe, Fail, RetryKind, Unanswered};
use super::super::memory::{resolve, resolve_remote, sg_copy, SgList};
use super::super::responder::{
    complete_recv, recv_sges, remote_access, solicited, take_recv, RecvDone, SrqMem,
};
use super::super::reveal::reveal_push;
use super::super::{qp_by_num, Done, Qp};
use super::{push, srq_of, tag_list};
use crate::prm::{
    op_own, Cqe64, CqeOpcode, Rvh, Syndrome, TmAppOp, Tmh, TmhOpcode, CQE_APP_TAG_MATCHING,
    INVALID_LKEY,
};
use crate::sim::exec::Exec;
use crate::sim::registry::{QpEntry, SrqEntry, TagSlot, TAG_FREE, TAG_POSTED};
use crate::types::access;

/// Largest message (header and payload) this device completes with one
/// CQE when it matches: one packet at a 4096-byte MTU.
pub(in crate::sim::engine) const SINGLE_PACKET: u64 = 4096;

/// The bytes of a header, and of a header and an `Rvh`.
const TMH: usize = 16;
const TMH_RVH: usize = 32;

/// [`Unanswered::replay`] of a rendezvous request whose FIN is still owed
/// to the sender (no atomic uses the value for a SEND).
const FIN_OWED: u64 = 1;

/// What arrived, as the header tells it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    NoTag,
    Eager,
    Rndv,
}

/// A message being delivered: who sent it, to whom, what it holds.
struct Msg<'a> {
    qp: &'a Qp<'a>,
    r: &'a QpEntry,
    rslot: usize,
    s: &'a SrqEntry,
    src: &'a SgList,
    len: u64,
    imm: Option<u32>,
    se: bool,
    /// Its first bytes: the header and, for a rendezvous, the `Rvh`.
    hdr: [u8; TMH_RVH],
}

impl Msg<'_> {
    fn tmh(&self) -> Tmh<&[u8]> {
        Tmh::new_unchecked(&self.hdr[..TMH])
    }
    fn kind(&self) -> Kind {
        if self.len < TMH as u64 {
            return Kind::NoTag;
        }
        match self.tmh().opcode() {
            Some(TmhOpcode::Eager) => Kind::Eager,
            Some(TmhOpcode::Rndv) if self.len >= TMH_RVH as u64 => Kind::Rndv,
            _ => Kind::NoTag,
        }
    }
    fn recv_opcode(&self) -> CqeOpcode {
        match self.imm {
            Some(_) => CqeOpcode::RespSendImm,
            None => CqeOpcode::RespSend,
        }
    }
}

/// Delivers the SEND `body` of `qp` (gathered in `src`, with `imm`) to
/// responder `r` (registry slot `rslot`), which is on tag-matching SRQ `s`.
pub(in crate::sim::engine) fn deliver(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    (body, imm, src): (&[u8], Option<u32>, &SgList),
    (rslot, r, s): (usize, &QpEntry, &SrqEntry),
) -> Result<Done, Fail> {
    let delay_us = r.min_rnr_us.load(Ordering::Relaxed);
    if x.faults.take_rnr() {
        return Err(Fail::rnr(delay_us));
    }
    let mut m = Msg {
        qp,
        r,
        rslot,
        s,
        src,
        len: src.total,
        imm,
        se: solicited(qp, body),
        hdr: [0; TMH_RVH],
    };
    m.hdr = header(src);
    let mem = SrqMem::of(x.fab, s).ok_or(Fail::rnr(delay_us))?;
    let list = tag_list(x, s).ok_or(Fail::rnr(delay_us))?;
    let kind = m.kind();
    let fin = {
        let _g = s.lock.lock(x.fab.member());
        let hit = match kind {
            Kind::NoTag => None,
            Kind::Eager | Kind::Rndv => matching(list, m.tmh().tag()),
        };
        match (kind, hit) {
            (Kind::NoTag, _) => into_srq(x, &m, &mem, TmAppOp::NoTag)?,
            (_, None) => {
                into_srq(x, &m, &mem, TmAppOp::Unexpected)?;
                let n = s.tm_hw_cnt.load(Ordering::Relaxed);
                s.tm_hw_cnt.store((n + 1) & 0xffff, Ordering::Relaxed);
            }
            (Kind::Eager, Some(i)) => eager(x, &m, (i, &list[i]))?,
            (Kind::Rndv, Some(i)) => rndv(x, &m, (i, &list[i]))?,
        }
        kind == Kind::Rndv && hit.is_some_and(|i| rndv_fits(&m, &list[i]))
    };
    let reveal = reveal_push(x, qp, m.len);
    if fin {
        m.hdr[0] = TmhOpcode::Fin.into();
        let u = Unanswered {
            byte_cnt: m.len as u32,
            replay: FIN_OWED,
        };
        send_fin(x, qp, r, &m.hdr).map_err(|f| fin_owed(qp, f, u))?;
    }
    Ok(Done::at(m.len as u32, reveal.map(|t| t.requester)))
}

/// A FIN that could not land (`f`): RNR, with the request marked executed
/// (`u`) so that its retry sends only the FIN; any other failure stands.
fn fin_owed(qp: &Qp<'_>, f: Fail, u: Unanswered) -> Fail {
    match f {
        Fail::Retry {
            kind: RetryKind::Rnr,
            delay_us,
            ..
        } => Fail::Retry {
            kind: RetryKind::Rnr,
            delay_us: delay_us.max(qp.e.min_rnr_us.load(Ordering::Relaxed)),
            key_violation: None,
            unanswered: Some(u),
        },
        f => f,
    }
}

/// A message's first bytes (gathered in `src`): its header and, for a
/// rendezvous, its `Rvh`; zeros past its end.
fn header(src: &SgList) -> [u8; TMH_RVH] {
    let mut hdr = [0u8; TMH_RVH];
    let mut h = SgList::new();
    h.push(hdr.as_mut_ptr(), TMH_RVH as u64);
    // SAFETY: the gather list is resolved; `h` is a local buffer.
    unsafe { sg_copy(src, &h, src.total.min(TMH_RVH as u64)) };
    hdr
}

/// The entry of `list` a message with `tag` goes to: the earliest appended
/// of those posted, allowed to match, and agreeing with `tag` on their mask.
fn matching(list: &[TagSlot], tag: u64) -> Option<usize> {
    let r = Ordering::Relaxed;
    list.iter()
        .enumerate()
        .filter(|(_, e)| {
            e.state.load(r) == TAG_POSTED
                && e.active.load(r) != 0
                && (tag ^ e.tag.load(r)) & e.mask.load(r) == 0
        })
        .min_by_key(|(_, e)| e.seq.load(r))
        .map(|(i, _)| i)
}

/// Whether a rendezvous request's data fits the buffer of entry `e`.
fn rndv_fits(m: &Msg<'_>, e: &TagSlot) -> bool {
    u64::from(Rvh::new_unchecked(&m.hdr[TMH..]).len()) <= u64::from(e.len.load(Ordering::Relaxed))
}

/// The whole message into the SRQ's next WQE (NO_TAG, UNEXPECTED), or RNR
/// when software has posted none. A WQE too small fails both QPs, as on
/// any SRQ.
fn into_srq(x: &mut Exec<'_>, m: &Msg<'_>, mem: &SrqMem, op: TmAppOp) -> Result<(), Fail> {
    let srqn = m.s.srqn.load(Ordering::Relaxed);
    let delay_us = m.r.min_rnr_us.load(Ordering::Relaxed);
    let rv = mem.take(m.s, srqn).ok_or(Fail::rnr(delay_us))?;
    let mut dst = SgList::new();
    let fail = |x: &mut Exec<'_>, syndrome| {
        let qpn = m.r.qpn.load(Ordering::Relaxed);
        let c = err_cqe(false, qpn, rv.idx(), 0, syndrome, 0, srqn);
        push(x, m.s, &c);
    };
    let Ok(cap) = recv_sges(x.fab, m.r, &rv, &mut dst) else {
        fail(x, Syndrome::LocalProt);
        return Err(Fail::remote(Syndrome::RemoteOp, 0, m.rslot));
    };
    if m.len > cap {
        fail(x, Syndrome::LocalLength);
        return Err(Fail::remote(Syndrome::RemoteInvalReq, 0, m.rslot));
    }
    // SAFETY: resolved regions.
    unsafe { sg_copy(m.src, &dst, m.len) };
    let c = cqe(m, (m.recv_opcode(), op), (rv.idx(), m.len as u32), None);
    push(x, m.s, &c);
    Ok(())
}

/// An EAGER message that matched entry `i`: its payload into the entry's
/// buffer, the entry consumed, one CQE or two.
fn eager(x: &mut Exec<'_>, m: &Msg<'_>, (i, e): (usize, &TagSlot)) -> Result<(), Fail> {
    let payload = m.len - TMH as u64;
    let dst = tagged_buffer(x, m, e)?;
    // SAFETY: resolved regions; the copy stops at the buffer's end.
    unsafe { sg_copy(&m.src.skip(TMH as u64), &dst, payload.min(dst.total)) };
    e.state.store(TAG_FREE, Ordering::Relaxed);
    let (entry, bytes) = (i as u16, payload as u32);
    if m.len <= SINGLE_PACKET {
        let op = (m.recv_opcode(), TmAppOp::ConsumedMsg);
        push(x, m.s, &cqe(m, op, (entry, bytes), Some(&m.hdr)));
    } else {
        let first = (CqeOpcode::NoPacket, TmAppOp::Consumed);
        push(x, m.s, &cqe(m, first, (entry, 0), Some(&m.hdr)));
        let then = (m.recv_opcode(), TmAppOp::Expected);
        push(x, m.s, &cqe(m, then, (entry, bytes), None));
    }
    Ok(())
}

/// A rendezvous request that matched entry `i`: the data read into the
/// entry's buffer when it fits (the FIN follows, see [`deliver`]), or the
/// request itself in the buffer for software.
fn rndv(x: &mut Exec<'_>, m: &Msg<'_>, (i, e): (usize, &TagSlot)) -> Result<(), Fail> {
    let dst = tagged_buffer(x, m, e)?;
    let entry = i as u16;
    if !rndv_fits(m, e) {
        // SAFETY: resolved regions; the copy stops at the buffer's end.
        unsafe { sg_copy(m.src, &dst, m.len.min(dst.total)) };
        e.state.store(TAG_FREE, Ordering::Relaxed);
        let op = (m.recv_opcode(), TmAppOp::ConsumedMsgSwRndv);
        push(x, m.s, &cqe(m, op, (entry, m.len as u32), Some(&m.hdr)));
        return Ok(());
    }
    let rvh = Rvh::new_unchecked(&m.hdr[TMH..]);
    let len = u64::from(rvh.len());
    // The sender's buffer, as the READ reaches it: the sender's QP
    // must allow remote reads and the key must cover the range.
    let sender = m.qp.e;
    let refused = || remote_access(m.rslot, 0);
    if len > 0 && sender.access.load(Ordering::Relaxed) & access::REMOTE_READ == 0 {
        return Err(refused());
    }
    let mut from = SgList::new();
    if len > 0 {
        let p = resolve_remote(
            x.fab,
            sender,
            rvh.rkey(),
            rvh.va(),
            len,
            access::REMOTE_READ,
        )
        .map_err(|v| remote_access(m.rslot, v))?;
        from.push(p, len);
    }
    let first = (CqeOpcode::NoPacket, TmAppOp::Consumed);
    push(x, m.s, &cqe(m, first, (entry, 0), Some(&m.hdr)));
    // SAFETY: resolved regions; `len` fits the buffer (`rndv_fits`).
    unsafe { sg_copy(&from, &dst, len) };
    e.state.store(TAG_FREE, Ordering::Relaxed);
    let then = (CqeOpcode::RespSend, TmAppOp::Expected);
    push(x, m.s, &cqe(m, then, (entry, len as u32), None));
    Ok(())
}

/// Entry `e`'s buffer, resolved for the NIC to write (empty for an entry
/// appended without one). A key that does not resolve is the receiver's
/// fault: a local protection error at the receiver, and both QPs to ERR,
/// as for a receive WQE naming memory the NIC cannot write.
fn tagged_buffer(x: &mut Exec<'_>, m: &Msg<'_>, e: &TagSlot) -> Result<SgList, Fail> {
    let r = Ordering::Relaxed;
    let mut dst = SgList::new();
    let (addr, len, lkey) = (e.addr.load(r), e.len.load(r), e.lkey.load(r));
    if lkey == INVALID_LKEY || len == 0 {
        return Ok(dst);
    }
    let (pd, dev) = (m.s.pd.load(r), m.s.dev.load(r));
    match resolve(
        x.fab,
        lkey,
        pd,
        dev,
        addr,
        u64::from(len),
        access::LOCAL_WRITE,
    ) {
        Ok(p) => {
            dst.push(p, u64::from(len));
            Ok(dst)
        }
        Err(_) => {
            let (qpn, srqn) = (m.r.qpn.load(r), m.s.srqn.load(r));
            push(
                x,
                m.s,
                &err_cqe(false, qpn, 0, 0, Syndrome::LocalProt, 0, srqn),
            );
            Err(Fail::remote(Syndrome::RemoteOp, 0, m.rslot))
        }
    }
}

/// The receiving QP `r` sends the FIN `hdr` (16 bytes) to the sender `qp`:
/// into its TM-SRQ as a NO_TAG message, or into its RQ or plain SRQ as a
/// SEND. An RNR failure when no receive is posted there.
fn send_fin(x: &mut Exec<'_>, qp: &Qp<'_>, r: &QpEntry, hdr: &[u8; TMH_RVH]) -> Result<(), Fail> {
    let mut fin = [0u8; TMH];
    fin.copy_from_slice(&hdr[..TMH]);
    let mut src = SgList::new();
    src.push(fin.as_mut_ptr(), TMH as u64);
    let sender = qp.e;
    let (slot, _) = qp_by_num(x.fab, qp.qpn).ok_or(Fail::local(Syndrome::LocalQpOp))?;
    let no_recv = Fail::rnr(sender.min_rnr_us.load(Ordering::Relaxed));
    if let Some(s) = srq_of(x, sender) {
        let mem = SrqMem::of(x.fab, s).ok_or(no_recv)?;
        let mut m = Msg {
            qp,
            r: sender,
            rslot: slot,
            s,
            src: &src,
            len: TMH as u64,
            imm: None,
            se: false,
            hdr: [0; TMH_RVH],
        };
        m.hdr[..TMH].copy_from_slice(&fin);
        let _g = s.lock.lock(x.fab.member());
        return into_srq(x, &m, &mem, TmAppOp::NoTag);
    }
    let rv = take_recv(x, sender)?;
    let mut dst = SgList::new();
    let Ok(cap) = recv_sges(x.fab, sender, &rv, &mut dst) else {
        return Err(Fail::remote(Syndrome::RemoteOp, 0, slot));
    };
    // SAFETY: resolved regions; the copy stops at the receive's end.
    unsafe { sg_copy(&src, &dst, cap.min(TMH as u64)) };
    let done = RecvDone {
        opcode: CqeOpcode::RespSend,
        byte_cnt: TMH as u32,
        imm: 0,
        src_qpn: r.qpn.load(Ordering::Relaxed),
        scatter: None,
        reveal: None,
        solicited: false,
    };
    complete_recv(x, sender, rv, done);
    Ok(())
}

/// A rendezvous request `body` of `qp` retried because its FIN found no
/// receive posted at the sender (`u`): sends the FIN again; the request
/// completes once it lands. `None` when `u` is not such a request.
pub(in crate::sim::engine) fn fin_again(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    r: &QpEntry,
    src: &SgList,
    u: Unanswered,
) -> Option<Result<Done, Fail>> {
    if u.replay != FIN_OWED || srq_of(x, r).is_none() {
        return None;
    }
    let mut hdr = header(src);
    hdr[0] = TmhOpcode::Fin.into();
    Some(match send_fin(x, qp, r, &hdr) {
        Ok(()) => Ok(Done::now(u.byte_cnt)),
        Err(f) => Err(fin_owed(qp, f, u)),
    })
}

/// A receive CQE of TM-SRQ `m.s` for message `m`: `opcode` and `op`, the
/// WQE or entry (`entry`) and byte count, and the header when it matched.
fn cqe(
    m: &Msg<'_>,
    (opcode, op): (CqeOpcode, TmAppOp),
    (entry, byte_cnt): (u16, u32),
    tmh: Option<&[u8; TMH_RVH]>,
) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut b[..]);
    if let Some(h) = tmh {
        let t = Tmh::new_unchecked(&h[..TMH]);
        let mut out = c.tmh_mut();
        out.set_opcode(t.opcode().unwrap_or(TmhOpcode::NoTag));
        out.set_app_ctx(t.app_ctx());
        out.set_tag(t.tag());
    }
    c.set_sop_drop_qpn(m.r.qpn.load(Ordering::Relaxed));
    c.set_wqe_counter(entry);
    c.set_app_info(entry);
    c.set_byte_cnt(byte_cnt);
    c.set_imm_inval_pkey(m.imm.unwrap_or(0));
    c.set_flags_rqpn(m.qp.qpn & 0x00ff_ffff);
    c.set_srqn_uidx(m.s.srqn.load(Ordering::Relaxed));
    c.set_app(CQE_APP_TAG_MATCHING);
    c.set_tm_op(op);
    let se = if m.se && op != TmAppOp::Consumed {
        op_own::SE_MASK
    } else {
        0
    };
    c.set_op_own(((opcode as u8) << 4) | se);
    b
}
