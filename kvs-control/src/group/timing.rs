//! The group's timing, agreed in its log: the state carries the group's
//! `member_timeout` ([`ClusterState::member_timeout`]), and every member
//! derives its tick, lease and failure timeout from it rather than from
//! its own configuration. Were each member to time by its own, a member
//! configured with a longer timeout would hold leases longer than the
//! leader waits before it marks the member failed and hands its slots
//! to another.

use std::time::{Duration, Instant};

use super::{Event, Group, GroupConfig};
use crate::error::GroupError;
use crate::limits::MEMBER_TIMEOUT_MS;
use crate::refusal::Refusal;
use crate::state::{ClusterState, Command};

impl GroupConfig {
    /// This timing with `member_timeout` instead of its own: the tick and
    /// the lease as [`GroupConfig::for_member_timeout`] derives them from
    /// it. The tick counts, the snapshot interval and the message size
    /// stay (Raft's tick counts are fixed when its node starts).
    pub fn with_member_timeout(&self, member_timeout: Duration) -> GroupConfig {
        let derived = GroupConfig::for_member_timeout(member_timeout);
        GroupConfig {
            tick: derived.tick,
            member_timeout,
            lease: derived.lease,
            ..*self
        }
    }
}

impl Group {
    /// The timing in force: the one the member was started with, with the
    /// group's `member_timeout` (and the tick and lease it makes) once the
    /// applied state says it. [`Event::Timing`] tells when that is not
    /// the member's own.
    pub fn config(&self) -> &GroupConfig {
        &self.cfg
    }

    /// Proposes that the group's `member_timeout` become `member_timeout`
    /// (leader only), a whole number of milliseconds within
    /// [`MEMBER_TIMEOUT_MS`]. Every member times by it once it has applied
    /// the change.
    pub fn propose_member_timeout(&mut self, member_timeout: Duration) -> Result<(), GroupError> {
        let ms = u64::try_from(member_timeout.as_millis()).unwrap_or(u64::MAX);
        if !MEMBER_TIMEOUT_MS.contains(&ms) {
            return Err(Refusal::MemberTimeout(ms).into());
        }
        self.cfg
            .with_member_timeout(Duration::from_millis(ms))
            .validate()?;
        self.propose(&Command::SetMemberTimeout { ms })
    }

    /// Takes up the group's `member_timeout` if the applied state has one
    /// this member does not time by yet (at open, and after each poll).
    /// A timing the member's own tick counts make invalid (only a
    /// hand-built [`GroupConfig`] can) is not taken up.
    pub(super) fn adopt_group_timing(&mut self, now: Instant) {
        let Some(t) = self.state.as_ref().and_then(ClusterState::member_timeout) else {
            return;
        };
        let old = self.cfg.member_timeout;
        if t == old {
            return;
        }
        let next = self.configured.with_member_timeout(t);
        if next.validate().is_err() {
            return;
        }
        // Shorter: a member that has not applied the change yet holds
        // leases of the old length, so the leader marks no one failed
        // until the old timeout has passed since.
        if t < old {
            if let Some(since) = self.leader_since {
                self.leader_since = Some(since.max(now + (old - t)));
            }
        }
        self.cfg = next;
        self.leases
            .set_timing(next.lease, next.tick * next.heartbeat_ticks as u32);
        if t != self.configured.member_timeout {
            self.events.push(Event::Timing {
                group: t,
                configured: self.configured.member_timeout,
            });
        }
    }
}
