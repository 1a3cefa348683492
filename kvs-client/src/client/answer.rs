//! Answers, from the receive ring to the caller. One poll or wait:
//!
//! 1. [`Client::poll`] / [`Client::wait`] have the context read the answers,
//!    each handed to [`Finish::answer`] where it lies in the receive ring: a
//!    key request's final answer (OK or NOT_FOUND) goes to the caller there;
//!    any other is copied into the inbox.
//! 2. `complete`: every 100 ms, the liveness check (`check_liveness`, in
//!    `peers`, which expires requests past their deadline with `expire`).
//! 3. `follow_inbox` → `answered`, by the op's kind: `key_result` for a key
//!    request (a redirect or try-again goes to `follow`, in `chase`),
//!    `part_answered` for a scan part (in `scan`), `map_answered` for the
//!    map fetch (in `map`).
//! 4. The slow path, `chase`, when anything waits for it.
//!
//! `fail` completes an op with an error, whatever its kind.

use std::time::{Duration, Instant};

use copyrpc::transport::Transport;
use copyrpc::{CloseReason, Context, WaitError};

use crate::error::KvError;
use crate::inbox::{Handler, Inbox};
use crate::reply::Reply;
use crate::retry::Target;
use kvs_proto::proto::{Op, Response, Status, FLAG_MAP_NEWER};

use super::{release, Client, Kind, OpSlot};

impl<T, X: Transport> Client<T, X> {
    /// Sends queued requests, reads answers, and calls `f` for every completed
    /// request. Returns how many completed.
    ///
    /// Redirects and try-agains are followed here, and re-sends whose time
    /// has come are sent. A re-send to a member the client is not connected
    /// to yet connects to it first, blocking for up to
    /// [`ClientOptions::setup_timeout`] (once per member, or once per
    /// backoff for a member that could not be connected).
    ///
    /// [`ClientOptions::setup_timeout`]: crate::ClientOptions::setup_timeout
    pub fn poll(&mut self, mut f: impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        let mut now = 0;
        let n = {
            let (ctx, mut done) = self.finishing(&mut now);
            ctx.poll_with(&mut |op, r| done.answer(op, r, &mut f))
        };
        now + self.complete(n, f)
    }

