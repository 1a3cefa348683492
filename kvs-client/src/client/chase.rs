//! Following redirects, try-agains and UNAVAILABLE answers. `follow` hands
//! the answer to the [`Chaser`](crate::retry::Chaser), which decides (after
//! the client connects to an owner its own map names and it lacks), and
//! carries out the step: `resend` now, or later from `chase`.
//!
//! `chase` is the slow path of a poll or wait that has something for it, in
//! this order: the requests that failed before they were sent, a fetched
//! map to install (the requests parked for it are routed by it), a map
//! fetch to start (a member was lost, or an answer came from a newer map:
//! `map_newer`, `stopping`), and the re-sends that are due.

use std::time::Instant;

use copyrpc::transport::Transport;
use copyrpc::{CallError, CloseReason, EndpointId};

use crate::error::KvError;
use crate::reply::Reply;
use crate::retry::{Answer, Answered, Step, Target};
use kvs_proto::proto::{self, Op, Redirect, Response, Status, REQUEST_HEADER};

use super::submit::call_failed;
use super::{Client, Kind};

/// Where a request carries the map version it was routed by.
const MAP_VERSION: std::ops::Range<usize> = 4..8;

impl<T, X: Transport> Client<T, X> {
    /// Follows a redirect or a try-again (`st`, `payload`) of op `i`: `None`
    /// while it is being chased (re-sent, queued or parked), else the error
    /// it ends with.
    #[cold]
    pub(super) fn follow(&mut self, i: u32, st: Status, payload: &[u8]) -> Option<KvError> {
        let answer = match st {
            Status::TryAgain => Answer::TryAgain,
            Status::Unavailable => Answer::Unavailable,
            _ => match Redirect::parse(payload) {
                Ok(r) => Answer::Redirect(r),
                Err(e) => return Some(KvError::Malformed(e)),
            },
        };
        let fixed = !matches!(self.ops[i as usize].kind, Kind::Key(_));
        // To an owner the client's map names and the client is not connected
        // to: connected first. (One named by a newer map waits for that map,
        // which says where it is.)
        if let Answer::Redirect(r) = answer {
            if !fixed
                && r.map_version <= self.routes.version()
                && self.routes.endpoint(r.owner).is_none()
            {
                if let Err(e) = self.reach(r.owner.member) {
                    return Some(e);
                }
            }
        }
        let now = Instant::now();
        let s = &mut self.ops[i as usize];
        let routes = &self.routes;
        let reply = Answered {
            answer,
            from: s.ep,
            fixed,
        };
        let step = self.chaser.on_answer(
            i,
            &mut s.chase,
            reply,
            routes.version(),
            |o| routes.endpoint(o),
            now,
        );
        match step {
            Step::Send(ep, version) => {
                raise_version(&mut self.ops[i as usize].req, version);
                self.resend(i, Target::To(ep))
            }
            Step::Queued | Step::Parked => None,
            // Still without a lease when the chase ran out: the server's
            // word, which names the member and why.
            Step::Fail(why) if st == Status::Unavailable => Some(KvError::Unavailable(format!(
                "{} ({why})",
                String::from_utf8_lossy(payload)
            ))),
            Step::Fail(why) => Some(self.no_route(why)),
        }
    }

    /// Op `i` was answered by a member that is stopping: the map is fetched
    /// again from another member.
    #[cold]
    pub(super) fn stopping(&mut self, i: u32) {
        let from = self.ops[i as usize].ep;
        let other = self.routes.member_of(from).and_then(|m| {
            self.routes
                .all()
                .iter()
                .copied()
                .find(|&e| self.routes.member_of(e) != Some(m))
        });
        if let Some(ep) = other {
            self.chaser.newer_map(ep);
        }
    }

    /// Op `i` was answered by a server with a newer map than the one it was
    /// routed by: if that was the client's newest, the client fetches the
    /// server's (so it learns of changes that moved none of its keys).
    #[cold]
    pub(super) fn map_newer(&mut self, i: u32) {
        let s = &self.ops[i as usize];
        let version = self.routes.version();
        if proto::routed_by(&s.req) >= version {
            self.chaser.newer_map(s.ep);
        }
    }

    /// The error of a request that could not be routed, with the last map
    /// problem if there was one.
    fn no_route(&self, why: String) -> KvError {
        KvError::NoRoute(match &self.map_error {
            Some(m) => format!("{why} (the last map fetch failed: {m})"),
            None => why,
        })
    }

    /// Whether `key`'s slot has a ready backup in the client's map: the
    /// group moves it there when its owner fails.
    pub(super) fn may_fail_over(&self, key: &[u8]) -> bool {
        let slot = kvs_proto::shard::slot_of(key, self.map.slots());
        self.map.backups(slot).iter().any(|b| b.ready)
    }

