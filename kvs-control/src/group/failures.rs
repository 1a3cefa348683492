//! The leader's watch over the members: a member silent for
//! `member_timeout` is marked failed (its slots go to their backups), a
//! stall of the leader's own is excused, a failed voter makes way for a
//! healthy learner, and what is being evicted is remembered.

use std::time::{Duration, Instant};

use kvs_proto::MemberId;
use raft::eraftpb::ConfChangeType;

use super::{Group, JOIN_GRACE};
use crate::member_state::MemberState;
use crate::state::{Command, Membership};

impl Group {
    /// At the leader: the next change of voters the state calls for, once
    /// no other membership change is being committed.
    pub(super) fn balance_voters(&mut self) {
        if self.node.raft.has_pending_conf() {
            return;
        }
        let Some((member, voter)) = self.state.as_ref().and_then(|s| s.voter_change(self.me))
        else {
            return;
        };
        let kind = if voter {
            ConfChangeType::AddNode
        } else {
            ConfChangeType::AddLearnerNode
        };
        let _ = self.propose_membership(&Membership::Voter { member, voter }, kind, member);
    }

    /// The leader itself did not run for `gap` (a stopped process, a
    /// machine too loaded to schedule it): what it did not hear meanwhile
    /// says nothing of its members, so the gap is not counted against
    /// them. It only delays marks; leases do not depend on it.
    pub(super) fn excuse_stall(&mut self, gap: Duration, now: Instant) {
        for t in self.heard.values_mut().chain(self.joining.values_mut()) {
            *t = (*t + gap).min(now);
        }
        if let Some(t) = self.leader_since.as_mut() {
            *t = (*t + gap).min(now);
        }
    }

    /// How long `m` has been silent at `now` as the leader counts it, and
    /// how long it may be: from its last word, or from this leader's
    /// election; a member that joined under this leader and has not spoken
    /// yet, from when its join was applied, and for [`JOIN_GRACE`] timeouts
    /// (it first gets connected to, sent the state and opens its log, all on
    /// a machine that may be loaded; it owns no slots yet).
    pub(super) fn silence(&self, m: MemberId, now: Instant) -> (Duration, Duration) {
        let since = self.leader_since.unwrap_or(now);
        let timeout = self.cfg.member_timeout;
        match (self.heard.get(&m), self.joining.get(&m)) {
            (Some(&h), _) => (now.saturating_duration_since(h.max(since)), timeout),
            (None, Some(&j)) => (now.saturating_duration_since(j), timeout * JOIN_GRACE),
            (None, None) => (now.saturating_duration_since(since), timeout),
        }
    }

    pub(super) fn detect_failures(&mut self, now: Instant) {
        let Some(s) = &self.state else { return };
        let mut late = Vec::new();
        for m in s.live_members() {
            if m == self.me || s.member_state(m) != Some(MemberState::Up) {
                continue;
            }
            let (silent, allowed) = self.silence(m, now);
            if silent > allowed && !self.marking_now(m, now) {
                late.push(m);
            }
        }
        for m in late {
            if self.propose(&Command::MarkFailed { member: m }).is_ok() {
                self.marking.insert(m, now);
                self.note_evicting(m);
            }
        }
    }

    /// At the leader: an entry that fails or forgets `member` was just
    /// proposed (the last in the log).
    pub(super) fn note_evicting(&mut self, member: MemberId) {
        let index = self.node.raft.raft_log.last_index();
        self.evicting.insert(member, index);
    }

    /// At the leader: whether to drop `from`'s lease request, because an
    /// entry this leader proposed to fail or forget it is not yet
    /// committed. The request would be answered with the commit index
    /// before that entry, and the grant could outlive the member's slots.
    pub(super) fn evicting_now(&self, from: MemberId) -> bool {
        self.evicting
            .get(&from)
            .is_some_and(|&i| i > self.node.raft.raft_log.committed)
    }

    /// Whether a mark of `m` proposed lately is still awaited.
    pub(super) fn marking_now(&self, m: MemberId, now: Instant) -> bool {
        self.marking
            .get(&m)
            .is_some_and(|&t| now.saturating_duration_since(t) < self.cfg.member_timeout)
    }
}
