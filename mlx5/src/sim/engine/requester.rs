//! The requester's side of a WQE: its gather (or, for READ and atomics,
//! scatter) list, and the execution of each opcode against the responder.

use std::sync::atomic::{AtomicU64, Ordering};

use super::answer;
use super::errors::{Fail, Unanswered};
use super::memory::{resolve, resolve_remote, sg_copy, SgList, MAX_MSG};
use super::responder::{
    access_fault, complete_recv, complete_recv_err, recv_sges, remote_access, responder,
    scatter_to_cqe, solicited, take_recv, RecvDone,
};
use super::reveal::{reveal_pull, reveal_push};
use super::tm;
use super::{Done, Qp};
use crate::prm::{
    AtomicSeg, CqeOpcode, DataSeg, InlineSeg, RaddrSeg, Syndrome, WqeOpcode, INVALID_LKEY,
};
use crate::sim::exec::Exec;
use crate::sim::fabric::Fabric;
use crate::types::access;

/// Where the segments after the control segment start (a SEND's gather list,
/// or the remote address segment).
const AFTER_CTRL: usize = crate::prm::CtrlSeg::<()>::LEN;
/// Where the segments after the remote address segment start.
const AFTER_RADDR: usize = AFTER_CTRL + RaddrSeg::<()>::LEN;
/// Where an atomic WQE's scatter entry starts.
const AFTER_ATOMIC: usize = AFTER_RADDR + AtomicSeg::<()>::LEN;

/// Executes one WQE (`body`: its `ds` × 16 bytes); returns the byte count for
/// its CQE.
pub(super) fn execute(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    body: &[u8],
    opcode: u8,
    imm: u32,
) -> Result<Done, Fail> {
    let op = WqeOpcode::from_u8(opcode).ok_or(Fail::local(Syndrome::LocalQpOp))?;
    match op {
        WqeOpcode::Nop => Ok(Done::now(0)),
        WqeOpcode::RdmaWrite => write(x, qp, body, None),
        WqeOpcode::RdmaWriteImm => write(x, qp, body, Some(imm)),
        WqeOpcode::Send => send(x, qp, body, None),
        WqeOpcode::SendImm => send(x, qp, body, Some(imm)),
        WqeOpcode::RdmaRead => read(x, qp, body),
        WqeOpcode::AtomicCs | WqeOpcode::AtomicFa => atomic(x, qp, body, op),
        _ => Err(Fail::local(Syndrome::LocalQpOp)),
    }
}

/// The remote address and rkey of a WQE that has a remote address segment.
fn remote_of(body: &[u8]) -> Result<(u64, u32), Fail> {
    let seg = body
        .get(AFTER_CTRL..AFTER_RADDR)
        .ok_or(Fail::local(Syndrome::LocalQpOp))?;
    let r = RaddrSeg::new_unchecked(seg);
    Ok((r.raddr(), r.rkey()))
}

/// RDMA WRITE, and WRITE with immediate (which consumes a receive WQE at the
/// responder and completes it with the immediate).
fn write(x: &mut Exec<'_>, qp: &Qp<'_>, body: &[u8], imm: Option<u32>) -> Result<Done, Fail> {
    let (raddr, rkey) = remote_of(body)?;
    let mut src = SgList::new();
    gather(x.fab, qp, body, AFTER_RADDR, 0, &mut src)?;
    let (rslot, r) = responder(x, qp)?;
    access_fault(x, rslot)?;
    let len = src.total;
    if r.access.load(Ordering::Relaxed) & access::REMOTE_WRITE == 0 {
        return Err(remote_access(rslot, 0));
    }
    let dst_ptr = if len == 0 {
        std::ptr::null_mut()
    } else {
        resolve_remote(x.fab, r, rkey, raddr, len, access::REMOTE_WRITE)
            .map_err(|v| remote_access(rslot, v))?
    };
    let recv = match imm {
        Some(_) => Some(take_recv(x, r)?),
        None => None,
    };
    let mut dst = SgList::new();
    dst.push(dst_ptr, len);
    // SAFETY: both lists were resolved against live regions.
    unsafe { sg_copy(&src, &dst, len) };
    let reveal = reveal_push(x, qp, len);
    if let (Some(rv), Some(imm)) = (recv, imm) {
        let done = RecvDone {
            opcode: CqeOpcode::RespWrImm,
            byte_cnt: len as u32,
            imm,
            src_qpn: qp.qpn,
            scatter: None,
            reveal: reveal.map(|t| t.responder),
            solicited: solicited(qp, body),
        };
        complete_recv(x, r, rv, done);
    }
    Ok(Done::at(len as u32, reveal.map(|t| t.requester)))
}