    /// Sends op `i`'s request again, to `to`, as routed by the client's map
    /// (or the newer one a redirect named): `None` when sent or queued as
    /// busy, else the error it ends with.
    pub(super) fn resend(&mut self, i: u32, to: Target<EndpointId>) -> Option<KvError> {
        let ep = match to {
            Target::To(ep) => ep,
            Target::Route => {
                let key = request_key(&self.ops[i as usize].req);
                match self.routes.of_key(key) {
                    Some(ep) => ep,
                    None => match self.reach_owner(self.map.owner(key)) {
                        Ok(ep) => ep,
                        // Its owner's connection died and the group can
                        // move its slot to a ready backup: asked again
                        // later (by the map in use then), until its
                        // deadline.
                        Err(KvError::Unreachable { .. })
                            if self.may_fail_over(request_key(&self.ops[i as usize].req)) =>
                        {
                            let s = &mut self.ops[i as usize];
                            self.chaser
                                .later(i, &mut s.chase, Target::Route, Instant::now());
                            return None;
                        }
                        Err(e) => return Some(e),
                    },
                }
            }
        };
        let s = &mut self.ops[i as usize];
        raise_version(&mut s.req, self.routes.version());
        if s.maybe_applied {
            // The server may have applied an earlier send: it must not
            // apply this one unless it can tell it did not.
            proto::mark_resent(&mut s.req);
        }
        s.ep = ep;
        let key_op = matches!(s.kind, Kind::Key(_));
        match self.ctx.call(ep, &s.req, s.allowance, i) {
            Ok(()) => None,
            Err(e) if e.is_retryable() => {
                self.chaser.busy(i, to);
                None
            }
            // The connection died since the request was routed to it (its
            // failure not followed yet): as `submit` does, the member is
            // lost and the request waits for the next map, until its
            // deadline, rather than failing as if the client had lost the
            // cluster.
            Err(CallError::Closed(..) | CallError::NoEndpoint(_))
                if key_op && self.map.members().len() > 1 =>
            {
                if let Some(m) = self.routes.member_of(ep) {
                    self.lost_member(m);
                }
                let s = &mut self.ops[i as usize];
                self.chaser
                    .later(i, &mut s.chase, Target::Route, Instant::now());
                None
            }
            Err(e) => Some(call_failed(e)),
        }
    }

    /// The slow path: completes the requests that failed before they were
    /// sent, installs a fetched map, starts a wanted map fetch, sends the
    /// re-sends that are due. Returns how many of the caller's requests
    /// completed (failed).
    #[cold]
    pub(super) fn chase(&mut self, f: &mut impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        let mut n = 0;
        let mut doomed = std::mem::take(&mut self.doomed);
        for (tag, e) in doomed.drain(..) {
            self.in_flight -= 1;
            n += 1;
            f(tag, Err(e));
        }
        self.doomed = doomed;
        if let Some((map, from)) = self.fetched.take() {
            self.install(map, from);
            self.map_error = None;
            self.map_stale = false;
            for op in self.chaser.installed() {
                if let Some(e) = self.resend(op, Target::Route) {
                    n += self.fail(op, e, f);
                }
            }
        }
        let now = Instant::now();
        // A member's connections died: until a map fetched since is in,
        // one is fetched (again, if the one in flight went to that member
        // and failed with it).
        if self.map_stale && !self.chaser.fetching() {
            if self.routes.all().is_empty() {
                // Connected to no member any more: any that answers gives
                // the map.
                for m in self.map.member_ids() {
                    if self.reach(m).is_ok() {
                        break;
                    }
                }
            }
            if let Some(&ep) = self.routes.all().first() {
                self.chaser.newer_map(ep);
            }
        }
        if let Some(from) = self.chaser.take_fetch() {
            let i = self.slot(None, Kind::Map, from, self.map_allowance);
            proto::write_request(&mut self.ops[i as usize].req, Op::Map, 0, &[], &[], 0, 0);
            if let Some(e) = self.resend(i, Target::To(from)) {
                self.release(i);
                self.fetch_failed(e.to_string());
            }
        }
        let mut due = std::mem::take(&mut self.due);
        self.chaser.due(now, &mut due);
        for (op, to) in due.drain(..) {
            let e = match self.ops[op as usize].chase.exhausted(now) {
                Some(why) => Some(self.no_route(why)),
                None => self.resend(op, to),
            };
            if let Some(e) = e {
                n += self.fail(op, e, f);
            }
        }
        self.due = due;
        n
    }
}

/// Raises the map version an encoded request was routed by to `v` (never
/// lowers it: a redirect may have routed it by a newer map than the
/// client's).
fn raise_version(req: &mut [u8], v: u32) {
    let b = &mut req[MAP_VERSION];
    let old = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    b.copy_from_slice(&old.max(v).to_le_bytes());
}

/// The key of an encoded request.
fn request_key(req: &[u8]) -> &[u8] {
    let n = usize::from(u16::from_le_bytes([req[2], req[3]]));
    &req[REQUEST_HEADER..REQUEST_HEADER + n]
}

/// A redirect or try-again answer's status, if it is one.
pub(super) fn chased_status(bytes: &Result<&[u8], CloseReason>) -> Option<Status> {
    let resp = Response::new_checked(bytes.as_ref().ok()?).ok()?;
    matches!(
        resp.status(),
        Status::Redirect | Status::TryAgain | Status::Unavailable
    )
    .then(|| resp.status())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::proto::Request;

    #[test]
    fn a_re_sent_request_keeps_its_key_and_never_goes_back_to_an_older_map() {
        let mut req = Vec::new();
        proto::write_request(&mut req, Op::Put, 3, b"user7", b"value", 5, 0);
        assert_eq!(request_key(&req), b"user7");
        // A redirect from map 6 routes it by 6; the client's map (4) does
        // not take it back.
        raise_version(&mut req, 6);
        raise_version(&mut req, 4);
        let r = Request::new_checked(&req).unwrap();
        assert_eq!(
            (r.map_version(), r.key(), r.value()),
            (6, &b"user7"[..], &b"value"[..])
        );
        raise_version(&mut req, 7);
        assert_eq!(Request::new_checked(&req).unwrap().map_version(), 7);
    }
}
