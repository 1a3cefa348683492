//! Following redirects and try-agains: the decisions, as a state machine over
//! op indexes, endpoints and the time passed in (no I/O; the client carries
//! them out).
//!
//! - A REDIRECT names the slot's owner under the answering server's map: the
//!   request goes there at once if the client is connected to it (as routed
//!   by that map, when it is newer than the client's; the client first
//!   connects to an owner its own map names, as for any request: see
//!   `reach`); else it is parked until the map fetched from that server is
//!   installed, then routed by it. A redirect from a newer map than the
//!   client's starts that fetch (one at a time).
//! - A TRY_AGAIN (the server has not seen the map the request was routed by)
//!   is re-sent after a backoff: 50 µs, doubling to 5 ms.
//! - A re-send refused because the endpoint is busy (ring or credit used up)
//!   is tried again at the next poll or wait.
//! - A scan part (a worker answers scans over whatever it owns) and the map
//!   fetch go back to the same worker after the backoff.
//! - The chase is bounded: more than [`MAX_REDIRECTS`] redirects (servers
//!   whose maps send a request round in circles), or [`MAX_CHASE`] since the
//!   first redirect or try-again (try-agains count against time only: a
//!   server may take a while to get the new map), and the request fails with
//!   the reason.

use std::time::{Duration, Instant};

use kvs_proto::proto::Redirect;
use kvs_proto::Owner;

/// The most redirects one request follows.
pub(crate) const MAX_REDIRECTS: u16 = 64;
/// The longest one request is chased (redirects, try-agains, waits for the
/// map), from its first redirect or try-again.
pub(crate) const MAX_CHASE: Duration = Duration::from_secs(10);
/// The first try-again backoff; it doubles with each one.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_micros(50);
/// The longest try-again backoff.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_millis(5);

/// One request's chase so far (kept in its op slot).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Chase {
    /// Redirects followed.
    redirects: u16,
    /// Backoffs taken (they double).
    backoffs: u16,
    /// The first redirect or try-again.
    since: Option<Instant>,
}

impl Chase {
    /// Whether nothing was chased yet (a redirect, a try-again or a backoff
    /// always comes with a first time).
    #[inline]
    pub(crate) fn is_fresh(&self) -> bool {
        self.since.is_none()
    }

    /// The next backoff (50 µs, doubling to 5 ms).
    fn backoff(&mut self) -> Duration {
        let d = FIRST_BACKOFF
            .saturating_mul(1 << self.backoffs.min(16))
            .min(MAX_BACKOFF);
        self.backoffs = self.backoffs.saturating_add(1);
        d
    }

    /// Why the chase must end now, if it must.
    pub(crate) fn exhausted(&self, now: Instant) -> Option<String> {
        if self.redirects > MAX_REDIRECTS {
            return Some(format!(
                "redirected {} times (more than {MAX_REDIRECTS}): the servers' maps disagree",
                self.redirects
            ));
        }
        let since = self.since?;
        let t = now.saturating_duration_since(since);
        (t > MAX_CHASE).then(|| {
            format!(
                "still redirected or told to try again after {:.1} s (at most {} s)",
                t.as_secs_f64(),
                MAX_CHASE.as_secs()
            )
        })
    }
}

/// What a server answered instead of doing the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The slot's owner under the server's map.
    Redirect(Redirect),
    /// The server has not seen the map the request was routed by.
    TryAgain,
    /// The owner holds no lease from the control group now (an election,
    /// a partition, or a failure): asked again with the same backoff.
    Unavailable,
}

/// Where a queued request goes when it is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target<E> {
    /// To its key's owner under the map in use then.
    Route,
    /// To this endpoint.
    To(E),
}

/// What to do with a request that was answered with a redirect or a
/// try-again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step<E> {
    /// Re-send it now to this endpoint, as routed by this map version (the
    /// redirect's, when newer than the client's: the owner it names may not
    /// have that map yet, and must then say try again rather than redirect
    /// back). Busy: [`Chaser::busy`].
    Send(E, u32),
    /// It waits in the retry queue.
    Queued,
    /// It waits for the map being fetched.
    Parked,
    /// Give up: it fails with this reason.
    Fail(String),
}

