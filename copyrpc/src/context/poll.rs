//! `poll()`: the protocol's steps (consumer positions, receive and send
//! completions, SRQ refill, batches and READs).

use super::batch::on_batch;
use super::endpoints::close;
use super::respond::{Given, Respond, Stored};
use super::{live_mut, Context, EndpointId};
use crate::endpoint::State;
use crate::error::{CallFailed, CloseReason};
use crate::transport::{Sge, Transport, WorkCompletion};

impl<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport> Context<U, F, T> {
    /// Runs the protocol: publishes consumer positions, reads receive
    /// completions (batches) and send completions, refills the SRQ, posts
    /// pending batches and READs. Touches only endpoints with work. Returns the
    /// number of completions handled.
    pub fn poll(&mut self) -> usize {
        self.poll_via(&mut Stored)
    }

    /// [`poll`](Self::poll), handing this poll's responses (and failed
    /// calls) to `on_response` instead of the context's own callback. The
    /// response borrows the receive ring: a caller can use it where it lies
    /// while it holds state the context's callback cannot reach (its own
    /// fields beside the context), and copy only what it keeps. Calls that
    /// fail outside a poll ([`close`](Self::close)) still go to the
    /// context's callback.
    #[inline]
    pub fn poll_with<G: FnMut(U, Result<&[u8], CallFailed>)>(
        &mut self,
        on_response: &mut G,
    ) -> usize {
        self.poll_via(&mut Given(on_response))
    }

    /// One poll, its responses going where `resp` says: the steps in order.
    #[inline]
    pub(super) fn poll_via<R: Respond<U, F>>(&mut self, resp: &mut R) -> usize {
        // Requests handed out by the previous poll are released to the peer.
        self.epoch += 1;
        self.publish_consumed();
        let mut n = self.poll_recv_completions(resp);
        self.refill_srq();
        n += self.poll_send_completions(resp);
        self.flush_dirty(resp);
        self.post_reads(resp);
        n
    }

    /// Sends now what endpoint `ep` has written since it was last flushed
    /// (its calls and replies): closes its open batch, as a poll would, and
    /// posts what its peer has room for. Every other endpoint waits for the
    /// next [`poll`](Self::poll), which sends the rest of `ep`'s too if its
    /// peer's ring had no room for all of it now. Returns true if nothing of
    /// `ep`'s waits any more; false also for an endpoint that is not open
    /// (a refused post closes it, failing its calls through the context's
    /// callback, as a poll would).
    ///
    /// What it is for: sending some endpoints' messages before something
    /// the others' must wait for. A server that makes its changes durable
    /// before its replies leave sends the calls it made to its peers
    /// first, so that their work overlaps its own fsync, and lets the next
    /// poll send the replies after it.
    ///
    /// Allocates nothing. The endpoint stays on the poll's work list, where
    /// the next poll finds nothing left to send.
    pub fn flush(&mut self, ep: EndpointId) -> bool {
        let Self {
            eps,
            shared,
            on_response,
            ..
        } = self;
        let Some(e) = live_mut(eps, ep.idx, ep.gen) else {
            return false;
        };
        if e.state != State::Open {
            return false;
        }
        if !e.dirty {
            return true;
        }
        e.close_batch(true);
        match e.post_ready(shared) {
            Ok(sent) => sent,
            Err(code) => {
                close(e, shared, CloseReason::Refused(code), on_response);
                false
            }
        }
    }

    /// Whether replies written from now on hold their endpoint back from
    /// [`flush_unheld`](Self::flush_unheld) until the next poll (off at
    /// first). A reply that [`reply_early_with`](Self::reply_early_with)
    /// writes never holds.
    ///
    /// What it is for: a server that makes its changes durable before the
    /// replies that depend on them leave, while the others (a read of what
    /// an earlier flush made durable) need not wait. It holds replies,
    /// writes the ones that depend on nothing pending with
    /// `reply_early_with`, and at the end of its batch calls
    /// `flush_unheld`, makes its changes durable, then polls: the held
    /// endpoints' messages leave then.
    #[inline]
    pub fn set_hold_replies(&mut self, hold: bool) {
        self.hold_replies = hold;
    }