/// SEND, and SEND with immediate, into the responder's next receive WQE.
fn send(x: &mut Exec<'_>, qp: &Qp<'_>, body: &[u8], imm: Option<u32>) -> Result<Done, Fail> {
    let mut src = SgList::new();
    gather(x.fab, qp, body, AFTER_CTRL, 0, &mut src)?;
    let (rslot, r) = responder(x, qp)?;
    if let Some(s) = tm::srq_of(x, r) {
        return tm::deliver(x, qp, (body, imm, &src), (rslot, r, s));
    }
    let rv = take_recv(x, r)?;
    let len = src.total;
    let mut dst = SgList::new();
    let Ok(cap) = recv_sges(x.fab, r, &rv, &mut dst) else {
        // The receive WQE names memory the responder cannot write.
        complete_recv_err(x, r, &rv, Syndrome::LocalProt);
        return Err(Fail::remote(Syndrome::RemoteOp, 0, rslot));
    };
    if len > cap {
        complete_recv_err(x, r, &rv, Syndrome::LocalLength);
        return Err(Fail::remote(Syndrome::RemoteInvalReq, 0, rslot));
    }
    let scatter = scatter_to_cqe(x.fab, r, &rv, &src, len);
    if scatter.is_none() {
        // SAFETY: resolved regions.
        unsafe { sg_copy(&src, &dst, len) };
    }
    let reveal = reveal_push(x, qp, len);
    let done = RecvDone {
        opcode: match imm {
            Some(_) => CqeOpcode::RespSendImm,
            None => CqeOpcode::RespSend,
        },
        byte_cnt: len as u32,
        imm: imm.unwrap_or(0),
        src_qpn: qp.qpn,
        scatter,
        reveal: reveal.map(|t| t.responder),
        solicited: solicited(qp, body),
    };
    complete_recv(x, r, rv, done);
    Ok(Done::at(len as u32, reveal.map(|t| t.requester)))
}

/// RDMA READ from the responder's memory into the local scatter list.
fn read(x: &mut Exec<'_>, qp: &Qp<'_>, body: &[u8]) -> Result<Done, Fail> {
    let (raddr, rkey) = remote_of(body)?;
    let mut dst = SgList::new();
    gather(x.fab, qp, body, AFTER_RADDR, access::LOCAL_WRITE, &mut dst)?;
    let (rslot, r) = responder(x, qp)?;
    access_fault(x, rslot)?;
    let len = dst.total;
    if r.access.load(Ordering::Relaxed) & access::REMOTE_READ == 0 {
        return Err(remote_access(rslot, 0));
    }
    if len > 0 {
        let p = resolve_remote(x.fab, r, rkey, raddr, len, access::REMOTE_READ)
            .map_err(|v| remote_access(rslot, v))?;
        // The response lost on its way back: nothing lands here, and the
        // retry reads again (a duplicate READ is executed again).
        if answer::lost(x, qp) {
            return Err(Fail::transport(qp.e.timeout_us.load(Ordering::Relaxed)));
        }
        let mut src = SgList::new();
        src.push(p, len);
        // SAFETY: resolved regions.
        unsafe { sg_copy(&src, &dst, len) };
    }
    Ok(Done::at(len as u32, reveal_pull(x, qp, r, len)))
}