#[derive(Debug, Clone, Copy)]
struct Retry<E> {
    op: u32,
    due: Instant,
    to: Target<E>,
}

/// The map fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetch<E> {
    /// None wanted.
    Idle,
    /// One is wanted from this endpoint (see [`Chaser::take_fetch`]).
    Wanted(E),
    /// One is in flight (or queued to be re-sent).
    InFlight,
}

/// The requests being chased: the retry queue, the requests parked until
/// the map is installed, and the map fetch. `E` is an endpoint.
#[derive(Debug)]
pub(crate) struct Chaser<E> {
    /// Re-sends waiting for their time.
    queue: Vec<Retry<E>>,
    /// Re-sends refused as busy: tried again at the next poll.
    busy: Vec<(u32, Target<E>)>,
    /// Requests waiting for the map being fetched.
    parked: Vec<u32>,
    fetch: Fetch<E>,
    /// Redirects and try-agains followed.
    followed: u64,
}

impl<E> Default for Chaser<E> {
    fn default() -> Self {
        Chaser {
            queue: Vec::new(),
            busy: Vec::new(),
            parked: Vec::new(),
            fetch: Fetch::Idle,
            followed: 0,
        }
    }
}

/// A request's reply, as the chase sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answered<E> {
    /// What the member said.
    pub(crate) answer: Answer,
    /// The endpoint it came on.
    pub(crate) from: E,
    /// The request goes back to `from` whatever the answer (a scan part,
    /// the map fetch).
    pub(crate) fixed: bool,
}

impl<E: Copy> Chaser<E> {
    /// Decides what to do with request `op` (its chase in `chase`), given
    /// its reply. `version`: the map version in use; `connected`: the
    /// endpoint of an owner, if the client is connected to it.
    pub(crate) fn on_answer(
        &mut self,
        op: u32,
        chase: &mut Chase,
        reply: Answered<E>,
        version: u32,
        connected: impl FnOnce(Owner) -> Option<E>,
        now: Instant,
    ) -> Step<E> {
        let Answered {
            answer,
            from,
            fixed,
        } = reply;
        self.followed += 1;
        chase.since.get_or_insert(now);
        if let Answer::Redirect(_) = answer {
            chase.redirects = chase.redirects.saturating_add(1);
        }
        if let Some(why) = chase.exhausted(now) {
            return Step::Fail(match answer {
                Answer::Redirect(r) => format!(
                    "{why} (the last to member {} worker {} under map version {}; \
                     this client's map is version {version})",
                    r.owner.member, r.owner.worker, r.map_version
                ),
                Answer::TryAgain => {
                    format!("{why} (the last: try again; this client's map is version {version})")
                }
                Answer::Unavailable => format!("{why} without a lease at the owner"),
            });
        }
        let r = match answer {
            Answer::TryAgain | Answer::Unavailable => {
                let to = if fixed {
                    Target::To(from)
                } else {
                    Target::Route
                };
                self.later(op, chase, to, now);
                return Step::Queued;
            }
            Answer::Redirect(r) => r,
        };
        let newer = r.map_version > version;
        if newer {
            self.want_fetch(from);
        }
        if fixed {
            self.later(op, chase, Target::To(from), now);
            return Step::Queued;
        }
        match connected(r.owner) {
            Some(ep) => Step::Send(ep, r.map_version.max(version)),
            None if newer => {
                self.parked.push(op);
                Step::Parked
            }
            // Named by a map no newer than this client's, yet not
            // connected: nothing to wait for but another try.
            None => {
                self.later(op, chase, Target::Route, now);
                Step::Queued
            }
        }
    }

    /// Queues `op` to be sent to `to` after its next backoff.
    pub(crate) fn later(&mut self, op: u32, chase: &mut Chase, to: Target<E>, now: Instant) {
        chase.since.get_or_insert(now);
        let due = now + chase.backoff();
        self.queue.push(Retry { op, due, to });
    }

