//! The replicated state machine: the cluster's configuration as the
//! committed log makes it, the same on every member that applied the same
//! entries.
//!
//! It holds the shard map (members, and which member and worker owns each
//! slot and which back it up), the replica count, and, per member, whether
//! it is up, failed or gone, its zone, and whether it votes in the control
//! group. Every change comes from an entry of the log:
//! a [`Command`] in a normal entry, or a [`Membership`] change carried by a
//! Raft configuration change (a member joins or is forgotten, and the group's
//! voters and learners change with it). Applying is deterministic: an entry
//! that is not valid against the state it meets changes nothing, on every
//! member alike.
//!
//! The state's parts:
//! - [`entries`]: what the log's entries carry, and what applying one did;
//! - [`commands`]: applying a normal entry's [`Command`];
//! - [`membership`]: joins, voters, members forgotten, unsafe recovery;
//! - [`migrating`]: a migration's checks, start and steps.

mod commands;
mod entries;
#[cfg(test)]
mod fixtures;
mod membership;
mod migrating;

use std::net::SocketAddr;

use kvs_proto::{MemberId, ShardMap};
use serde::{Deserialize, Serialize};

pub use entries::{Applied, Command, Membership};

use crate::error::DecodeError;
use crate::limits::REPLICAS;
use crate::log_pos::LogPos;
use crate::member_state::MemberState;
use crate::migration::Migration;
use crate::replication::{self, Rejoining};
use kvs_proto::ClusterId;

/// The cluster's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterState {
    cluster_id: ClusterId,
    control_voters: u16,
    /// Copies of each slot: its primary and `replicas - 1` backups.
    replicas: u8,
    /// The group's `member_timeout`, in milliseconds (`None`: a state from
    /// before the group agreed on it, each member using its own).
    member_timeout_ms: Option<u64>,
    map: ShardMap,
    /// Per member id.
    members: Vec<Standing>,
    /// The entry that made the map what it is.
    map_at: LogPos,
    /// The migration running, or the last one.
    migration: Option<Migration>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Standing {
    state: MemberState,
    voter: bool,
    #[serde(default)]
    zone: Option<String>,
    /// Drained: takes no copies and no slots until it restarts.
    #[serde(default)]
    drained: bool,
}

/// The state as kept in a snapshot.
#[derive(Serialize, Deserialize)]
struct Snap {
    cluster_id: ClusterId,
    control_voters: u16,
    #[serde(default = "one")]
    replicas: u8,
    #[serde(default)]
    member_timeout_ms: Option<u64>,
    map: Vec<u8>,
    members: Vec<Standing>,
    map_at: LogPos,
    #[serde(default)]
    migration: Option<Migration>,
}

fn one() -> u8 {
    1
}

/// What a new cluster is founded with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Founding {
    /// Members that vote in the control group (the first ones).
    pub control_voters: u16,
    /// Copies of each slot (1 to 3).
    pub replicas: u8,
    /// The first member's zone.
    pub zone: Option<String>,
    /// The group's `member_timeout`, in milliseconds, from which every
    /// member derives its timing (`None`: the founder's own, as
    /// [`Group::bootstrap`](crate::Group::bootstrap) fills in).
    pub member_timeout_ms: Option<u64>,
}

impl ClusterState {
    /// A new cluster's first state: one member owning every slot, a voter.
    pub fn bootstrap(cluster_id: ClusterId, founding: Founding, map: ShardMap) -> ClusterState {
        ClusterState {
            cluster_id,
            control_voters: founding.control_voters.max(1),
            replicas: founding.replicas.clamp(*REPLICAS.start(), *REPLICAS.end()),
            member_timeout_ms: founding.member_timeout_ms,
            members: vec![
                Standing {
                    state: MemberState::Up,
                    voter: true,
                    zone: founding.zone,
                    drained: false,
                };
                map.members().len()
            ],
            map,
            map_at: LogPos::new(1, 1),
            migration: None,
        }
    }

