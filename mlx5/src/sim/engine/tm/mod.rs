//! The NIC's side of tag-matching SRQs: the list commands software posts on
//! an SRQ's command QP (`commands`), and the messages that arrive on a QP
//! on the SRQ and match against the list (`arrival`). Both hold the SRQ's
//! lock while they read or change the list, so that a command and a
//! message are ordered one way or the other.

mod arrival;
mod commands;

use std::sync::atomic::Ordering;

pub(super) use arrival::{deliver, fin_again};
pub(super) use commands::command;

use crate::sim::cqe_out::FlushReport;
use crate::sim::exec::Exec;
use crate::sim::fabric::in_segment;
use crate::sim::registry::{slot_of, QpEntry, SrqEntry, TagSlot, LIVE, MAX_SRQS};

/// The tag-matching SRQ QP `r` receives on, if it is on one.
pub(super) fn srq_of<'f>(x: &Exec<'f>, r: &QpEntry) -> Option<&'f SrqEntry> {
    tm_srq(x, r.srqn.load(Ordering::Relaxed))
}

/// The live tag-matching SRQ `srqn`.
fn tm_srq<'f>(x: &Exec<'f>, srqn: u32) -> Option<&'f SrqEntry> {
    if srqn == u32::MAX {
        return None;
    }
    let s = &x.fab.reg().srqs[slot_of(srqn, MAX_SRQS)];
    (s.state.load(Ordering::Acquire) == LIVE
        && s.srqn.load(Ordering::Relaxed) == srqn
        && s.tm_slots.load(Ordering::Relaxed) != 0)
        .then_some(s)
}

/// SRQ `s`'s tag list, in its segment.
fn tag_list<'f>(x: &Exec<'f>, s: &SrqEntry) -> Option<&'f [TagSlot]> {
    let n = s.tm_slots.load(Ordering::Relaxed) as usize;
    let seg = x.fab.segment(s.seg.load(Ordering::Relaxed))?;
    let len = (n * std::mem::size_of::<TagSlot>()) as u64;
    let p = in_segment(seg, s.tm_off.load(Ordering::Relaxed), len)?;
    // SAFETY: `n` entries inside the SRQ's segment, which lives as long as
    // the fabric mapping; the offset is 64-byte aligned (after the doorbell
    // record's 64 bytes, behind a WQE buffer of power-of-two size), and the
    // entries are atomics.
    Some(unsafe { std::slice::from_raw_parts(p.as_ptr() as *const TagSlot, n) })
}

/// Writes CQE `c` to TM-SRQ `s`'s CQ, where its commands' and its
/// messages' completions go. An overrun puts that CQ in error on its own;
/// the work it completes is done.
fn push(x: &mut Exec<'_>, s: &SrqEntry, c: &[u8; 64]) {
    let mut report = FlushReport::default();
    x.push_cqe(s.tm_cqn.load(Ordering::Relaxed), c, &mut report);
}