    /// [`poll`](Self::poll), and if nothing completed, waits for an answer
    /// up to `timeout` (never past the time a request being retried is
    /// due): spinning, then sleeping until one arrives, as
    /// [`ClientOptions::idle`] says ([`copyrpc::Context::wait`]). Returns
    /// how many completed (0: none within `timeout`).
    ///
    /// # Errors
    /// The device could not arm its CQs or wait on its completion channel;
    /// [`poll`](Self::poll) still works.
    ///
    /// [`ClientOptions::idle`]: crate::ClientOptions::idle
    pub fn wait(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> Result<usize, WaitError> {
        let timeout = match self.chaser.next_due() {
            _ if !self.doomed.is_empty() => Duration::ZERO,
            Some(due) => timeout.min(due.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        let mut now = 0;
        let n = {
            let (ctx, mut done) = self.finishing(&mut now);
            ctx.wait_with(timeout, &mut |op, r| done.answer(op, r, &mut f))?
        };
        Ok(now + self.complete(n, f))
    }

    /// The context, and what takes the answers it reads ([`Finish`]),
    /// counting those handed over in `completed`.
    #[inline]
    fn finishing<'a>(
        &'a mut self,
        completed: &'a mut usize,
    ) -> (&'a mut Context<u32, Handler, X>, Finish<'a, T>) {
        let Client {
            ctx,
            ops,
            free,
            in_flight,
            inbox,
            ..
        } = self;
        let done = Finish {
            ops,
            free,
            in_flight,
            inbox,
            completed,
        };
        (ctx, done)
    }

    /// Hands the answers the context received to `f`, following redirects
    /// and try-agains; `events` is what the context's poll or wait handled.
    /// The connections' liveness is looked at every 100 ms: under load every
    /// 1024 polls, and at every poll or wait that found nothing (a dead
    /// server sends nothing more).
    fn complete(
        &mut self,
        events: usize,
        mut f: impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        self.polls = self.polls.wrapping_add(1);
        self.clock = Instant::now();
        let mut n = 0;
        if (events == 0 || self.polls % 1024 == 0)
            && self.clock.duration_since(self.last_check) >= Duration::from_millis(100)
        {
            n += self.check_liveness(&mut f);
        }
        n += self.follow_inbox(&mut f);
        if self.fetched.is_some()
            || self.chaser.pending()
            || !self.doomed.is_empty()
            || self.map_stale
        {
            n += self.chase(&mut f);
        }
        n
    }

    /// Follows the answers the poll copied into the inbox, and empties it.
    /// Following one may fail more calls: a call that failed because its
    /// member is gone has the client remove the member's other connections
    /// (`lost_member`), and the calls waiting on them fail into the inbox
    /// there and then. They are followed too, in another round: dropped,
    /// their requests would never complete (a `Timeout` for the caller),
    /// and a map fetch among them would wait forever. Returns how many of
    /// the caller's requests completed.
    #[inline(always)]
    fn follow_inbox(&mut self, f: &mut impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        let mut n = 0;
        loop {
            let mut done = self.inbox.done.take();
            let mut arena = self.inbox.arena.take();
            for d in done.drain(..) {
                let bytes = d
                    .result
                    .map(|(s, len)| &arena[s as usize..(s + len) as usize]);
                n += self.answered(d.op, bytes, f);
            }
            arena.clear();
            if !self.inbox.give_back(done, arena) {
                return n;
            }
        }
    }

    /// One answer (`bytes`, or why the call failed) to op `i`, by the op's
    /// kind (a long `match` of small arms). Returns how many of the
    /// caller's requests completed.
    #[inline(always)]
    fn answered(
        &mut self,
        i: u32,
        bytes: Result<&[u8], CloseReason>,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        let Some(kind) = self.ops.get(i as usize).map(|s| s.kind) else {
            return 0;
        };
        // The caller was told its deadline passed.
        if self.ops[i as usize].abandoned {
            self.release(i);
            return 0;
        }
        // The flags byte of any answer (checked in full below).
        if let Ok([_, flags, ..]) = bytes {
            if flags & FLAG_MAP_NEWER != 0 {
                self.map_newer(i);
            }
        }
        match kind {
            Kind::Key(op) => {
                let Some(r) = self.key_result(i, op, bytes) else {
                    return 0;
                };
                let tag = self.release(i).expect("a request has its tag");
                self.in_flight -= 1;
                f(tag, r);
                1
            }
            Kind::Part(parent) => self.part_answered(i, parent, bytes, f),
            Kind::Map => {
                self.map_answered(i, bytes);
                0
            }
            Kind::Scan => 0,
        }
    }

    /// The caller's result of key request `i` (an `op`) from its answer
    /// `bytes`; `None` while the request is being chased (re-sent, queued
    /// or parked).
    #[inline(always)]
    fn key_result<'b>(
        &mut self,
        i: u32,
        op: Op,
        bytes: Result<&'b [u8], CloseReason>,
    ) -> Option<Result<Reply<'b>, KvError>> {
        let b = match bytes {
            // The member's connection died with the request on it: in a
            // cluster its slot may be served by a backup by now, so it is
            // sent again, by the next map, until its deadline. Closed by
            // this side: another connection of the member died first, and
            // the client removed this one with it (`lost_member`, the only
            // place the client closes a connection with calls on it).
            Err(CloseReason::PeerGone | CloseReason::Transport(_) | CloseReason::Local)
                if self.map.members().len() > 1 =>
            {
                let ep = self.ops[i as usize].ep;
                if let Some(m) = self.routes.member_of(ep) {
                    self.lost_member(m);
                }
                self.map_stale = true;
                let s = &mut self.ops[i as usize];
                s.maybe_applied = true;
                self.chaser
                    .later(i, &mut s.chase, Target::Route, self.clock);
                return None;
            }
            Err(why) => return Some(Err(KvError::Failed(why))),
            Ok(b) => b,
        };
        let resp = match Response::new_checked(b) {
            Err(e) => return Some(Err(KvError::Malformed(e))),
            Ok(resp) => resp,
        };
        Some(match resp.status() {
            Status::Ok => Ok(if op == Op::Get {
                Reply::Value(resp.payload())
            } else {
                Reply::Done
            }),
            Status::NotFound => Ok(Reply::NotFound),
            st @ (Status::Redirect | Status::TryAgain | Status::Unavailable) => {
                // Unavailable may come after the primary applied it.
                self.ops[i as usize].maybe_applied |= st == Status::Unavailable;
                Err(self.follow(i, st, resp.payload())?)
            }
            // A member of a cluster stopping: its slots moved (it handed
            // them over) or will once it is marked failed; asked again by
            // the next map.
            Status::ShuttingDown if self.map.members().len() > 1 => {
                self.stopping(i);
                self.follow(i, Status::Unavailable, resp.payload())?;
                Err(KvError::ShuttingDown)
            }
            st => Err(KvError::of_status(st, resp.payload())),
        })
    }

    /// Completes op `i` with `e`: a request's caller sees it; a scan part
    /// fails its scan; a map fetch counts as failed. Returns how many of the
    /// caller's requests completed.
    pub(super) fn fail(
        &mut self,
        i: u32,
        e: KvError,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        if self.ops[i as usize].abandoned {
            self.release(i);
            return 0;
        }
        match self.ops[i as usize].kind {
            Kind::Key(_) => {
                let tag = self.release(i).expect("a request has its tag");
                self.in_flight -= 1;
                f(tag, Err(e));
                1
            }
            Kind::Part(parent) => {
                self.release(i);
                self.part_done(parent, |agg| agg.fail(e), f)
            }
            Kind::Map => {
                self.release(i);
                self.fetch_failed(e.to_string());
                0
            }
            Kind::Scan => 0,
        }
    }