    /// The members that are up (not failed, not gone) and not drained:
    /// those that may take slots and copies.
    pub fn up_members(&self) -> impl Iterator<Item = MemberId> + '_ {
        self.member_ids()
            .filter(|&m| self.member_state(m) == Some(MemberState::Up) && !self.drained(m))
    }

    /// Whether a member was drained (and has not restarted since).
    pub fn drained(&self, member: MemberId) -> bool {
        self.members.get(member.index()).is_some_and(|s| s.drained)
    }

    /// The cluster's id.
    pub fn cluster_id(&self) -> ClusterId {
        self.cluster_id
    }

    /// How many members vote in the control group (the first ones).
    pub fn control_voters(&self) -> u16 {
        self.control_voters
    }

    /// Copies of each slot the cluster keeps.
    pub fn replicas(&self) -> u8 {
        self.replicas
    }

    /// The group's `member_timeout` (`None`: a state from before the group
    /// agreed on it, each member using its own).
    pub fn member_timeout(&self) -> Option<std::time::Duration> {
        self.member_timeout_ms.map(std::time::Duration::from_millis)
    }

    /// A member's zone, if it gave one.
    pub fn zone(&self, member: MemberId) -> Option<&str> {
        self.members
            .get(member.index())
            .and_then(|s| s.zone.as_deref())
    }

    /// Slots with fewer ready copies than [`replicas`](Self::replicas).
    pub fn under_replicated(&self) -> u32 {
        self.map.under_replicated(usize::from(self.replicas))
    }

    /// Brings every slot's backups to `replicas - 1` on members that are
    /// up ([`replication::reconcile`]); a new map if that changed any.
    pub(super) fn reconcile(&mut self, at: LogPos) -> bool {
        self.reconcile_rejoining(at, None)
    }

    /// As [`reconcile`](Self::reconcile), the backups it adds preferring
    /// the copies a member that `rejoining` kept.
    fn reconcile_rejoining(&mut self, at: LogPos, rejoining: Option<&Rejoining>) -> bool {
        let up: Vec<MemberId> = self.up_members().collect();
        let mut map = self.map.clone();
        let zones: Vec<Option<String>> = self.members.iter().map(|s| s.zone.clone()).collect();
        let zone = |m: MemberId| zones.get(m.index()).cloned().flatten();
        let kept = self
            .migration
            .as_ref()
            .filter(|g| g.running())
            .and_then(Migration::kept);
        let replicas = usize::from(self.replicas);
        if !replication::reconcile_rejoining(&mut map, replicas, &up, (&kept, rejoining), zone) {
            return false;
        }
        self.set_map(map, at);
        true
    }

    /// Fails `member`'s slots over to their ready backups and drops its
    /// copies ([`replication::failover`]), then refills the backups.
    pub(super) fn fail_over(&mut self, member: MemberId, at: LogPos) {
        self.fail_over_then(member, at, None);
    }

    /// As [`fail_over`](Self::fail_over) for a member that restarted: the
    /// backups it is given again prefer the copies it kept.
    pub(super) fn fail_over_rejoining(&mut self, member: MemberId, at: LogPos, kept: &Rejoining) {
        self.fail_over_then(member, at, Some(kept));
    }

    fn fail_over_then(&mut self, member: MemberId, at: LogPos, rejoining: Option<&Rejoining>) {
        let mut map = self.map.clone();
        let up: Vec<MemberId> = self.up_members().filter(|&m| m != member).collect();
        replication::failover(&mut map, member, |m| up.contains(&m));
        if map != self.map {
            self.set_map(map, at);
        }
        // A chunk being copied from or to it gives up or waits.
        self.step_migration(at, None);
        self.reconcile_rejoining(at, rejoining);
    }

    /// The committed shard map.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// The entry the map was committed by.
    pub fn map_committed_at(&self) -> LogPos {
        self.map_at
    }

    /// How many member ids were given (members that left included).
    pub fn member_count(&self) -> u16 {
        self.members.len() as u16
    }

    /// Every member that was given an id (members that left included).
    pub fn member_ids(&self) -> impl Iterator<Item = MemberId> + '_ {
        (0..self.member_count()).map(MemberId)
    }

    /// The id the next member to join gets.
    pub fn next_member(&self) -> MemberId {
        MemberId(self.member_count())
    }

    /// A member's standing, if it has an id.
    pub fn member_state(&self, member: MemberId) -> Option<MemberState> {
        self.members.get(member.index()).map(|s| s.state)
    }

    /// Whether a member votes in the control group.
    pub fn is_voter(&self, member: MemberId) -> bool {
        self.members
            .get(member.index())
            .is_some_and(|s| s.voter && s.state != MemberState::Left)
    }

    /// The members that have not left.
    pub fn live_members(&self) -> impl Iterator<Item = MemberId> + '_ {
        self.member_ids()
            .filter(|&m| self.member_state(m) != Some(MemberState::Left))
    }

    /// The member whose setup address is `addr`, if one has it and has not
    /// left.
    pub fn member_at(&self, addr: SocketAddr) -> Option<MemberId> {
        self.live_members()
            .find(|&m| self.map.members()[m.index()].addr == addr)
    }

    pub(super) fn set_map(&mut self, mut map: ShardMap, at: LogPos) {
        map.set_version(self.map.version() + 1);
        self.map = map;
        self.map_at = at;
    }

    /// The state's bytes, for a snapshot.
    pub fn encode(&self) -> Vec<u8> {
        let mut map = Vec::new();
        self.map.encode(&mut map);
        serde_json::to_vec(&Snap {
            cluster_id: self.cluster_id,
            control_voters: self.control_voters,
            replicas: self.replicas,
            member_timeout_ms: self.member_timeout_ms,
            map,
            members: self.members.clone(),
            map_at: self.map_at,
            migration: self.migration.clone(),
        })
        .expect("the state encodes")
    }

    /// The state in a snapshot's bytes.
    pub fn decode(b: &[u8]) -> Result<ClusterState, DecodeError> {
        let s: Snap = serde_json::from_slice(b)?;
        let map = ShardMap::decode(&s.map)?;
        if s.members.len() != map.members().len() {
            return Err(DecodeError::Standings {
                standings: s.members.len(),
                members: map.members().len(),
            });
        }
        Ok(ClusterState {
            cluster_id: s.cluster_id,
            control_voters: s.control_voters.max(1),
            replicas: s.replicas.clamp(*REPLICAS.start(), *REPLICAS.end()),
            member_timeout_ms: s.member_timeout_ms,
            map,
            members: s.members,
            map_at: s.map_at,
            migration: s.migration,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::*;

    #[test]
    fn a_state_from_a_snapshot_applies_entries_as_the_one_it_was_taken_of() {
        // Member 0 backs up member 2's slots. Readying its copies once
        // also set fields of the map that its bytes leave out, so a member
        // given the state in a snapshot (one that joined, or restarted)
        // placed later backups on other workers than the members that
        // applied the entries: their maps of one version differed, and
        // copies to the new backups were refused for good.
        let mut s = three();
        spread(&mut s);
        s.apply(&Command::SetReplicas { replicas: 2 }, LogPos::new(10, 1));
        assert!((42..64).all(|x| s.map().backups(x)[0].owner.member == MemberId(0)));
        let since = s.map().version();
        s.apply(
            &ready_cmd(MemberId(0), vec![42..64], since),
            LogPos::new(11, 1),
        );
        let mut back = ClusterState::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
        for (i, cmd) in [
            Command::SetReplicas { replicas: 3 },
            ready_cmd(MemberId(1), vec![42..53], since + 2),
            Command::MarkFailed {
                member: MemberId(2),
            },
        ]
        .iter()
        .enumerate()
        {
            let at = LogPos::new(12 + i as u64, 1);
            assert_eq!(back.apply(cmd, at), s.apply(cmd, at));
            assert_eq!(back, s, "after {cmd:?}");
        }
    }

    #[test]
    fn the_state_reads_back_from_its_bytes() {
        let mut s = three();
        s.apply(
            &Command::MarkFailed {
                member: MemberId(1),
            },
            LogPos::new(9, 3),
        );
        // The group's member_timeout: within bounds, and kept.
        assert_eq!(s.member_timeout(), Some(std::time::Duration::from_secs(1)));
        let bad = Command::SetMemberTimeout { ms: 100 };
        assert!(matches!(
            s.apply(&bad, LogPos::new(10, 3)),
            Applied::Refused(_)
        ));
        let set = Command::SetMemberTimeout { ms: 1500 };
        assert_eq!(
            s.apply(&set, LogPos::new(11, 3)),
            Applied::MemberTimeout(1500)
        );
        assert_eq!(s.apply(&set, LogPos::new(12, 3)), Applied::Nothing);
        let back = ClusterState::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
        // A state from before the group agreed on it: each member's own.
        let mut old: serde_json::Value = serde_json::from_slice(&s.encode()).unwrap();
        old.as_object_mut().unwrap().remove("member_timeout_ms");
        let old = ClusterState::decode(&serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(old.member_timeout(), None);
        assert!(ClusterState::decode(b"{}").is_err());
        let c = Command::Readdress {
            member: MemberId(1),
            addr: addr(7101),
            bulk_port: 5,
        };
        assert_eq!(Command::decode(&c.encode()).unwrap(), c);
        assert!(Command::decode(b"{\"command\":\"launch\"}").is_err());
    }
}
