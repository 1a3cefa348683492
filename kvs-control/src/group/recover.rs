//! Unsafe recovery: restoring service from a minority of the voters after
//! a majority was lost for good, as TiKV's `unsafe-recover` does. Raft
//! cannot commit anything without a quorum of the configuration it has, and
//! a configuration change is itself an entry to commit; so the survivor
//! changes its own Raft node's configuration without the log
//! ([`RawNode::apply_conf_change`](raft::RawNode::apply_conf_change) with
//! no entry behind it), leaving itself the only voter, takes the lead,
//! and then commits a [`Command::UnsafeRecover`] that makes it lasting:
//! every member that applies it (the survivor again after a restart
//! included) forces the same configuration, and the state forgets the lost
//! members. Until that entry is committed nothing is lasting: a survivor
//! that restarts before has its old configuration back, and the recovery
//! is run again.
//!
//! It is unsafe because whatever only the lost members had, committed
//! entries and acknowledged writes alike, is gone; and a lost member
//! restarted with its old data dir would find the old configuration in it,
//! in which the lost members may elect a leader of their own.

use kvs_proto::MemberId;
use raft::eraftpb::{ConfChange, ConfChangeType};

use super::{member_of, node_of, Group};
use crate::error::GroupError;
use crate::state::Command;

impl Group {
    /// Makes this member, a voter, the control group's only voter and its
    /// leader, without the `lost` members (lost for good), and proposes the
    /// [`Command::UnsafeRecover`] that makes it lasting, at `at_ms` (the
    /// caller's wall clock, Unix milliseconds). The other voters become
    /// learners, which the leader makes voters again as they are up. Run it
    /// on the surviving voter whose log is the most advanced: one that
    /// committed entries this member does not have cannot follow it.
    pub fn unsafe_recover(&mut self, lost: &[MemberId], at_ms: u64) -> Result<(), GroupError> {
        let state = self.state.as_ref().ok_or_else(|| GroupError::NoState)?;
        state.check_recovery(self.me, lost)?;
        let me = self.me;
        let demoted: Vec<MemberId> = state
            .live_members()
            .filter(|&m| m != me && state.is_voter(m) && !lost.contains(&m))
            .collect();
        self.force_conf(lost, &demoted)?;
        if !self.is_leader() {
            self.node.campaign()?;
        }
        if !self.is_leader() {
            return Err(GroupError::NotLeading);
        }
        self.propose(&Command::UnsafeRecover {
            survivor: me,
            lost: lost.to_vec(),
            at_ms,
        })
    }

    /// Changes the Raft node's configuration without an entry: the `lost`
    /// members out, the `demoted` voters learners. Each step changes one
    /// voter, as raft-rs allows outside a joint configuration; a step
    /// already taken (on the survivor, or when an entry is applied again
    /// after a restart) changes nothing.
    pub(super) fn force_conf(
        &mut self,
        lost: &[MemberId],
        demoted: &[MemberId],
    ) -> Result<(), GroupError> {
        let voters = |g: &Group| -> Vec<MemberId> {
            g.conf.voters.iter().filter_map(|&n| member_of(n)).collect()
        };
        let steps = lost
            .iter()
            .map(|&m| (m, ConfChangeType::RemoveNode))
            .chain(demoted.iter().map(|&m| (m, ConfChangeType::AddLearnerNode)));
        for (m, kind) in steps {
            let known =
                self.conf.voters.contains(&node_of(m)) || self.conf.learners.contains(&node_of(m));
            let due = match kind {
                ConfChangeType::RemoveNode => known,
                _ => voters(self).contains(&m),
            };
            if !due {
                continue;
            }
            let mut cc = ConfChange::default();
            cc.set_change_type(kind);
            cc.node_id = node_of(m);
            self.conf = self.node.apply_conf_change(&cc)?;
        }
        Ok(())
    }
}
