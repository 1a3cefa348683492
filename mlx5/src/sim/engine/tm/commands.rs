//! A tag-matching SRQ's list commands: the tag-matching
//! WQEs (opcode 0x28) of a QP on the SRQ (its command QP), executed in the
//! QP's order with the SRQ's lock held, so that they serialise with the
//! messages that match against the list.
//!
//! The list follows the rules rdma-core's `Documentation/tag_matching.md`
//! and its mlx5 provider rely on:
//! - an APPEND fills the entry the previous APPEND named in its `index`
//!   (entry 0 first) and names the entry the next one fills;
//! - a REMOVE frees a posted entry; one a message consumed already fails
//!   (its CQE lacks [`TMC_SUCCESS`]);
//! - a command with `SW_CNT` reports software's count of handled
//!   unexpected messages. Entries appended while that count trails the
//!   NIC's do not match; once a command brings the counts level, they all
//!   do.
//!
//! A command asks for its CQE with `CQE_REQ` in its segment (not the
//! control segment's `CQ_UPDATE`): a `NO_PACKET` CQE, `app` tag matching,
//! `app_op` APPEND / REMOVE / NOOP, written to the SRQ's CQ, carrying the
//! success bit, the NIC's unexpected count (`hw_phase_cnt`), the entry in
//! `app_info` and the command's WQE counter.
//!
//! What a ConnectX does with a malformed command (an APPEND onto an entry
//! that is in use, or an `index` beyond the list) no document says; here it
//! is a local QP operation error, which moves the command QP to ERR.

use std::sync::atomic::Ordering;

use super::super::errors::Fail;
use super::super::{Done, Qp};
use super::{push, tag_list, tm_srq};
use crate::prm::{
    tm_flags, Cqe64, CqeOpcode, CtrlSeg, DataSeg, Syndrome, TmAppOp, TmCmd, TmOpcode, TmSeg,
    CQE_APP_TAG_MATCHING, INVALID_LKEY, TMC_SUCCESS,
};
use crate::sim::exec::Exec;
use crate::sim::registry::{SrqEntry, TagSlot, TAG_FREE, TAG_POSTED};

/// Where the tag-matching segment starts.
const TM_SEG: usize = CtrlSeg::<()>::LEN;
/// Where an APPEND's data segment starts.
const TM_DATA: usize = TM_SEG + TmSeg::<()>::LEN;

/// Executes the tag-matching WQE `body` (counter `wqe_counter`) of `qp`,
/// which must be a QP on a tag-matching SRQ.
pub(in crate::sim::engine) fn command(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    body: &[u8],
    wqe_counter: u16,
) -> Result<Done, Fail> {
    let bad = || Fail::local(Syndrome::LocalQpOp);
    let srqn = qp.e.srqn.load(Ordering::Relaxed);
    let s = tm_srq(x, srqn).ok_or_else(bad)?;
    let seg = TmSeg::new_checked(body.get(TM_SEG..TM_DATA).ok_or_else(bad)?).map_err(|_| bad())?;
    let cmd = seg.get().ok_or_else(bad)?;
    let buf = body
        .get(TM_DATA..TM_DATA + DataSeg::<()>::LEN)
        .map(DataSeg::new_unchecked);
    let _g = s.lock.lock(x.fab.member());
    let list = tag_list(x, s).ok_or_else(bad)?;
    if cmd.flags & tm_flags::SW_CNT != 0 {
        sync(s, list, cmd.sw_cnt);
    }
    let (op, entry, ok) = match cmd.opcode {
        TmOpcode::Append => {
            let at = s.tm_next.load(Ordering::Relaxed);
            let next = u32::from(cmd.index);
            let e = list.get(at as usize).ok_or_else(bad)?;
            if next as usize >= list.len()
                || next == at
                || e.state.load(Ordering::Relaxed) != TAG_FREE
            {
                return Err(bad());
            }
            append(
                s,
                e,
                &cmd,
                buf.map(|d| (d.addr(), d.byte_count(), d.lkey())),
            );
            s.tm_next.store(next, Ordering::Relaxed);
            (TmAppOp::Append, at, true)
        }
        TmOpcode::Remove => {
            let at = u32::from(cmd.index);
            let e = list.get(at as usize).ok_or_else(bad)?;
            // A consumed entry stays the message's until its last CQE;
            // software frees it then.
            let ok = e.state.load(Ordering::Relaxed) == TAG_POSTED;
            if ok {
                e.state.store(TAG_FREE, Ordering::Relaxed);
            }
            (TmAppOp::Remove, at, ok)
        }
        TmOpcode::Nop => (TmAppOp::Noop, 0, true),
    };
    if cmd.flags & tm_flags::CQE_REQ != 0 {
        let c = list_cqe(s, qp.qpn, wqe_counter, (op, entry, ok));
        push(x, s, &c);
    }
    Ok(Done::now(0))
}

/// Takes software's count of handled unexpected messages; when it reaches
/// the NIC's, every posted entry may match.
fn sync(s: &SrqEntry, list: &[TagSlot], sw_cnt: u16) {
    s.tm_sw_cnt.store(u32::from(sw_cnt), Ordering::Relaxed);
    if u32::from(sw_cnt) == s.tm_hw_cnt.load(Ordering::Relaxed) {
        for e in list {
            e.active.store(1, Ordering::Relaxed);
        }
    }
}

/// Fills free entry `e` with an APPEND's tag, mask and buffer (`None`, or
/// the end-of-list lkey: an empty buffer).
fn append(s: &SrqEntry, e: &TagSlot, cmd: &TmCmd, buf: Option<(u64, u32, u32)>) {
    let r = Ordering::Relaxed;
    let (addr, len, lkey) = match buf {
        Some((_, _, INVALID_LKEY)) | None => (0, 0, INVALID_LKEY),
        Some(b) => b,
    };
    let level = s.tm_sw_cnt.load(r) == s.tm_hw_cnt.load(r);
    e.active.store(u32::from(level), r);
    e.seq.store(u64::from(s.tm_seq.fetch_add(1, r)), r);
    e.tag.store(cmd.append_tag, r);
    e.mask.store(cmd.append_mask, r);
    e.addr.store(addr, r);
    e.len.store(len, r);
    e.lkey.store(lkey, r);
    e.state.store(TAG_POSTED, r);
}

/// The CQE of a list command (`op`, on entry `entry`, succeeded `ok`).
fn list_cqe(
    s: &SrqEntry,
    qpn: u32,
    wqe_counter: u16,
    (op, entry, ok): (TmAppOp, u32, bool),
) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut b[..]);
    c.set_tm_success(if ok { TMC_SUCCESS } else { 0 });
    c.set_tm_hw_phase_cnt(s.tm_hw_cnt.load(Ordering::Relaxed) as u16);
    c.set_srqn_uidx(s.srqn.load(Ordering::Relaxed));
    c.set_app(CQE_APP_TAG_MATCHING);
    c.set_tm_op(op);
    c.set_app_info(entry as u16);
    c.set_sop_drop_qpn(qpn);
    c.set_wqe_counter(wqe_counter);
    c.set_op_own((CqeOpcode::NoPacket as u8) << 4);
    b
}
