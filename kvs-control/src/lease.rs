//! A member's lease, ReadIndex-style: the member asks the leader, at its
//! own send time, to confirm that it still leads and to name its commit
//! index; the answer grants a lease from that send time, which holds once
//! the member has applied up to that index. See the
//! [group's docs](crate::group) for why this is safe.
//!
//! This module keeps the member's requests and the grants it was answered
//! with; the group carries them through raft-rs and checks the applied
//! state.

use kvs_proto::MemberId;
use std::time::{Duration, Instant};

/// The bytes of a request's context: the member (2 bytes) and its send
/// time in nanoseconds since the epoch (8 bytes), big-endian.
const CTX_LEN: usize = 10;

/// Grants kept at most. A member asks once per heartbeat, so grants still
/// running number about a lease's worth of heartbeats; the bound holds
/// whatever peers answer.
const MAX_GRANTS: usize = 16;

/// A lease confirmed by the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grant {
    /// The request's send time plus the lease.
    until: Instant,
    /// The leader's commit index when it took the request: the grant
    /// holds only once this member has applied it.
    index: u64,
}

/// One member's lease requests and grants.
#[derive(Debug)]
pub(crate) struct Leases {
    me: MemberId,
    /// What send times count from.
    epoch: Instant,
    lease: Duration,
    /// How often to ask.
    every: Duration,
    /// When this member last asked.
    asked: Option<Instant>,
    /// Grants that may still matter: none expired, none another makes
    /// useless (one that runs longer and needs no more applied).
    grants: Vec<Grant>,
}

impl Leases {
    /// No lease yet; send times count from `epoch`.
    pub(crate) fn new(me: MemberId, epoch: Instant, lease: Duration, every: Duration) -> Leases {
        Leases {
            me,
            epoch,
            lease,
            every,
            asked: None,
            grants: Vec::new(),
        }
    }

    /// New timing, once the group's `member_timeout` changed: grants from
    /// now on run for `lease`, and requests go out every `every`. Grants
    /// made already keep their end (the leader allows for them).
    pub(crate) fn set_timing(&mut self, lease: Duration, every: Duration) {
        self.lease = lease;
        self.every = every;
    }

    /// The context of a request to send at `now`, if one is due (one per
    /// `every`: a request the leader dropped, because it has not committed
    /// in its term yet or there is no leader, is asked again, never piled
    /// up).
    pub(crate) fn due(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.asked.is_some_and(|t| now < t + self.every) {
            return None;
        }
        self.asked = Some(now);
        let nanos = now.saturating_duration_since(self.epoch).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
        let mut ctx = Vec::with_capacity(CTX_LEN);
        ctx.extend_from_slice(&self.me.0.to_be_bytes());
        ctx.extend_from_slice(&nanos.to_be_bytes());
        Some(ctx)
    }

    /// The send time a request's context names, if it is one this member
    /// sent: its own id, and no later than its last request (a context
    /// from anywhere else grants nothing).
    fn sent_at(&self, ctx: &[u8]) -> Option<Instant> {
        let ctx: &[u8; CTX_LEN] = ctx.try_into().ok()?;
        let (member, nanos) = ctx.split_at(2);
        if MemberId(u16::from_be_bytes(member.try_into().ok()?)) != self.me {
            return None;
        }
        let nanos = u64::from_be_bytes(nanos.try_into().ok()?);
        let sent = self.epoch.checked_add(Duration::from_nanos(nanos))?;
        self.asked.filter(|&a| sent <= a).map(|_| sent)
    }

    /// The leader answered the request with context `ctx`: it still led
    /// after the request was sent, and had committed up to `index`.
    /// Whether the answer was to a request of this member's.
    pub(crate) fn confirmed(&mut self, ctx: &[u8], index: u64, now: Instant) -> bool {
        let Some(sent) = self.sent_at(ctx) else {
            return false;
        };
        let g = Grant {
            until: sent + self.lease,
            index,
        };
        if g.until <= now {
            return true;
        }
        if self
            .grants
            .iter()
            .any(|o| o.until >= g.until && o.index <= g.index)
        {
            return true;
        }
        self.grants
            .retain(|o| !(o.until <= g.until && o.index >= g.index));
        self.grants.push(g);
        if self.grants.len() > MAX_GRANTS {
            // The one that ends first matters least.
            if let Some(i) = (0..self.grants.len()).min_by_key(|&i| self.grants[i].until) {
                self.grants.swap_remove(i);
            }
        }
        true
    }

