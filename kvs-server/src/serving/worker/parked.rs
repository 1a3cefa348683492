//! Requests a worker parked, handled again once what they waited for came:
//! a pulled key, the end of a write in flight, a newer map; and the
//! answers that send a client or a primary away (TRY_AGAIN, FENCED).

use std::time::Instant;

use copyrpc::transport::Transport;
use kvs_proto::proto::{begin_response, finish_response, Status, RESPONSE_HEADER};

use crate::migration::waiting::Parked;
use crate::replication::Forwarder;
use crate::serving::handle::{Handled, Handler};
use crate::serving::map_wait::AwaitingMap;
use crate::serving::read_wait::{ParkedRead, ReadsWaiting};

/// Handles parked requests again now that their keys are settled (or their
/// slots moved on); returns how many were answered.
pub(super) fn settle<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    h: &mut Handler,
    fwd: &mut Forwarder,
    parked: Vec<Parked>,
    out: &mut Vec<u8>,
) -> u64 {
    let mut n = 0;
    for p in parked {
        match h.handle(&p.req, p.handle.max_response(), out) {
            Handled::Answered => {
                let _ = ctx.reply(p.handle, out);
                n += 1;
            }
            Handled::Forward(f) => {
                fwd.prepare(&mut h.primary(), &p.req, f);
                if fwd.forward(ctx, &mut h.primary(), p.handle, f, out) {
                    h.answered_uncommitted = true;
                }
            }
            // Still not here (its pull failed), or a write of it in
            // flight: the client asks again.
            Handled::Pull { .. } | Handled::AwaitWrite { .. } | Handled::AwaitMap => {
                try_again(ctx, p.handle, out)
            }
        }
    }
    n
}

/// Handles again the parked reads whose key no write awaits any more;
/// returns how many were answered.
pub(super) fn reads_due<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    h: &mut Handler,
    reads: &mut ReadsWaiting<copyrpc::RecvHandle>,
    due: &mut Vec<ParkedRead<copyrpc::RecvHandle>>,
    out: &mut Vec<u8>,
) -> u64 {
    reads.take_due(|fp| h.in_flight(fp), due);
    let mut n = 0;
    for r in due.drain(..) {
        match h.handle(&r.req, r.handle.max_response(), out) {
            // Its key's write was made in an earlier turn, and committed.
            Handled::Answered if !h.answered_uncommitted => {
                let _ = ctx.reply_early(r.handle, out);
                reads.recycle(r.req);
                n += 1;
            }
            Handled::Answered => {
                let _ = ctx.reply(r.handle, out);
                reads.recycle(r.req);
                n += 1;
            }
            // A newer write of the key: waits again, within limits.
            Handled::AwaitWrite { .. } => {
                if let Err(handle) = reads.again(r) {
                    try_again(ctx, handle, out);
                }
            }
            // A read is neither forwarded nor (its slot served here) pulled
            // but by a map change since: the client asks again.
            Handled::Forward(_) | Handled::Pull { .. } | Handled::AwaitMap => {
                try_again(ctx, r.handle, out);
                reads.recycle(r.req);
            }
        }
    }
    n
}

/// Handles again, in the order they came, the replication messages that
/// waited for a newer map (one was just installed).
pub(super) fn maps_due<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    h: &mut Handler,
    maps: &mut AwaitingMap<copyrpc::RecvHandle>,
    out: &mut Vec<u8>,
) {
    let now = Instant::now();
    for m in maps.take_all() {
        match h.handle(&m.req, m.handle.max_response(), out) {
            Handled::AwaitMap => {
                if let Err(handle) = maps.again(m, now) {
                    fenced(ctx, handle, out);
                }
            }
            // A replication message is answered or waits: nothing else.
            _ => {
                let _ = ctx.reply(m.handle, out);
                maps.recycle(m.req);
            }
        }
    }
}

/// Refuses a replication message that waited too long for a newer map.
pub(super) fn fenced<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    handle: copyrpc::RecvHandle,
    out: &mut Vec<u8>,
) {
    begin_response(out, Status::Fenced, 0);
    let why = b"the primary's map is newer than this backup's, which did not arrive in time";
    let room = handle.max_response().saturating_sub(RESPONSE_HEADER);
    out.extend_from_slice(&why[..why.len().min(room)]);
    finish_response(out, 0);
    let _ = ctx.reply(handle, out);
}

/// Answers TryAgain: the client sends the request again shortly.
pub(super) fn try_again<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    handle: copyrpc::RecvHandle,
    out: &mut Vec<u8>,
) {
    begin_response(out, Status::TryAgain, 0);
    finish_response(out, 0);
    let _ = ctx.reply(handle, out);
}