    /// [`flush`](Self::flush) of every endpoint with messages waiting that
    /// no reply written since the last poll holds back
    /// ([`set_hold_replies`](Self::set_hold_replies)). Touches only the
    /// endpoints with messages waiting, and allocates nothing; they stay on
    /// the poll's work list, as with `flush`.
    pub fn flush_unheld(&mut self) {
        let held = self.epoch + 1;
        for k in 0..self.dirty.len() {
            let idx = self.dirty[k];
            let Some(e) = self.eps[idx as usize].as_mut() else {
                continue;
            };
            if e.held_at == held || e.state != State::Open || !e.dirty {
                continue;
            }
            e.close_batch(true);
            if let Err(code) = e.post_ready(&mut self.shared) {
                // As `flush`: a refused post closes the endpoint; the next
                // poll takes it off the work list.
                close(
                    e,
                    &mut self.shared,
                    CloseReason::Refused(code),
                    &mut self.on_response,
                );
            }
        }
    }

    /// Publishes the consumer positions of the endpoints whose requests
    /// were consumed since the last poll.
    #[inline(always)]
    fn publish_consumed(&mut self) {
        for &i in &self.consumed {
            // Ring space is released up to the oldest request not yet taken by
            // `recv()`: a request's bytes stay until its handle's poll is over.
            let Some(e) = self.eps[i as usize].as_mut() else {
                continue;
            };
            e.consumed_dirty = false;
            let w = e.queued.front().copied().unwrap_or(e.recv_producer);
            if w > e.last_recv_pos {
                e.last_recv_pos = w;
                self.consumer_arena.write(8 * i as usize, &w.to_le_bytes());
            }
        }
        self.consumed.clear();
    }

    /// Reads the receive completions (one per batch) and delivers their
    /// batches; returns how many were read.
    #[inline(always)]
    fn poll_recv_completions<R: Respond<U, F>>(&mut self, resp: &mut R) -> usize {
        let Self {
            recv_cq,
            srq_posted,
            strays,
            eps,
            shared,
            on_response,
            recvq,
            consumed,
            ..
        } = self;
        let on_response = &mut |u: U, r: Result<&[u8], CallFailed>| resp.call(on_response, u, r);
        T::poll_recv(recv_cq, 256, |c, took| {
            let idx = T::recv_owner(shared, c);
            let e = idx
                .and_then(|i| eps.get_mut(i as usize)?.as_mut())
                .filter(|e| T::recv_from_peer(&e.sq, c));
            // The batch's lines were written by the peer's NIC (in the
            // software device: another core); they are on their way while
            // the endpoint's state is looked at.
            if let Some(e) = &e {
                e.prefetch_batch(u64::from(c.byte_len()));
            }
            if took {
                *srq_posted -= 1;
            }
            let (Some(i), Some(e)) = (idx, e) else {
                *strays += 1;
                return;
            };
            if let Some(code) = c.error() {
                close(e, shared, transport_error(code), on_response);
                return;
            }
            if e.state != State::Open {
                return;
            }
            match on_batch(e, i, c.byte_len(), on_response, recvq) {
                Ok(()) => {
                    if !e.consumed_dirty {
                        e.consumed_dirty = true;
                        consumed.push(i);
                    }
                }
                Err(why) => close(e, shared, CloseReason::Violation(why), on_response),
            }
        })
    }

    /// Keeps the SRQ above 2/3 full.
    #[inline(always)]
    fn refill_srq(&mut self) {
        if self.srq_posted < self.srq_low {
            while self.srq_posted < self.srq_cap && T::srq_post(&mut self.recv_cq) {
                self.srq_posted += 1;
            }
            T::srq_ring(&mut self.recv_cq);
        }
    }