    /// A re-send of `op` to `to` was refused as busy: it is tried again at
    /// the next poll or wait (which it does not cut short: the answers that
    /// free the ring end the wait).
    pub(crate) fn busy(&mut self, op: u32, to: Target<E>) {
        self.busy.push((op, to));
    }

    /// Moves the re-sends due at `now` into `out` (busy ones first).
    pub(crate) fn due(&mut self, now: Instant, out: &mut Vec<(u32, Target<E>)>) {
        out.append(&mut self.busy);
        let mut i = 0;
        while i < self.queue.len() {
            if self.queue[i].due <= now {
                let r = self.queue.swap_remove(i);
                out.push((r.op, r.to));
            } else {
                i += 1;
            }
        }
    }

    /// When the earliest timed re-send is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.queue.iter().map(|r| r.due).min()
    }

    /// Whether anything waits: a re-send, a parked request, a fetch to
    /// start.
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        !self.queue.is_empty()
            || !self.busy.is_empty()
            || !self.parked.is_empty()
            || matches!(self.fetch, Fetch::Wanted(_))
    }

    /// Redirects and try-agains followed.
    pub(crate) fn followed(&self) -> u64 {
        self.followed
    }

    /// A fetch of the map from `from` is wanted (a redirect from a newer
    /// map than the client's), unless one is under way.
    fn want_fetch(&mut self, from: E) {
        if matches!(self.fetch, Fetch::Idle) {
            self.fetch = Fetch::Wanted(from);
        }
    }

    /// An answer from `from` said its server serves by a newer map than the
    /// client's, though the request was served: fetch it, unless a fetch is
    /// under way.
    pub(crate) fn newer_map(&mut self, from: E) {
        self.want_fetch(from);
    }

    /// The endpoint to fetch the map from, if a fetch is wanted; it is in
    /// flight from now on.
    pub(crate) fn take_fetch(&mut self) -> Option<E> {
        match self.fetch {
            Fetch::Wanted(e) => {
                self.fetch = Fetch::InFlight;
                Some(e)
            }
            _ => None,
        }
    }

    /// Whether a fetch is wanted or in flight.
    pub(crate) fn fetching(&self) -> bool {
        !matches!(self.fetch, Fetch::Idle)
    }

    /// The fetch ended with a map installed (or one no newer than the
    /// client's): the parked requests, to be routed by the map in use.
    pub(crate) fn installed(&mut self) -> Vec<u32> {
        self.fetch = Fetch::Idle;
        std::mem::take(&mut self.parked)
    }

    /// The fetch failed: the parked requests, to be queued again
    /// ([`later`](Self::later)).
    pub(crate) fn fetch_failed(&mut self) -> Vec<u32> {
        self.fetch = Fetch::Idle;
        std::mem::take(&mut self.parked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::MemberId;

    fn reply(answer: Answer, from: u32, fixed: bool) -> Answered<u32> {
        Answered {
            answer,
            from,
            fixed,
        }
    }

    fn redirect(map_version: u32, member: MemberId, worker: u16) -> Answer {
        Answer::Redirect(Redirect {
            map_version,
            owner: Owner { member, worker },
        })
    }

    /// Member 0 (endpoints 10, 11) is connected; the rest are not.
    fn connected(o: Owner) -> Option<u32> {
        (o.member == MemberId(0)).then_some(10 + u32::from(o.worker))
    }

    fn due(c: &mut Chaser<u32>, now: Instant) -> Vec<(u32, Target<u32>)> {
        let mut out = Vec::new();
        c.due(now, &mut out);
        out
    }

    #[test]
    fn a_redirect_to_a_connected_member_is_re_sent_there_at_once() {
        let mut c = Chaser::default();
        let mut ch = Chase::default();
        let t = Instant::now();
        let s = c.on_answer(
            3,
            &mut ch,
            reply(redirect(1, MemberId(0), 1), 10, false),
            1,
            connected,
            t,
        );
        assert_eq!(s, Step::Send(11, 1));
        // Same version as the client's: no fetch.
        assert!(!c.fetching());
        assert_eq!(c.take_fetch(), None);
        assert_eq!(c.followed(), 1);
        assert!(!c.pending());
    }

    #[test]
    fn a_redirect_from_a_newer_map_fetches_it_once() {
        let mut c = Chaser::default();
        let t = Instant::now();
        let (mut a, mut b) = (Chase::default(), Chase::default());
        // Both re-sent at once (the owner is connected), as routed by the
        // redirect's map; one fetch, from the server that answered first.
        assert_eq!(
            c.on_answer(
                1,
                &mut a,
                reply(redirect(5, MemberId(0), 0), 11, false),
                4,
                connected,
                t
            ),
            Step::Send(10, 5)
        );
        assert_eq!(
            c.on_answer(
                2,
                &mut b,
                reply(redirect(5, MemberId(0), 0), 12, false),
                4,
                connected,
                t
            ),
            Step::Send(10, 5)
        );
        assert!(c.pending());
        assert_eq!(c.take_fetch(), Some(11));
        assert_eq!(c.take_fetch(), None);
        // In flight: later redirects start none.
        let mut d = Chase::default();
        c.on_answer(
            4,
            &mut d,
            reply(redirect(6, MemberId(0), 0), 13, false),
            4,
            connected,
            t,
        );
        assert_eq!(c.take_fetch(), None);
        assert!(c.fetching());
        assert!(c.installed().is_empty());
        assert!(!c.fetching());
    }

    #[test]
    fn an_answer_from_a_newer_map_fetches_it_once_without_chasing_anything() {
        let mut c: Chaser<u32> = Chaser::default();
        c.newer_map(11);
        c.newer_map(12);
        assert!(c.pending());
        assert_eq!(c.take_fetch(), Some(11));
        assert_eq!(c.take_fetch(), None);
        assert_eq!(c.followed(), 0);
        assert!(c.installed().is_empty());
        assert!(!c.pending());
    }

    #[test]
    fn a_redirect_to_an_unknown_member_parks_until_the_map_is_installed() {
        let mut c = Chaser::default();
        let t = Instant::now();
        let mut ch = Chase::default();
        let s = c.on_answer(
            7,
            &mut ch,
            reply(redirect(2, MemberId(1), 0), 10, false),
            1,
            connected,
            t,
        );
        assert_eq!(s, Step::Parked);
        assert_eq!(c.take_fetch(), Some(10));
        // Nothing is due: it waits for the map, not the clock.
        assert!(due(&mut c, t + Duration::from_secs(1)).is_empty());
        assert!(c.pending());
        assert_eq!(c.installed(), vec![7]);
        assert!(!c.pending());
        // A failed fetch hands the parked requests back to be queued.
        let s = c.on_answer(
            8,
            &mut ch,
            reply(redirect(3, MemberId(2), 0), 10, false),
            2,
            connected,
            t,
        );
        assert_eq!(s, Step::Parked);
        assert_eq!(c.fetch_failed(), vec![8]);
        c.later(8, &mut ch, Target::Route, t);
        assert_eq!(due(&mut c, t + MAX_BACKOFF), vec![(8, Target::Route)]);
    }

    #[test]
    fn a_redirect_to_an_unknown_member_of_an_old_map_is_retried_later() {
        let mut c = Chaser::default();
        let t = Instant::now();
        let mut ch = Chase::default();
        let s = c.on_answer(
            7,
            &mut ch,
            reply(redirect(3, MemberId(4), 0), 10, false),
            3,
            connected,
            t,
        );
        assert_eq!(s, Step::Queued);
        assert!(!c.fetching());
        assert_eq!(due(&mut c, t + FIRST_BACKOFF), vec![(7, Target::Route)]);
    }

    #[test]
    fn try_again_backs_off_doubling_to_a_cap_and_is_re_sent() {
        let mut c = Chaser::default();
        let t = Instant::now();
        let mut ch = Chase::default();
        let mut at = t;
        let mut waits = Vec::new();
        for _ in 0..10 {
            assert_eq!(
                c.on_answer(
                    5,
                    &mut ch,
                    reply(Answer::TryAgain, 10, false),
                    1,
                    connected,
                    at
                ),
                Step::Queued
            );
            let next = c.next_due().unwrap();
            waits.push(next - at);
            // Not before its time; then routed by the map.
            assert!(due(&mut c, next - Duration::from_nanos(1)).is_empty());
            assert_eq!(due(&mut c, next), vec![(5, Target::Route)]);
            at = next;
        }
        assert_eq!(waits[0], FIRST_BACKOFF);
        assert_eq!(waits[1], 2 * FIRST_BACKOFF);
        assert_eq!(waits[6], 64 * FIRST_BACKOFF);
        assert_eq!(waits[7], MAX_BACKOFF);
        assert_eq!(waits[9], MAX_BACKOFF);
        assert_eq!(c.followed(), 10);
        // A scan part (fixed) goes back to the worker that answered.
        c.on_answer(
            6,
            &mut ch,
            reply(Answer::TryAgain, 12, true),
            1,
            connected,
            at,
        );
        assert_eq!(due(&mut c, at + MAX_BACKOFF), vec![(6, Target::To(12))]);
        // So does one redirected (a worker scans what it owns), after the
        // backoff.
        let mut ch = Chase::default();
        let s = c.on_answer(
            6,
            &mut ch,
            reply(redirect(1, MemberId(0), 1), 12, true),
            1,
            connected,
            at,
        );
        assert_eq!(s, Step::Queued);
        assert_eq!(due(&mut c, at + FIRST_BACKOFF), vec![(6, Target::To(12))]);
    }

    #[test]
    fn a_busy_re_send_is_queued_for_the_next_poll_not_dropped() {
        let mut c = Chaser::default();
        let t = Instant::now();
        c.busy(4, Target::To(11));
        c.busy(5, Target::Route);
        assert!(c.pending());
        // It does not cut a wait short.
        assert_eq!(c.next_due(), None);
        assert_eq!(
            due(&mut c, t),
            vec![(4, Target::To(11)), (5, Target::Route)]
        );
        assert!(!c.pending());
    }

    #[test]
    fn the_chase_ends_after_the_redirect_limit_or_the_time_limit() {
        let mut c = Chaser::default();
        let t = Instant::now();
        let mut ch = Chase::default();
        for _ in 0..MAX_REDIRECTS {
            let s = c.on_answer(
                1,
                &mut ch,
                reply(redirect(1, MemberId(0), 0), 10, false),
                1,
                connected,
                t,
            );
            assert_eq!(s, Step::Send(10, 1));
        }
        match c.on_answer(
            1,
            &mut ch,
            reply(redirect(1, MemberId(0), 0), 10, false),
            1,
            connected,
            t,
        ) {
            Step::Fail(why) => assert!(why.contains("redirected 65 times"), "{why}"),
            s => panic!("{s:?}"),
        }
        // Try-agains are bounded by time.
        let mut ch = Chase::default();
        let s = c.on_answer(
            2,
            &mut ch,
            reply(Answer::TryAgain, 10, false),
            1,
            connected,
            t,
        );
        assert_eq!(s, Step::Queued);
        assert_eq!(ch.exhausted(t + MAX_CHASE), None);
        assert!(ch
            .exhausted(t + MAX_CHASE + Duration::from_millis(1))
            .is_some());
        let late = t + MAX_CHASE + Duration::from_millis(1);
        match c.on_answer(
            2,
            &mut ch,
            reply(Answer::TryAgain, 10, false),
            1,
            connected,
            late,
        ) {
            Step::Fail(why) => assert!(why.contains("try again"), "{why}"),
            s => panic!("{s:?}"),
        }
        // An owner without a lease is asked again the same way, and the
        // chase's end says so.
        let mut ch = Chase::default();
        let s = c.on_answer(
            3,
            &mut ch,
            reply(Answer::Unavailable, 10, false),
            1,
            connected,
            t,
        );
        assert_eq!(s, Step::Queued);
        match c.on_answer(
            3,
            &mut ch,
            reply(Answer::Unavailable, 10, false),
            1,
            connected,
            late,
        ) {
            Step::Fail(why) => assert!(why.contains("without a lease"), "{why}"),
            s => panic!("{s:?}"),
        }
    }
}