    /// Forgets grants that ended by `now`, and those a grant already
    /// applied outlasts.
    pub(crate) fn prune(&mut self, now: Instant, applied: u64) {
        let best = self.expiry(applied);
        self.grants.retain(|g| {
            g.until > now
                && best.is_none_or(|b| g.until > b || (g.until == b && g.index <= applied))
        });
    }

    /// Until when the lease holds with `applied` applied: the latest grant
    /// whose index is applied (`None`: no grant is).
    pub(crate) fn expiry(&self, applied: u64) -> Option<Instant> {
        self.grants
            .iter()
            .filter(|g| g.index <= applied)
            .map(|g| g.until)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn leases(epoch: Instant) -> Leases {
        Leases::new(MemberId(3), epoch, 400 * MS, 40 * MS)
    }

    #[test]
    fn a_grant_runs_from_the_send_time_and_waits_for_its_index() {
        let t0 = Instant::now();
        let mut l = leases(t0);
        let ctx = l.due(t0 + 10 * MS).unwrap();
        // Not due again before the interval.
        assert_eq!(l.due(t0 + 49 * MS), None);
        // Answered late: the lease still counts from the send.
        assert!(l.confirmed(&ctx, 7, t0 + 300 * MS));
        assert_eq!(l.expiry(6), None);
        assert_eq!(l.expiry(7), Some(t0 + 410 * MS));
        // An answer after the lease would have ended grants nothing.
        let late = l.due(t0 + 50 * MS).unwrap();
        assert!(l.confirmed(&late, 7, t0 + 451 * MS));
        l.prune(t0 + 451 * MS, 7);
        assert_eq!(l.expiry(7), None);
    }

    #[test]
    fn a_pending_grant_is_kept_beside_an_applied_one() {
        let t0 = Instant::now();
        let mut l = leases(t0);
        let a = l.due(t0).unwrap();
        let b = l.due(t0 + 40 * MS).unwrap();
        assert!(l.confirmed(&a, 5, t0 + MS));
        assert!(l.confirmed(&b, 9, t0 + 41 * MS));
        l.prune(t0 + 41 * MS, 5);
        assert_eq!(l.expiry(5), Some(t0 + 400 * MS));
        assert_eq!(l.expiry(9), Some(t0 + 440 * MS));
        // Applied up to 9: the older grant is no longer needed.
        l.prune(t0 + 42 * MS, 9);
        assert_eq!(l.grants.len(), 1);
    }

    #[test]
    fn contexts_not_of_this_members_requests_grant_nothing() {
        let t0 = Instant::now();
        let mut l = leases(t0);
        let ctx = l.due(t0 + MS).unwrap();
        // Another member's.
        let mut other = ctx.clone();
        other[1] ^= 1;
        assert!(!l.confirmed(&other, 1, t0 + 2 * MS));
        // A send time later than any request.
        let mut future = ctx.clone();
        future[9] = future[9].wrapping_add(1);
        assert!(!l.confirmed(&future, 1, t0 + 2 * MS));
        // Bytes of another length.
        assert!(!l.confirmed(&ctx[..9], 1, t0 + 2 * MS));
        assert!(!l.confirmed(&[], 1, t0 + 2 * MS));
        assert_eq!(l.expiry(u64::MAX), None);
        assert!(l.confirmed(&ctx, 1, t0 + 2 * MS));
        assert_eq!(l.expiry(1), Some(t0 + 401 * MS));
    }

    #[test]
    fn grants_are_bounded_whatever_is_answered() {
        let t0 = Instant::now();
        let mut l = leases(t0);
        // Grants each needing more applied than the one before, none
        // applied: each may matter, but only so many are kept.
        for i in 0..100u32 {
            let ctx = l.due(t0 + i * 40 * MS).unwrap();
            assert!(l.confirmed(&ctx, 1000 + u64::from(i), t0 + i * 40 * MS));
            assert!(l.grants.len() <= MAX_GRANTS);
        }
    }
}