    /// Reads the send completions: retires WQEs, and READ results update
    /// the peer's consumer position. Returns how many were read.
    #[inline(always)]
    fn poll_send_completions<R: Respond<U, F>>(&mut self, resp: &mut R) -> usize {
        let Self {
            send_cq,
            shared,
            eps,
            read_arena,
            on_response,
            dirty,
            ..
        } = self;
        let on_response = &mut |u: U, r: Result<&[u8], CallFailed>| resp.call(on_response, u, r);
        T::poll_send(send_cq, shared, 256, |sh, reg, c| {
            let Some(owner) = T::send_owner(sh, reg, c) else {
                return;
            };
            let i = owner.idx;
            let e = eps
                .get_mut(i as usize)
                .and_then(Option::as_mut)
                .filter(|e| owner.gen.is_none_or(|g| g == e.gen));
            let Some(e) = e else {
                // Work of a removed endpoint: retired, and nothing else.
                T::sq_complete(sh, None, c);
                return;
            };
            if let Some(code) = c.error() {
                T::sq_complete(sh, Some(&mut e.sq), c);
                if e.state == State::Open {
                    close(e, sh, transport_error(code), on_response);
                }
                return;
            }
            if T::sq_complete(sh, Some(&mut e.sq), c) {
                e.read_inflight = false;
                let mut w = [0u8; 8];
                read_arena.read(8 * i as usize, &mut w);
                if let Err(why) = e.update_remote_consumer(u64::from_le_bytes(w)) {
                    close(e, sh, CloseReason::Violation(why), on_response);
                } else if !e.dirty {
                    // Space may have opened for queued ranges.
                    e.dirty = true;
                    dirty.push(i);
                }
            }
        })
    }

    /// Flushes the endpoints with data: closes their open batches and posts
    /// what their peers have room for.
    #[inline(always)]
    fn flush_dirty<R: Respond<U, F>>(&mut self, resp: &mut R) {
        let mut i = 0;
        while i < self.dirty.len() {
            let idx = self.dirty[i];
            let Some(e) = self.eps[idx as usize].as_mut() else {
                self.dirty.swap_remove(i);
                continue;
            };
            if e.state != State::Open {
                e.dirty = false;
                self.dirty.swap_remove(i);
                continue;
            }
            e.close_batch(true);
            match e.post_ready(&mut self.shared) {
                Ok(true) => {
                    e.dirty = false;
                    self.dirty.swap_remove(i);
                }
                Ok(false) => i += 1,
                Err(code) => {
                    let stored = &mut self.on_response;
                    close(
                        e,
                        &mut self.shared,
                        CloseReason::Refused(code),
                        &mut |u, r| resp.call(stored, u, r),
                    );
                    e.dirty = false;
                    self.dirty.swap_remove(i);
                }
            }
        }
    }

    /// Issues the READs of the peers' consumer positions that endpoints
    /// asked for.
    #[inline(always)]
    fn post_reads<R: Respond<U, F>>(&mut self, resp: &mut R) {
        let Self {
            reads,
            eps,
            shared,
            read_arena,
            on_response,
            ..
        } = self;
        let on_response = &mut |u: U, r: Result<&[u8], CallFailed>| resp.call(on_response, u, r);
        reads.retain(|&idx| {
            let Some(e) = eps[idx as usize].as_mut() else {
                return false;
            };
            if e.state != State::Open {
                e.want_read = false;
                return false;
            }
            let dst = Sge {
                addr: read_arena.addr() + 8 * u64::from(idx),
                len: 8,
                lkey: read_arena.lkey(),
            };
            match e.post_read(shared, dst) {
                Ok(true) => {
                    e.want_read = false;
                    false
                }
                Ok(false) => true,
                Err(code) => {
                    e.want_read = false;
                    close(e, shared, CloseReason::Refused(code), on_response);
                    false
                }
            }
        });
    }
}

/// The close reason of a transport error code (codes above 255, which neither
/// mlx5 syndromes nor `ibv_wc_status` values reach, read as 255).
fn transport_error(code: u32) -> CloseReason {
    CloseReason::Transport(u8::try_from(code).unwrap_or(u8::MAX))
}