    /// Fails the requests whose deadline passed ([`ClientOptions::timeout`]):
    /// the caller is told now; the slot stays taken until its answer (if
    /// any still comes) is dropped. Returns how many completed.
    ///
    /// [`ClientOptions::timeout`]: crate::ClientOptions::timeout
    #[cold]
    pub(super) fn expire(&mut self, f: &mut impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        let limit = self.opts.timeout;
        let mut n = 0;
        for i in 0..self.ops.len() {
            let s = &mut self.ops[i];
            if s.abandoned
                || !matches!(s.kind, Kind::Key(_))
                || self.clock.saturating_duration_since(s.started) < limit
            {
                continue;
            }
            let Some(tag) = s.tag.take() else { continue };
            s.abandoned = true;
            self.in_flight -= 1;
            n += 1;
            f(tag, Err(KvError::Timeout(limit)));
        }
        n
    }
}

/// Answers as the context reads them, where they lie in its receive ring:
/// a key request's final answer (OK or NOT_FOUND, from a member on the
/// client's map) goes to the caller at once, its value borrowed from the
/// ring; anything else is copied into the inbox for
/// [`Client::complete`](Client) to follow.
struct Finish<'a, T> {
    ops: &'a mut [OpSlot<T>],
    free: &'a mut Vec<u32>,
    in_flight: &'a mut usize,
    inbox: &'a Inbox,
    /// How many went to the caller.
    completed: &'a mut usize,
}

impl<T> Finish<'_, T> {
    #[inline]
    fn answer(
        &mut self,
        i: u32,
        r: Result<&[u8], copyrpc::CallFailed>,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) {
        if let (Ok(b), Some(s)) = (&r, self.ops.get(i as usize)) {
            if let Some(reply) = final_reply(s.kind, s.abandoned, b) {
                if let Some(tag) = release(self.ops, self.free, i) {
                    *self.in_flight -= 1;
                    *self.completed += 1;
                    f(tag, Ok(reply));
                }
                return;
            }
        }
        self.inbox.push(i, r);
    }
}

/// The caller's answer in `b`, if `b` ends an op of `kind` as it is: a
/// well-formed OK or NOT_FOUND from a member on the client's map, to a key
/// request whose caller still waits. The value is `b`'s payload, in place.
#[inline]
fn final_reply(kind: Kind, abandoned: bool, b: &[u8]) -> Option<Reply<'_>> {
    let (Kind::Key(op), false) = (kind, abandoned) else {
        return None;
    };
    let resp = Response::new_checked(b).ok()?;
    if resp.flags() & FLAG_MAP_NEWER != 0 {
        return None;
    }
    match resp.status() {
        Status::Ok if op == Op::Get => Some(Reply::Value(resp.payload())),
        Status::Ok => Some(Reply::Done),
        Status::NotFound => Some(Reply::NotFound),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::proto::{begin_response, finish_response, RESPONSE_HEADER};

    fn get_answer(value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        begin_response(&mut b, Status::Ok, 0);
        b.extend_from_slice(value);
        finish_response(&mut b, 0);
        b
    }

    #[test]
    fn a_value_is_handed_over_where_it_lies_only_when_the_answer_is_whole() {
        let get = Kind::Key(Op::Get);
        let b = get_answer(b"the value");
        match final_reply(get, false, &b) {
            Some(Reply::Value(v)) => {
                assert_eq!(v, b"the value");
                assert_eq!(v.as_ptr(), b[RESPONSE_HEADER..].as_ptr(), "not copied");
            }
            other => panic!("{other:?}"),
        }
        // A header that declares more than the answer holds (the rest would
        // lie past the message, in the ring): not handed over. The copying
        // path then reports it as malformed.
        let mut long = b.clone();
        long[4..8].copy_from_slice(&1000u32.to_le_bytes());
        assert!(final_reply(get, false, &long).is_none());
        assert!(Response::new_checked(&long).is_err());
        let mut short = b.clone();
        short.truncate(RESPONSE_HEADER - 1);
        assert!(final_reply(get, false, &short).is_none());
        // Answers the client must act on, or whose caller was told already.
        let mut newer = b.clone();
        newer[1] |= FLAG_MAP_NEWER;
        assert!(final_reply(get, false, &newer).is_none());
        assert!(final_reply(get, true, &b).is_none());
        assert!(final_reply(Kind::Map, false, &b).is_none());
        let mut redirect = Vec::new();
        begin_response(&mut redirect, Status::TryAgain, 0);
        finish_response(&mut redirect, 0);
        assert!(final_reply(get, false, &redirect).is_none());
        assert!(matches!(
            final_reply(Kind::Key(Op::Put), false, &get_answer(b"")),
            Some(Reply::Done)
        ));
    }

    #[test]
    fn a_write_too_old_to_tell_is_an_error_never_a_success() {
        let mut b = Vec::new();
        begin_response(&mut b, Status::TooOld, 0);
        b.extend_from_slice(b"not applied now");
        finish_response(&mut b, 0);
        assert!(final_reply(Kind::Key(Op::Put), false, &b).is_none());
        let r = Response::new_checked(&b).unwrap();
        assert_eq!(
            KvError::of_status(r.status(), r.payload()),
            KvError::TooOld("not applied now".into())
        );
    }
}
