//! Calls, and the requests a context receives and replies to.

use super::{live, live_mut, max_payload, Context, EndpointId, RecvHandle};
use crate::encoding::*;
use crate::endpoint::{copy_small, State};
use crate::error::{CallError, CallFailed, CloseReason, ReplyError};
use crate::transport::Transport;

impl<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport> Context<U, F, T> {
    /// Queues a request of `payload` expecting a response of up to
    /// `max_response` bytes; `user` comes back with the response. Sent by the
    /// next `poll()`. `RingFull` and `InsufficientCredit` are retryable.
    pub fn call(
        &mut self,
        ep: EndpointId,
        payload: &[u8],
        max_response: usize,
        user: U,
    ) -> Result<(), CallError<U>> {
        let Some(e) = self.slot_mut(ep) else {
            return Err(CallError::NoEndpoint(user));
        };
        match &e.state {
            State::Open => {}
            State::Closed(r) => return Err(CallError::Closed(user, r.clone())),
            State::Idle => return Err(CallError::Closed(user, CloseReason::Local)),
        }
        let msg = padded_message_size(payload.len());
        let allowance = align_up(padded_message_size(max_response) + FLOW_METADATA_SIZE);
        // Never fits: a message (and the tail it may waste) must fit beside the
        // largest reservation; an allowance above the peer's maximum is never granted.
        if 2 * (msg + FLOW_METADATA_SIZE) > e.send_size - 2 * e.max_resp
            || allowance > e.recv_size / 4
        {
            return Err(CallError::TooLarge(user, payload.len().max(max_response)));
        }
        if e.peer_credit < allowance {
            return Err(CallError::InsufficientCredit(user));
        }
        if e.in_flight() + e.space_needed(msg) + 2 * e.resp_reservation > e.send_size {
            if !e.read_inflight && !e.want_read {
                e.want_read = true;
                self.reads.push(ep.idx);
            }
            return Err(CallError::RingFull(user));
        }
        let id = e.pending.insert(user);
        debug_assert!(id & RESPONSE_FLAG == 0);
        e.peer_credit -= allowance;
        e.write_message(id, (allowance / ALIGNMENT) as u32, payload);
        e.stats.calls += 1;
        if !e.dirty {
            e.dirty = true;
            self.dirty.push(ep.idx);
        }
        Ok(())
    }

    /// The next received request, in arrival order per endpoint. Its payload
    /// ([`request`](Self::request)) stays readable until the next `poll()`.
    pub fn recv(&mut self) -> Option<RecvHandle> {
        loop {
            let a = self.recvq.pop_front()?;
            let i = a.ep;
            // Requests of a removed endpoint are dropped.
            let Some(e) = live_mut(&mut self.eps, i, a.gen) else {
                continue;
            };
            e.queued.pop_front();
            if !e.consumed_dirty {
                e.consumed_dirty = true;
                self.consumed.push(i);
            }
            // Requests of an endpoint that closed since cannot be answered.
            if e.state != State::Open {
                continue;
            }
            return Some(RecvHandle {
                ep: a.ep,
                gen: a.gen,
                call_id: a.call_id,
                tag: e.tag,
                allowance: a.allowance,
                pos: a.pos,
                len: a.len,
                epoch: self.epoch,
            });
        }
    }

    /// The payload of a request received since the last `poll()` (`None` once a
    /// later poll has released it to the peer).
    pub fn request(&self, h: &RecvHandle) -> Option<&[u8]> {
        if h.epoch != self.epoch {
            return None;
        }
        let e = live(&self.eps, h.ep, h.gen)?;
        Some(e.recv_slice(h.pos, u64::from(h.len)))
    }

    /// Answers a request, in any order. Never `RingFull`: the caller's
    /// allowance was reserved when the credit was granted.
    #[inline]
    pub fn reply(&mut self, h: RecvHandle, payload: &[u8]) -> Result<(), ReplyError> {
        self.reply_with(h, payload.len(), |b| copy_small(b, payload))
    }

    /// Answers a request with a `len`-byte response that `fill` writes where
    /// it is sent from: the send ring, whose space the caller's allowance
    /// reserved. `fill` gets exactly `len` bytes and must write all of them
    /// (what it leaves is whatever the ring held). Nothing is written, and
    /// the request stays unanswered, when the reply is refused.
    ///
    /// ```no_run
    /// # fn f(ctx: &mut copyrpc::Context<u64, fn(u64, Result<&[u8], copyrpc::CallFailed>)>) {
    /// while let Some(req) = ctx.recv() {
    ///     let value = b"the stored value";
    ///     // The header and the value go into the ring; no buffer between.
    ///     let _ = ctx.reply_with(req, 2 + value.len(), |out| {
    ///         out[..2].copy_from_slice(&[0, 0]);
    ///         out[2..].copy_from_slice(value);
    ///     });
    /// }
    /// # }
    /// ```
    #[inline]
    pub fn reply_with(
        &mut self,
        h: RecvHandle,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), ReplyError> {
        let hold = self.hold_replies;
        self.write_reply(h, len, fill, hold)
    }

    /// [`reply_with`](Self::reply_with), for a reply that may leave ahead of
    /// the held ones: it does not hold its endpoint back from
    /// [`flush_unheld`](Self::flush_unheld), even while the context holds
    /// replies ([`set_hold_replies`](Self::set_hold_replies)). An endpoint
    /// an earlier reply of this poll held stays held: its messages leave in
    /// the order they were written.
    #[inline]
    pub fn reply_early_with(
        &mut self,
        h: RecvHandle,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), ReplyError> {
        self.write_reply(h, len, fill, false)
    }

    /// [`reply_early_with`](Self::reply_early_with) of `payload`.
    #[inline]
    pub fn reply_early(&mut self, h: RecvHandle, payload: &[u8]) -> Result<(), ReplyError> {
        self.write_reply(h, payload.len(), |b| copy_small(b, payload), false)
    }

    /// Writes a reply; `hold`: it holds its endpoint until the next poll.
    #[inline(always)]
    fn write_reply(
        &mut self,
        h: RecvHandle,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        hold: bool,
    ) -> Result<(), ReplyError> {
        let Some(e) = live_mut(&mut self.eps, h.ep, h.gen) else {
            return Err(ReplyError::Closed(CloseReason::Local));
        };
        if let State::Closed(r) = &e.state {
            return Err(ReplyError::Closed(r.clone()));
        }
        let max = max_payload(h.allowance);
        if len > max {
            return Err(ReplyError::TooLarge { len, max });
        }
        // The reservation turns into the response: the message, a batch's
        // metadata and a wrap's wasted tail cost at most twice the allowance,
        // which `2R` covered.
        e.resp_reservation -= h.allowance;
        e.write_message_with(h.call_id | RESPONSE_FLAG, 0, len, fill);
        e.stats.replies += 1;
        if hold {
            e.held_at = self.epoch + 1;
        }
        if !e.dirty {
            e.dirty = true;
            self.dirty.push(h.ep);
        }
        Ok(())
    }
}