/// Atomic compare-and-swap or fetch-and-add on an aligned 8-byte word of the
/// responder's; the old value lands in the one 8-byte local scatter entry.
fn atomic(x: &mut Exec<'_>, qp: &Qp<'_>, body: &[u8], op: WqeOpcode) -> Result<Done, Fail> {
    let (raddr, rkey) = remote_of(body)?;
    let seg = body
        .get(AFTER_RADDR..AFTER_ATOMIC)
        .ok_or(Fail::local(Syndrome::LocalQpOp))?;
    let a = AtomicSeg::new_unchecked(seg);
    let (swap_add, compare) = (a.swap_add(), a.compare());
    let mut dst = SgList::new();
    gather(x.fab, qp, body, AFTER_ATOMIC, access::LOCAL_WRITE, &mut dst)?;
    if dst.total != 8 || dst.n != 1 {
        return Err(Fail::local(Syndrome::LocalLength));
    }
    let (rslot, r) = responder(x, qp)?;
    access_fault(x, rslot)?;
    if r.access.load(Ordering::Relaxed) & access::REMOTE_ATOMIC == 0 {
        return Err(remote_access(rslot, 0));
    }
    if raddr % 8 != 0 {
        return Err(Fail::remote(Syndrome::RemoteInvalReq, 0, rslot));
    }
    let p = resolve_remote(x.fab, r, rkey, raddr, 8, access::REMOTE_ATOMIC)
        .map_err(|v| remote_access(rslot, v))?;
    // SAFETY: an 8-byte aligned word inside a live region; other processes
    // access it atomically too. mlx5 treats the target as big-endian and
    // returns the old value big-endian.
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
    // The response lost on its way back: the responder keeps the old value
    // for the duplicate, and nothing lands here yet.
    if answer::lost(x, qp) {
        let u = Unanswered {
            byte_cnt: 8,
            replay: old,
        };
        return Err(Fail::unanswered(qp.e.timeout_us.load(Ordering::Relaxed), u));
    }
    // SAFETY: the 8-byte local destination resolved above.
    unsafe { std::ptr::copy_nonoverlapping(old.to_ne_bytes().as_ptr(), dst.get(0).ptr, 8) };
    Ok(Done::at(8, reveal_push(x, qp, 8).map(|t| t.requester)))
}

/// Sends again a WQE (`body`, `opcode`) that the responder executed before
/// while its answer was lost (`u`): the responder recognises the duplicate
/// and answers it without executing it again — an atomic with the old
/// value it kept — so it completes once the way there and back works (and
/// the responder QP is still there to answer).
pub(super) fn again(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    body: &[u8],
    opcode: u8,
    u: Unanswered,
) -> Result<Done, Fail> {
    let (_, r) = responder(x, qp)?;
    if answer::lost(x, qp) {
        return Err(Fail::unanswered(qp.e.timeout_us.load(Ordering::Relaxed), u));
    }
    if opcode == WqeOpcode::Send as u8 || opcode == WqeOpcode::SendImm as u8 {
        // A rendezvous request whose FIN is still owed sends the FIN.
        let mut src = SgList::new();
        gather(x.fab, qp, body, AFTER_CTRL, 0, &mut src)?;
        if let Some(out) = tm::fin_again(x, qp, r, &src, u) {
            return out;
        }
    }
    if opcode == WqeOpcode::AtomicCs as u8 || opcode == WqeOpcode::AtomicFa as u8 {
        let mut dst = SgList::new();
        gather(x.fab, qp, body, AFTER_ATOMIC, access::LOCAL_WRITE, &mut dst)?;
        if dst.total != 8 || dst.n != 1 {
            return Err(Fail::local(Syndrome::LocalLength));
        }
        // SAFETY: the 8-byte local destination just resolved.
        unsafe {
            std::ptr::copy_nonoverlapping(u.replay.to_ne_bytes().as_ptr(), dst.get(0).ptr, 8)
        };
    }
    Ok(Done::at(
        u.byte_cnt,
        reveal_push(x, qp, 0).map(|t| t.requester),
    ))
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
                return Err(Fail::local(Syndrome::LocalQpOp));
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
            return Err(Fail::local(Syndrome::LocalLength));
        }
    }
    if list.total > MAX_MSG {
        return Err(Fail::local(Syndrome::LocalLength));
    }
    Ok(())
}
