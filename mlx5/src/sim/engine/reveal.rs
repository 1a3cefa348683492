//! When the link model lets a transfer's completions appear: a push (a
//! WRITE or SEND of the requester's bytes) and a pull (a READ of the
//! responder's).

use std::sync::atomic::Ordering;

use super::Qp;
use crate::sim::exec::Exec;
use crate::sim::link::{Port, Reveal};
use crate::sim::registry::QpEntry;

/// When the completions of `len` bytes that `qp` sends may appear, if its
/// port has a link model. A DCI's WQE that connects to its DCT first sends
/// the connect packet and then the data without waiting (a half
/// handshake): the data goes one latency later.
pub(super) fn reveal_push(x: &Exec<'_>, qp: &Qp<'_>, len: u64) -> Option<Reveal> {
    if !x.links {
        return None;
    }
    Port::of(x.fab.reg(), qp.dev).map(|p| {
        let connect = if qp.connects() { p.latency_ns() } else { 0 };
        p.push(x.clock.ns() + connect, len)
    })
}

/// When the requester of a READ of `len` bytes from responder `r` has its
/// data, if either port has a link model: the responder's port sends the
/// data, after the request crossed.
pub(super) fn reveal_pull(x: &Exec<'_>, qp: &Qp<'_>, r: &QpEntry, len: u64) -> Option<u64> {
    if !x.links {
        return None;
    }
    let reg = x.fab.reg();
    let now = x.clock.ns();
    let req = Port::of(reg, qp.dev);
    match Port::of(reg, r.dev.load(Ordering::Relaxed)) {
        Some(p) => {
            let request = req.map_or(p.latency_ns(), |q| q.latency_ns());
            // A DCI's connect packet goes first (see `reveal_push`).
            let connect = if qp.connects() { request } else { 0 };
            Some(p.pull(now + connect, request, len))
        }
        None => req.map(|q| {
            let connect = if qp.connects() { q.latency_ns() } else { 0 };
            q.push(now + connect, 0).requester
        }),
    }
}
