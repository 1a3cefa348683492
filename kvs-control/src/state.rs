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

use std::net::SocketAddr;

use kvs_proto::control::MigrationStatus;
use kvs_proto::{Member, ShardMap};
use serde::{Deserialize, Serialize};

use crate::error::DecodeError;
use crate::identity::ClusterId;
use crate::limits::{MAX_MAP_BYTES, MEMBER_TIMEOUT_MS, REPLICAS};
use crate::member_state::MemberState;
use crate::migration::Migration;
use crate::refusal::Refusal;
use crate::replication;

/// A change to the configuration, carried in a normal entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "command")]
pub enum Command {
    /// A new shard map, encoded ([`ShardMap::encode`]): it must have the
    /// next version, the same slots, and the same members.
    Map {
        /// The map's bytes.
        map: Vec<u8>,
    },
    /// The leader lost touch with a member.
    MarkFailed {
        /// The member.
        member: u16,
    },
    /// A failed member was heard from again.
    MarkUp {
        /// The member.
        member: u16,
    },
    /// Start moving slots: each `(first, end, to)` range to member `to`.
    Migrate {
        /// The moves.
        moves: Vec<(u32, u32, u16)>,
        /// The proposer's wall clock, in Unix milliseconds.
        at_ms: u64,
    },
    /// Start spreading the slots evenly over the members that are up.
    Rebalance {
        /// The proposer's wall clock, in Unix milliseconds.
        at_ms: u64,
    },
    /// Stop the migration after the chunk being pulled.
    Cancel {
        /// The proposer's wall clock, in Unix milliseconds.
        at_ms: u64,
    },
    /// A target has every record of `slots`, imported under map `version`.
    ImportDone {
        /// The map version that handed the slots over.
        version: u32,
        /// The slots, as `[first, end)` ranges.
        slots: Vec<(u32, u32)>,
        /// Records pulled.
        records: u64,
        /// Bytes of keys and values pulled.
        bytes: u64,
        /// Why records are missing, if the import ended without them all.
        lost: Option<String>,
        /// The proposer's wall clock, in Unix milliseconds.
        at_ms: u64,
    },
    /// Keep `replicas` copies of every slot (1 to 3): its primary and
    /// `replicas - 1` backups.
    SetReplicas {
        /// The copies.
        replicas: u8,
    },
    /// A primary copied `slots` whole to its backup on `member`, which has
    /// applied every write since: the backup may be promoted. Applies to
    /// the slots whose replica set has not changed since map `since`, the
    /// version the copy began under.
    BackupReady {
        /// The backup's member.
        member: u16,
        /// The slots, as `[first, end)` ranges.
        slots: Vec<(u32, u32)>,
        /// The map version the copy began under.
        since: u32,
        /// Records copied (a migration's target counts them).
        #[serde(default)]
        records: u64,
        /// Bytes of keys and values copied.
        #[serde(default)]
        bytes: u64,
    },
    /// A primary lost touch with its ready backup on `member` for `slots`
    /// (the backup may have missed a write the primary could not get
    /// acknowledged): the backup is not ready until it is copied anew, so
    /// it cannot be promoted meanwhile.
    BackupStale {
        /// The backup's member.
        member: u16,
        /// The slots, as `[first, end)` ranges.
        slots: Vec<(u32, u32)>,
    },
    /// The source of the chunk a migration is copying (with replicas) asks
    /// for the hand-over: it stopped taking writes of slots `first..end`,
    /// and every write it took is on every backup, the target's included.
    /// Applied only while the chunk is the one being copied, its source is
    /// still each slot's primary and the target a ready backup of each
    /// ([`ShardMap::hand_over`]).
    HandOver {
        /// The chunk's first slot.
        first: u32,
        /// One past its last.
        end: u32,
        /// The target.
        to: u16,
        /// The proposer's wall clock, in Unix milliseconds.
        at_ms: u64,
    },
    /// Empty a member that stays up: each slot it is primary of goes to its
    /// ready backup, and its copies are dropped; it takes no new copies and
    /// no slots from a rebalance until it restarts. The member stopped
    /// serving before it asked (SIGTERM, `kvs-admin drain`), so no read of
    /// it can be stale.
    Drain {
        /// The member.
        member: u16,
    },
    /// A member started again without the records it held (the store is in
    /// memory): its slots go to their ready backups and its copies are
    /// dropped, as if it had failed, and it stays up. It serves nothing
    /// until this entry is applied; `nonce` tells it which start it was.
    Restarted {
        /// The member.
        member: u16,
        /// Its start's random number.
        nonce: u64,
    },
    /// The group's `member_timeout` becomes `ms` milliseconds (within
    /// [`MEMBER_TIMEOUT_MS`]): every member derives its timing from it
    /// ([`GroupConfig::for_member_timeout`](crate::GroupConfig::for_member_timeout)).
    SetMemberTimeout {
        /// The timeout, in milliseconds.
        ms: u64,
    },
    /// Service restored from a minority after a majority of the voters
    /// was lost for good (`kvs-admin unsafe-recover`): `survivor`, which
    /// forced a configuration in which it is the only voter, proposed this
    /// once it led. The `lost` members are forgotten (their slots fail
    /// over to ready backups, the others go out empty), the other voters
    /// become learners (the leader makes voters of them again as they are
    /// up), and every member applying it forces the same configuration on
    /// its Raft node. Acknowledged changes only the lost members had are
    /// gone.
    UnsafeRecover {
        /// The member that leads after the recovery, the only voter.
        survivor: u16,
        /// The members lost for good.
        lost: Vec<u16>,
        /// The proposer's wall clock, in Unix milliseconds.
        at_ms: u64,
    },
    /// A member came back with a new bulk port (or, listening on an
    /// unspecified address, learned the one others reach it at).
    Readdress {
        /// The member.
        member: u16,
        /// Where it sets connections up.
        addr: SocketAddr,
        /// Its bulk-transfer port.
        bulk_port: u16,
    },
}

/// A change of membership, carried in the context of a Raft configuration
/// change (which adds or removes the member's node in the group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "change")]
pub enum Membership {
    /// A new member with the next id, as a learner (the leader then
    /// makes voters of learners as [`ClusterState::voter_change`] says).
    Join {
        /// The id it gets (the number of members so far).
        member: u16,
        /// Where it sets connections up.
        addr: SocketAddr,
        /// Its worker threads.
        workers: u16,
        /// Its bulk-transfer port.
        bulk_port: u16,
        /// Its zone (host or rack): backups of a slot go to zones that hold
        /// no copy of it yet, when there are such.
        #[serde(default)]
        zone: Option<String>,
    },
    /// A member becomes a voter (`voter`) or a learner.
    Voter {
        /// The member.
        member: u16,
        /// Whether it votes from now on.
        voter: bool,
    },
    /// A member removed for good. Refused while it owns slots unless
    /// `force`, which fails its slots over to their ready backups on
    /// members that are up, and gives those with none, empty, to the
    /// members that are up.
    Forget {
        /// The member.
        member: u16,
        /// Whether its slots' records may be declared lost.
        force: bool,
        /// The proposer's wall clock, in Unix milliseconds (for a migration
        /// it ends a chunk of).
        #[serde(default)]
        at_ms: u64,
    },
}

/// What applying an entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Nothing (an empty entry, as a new leader commits).
    Nothing,
    /// The map changed; its new version.
    Map(u32),
    /// A member joined.
    Joined(u16),
    /// A member became a voter, or a learner.
    Voter {
        /// The member.
        member: u16,
        /// Whether it votes now.
        voter: bool,
    },
    /// A member was marked failed.
    Failed(u16),
    /// The group's `member_timeout` changed; its new value in milliseconds.
    MemberTimeout(u64),
    /// A failed member is up again.
    Up(u16),
    /// A member was drained; how many of its slots moved to backups.
    Drained {
        /// The member.
        member: u16,
        /// Slots it was primary of that it no longer is.
        moved: u32,
    },
    /// A member that started again without its records is back in service.
    Restarted {
        /// The member.
        member: u16,
        /// Its start's number.
        nonce: u64,
    },
    /// A member was forgotten; how many of its slots failed over to their
    /// ready backups, and how many it lost (with `force`).
    Left {
        /// The member.
        member: u16,
        /// Slots that went to a ready backup, records and all.
        moved: u32,
        /// Slots given away empty: their records are lost.
        lost_slots: u32,
    },
    /// A minority restored service after a majority of the voters was lost
    /// ([`Command::UnsafeRecover`]).
    Recovered {
        /// The only voter now.
        survivor: u16,
        /// The members forgotten.
        lost: Vec<u16>,
        /// The other voters, learners now.
        demoted: Vec<u16>,
        /// The lost members' slots that failed over to a ready backup.
        moved: u32,
        /// Their slots given away empty: their records are lost.
        lost_slots: u32,
    },
    /// The entry was not valid against the state, and changed nothing.
    Refused(Refusal),
}

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
    /// The index and term of the entry that made the map what it is.
    map_at: (u64, u64),
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
    map_at: (u64, u64),
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
            map_at: (1, 1),
            migration: None,
        }
    }

    /// The migration running, or the last one, as of `now_ms` (Unix
    /// milliseconds).
    pub fn migration_status(&self, now_ms: u64) -> Option<MigrationStatus> {
        self.migration.as_ref().map(|g| g.status(now_ms))
    }

    /// The chunk a migration is copying, if its source may hand it over
    /// now ([`Command::HandOver`]): the source is still each slot's
    /// primary and the target a ready backup of each.
    pub fn hand_over_due(&self) -> Option<crate::migration::Chunk> {
        self.migration
            .as_ref()
            .filter(|g| g.running())
            .and_then(|g| g.hand_over_due(&self.map))
    }

    /// Whether a migration is running.
    pub fn migrating(&self) -> bool {
        self.migration.as_ref().is_some_and(Migration::running)
    }

    /// The members that are up (not failed, not gone) and not drained:
    /// those that may take slots and copies.
    pub fn up_members(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.member_count())
            .filter(|&m| self.member_state(m) == Some(MemberState::Up) && !self.drained(m))
    }

    /// Whether a member was drained (and has not restarted since).
    pub fn drained(&self, member: u16) -> bool {
        self.members
            .get(usize::from(member))
            .is_some_and(|s| s.drained)
    }

    /// Whether `cmd` would start a migration, checked against this state
    /// (the leader asks before proposing, to answer with a clear error).
    pub fn check_migration(&self, cmd: &Command) -> Result<(), Refusal> {
        let moves = match cmd {
            Command::Migrate { moves, .. } => moves
                .iter()
                .map(|&(a, b, to)| (a..b, to))
                .collect::<Vec<_>>(),
            Command::Rebalance { .. } => self.rebalance_moves(),
            Command::Cancel { .. } => {
                return if self.migrating() {
                    Ok(())
                } else {
                    Err(Refusal::NoMigration)
                }
            }
            _ => return Ok(()),
        };
        if let Some(g) = self.migration.as_ref().filter(|g| g.running()) {
            let s = g.status(0);
            return Err(Refusal::MigrationRunning {
                done: s.slots_done,
                total: s.slots_total,
            });
        }
        let slots = self.map.slots();
        for (r, to) in &moves {
            if r.start >= r.end || r.end > slots {
                return Err(Refusal::SlotsOutOfBounds {
                    first: r.start,
                    end: r.end,
                    slots,
                });
            }
            match self.member_state(*to) {
                Some(MemberState::Up) => {}
                None => {
                    return Err(Refusal::NoTarget {
                        member: *to,
                        members: self.member_count(),
                    })
                }
                Some(state) => return Err(Refusal::TargetNotUp { member: *to, state }),
            }
        }
        let spread = self.spreads(cmd);
        if moves.is_empty() && (!spread || self.spread_moves(&self.map).is_empty()) {
            return Err(Refusal::Balanced);
        }
        Migration::new(&self.map, &moves, 0, spread)?;
        // The map after it must fit the messages the group carries.
        let mut after = self.map.clone();
        for c in crate::migration::chunks(&self.map, &moves) {
            let _ = after.assign(c.first..c.end, c.to, Some(c.from));
            let _ = after.finish_import(c.first..c.end);
        }
        if after.encoded_len() > MAX_MAP_BYTES {
            return Err(Refusal::MapTooLarge {
                runs: after.runs().len(),
                bytes: after.encoded_len(),
            });
        }
        Ok(())
    }

    /// Whether `cmd`'s migration spreads the backups too (a rebalance,
    /// with replicas).
    fn spreads(&self, cmd: &Command) -> bool {
        matches!(cmd, Command::Rebalance { .. }) && self.replicas >= 2
    }

    /// The backup moves that would even out the copies on `map`.
    fn spread_moves(&self, map: &ShardMap) -> Vec<(std::ops::Range<u32>, u16, u16)> {
        let up: Vec<u16> = self.up_members().collect();
        replication::spread(map, &up, |m| self.zone(m).map(str::to_string))
    }

    fn rebalance_moves(&self) -> Vec<(std::ops::Range<u32>, u16)> {
        let up: Vec<u16> = self.up_members().collect();
        self.map.rebalance_moves_among(&up)
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
    pub fn zone(&self, member: u16) -> Option<&str> {
        self.members
            .get(usize::from(member))
            .and_then(|s| s.zone.as_deref())
    }

    /// Slots with fewer ready copies than [`replicas`](Self::replicas).
    pub fn under_replicated(&self) -> u32 {
        self.map.under_replicated(usize::from(self.replicas))
    }

    /// Brings every slot's backups to `replicas - 1` on members that are
    /// up ([`replication::reconcile`]); a new map if that changed any.
    fn reconcile(&mut self, at: (u64, u64)) -> bool {
        let up: Vec<u16> = self.up_members().collect();
        let mut map = self.map.clone();
        let zones: Vec<Option<String>> = self.members.iter().map(|s| s.zone.clone()).collect();
        let zone = |m: u16| zones.get(usize::from(m)).cloned().flatten();
        let kept = self
            .migration
            .as_ref()
            .filter(|g| g.running())
            .and_then(Migration::kept);
        if !replication::reconcile(&mut map, usize::from(self.replicas), &up, &kept, zone) {
            return false;
        }
        self.set_map(map, at);
        true
    }

    /// Fails `member`'s slots over to their ready backups and drops its
    /// copies ([`replication::failover`]), then refills the backups.
    fn fail_over(&mut self, member: u16, at: (u64, u64)) {
        let mut map = self.map.clone();
        let up: Vec<u16> = self.up_members().filter(|&m| m != member).collect();
        replication::failover(&mut map, member, |m| up.contains(&m));
        if map != self.map {
            self.set_map(map, at);
        }
        // A chunk being copied from or to it gives up or waits.
        self.step_migration(at, None);
        self.reconcile(at);
    }

    /// The committed shard map.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// The Raft index and term of the entry the map was committed by.
    pub fn map_committed_at(&self) -> (u64, u64) {
        self.map_at
    }

    /// How many member ids were given (members that left included).
    pub fn member_count(&self) -> u16 {
        self.members.len() as u16
    }

    /// A member's standing, if it has an id.
    pub fn member_state(&self, member: u16) -> Option<MemberState> {
        self.members.get(usize::from(member)).map(|s| s.state)
    }

    /// Whether a member votes in the control group.
    pub fn is_voter(&self, member: u16) -> bool {
        self.members
            .get(usize::from(member))
            .is_some_and(|s| s.voter && s.state != MemberState::Left)
    }

    /// The members that have not left.
    pub fn live_members(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.member_count()).filter(|&m| self.member_state(m) != Some(MemberState::Left))
    }

    /// The member whose setup address is `addr`, if one has it and has not
    /// left.
    pub fn member_at(&self, addr: SocketAddr) -> Option<u16> {
        self.live_members()
            .find(|&m| self.map.members()[usize::from(m)].addr == addr)
    }

    /// Whether `change` would be applied, checked against this state (the
    /// leader asks before proposing; applying asks again).
    pub fn check_membership(&self, change: &Membership) -> Result<(), Refusal> {
        match change {
            Membership::Join {
                member,
                addr,
                workers,
                ..
            } => {
                if *member != self.member_count() {
                    return Err(Refusal::NotNextId {
                        member: *member,
                        next: self.member_count(),
                    });
                }
                if let Some(m) = self.member_at(*addr) {
                    return Err(Refusal::MemberAlready {
                        addr: *addr,
                        member: m,
                    });
                }
                if *workers == 0 || *workers > kvs_proto::shard::MAX_WORKERS {
                    return Err(Refusal::Workers(*workers));
                }
                if self.member_count() >= kvs_proto::shard::MAX_MEMBERS {
                    return Err(Refusal::Full);
                }
                Ok(())
            }
            Membership::Voter { member, voter } => match self.member_state(*member) {
                None | Some(MemberState::Left) => Err(Refusal::NoMember(*member)),
                _ if self.is_voter(*member) == *voter => Err(Refusal::VoterAlready {
                    member: *member,
                    voter: *voter,
                }),
                _ if !voter && self.live_voters().count() <= 1 => Err(Refusal::LastVoter(*member)),
                _ => Ok(()),
            },
            Membership::Forget { member, force, .. } => {
                match self.member_state(*member) {
                    None => return Err(Refusal::NoMember(*member)),
                    Some(MemberState::Left) => return Err(Refusal::Forgotten(*member)),
                    _ => {}
                }
                let held = self.map.slots_of(*member);
                let importing =
                    (0..self.map.slots()).any(|s| self.map.importing_from(s) == Some(*member));
                if (held > 0 || importing) && !force {
                    return Err(Refusal::OwnsSlots {
                        member: *member,
                        held,
                    });
                }
                let others = self
                    .live_members()
                    .filter(|&m| m != *member && self.member_state(m) == Some(MemberState::Up))
                    .count();
                if held > 0 && others == 0 {
                    return Err(Refusal::NoTaker(*member));
                }
                if self.is_voter(*member) && self.live_voters().filter(|v| v != member).count() == 0
                {
                    return Err(Refusal::LastVoter(*member));
                }
                Ok(())
            }
        }
    }

    fn live_voters(&self) -> impl Iterator<Item = u16> + '_ {
        self.live_members().filter(|&m| self.is_voter(m))
    }

    /// How many voters the group should have: the largest odd number not
    /// above `control_voters` nor the members that have not left. An odd
    /// count, because an even one tolerates no more failures than the odd
    /// one below it and needs more members for a quorum (two voters: either
    /// one's death stops the group).
    pub fn voter_target(&self) -> usize {
        let n = self
            .live_members()
            .count()
            .min(usize::from(self.control_voters));
        if n == 0 {
            0
        } else if n % 2 == 1 {
            n
        } else {
            n - 1
        }
    }

    /// The next change of voters toward [`voter_target`](Self::voter_target),
    /// if one is due: `(member, true)` makes a learner that is up a voter
    /// (the lowest-numbered in a zone with no voter that is up, else the
    /// lowest-numbered); `(member, false)` makes a voter a learner (a failed
    /// one first, else the highest-numbered; never `leader`).
    ///
    /// A voter marked failed while a learner is up makes way for it:
    /// demoted first, then the learner promoted. The failed voter still
    /// counts toward the quorum, so without the swap a second failure would
    /// stop the group although members enough to vote are up. The mark
    /// already waited out `member_timeout`, so a voter that only paused is
    /// not swapped; one that comes back stays a learner, the group having
    /// its voters. Demoting before promoting keeps every step's quorum
    /// within the members that are up (two of two, then two of three),
    /// whatever the learner's log.
    pub fn voter_change(&self, leader: u16) -> Option<(u16, bool)> {
        let voters: Vec<u16> = self.live_voters().collect();
        let target = self.voter_target();
        if voters.len() < target {
            return self.next_voter().map(|m| (m, true));
        }
        let failed = voters
            .iter()
            .copied()
            .find(|&v| v != leader && self.member_state(v) == Some(MemberState::Failed));
        if voters.len() > target {
            let highest = voters.iter().copied().rev().find(|&v| v != leader);
            return failed.or(highest).map(|m| (m, false));
        }
        failed
            .filter(|_| self.next_voter().is_some())
            .map(|m| (m, false))
    }

    /// The learner that is up to make a voter next: the lowest-numbered in
    /// a zone where no voter is up (a member without a zone is a zone of
    /// its own), else the lowest-numbered, so the voters spread over zones
    /// and one zone's loss takes as few as it can.
    fn next_voter(&self) -> Option<u16> {
        let voting_zones: Vec<&str> = self
            .live_voters()
            .filter(|&v| self.member_state(v) == Some(MemberState::Up))
            .filter_map(|v| self.zone(v))
            .collect();
        let learners: Vec<u16> = self.up_members().filter(|&m| !self.is_voter(m)).collect();
        learners
            .iter()
            .copied()
            .find(|&m| self.zone(m).is_none_or(|z| !voting_zones.contains(&z)))
            .or_else(|| learners.first().copied())
    }

    /// Applies a membership change committed at `at` (index, term); the
    /// caller applies the Raft configuration change only if this is not
    /// [`Applied::Refused`].
    pub fn apply_membership(&mut self, change: &Membership, at: (u64, u64)) -> Applied {
        if let Err(why) = self.check_membership(change) {
            return Applied::Refused(why);
        }
        match *change {
            Membership::Join {
                member,
                addr,
                workers,
                bulk_port,
                ref zone,
            } => {
                let mut map = self.map.clone();
                if let Err(e) = map.add_member(Member {
                    addr,
                    workers,
                    bulk_port,
                }) {
                    return Applied::Refused(e.into());
                }
                self.members.push(Standing {
                    state: MemberState::Up,
                    voter: false,
                    zone: zone.clone(),
                    drained: false,
                });
                self.set_map(map, at);
                self.reconcile(at);
                Applied::Joined(member)
            }
            Membership::Voter { member, voter } => {
                self.members[usize::from(member)].voter = voter;
                Applied::Voter { member, voter }
            }
            Membership::Forget { member, at_ms, .. } => self.forget(member, at_ms, at),
        }
    }

    /// A `Forget` change (checked): `member` leaves. Each slot it is primary
    /// of goes to its first ready backup on a member that is up, as a
    /// failover does (every acknowledged write is on that copy); only the
    /// slots with no such backup go, empty, to the members that are up in
    /// turn, their records lost.
    fn forget(&mut self, member: u16, at_ms: u64, at: (u64, u64)) -> Applied {
        // A migration from or to it goes on without it.
        let unblocked = self
            .migration
            .as_mut()
            .filter(|g| g.running())
            .is_some_and(|g| g.forget(member));
        let mut map = self.map.clone();
        let up: Vec<u16> = self.up_members().filter(|&m| m != member).collect();
        let moved = replication::failover(&mut map, member, |m| up.contains(&m));
        let lost = map.slots_of(member);
        let takers: Vec<u16> = self
            .live_members()
            .filter(|&m| m != member && self.member_state(m) == Some(MemberState::Up))
            .collect();
        // Runs of the slots left go, empty, to the members that are up in
        // turn.
        let mut turn = 0usize;
        for r in map.clone().runs() {
            // No member up to take them (only an unsafe recovery whose
            // survivor is marked failed): they stay, unavailable.
            if r.owner.member == member && !takers.is_empty() {
                let to = takers[turn % takers.len()];
                turn += 1;
                if map.assign(r.slots.clone(), to, None).is_err() {
                    return Applied::Refused(Refusal::CannotGive {
                        first: r.slots.start,
                        end: r.slots.end,
                        to,
                    });
                }
            }
        }
        // Imports from it end: what was not pulled is lost.
        for s in 0..map.slots() {
            if map.importing_from(s) == Some(member) {
                let _ = map.finish_import(s..s + 1);
            }
        }
        self.members[usize::from(member)] = Standing {
            state: MemberState::Left,
            voter: false,
            zone: None,
            drained: false,
        };
        self.set_map(map, at);
        if unblocked {
            self.step_migration(at, Some(at_ms));
        }
        self.reconcile(at);
        Applied::Left {
            member,
            moved,
            lost_slots: lost,
        }
    }

    /// Applies a command committed at `at` (index, term): a `match` of one
    /// arm per command, each small or a call to the command's own step.
    pub fn apply(&mut self, cmd: &Command, at: (u64, u64)) -> Applied {
        match cmd {
            Command::Migrate { at_ms, .. } | Command::Rebalance { at_ms } => {
                self.start_migration(cmd, *at_ms, at)
            }
            Command::Cancel { at_ms } => match self.migration.as_mut() {
                Some(g) if g.running() => {
                    g.cancel();
                    self.step_migration(at, Some(*at_ms))
                }
                _ => Applied::Refused(Refusal::NoMigration),
            },
            Command::ImportDone {
                version,
                slots,
                records,
                bytes,
                lost,
                at_ms,
            } => {
                let Some(g) = self.migration.as_mut().filter(|g| g.running()) else {
                    return Applied::Nothing;
                };
                if g.imported(*version, slots, *records, *bytes, lost.clone()) {
                    self.step_migration(at, Some(*at_ms))
                } else {
                    Applied::Nothing
                }
            }
            Command::Map { map } => self.replace_map(map, at),
            &Command::MarkFailed { member } => match self.member_state(member) {
                Some(MemberState::Up) => {
                    self.members[usize::from(member)].state = MemberState::Failed;
                    self.fail_over(member, at);
                    Applied::Failed(member)
                }
                state => Applied::Refused(Refusal::NotUp { member, state }),
            },
            &Command::MarkUp { member } => match self.member_state(member) {
                Some(MemberState::Failed) => {
                    self.members[usize::from(member)].state = MemberState::Up;
                    self.step_migration(at, None);
                    self.reconcile(at);
                    Applied::Up(member)
                }
                state => Applied::Refused(Refusal::NotFailed { member, state }),
            },
            &Command::Restarted { member, nonce } => match self.member_state(member) {
                Some(MemberState::Up | MemberState::Failed) => {
                    let st = &mut self.members[usize::from(member)];
                    st.state = MemberState::Up;
                    st.drained = false;
                    self.fail_over(member, at);
                    Applied::Restarted { member, nonce }
                }
                state => Applied::Refused(Refusal::NotRestartable { member, state }),
            },
            &Command::HandOver {
                first,
                end,
                to,
                at_ms,
            } => self.hand_over_chunk(first..end, to, at_ms, at),
            &Command::Drain { member } => self.drain(member, at),
            &Command::SetReplicas { replicas } => self.set_replicas(replicas, at),
            &Command::SetMemberTimeout { ms } => self.set_member_timeout(ms),
            Command::UnsafeRecover {
                survivor,
                lost,
                at_ms,
            } => self.unsafe_recover(*survivor, lost, *at_ms, at),
            Command::BackupStale { member, slots } => self.backups_stale(*member, slots, at),
            Command::BackupReady {
                member,
                slots,
                since,
                records,
                bytes,
            } => self.backups_ready(*member, slots, *since, (*records, *bytes), at),
            &Command::Readdress {
                member,
                addr,
                bulk_port,
            } => self.readdress(member, addr, bulk_port, at),
        }
    }

    /// A `Migrate` or `Rebalance` command (`cmd`) at `at_ms`: plans its
    /// moves, when no migration runs, and takes the first step.
    fn start_migration(&mut self, cmd: &Command, at_ms: u64, at: (u64, u64)) -> Applied {
        if let Err(why) = self.check_migration(cmd) {
            return Applied::Refused(why);
        }
        let moves: Vec<(std::ops::Range<u32>, u16)> = match cmd {
            Command::Migrate { moves, .. } => moves.iter().map(|&(a, b, to)| (a..b, to)).collect(),
            _ => self.rebalance_moves(),
        };
        match Migration::new(&self.map, &moves, at_ms, self.spreads(cmd)) {
            Ok(g) => self.migration = Some(g),
            Err(why) => return Applied::Refused(why),
        }
        self.step_migration(at, Some(at_ms))
    }

    /// A `Drain` command: an up `member` is marked drained, and each slot
    /// it is primary of goes to its ready backup.
    fn drain(&mut self, member: u16, at: (u64, u64)) -> Applied {
        match self.member_state(member) {
            Some(MemberState::Up) => {
                self.members[usize::from(member)].drained = true;
                let before = self.map.slots_of(member);
                self.fail_over(member, at);
                Applied::Drained {
                    member,
                    moved: before - self.map.slots_of(member),
                }
            }
            state => Applied::Refused(Refusal::NotUp { member, state }),
        }
    }

    /// A `SetReplicas` command: the cluster keeps `replicas` copies of
    /// each slot (1 to 3), and the map is reconciled to it.
    fn set_replicas(&mut self, replicas: u8, at: (u64, u64)) -> Applied {
        if !REPLICAS.contains(&replicas) {
            return Applied::Refused(Refusal::Replicas(replicas));
        }
        self.replicas = replicas;
        if self.reconcile(at) {
            Applied::Map(self.map.version())
        } else {
            Applied::Nothing
        }
    }

    /// Whether `survivor` may recover the group without `lost`
    /// ([`Command::UnsafeRecover`]): it is a voter and not lost, and each
    /// lost member is a member that has not left.
    pub fn check_recovery(&self, survivor: u16, lost: &[u16]) -> Result<(), Refusal> {
        if !self.is_voter(survivor) {
            return Err(Refusal::SurvivorNotVoter(survivor));
        }
        if lost.is_empty() {
            return Err(Refusal::NoneLost);
        }
        for &m in lost {
            match self.member_state(m) {
                _ if m == survivor => return Err(Refusal::SurvivorLost(m)),
                None | Some(MemberState::Left) => return Err(Refusal::NoLostMember(m)),
                _ => {}
            }
        }
        Ok(())
    }

    /// An `UnsafeRecover` command: the `lost` members are forgotten, as
    /// with `forget --force`, and the voters other than `survivor` become
    /// learners.
    fn unsafe_recover(
        &mut self,
        survivor: u16,
        lost: &[u16],
        at_ms: u64,
        at: (u64, u64),
    ) -> Applied {
        if let Err(why) = self.check_recovery(survivor, lost) {
            return Applied::Refused(why);
        }
        let (mut moved, mut lost_slots) = (0, 0);
        let mut lost: Vec<u16> = lost.to_vec();
        lost.sort_unstable();
        lost.dedup();
        // None of them takes another's slots or is promoted for them.
        for &m in &lost {
            self.members[usize::from(m)].state = MemberState::Failed;
        }
        for &m in &lost {
            if let Applied::Left {
                moved: mv,
                lost_slots: ls,
                ..
            } = self.forget(m, at_ms, at)
            {
                moved += mv;
                lost_slots += ls;
            }
        }
        let demoted: Vec<u16> = self.live_voters().filter(|&v| v != survivor).collect();
        for &v in &demoted {
            self.members[usize::from(v)].voter = false;
        }
        Applied::Recovered {
            survivor,
            lost,
            demoted,
            moved,
            lost_slots,
        }
    }

    /// A `SetMemberTimeout` command: the group's `member_timeout` becomes
    /// `ms`, if within [`MEMBER_TIMEOUT_MS`].
    fn set_member_timeout(&mut self, ms: u64) -> Applied {
        if !MEMBER_TIMEOUT_MS.contains(&ms) {
            return Applied::Refused(Refusal::MemberTimeout(ms));
        }
        if self.member_timeout_ms == Some(ms) {
            return Applied::Nothing;
        }
        self.member_timeout_ms = Some(ms);
        Applied::MemberTimeout(ms)
    }

    /// A `Map` command: the encoded `map` replaces the group's if it is the
    /// next version, changes owners only, and gives no slot to a member
    /// that left.
    fn replace_map(&mut self, map: &[u8], at: (u64, u64)) -> Applied {
        let m = match ShardMap::decode(map) {
            Ok(m) => m,
            Err(e) => return Applied::Refused(e.into()),
        };
        if m.version() != self.map.version() + 1 {
            return Applied::Refused(Refusal::MapVersion {
                version: m.version(),
                current: self.map.version(),
            });
        }
        if m.slots() != self.map.slots() || m.members() != self.map.members() {
            return Applied::Refused(Refusal::MapShape);
        }
        for r in m.runs() {
            if self.member_state(r.owner.member) == Some(MemberState::Left) {
                return Applied::Refused(Refusal::GivenToLeft {
                    first: r.slots.start,
                    end: r.slots.end,
                    member: r.owner.member,
                });
            }
        }
        let v = m.version();
        self.map = m;
        self.map_at = at;
        Applied::Map(v)
    }

    /// A `HandOver` command: the running migration's due chunk `slots`
    /// goes to member `to`; the copy one too many goes, and the migration
    /// steps on.
    fn hand_over_chunk(
        &mut self,
        slots: std::ops::Range<u32>,
        to: u16,
        at_ms: u64,
        at: (u64, u64),
    ) -> Applied {
        let (first, end) = (slots.start, slots.end);
        let due = self
            .migration
            .as_ref()
            .filter(|g| g.running())
            .and_then(|g| g.hand_over_due(&self.map));
        if due.is_none_or(|c| (c.first, c.end, c.to) != (first, end, to)) {
            return Applied::Refused(Refusal::HandOverNotDue { first, end, to });
        }
        let mut map = self.map.clone();
        if let Err(why) = map.hand_over(slots, to) {
            return Applied::Refused(Refusal::HandOver {
                first,
                end,
                to,
                why,
            });
        }
        self.set_map(map, at);
        // The copy one too many goes; then the next chunk starts
        // (or the backups' moves are planned, on the map without
        // it).
        self.reconcile(at);
        self.step_migration(at, Some(at_ms));
        Applied::Map(self.map.version())
    }

    /// A `BackupStale` command: `member`'s backups of `slots` are not
    /// ready.
    fn backups_stale(&mut self, member: u16, slots: &[(u32, u32)], at: (u64, u64)) -> Applied {
        let mut map = self.map.clone();
        for &(a, b) in slots {
            let _ = map.set_backup_unready(a..b.min(map.slots()), member);
        }
        if map == self.map {
            return Applied::Nothing;
        }
        self.set_map(map, at);
        Applied::Map(self.map.version())
    }

    /// A `BackupReady` command: `member`'s backups of `slots` whose epoch
    /// is at most `since` are ready; the running migration counts the
    /// copy (`records`, `bytes`), and a backup it moved replaces the old.
    fn backups_ready(
        &mut self,
        member: u16,
        slots: &[(u32, u32)],
        since: u32,
        (records, bytes): (u64, u64),
        at: (u64, u64),
    ) -> Applied {
        let mut map = self.map.clone();
        for &(a, b) in slots {
            for s in a..b.min(map.slots()) {
                if map.epoch(s) <= since {
                    let _ = map.set_backup_ready(s..s + 1, member);
                }
            }
        }
        if map == self.map {
            return Applied::Nothing;
        }
        self.set_map(map, at);
        if let Some(g) = self.migration.as_mut().filter(|g| g.running()) {
            g.copied(member, slots, records, bytes);
        }
        // A backup a rebalance moved is ready: the old one goes.
        self.step_migration(at, None);
        Applied::Map(self.map.version())
    }

    /// A `Readdress` command: `member` (not one that left) is reached at
    /// `addr`, its bulk port `bulk_port`, unless another member is there.
    fn readdress(
        &mut self,
        member: u16,
        addr: SocketAddr,
        bulk_port: u16,
        at: (u64, u64),
    ) -> Applied {
        match self.member_state(member) {
            Some(MemberState::Left) | None => return Applied::Refused(Refusal::NoMember(member)),
            _ => {}
        }
        if let Some(other) = self.member_at(addr).filter(|&o| o != member) {
            return Applied::Refused(Refusal::AddressOf {
                addr,
                member: other,
            });
        }
        let mut map = self.map.clone();
        let _ = map.set_member_addr(member, addr);
        let _ = map.set_bulk_port(member, bulk_port);
        if map == self.map {
            return Applied::Nothing;
        }
        self.set_map(map, at);
        Applied::Map(self.map.version())
    }

    /// The migration's next step, if it takes one: a new map.
    fn step_migration(&mut self, at: (u64, u64), now_ms: Option<u64>) -> Applied {
        let up: Vec<u16> = self.up_members().collect();
        let Some(mut g) = self.migration.take() else {
            return Applied::Nothing;
        };
        let mut m = self.map.clone();
        let version = m.version() + 1;
        g.step(
            &mut m,
            version,
            (now_ms, self.replicas, &up),
            &|map: &ShardMap| self.spread_moves(map),
        );
        self.migration = Some(g);
        if m == self.map {
            return Applied::Nothing;
        }
        self.set_map(m, at);
        // Slots whose import ended get their backups.
        self.reconcile(at);
        Applied::Map(self.map.version())
    }

    fn set_map(&mut self, mut map: ShardMap, at: (u64, u64)) {
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

impl Command {
    /// The command's bytes, for an entry.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a command encodes")
    }

    /// The command in an entry's bytes.
    pub fn decode(b: &[u8]) -> Result<Command, DecodeError> {
        Ok(serde_json::from_slice(b)?)
    }
}

impl Membership {
    /// The change's bytes, for a configuration change's context.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a membership change encodes")
    }

    /// The change in a context's bytes.
    pub fn decode(b: &[u8]) -> Result<Membership, DecodeError> {
        Ok(serde_json::from_slice(b)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], p))
    }

    fn founding(control_voters: u16) -> Founding {
        Founding {
            control_voters,
            replicas: 1,
            zone: None,
            member_timeout_ms: Some(1000),
        }
    }

    /// A copy of `slots` on `member`, begun under map `since`, is ready.
    fn ready_cmd(member: u16, slots: Vec<(u32, u32)>, since: u32) -> Command {
        Command::BackupReady {
            member,
            slots,
            since,
            records: 0,
            bytes: 0,
        }
    }

    fn three() -> ClusterState {
        let map = ShardMap::single(addr(7000), 64, 2).unwrap();
        let mut s = ClusterState::bootstrap(ClusterId::from_bytes([7; 16]), founding(2), map);
        for (i, p) in [(1u16, 7001u16), (2, 7002)] {
            let j = Membership::Join {
                member: i,
                addr: addr(p),
                workers: 2,
                bulk_port: 9000 + i,
                zone: None,
            };
            assert_eq!(
                s.apply_membership(&j, (u64::from(i) + 1, 1)),
                Applied::Joined(i)
            );
        }
        s
    }

    #[test]
    fn joins_take_the_next_id_and_the_voters_stay_odd() {
        let mut s = three();
        assert_eq!(s.member_count(), 3);
        assert_eq!(s.map().version(), 3);
        assert_eq!(s.map_committed_at(), (3, 1));
        // Joined as learners; control_voters = 2 and 3 members: one voter.
        assert!(s.is_voter(0) && !s.is_voter(1) && !s.is_voter(2));
        assert_eq!(s.voter_target(), 1);
        assert_eq!(s.voter_change(0), None);
        s.control_voters = 5;
        assert_eq!(s.voter_target(), 3);
        assert_eq!(s.voter_change(0), Some((1, true)));
        let v = Membership::Voter {
            member: 1,
            voter: true,
        };
        assert_eq!(
            s.apply_membership(&v, (4, 1)),
            Applied::Voter {
                member: 1,
                voter: true
            }
        );
        assert!(matches!(
            s.apply_membership(&v, (5, 1)),
            Applied::Refused(_)
        ));
        assert_eq!(s.voter_change(0), Some((2, true)));
        // Four members with five allowed: three voters, so one goes back.
        s.members[2].voter = true;
        s.members.push(Standing {
            state: MemberState::Up,
            voter: true,
            zone: None,
            drained: false,
        });
        s.map
            .add_member(Member {
                addr: addr(7003),
                workers: 1,
                bulk_port: 0,
            })
            .unwrap();
        assert_eq!(s.voter_change(3), Some((2, false)));
        s.members[1].state = MemberState::Failed;
        assert_eq!(s.voter_change(3), Some((1, false)), "a failed voter first");
        assert_eq!(s.member_at(addr(7002)), Some(2));
        let mut s2 = s.clone();
        let again = Membership::Join {
            member: 3,
            addr: addr(7001),
            workers: 2,
            bulk_port: 1,
            zone: None,
        };
        assert!(matches!(
            s2.apply_membership(&again, (9, 1)),
            Applied::Refused(_)
        ));
        let stale = Membership::Join {
            member: 2,
            addr: addr(7009),
            workers: 2,
            bulk_port: 1,
            zone: None,
        };
        assert!(matches!(
            s2.apply_membership(&stale, (9, 1)),
            Applied::Refused(_)
        ));
        assert_eq!(s2, s, "a refused change changes nothing");
    }

    #[test]
    fn a_failed_voter_makes_way_for_a_learner_in_a_zone_without_a_voter() {
        // Voters 0, 1, 2 in zones a, b, c; learners 3 (zone a) and 4 (d).
        let map = ShardMap::single(addr(7000), 64, 2).unwrap();
        let mut f = founding(3);
        f.zone = Some("a".into());
        let mut s = ClusterState::bootstrap(ClusterId::from_bytes([7; 16]), f, map);
        for (i, z) in [(1u16, "b"), (2, "c"), (3, "a"), (4, "d")] {
            let j = Membership::Join {
                member: i,
                addr: addr(7000 + i),
                workers: 2,
                bulk_port: 9000 + i,
                zone: Some(z.into()),
            };
            assert_eq!(
                s.apply_membership(&j, (u64::from(i) + 1, 1)),
                Applied::Joined(i)
            );
        }
        let mut at = 10;
        let mut apply = |s: &mut ClusterState, (member, voter)| {
            at += 1;
            let v = Membership::Voter { member, voter };
            assert!(matches!(
                s.apply_membership(&v, (at, 1)),
                Applied::Voter { .. }
            ));
        };
        while let Some(c) = s.voter_change(0) {
            apply(&mut s, c);
        }
        assert_eq!(s.live_voters().collect::<Vec<_>>(), [0, 1, 2]);
        // Member 1 fails: it goes back to learning, and the learner in a
        // zone with no voter (d, not a) votes in its place.
        s.apply(&Command::MarkFailed { member: 1 }, (20, 1));
        assert_eq!(s.voter_change(0), Some((1, false)));
        apply(&mut s, (1, false));
        assert_eq!(s.voter_change(0), Some((4, true)));
        apply(&mut s, (4, true));
        assert_eq!(s.voter_change(0), None);
        // Back up, it stays a learner: the group has its voters.
        s.apply(&Command::MarkUp { member: 1 }, (21, 1));
        assert_eq!(s.voter_change(0), None);
        // A failed voter with no learner up to take its place stays.
        s.apply(&Command::MarkFailed { member: 1 }, (22, 1));
        s.apply(&Command::MarkFailed { member: 3 }, (23, 1));
        s.apply(&Command::MarkFailed { member: 2 }, (24, 1));
        assert_eq!(s.voter_change(0), None);
    }

    #[test]
    fn a_map_command_must_follow_the_version_and_keep_the_members() {
        let mut s = three();
        let mut m = s.map().clone();
        m.assign(0..16, 2, Some(0)).unwrap();
        m.set_version(s.map().version() + 1);
        let mut b = Vec::new();
        m.encode(&mut b);
        let cmd = Command::Map { map: b };
        assert_eq!(s.apply(&cmd, (10, 2)), Applied::Map(4));
        assert_eq!(s.map().owner_of_slot(3).member, 2);
        assert_eq!(s.map_committed_at(), (10, 2));
        // The same command again is out of order.
        assert!(matches!(s.apply(&cmd, (11, 2)), Applied::Refused(_)));
        assert!(matches!(
            s.apply(&Command::Map { map: vec![1, 2, 3] }, (12, 2)),
            Applied::Refused(_)
        ));
    }

    #[test]
    fn failure_marks_and_forgetting() {
        let mut s = three();
        assert_eq!(
            s.apply(&Command::MarkFailed { member: 2 }, (5, 1)),
            Applied::Failed(2)
        );
        assert!(matches!(
            s.apply(&Command::MarkFailed { member: 2 }, (6, 1)),
            Applied::Refused(_)
        ));
        assert_eq!(s.member_state(2), Some(MemberState::Failed));
        assert_eq!(
            s.apply(&Command::MarkUp { member: 2 }, (7, 1)),
            Applied::Up(2)
        );
        // Member 0 owns every slot: forgetting it needs force.
        let f = Membership::Forget {
            member: 0,
            force: false,
            at_ms: 0,
        };
        let Applied::Refused(why) = s.apply_membership(&f, (8, 1)) else {
            panic!("forget of a member with slots went through")
        };
        assert!(why.to_string().contains("owns 64 slots"), "{why}");
        // Member 2 owns nothing: it goes.
        let f2 = Membership::Forget {
            member: 2,
            force: false,
            at_ms: 0,
        };
        assert_eq!(
            s.apply_membership(&f2, (9, 1)),
            Applied::Left {
                member: 2,
                moved: 0,
                lost_slots: 0
            }
        );
        assert_eq!(s.member_at(addr(7002)), None);
        assert_eq!(s.live_members().collect::<Vec<_>>(), [0, 1]);
        // With force, member 0's slots go, empty, to member 1 (a voter now,
        // so the group keeps one).
        let v = Membership::Voter {
            member: 1,
            voter: true,
        };
        assert!(matches!(
            s.apply_membership(&v, (10, 1)),
            Applied::Voter { .. }
        ));
        s.apply(&Command::MarkFailed { member: 0 }, (10, 1));
        let ff = Membership::Forget {
            member: 0,
            force: true,
            at_ms: 0,
        };
        assert_eq!(
            s.apply_membership(&ff, (11, 1)),
            Applied::Left {
                member: 0,
                moved: 0,
                lost_slots: 64
            }
        );
        assert_eq!(s.map().slots_of(1), 64);
        // The last voter cannot go.
        let last = Membership::Forget {
            member: 1,
            force: true,
            at_ms: 0,
        };
        assert!(matches!(
            s.apply_membership(&last, (12, 1)),
            Applied::Refused(_)
        ));
    }

    #[test]
    fn replicas_place_backups_fail_over_and_refill() {
        let mut s = three();
        // Spread: member i owns slots 21i.. (the rest stay member 0's).
        for (r, to) in [(21..42, 1u16), (42..64, 2)] {
            let mut m = s.map.clone();
            m.assign(r, to, None).unwrap();
            s.set_map(m, (9, 1));
        }
        assert_eq!(s.replicas(), 1);
        assert_eq!(s.under_replicated(), 0);
        let bad = Command::SetReplicas { replicas: 4 };
        assert!(matches!(s.apply(&bad, (10, 1)), Applied::Refused(_)));
        let v = s.map().version();
        assert_eq!(
            s.apply(&Command::SetReplicas { replicas: 2 }, (11, 1)),
            Applied::Map(v + 1)
        );
        assert_eq!(s.under_replicated(), 64, "no copy is ready yet");
        assert!((0..64).all(|x| s.map().backups(x).len() == 1));
        let since = s.map().version();
        // A report for a copy begun under an older replica set is stale.
        let stale = ready_cmd(1, vec![(0, 21)], since - 1);
        assert_eq!(s.apply(&stale, (12, 1)), Applied::Nothing);
        let ready = |member, a, b| ready_cmd(member, vec![(a, b)], since);
        assert!(matches!(
            s.apply(&ready(1, 0, 21), (13, 1)),
            Applied::Map(_)
        ));
        assert!(matches!(
            s.apply(&ready(2, 21, 42), (14, 1)),
            Applied::Map(_)
        ));
        assert_eq!(s.under_replicated(), 22);
        // A stale backup is not ready, and ready again once copied.
        let stale = Command::BackupStale {
            member: 2,
            slots: vec![(21, 42)],
        };
        assert!(matches!(s.apply(&stale, (14, 1)), Applied::Map(_)));
        assert_eq!(s.under_replicated(), 43);
        assert_eq!(s.apply(&stale, (14, 1)), Applied::Nothing);
        assert!(matches!(
            s.apply(&ready(2, 21, 42), (14, 1)),
            Applied::Map(_)
        ));
        // Member 0 fails: its slots go to member 1, whose copies were
        // ready, and get new backups on member 2.
        assert_eq!(
            s.apply(&Command::MarkFailed { member: 0 }, (15, 1)),
            Applied::Failed(0)
        );
        assert_eq!(s.map().slots_of(0), 0);
        assert_eq!(s.map().slots_of(1), 42);
        assert!((0..21).all(|x| s.map().backups(x)[0].owner.member == 2));
        assert_eq!(s.map().backup_slots_of(0), 0);
        // Member 2's slots had their backups on member 0: gone, and not
        // replaced on a failed member.
        assert!((42..64).all(|x| s.map().backups(x)[0].owner.member == 1));
        // It comes back, restarted: nothing of it is kept, and it takes
        // backups again.
        assert_eq!(
            s.apply(
                &Command::Restarted {
                    member: 0,
                    nonce: 7
                },
                (16, 1)
            ),
            Applied::Restarted {
                member: 0,
                nonce: 7
            }
        );
        assert_eq!(s.member_state(0), Some(MemberState::Up));
        assert_eq!(s.map().slots_of(0), 0);
        // Three copies: member 0 is the only member with room for them.
        s.apply(&Command::SetReplicas { replicas: 3 }, (17, 1));
        assert_eq!(s.map().backup_slots_of(0), 64);
        // Drained: member 1's slots go to their ready backups (none are
        // ready on member 0 yet: they stay), it keeps no copies, and it
        // takes none until it restarts.
        s.apply(&Command::SetReplicas { replicas: 2 }, (18, 1));
        let since = s.map().version();
        let r = ready_cmd(2, vec![(0, 42)], since);
        s.apply(&r, (19, 1));
        assert_eq!(
            s.apply(&Command::Drain { member: 1 }, (20, 1)),
            Applied::Drained {
                member: 1,
                moved: 42
            }
        );
        assert!(s.drained(1));
        assert_eq!(s.map().slots_of(1), 0);
        assert_eq!(s.map().backup_slots_of(1), 0);
        assert!(!s.up_members().any(|m| m == 1));
        let back = Command::Restarted {
            member: 1,
            nonce: 9,
        };
        s.apply(&back, (21, 1));
        assert!(!s.drained(1));
        // The state survives a snapshot.
        assert_eq!(ClusterState::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn a_state_from_a_snapshot_applies_entries_as_the_one_it_was_taken_of() {
        // Member 0 backs up member 2's slots. Readying its copies once
        // also set fields of the map that its bytes leave out, so a member
        // given the state in a snapshot (one that joined, or restarted)
        // placed later backups on other workers than the members that
        // applied the entries: their maps of one version differed, and
        // copies to the new backups were refused for good.
        let mut s = three();
        for (r, to) in [(21..42, 1u16), (42..64, 2)] {
            let mut m = s.map.clone();
            m.assign(r, to, None).unwrap();
            s.set_map(m, (9, 1));
        }
        s.apply(&Command::SetReplicas { replicas: 2 }, (10, 1));
        assert!((42..64).all(|x| s.map().backups(x)[0].owner.member == 0));
        let since = s.map().version();
        s.apply(&ready_cmd(0, vec![(42, 64)], since), (11, 1));
        let mut back = ClusterState::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
        for (i, cmd) in [
            Command::SetReplicas { replicas: 3 },
            ready_cmd(1, vec![(42, 53)], since + 2),
            Command::MarkFailed { member: 2 },
        ]
        .iter()
        .enumerate()
        {
            let at = (12 + i as u64, 1);
            assert_eq!(back.apply(cmd, at), s.apply(cmd, at));
            assert_eq!(back, s, "after {cmd:?}");
        }
    }

    #[test]
    fn with_replicas_a_migration_copies_then_hands_over_on_the_sources_word() {
        let mut s = three();
        s.apply(&Command::SetReplicas { replicas: 2 }, (10, 1));
        // Member 0's slots are backed up on member 1, ready.
        let since = s.map().version();
        let ready = |member, a, b| ready_cmd(member, vec![(a, b)], since);
        s.apply(&ready(1, 0, 64), (11, 1));
        assert_eq!(s.under_replicated(), 0);
        let go = Command::Migrate {
            moves: vec![(0, 32, 2)],
            at_ms: 1,
        };
        assert!(matches!(s.apply(&go, (12, 1)), Applied::Map(_)));
        // Member 2 is copied the chunk as one more backup; member 0 keeps
        // serving it with its ready backup.
        assert_eq!(s.map().owner_of_slot(5).member, 0);
        assert_eq!(s.map().backups(5).len(), 2);
        assert_eq!(s.under_replicated(), 0);
        assert!(s.hand_over_due().is_none());
        let over = Command::HandOver {
            first: 0,
            end: 32,
            to: 2,
            at_ms: 2,
        };
        assert!(matches!(s.apply(&over, (13, 1)), Applied::Refused(_)));
        // A reconcile (here, on the replicas entry) keeps the copy.
        s.apply(&Command::SetReplicas { replicas: 2 }, (14, 1));
        assert_eq!(s.map().backups(5).len(), 2);
        let since = s.map().version();
        let copied = Command::BackupReady {
            member: 2,
            slots: vec![(0, 32)],
            since,
            records: 5,
            bytes: 500,
        };
        s.apply(&copied, (15, 1));
        let due = s.hand_over_due().unwrap();
        assert_eq!((due.first, due.end, due.from, due.to), (0, 32, 0, 2));
        // Another chunk, or another target, is refused.
        let wrong = Command::HandOver {
            first: 0,
            end: 16,
            to: 2,
            at_ms: 2,
        };
        assert!(matches!(s.apply(&wrong, (16, 1)), Applied::Refused(_)));
        assert!(matches!(s.apply(&over, (17, 1)), Applied::Map(_)));
        // Member 2 serves the chunk with one ready backup (the busier of
        // members 0 and 1 gave up its copy), and the migration is over.
        for x in 0..32 {
            assert_eq!(s.map().owner_of_slot(x).member, 2);
            let b = s.map().backups(x);
            assert_eq!(b.len(), 1, "{x}");
            assert!(b[0].ready);
        }
        assert_eq!(s.under_replicated(), 0);
        assert!(!s.migrating());
        let st = s.migration_status(3).unwrap();
        assert_eq!((st.slots_done, st.error), (32, None));
        // The copy's records and bytes count as the migration's.
        assert_eq!((st.records, st.bytes), (5, 500));
    }

    #[test]
    fn a_migration_that_would_shred_the_map_past_a_message_is_refused() {
        let map = ShardMap::single(addr(7000), 16384, 1).unwrap();
        let mut s = ClusterState::bootstrap(ClusterId::from_bytes([7; 16]), founding(3), map);
        let j = Membership::Join {
            member: 1,
            addr: addr(7001),
            workers: 1,
            bulk_port: 9001,
            zone: None,
        };
        assert_eq!(s.apply_membership(&j, (2, 1)), Applied::Joined(1));
        // Every other slot: 16 384 runs.
        let shred = Command::Migrate {
            moves: (0..16384).step_by(2).map(|a| (a, a + 1, 1)).collect(),
            at_ms: 0,
        };
        let e = s.check_migration(&shred).unwrap_err().to_string();
        assert!(
            e.contains("16384 runs") && e.contains("longer ranges"),
            "{e}"
        );
        let v = s.map().version();
        assert!(matches!(s.apply(&shred, (3, 1)), Applied::Refused(_)));
        assert_eq!(s.map().version(), v, "a refused entry changes nothing");
        // Half the slots in one range: two runs.
        let half = Command::Migrate {
            moves: vec![(0, 8192, 1)],
            at_ms: 0,
        };
        s.check_migration(&half).unwrap();
        // Up to the limit's worth of runs is fine.
        let runs = (MAX_MAP_BYTES / kvs_proto::shard::RUN_BYTES / 2) as u32 - 16;
        let many = Command::Migrate {
            moves: (0..runs).map(|i| (4 * i, 4 * i + 2, 1)).collect(),
            at_ms: 0,
        };
        s.check_migration(&many).unwrap();
    }

    #[test]
    fn a_migration_runs_in_the_log_chunk_by_chunk_on_the_targets_reports() {
        let mut s = three();
        let v0 = s.map().version();
        let bad = Command::Migrate {
            moves: vec![(0, 300, 1)],
            at_ms: 0,
        };
        assert!(s
            .check_migration(&bad)
            .unwrap_err()
            .to_string()
            .contains("out of bounds"));
        let go = Command::Migrate {
            moves: vec![(0, 40, 1)],
            at_ms: 1000,
        };
        s.check_migration(&go).unwrap();
        // The handover: the target owns the chunk and imports it.
        assert_eq!(s.apply(&go, (20, 2)), Applied::Map(v0 + 1));
        assert_eq!(s.map().owner_of_slot(5).member, 1);
        assert_eq!(s.map().importing_from(5), Some(0));
        assert!(s.migrating());
        assert!(s
            .check_migration(&go)
            .unwrap_err()
            .to_string()
            .contains("already running"));
        // A report of another version or of part of the chunk: no step.
        let report = |version, a, b| Command::ImportDone {
            version,
            slots: vec![(a, b)],
            records: 3,
            bytes: 30,
            lost: None,
            at_ms: 3000,
        };
        assert_eq!(s.apply(&report(v0, 0, 40), (21, 2)), Applied::Nothing);
        assert_eq!(s.apply(&report(v0 + 1, 0, 20), (22, 2)), Applied::Nothing);
        // The whole chunk in: the map ends the import, and the migration.
        assert_eq!(
            s.apply(&report(v0 + 1, 20, 40), (23, 2)),
            Applied::Map(v0 + 2)
        );
        assert_eq!(s.map().importing_from(5), None);
        let st = s.migration_status(9000).unwrap();
        assert!(st.finished && st.slots_done == 40 && st.records == 6);
        assert_eq!(st.seconds, 2.0);
        // Rebalance spreads over the members that are up only.
        s.apply(&Command::MarkFailed { member: 2 }, (24, 2));
        assert_eq!(
            s.apply(&Command::Rebalance { at_ms: 0 }, (25, 2)),
            Applied::Map(v0 + 3)
        );
        assert!(s.map().runs().iter().all(|r| r.owner.member != 2));
        assert!(matches!(
            s.apply(&Command::Rebalance { at_ms: 0 }, (26, 2)),
            Applied::Refused(_)
        ));
        // Cancel stops after the chunk being pulled.
        assert_eq!(
            s.apply(&Command::Cancel { at_ms: 0 }, (27, 2)),
            Applied::Nothing
        );
        assert!(!s.migrating() || s.migration_status(0).unwrap().cancelled);
    }

    #[test]
    fn forgetting_a_migrations_source_ends_its_chunk_with_the_loss_named() {
        let mut s = three();
        s.apply(
            &Command::Migrate {
                moves: vec![(0, 64, 1)],
                at_ms: 0,
            },
            (20, 2),
        );
        assert!(s.migrating());
        assert_eq!(s.map().importing_from(3), Some(0));
        // Member 1 (the target) holds nothing yet; member 0, the source, dies.
        let v = Membership::Voter {
            member: 1,
            voter: true,
        };
        s.apply_membership(&v, (21, 2));
        s.apply(&Command::MarkFailed { member: 0 }, (22, 2));
        let f = Membership::Forget {
            member: 0,
            force: true,
            at_ms: 5,
        };
        assert!(matches!(
            s.apply_membership(&f, (23, 2)),
            Applied::Left { member: 0, .. }
        ));
        let st = s.migration_status(10).unwrap();
        assert!(st.finished, "{st:?}");
        assert!(
            st.error.as_deref().unwrap().contains("lost with member 0"),
            "{st:?}"
        );
        assert_eq!(s.map().importing_from(3), None);
        assert_eq!(s.map().slots_of(0), 0);
    }

    #[test]
    fn forget_with_force_fails_slots_over_to_ready_backups_and_loses_the_rest() {
        let mut s = three();
        for (r, to) in [(21..42, 1u16), (42..64, 2)] {
            let mut m = s.map.clone();
            m.assign(r, to, None).unwrap();
            s.set_map(m, (9, 1));
        }
        s.apply(&Command::SetReplicas { replicas: 2 }, (10, 1));
        // Member 2's slots are backed up on member 0; 42..53 are copied.
        assert!((42..64).all(|x| s.map().backups(x)[0].owner.member == 0));
        let since = s.map().version();
        s.apply(&ready_cmd(0, vec![(42, 53)], since), (11, 1));
        let heirs: Vec<_> = (42..53).map(|x| s.map().backups(x)[0].owner).collect();
        // Member 2 dies and is forgotten before the leader marks it failed
        // (an operator who knows the machine is gone).
        let f = Membership::Forget {
            member: 2,
            force: true,
            at_ms: 0,
        };
        assert_eq!(
            s.apply_membership(&f, (12, 1)),
            Applied::Left {
                member: 2,
                moved: 11,
                lost_slots: 11
            },
            "only slots without a ready copy are lost"
        );
        // The copied slots are their backups' now, records and all: the
        // owner is the backup's worker, with nothing to import.
        for (x, heir) in (42..53).zip(heirs) {
            assert_eq!(s.map().owner_of_slot(x), heir, "slot {x}");
            assert_eq!(s.map().importing_from(x), None);
        }
        // The others went out empty, to the members that are up.
        assert!((53..64).all(|x| s.map().owner_of_slot(x).member != 2));
        assert_eq!(s.map().slots_of(2), 0);
    }

    #[test]
    fn an_unsafe_recovery_forgets_the_lost_and_leaves_one_voter() {
        let mut s = three();
        for m in [1, 2] {
            s.members[m].voter = true;
        }
        let mut m = s.map.clone();
        m.assign(0..32, 2, None).unwrap();
        s.set_map(m, (9, 1));
        let recover = |survivor, lost: Vec<u16>| Command::UnsafeRecover {
            survivor,
            lost,
            at_ms: 0,
        };
        assert!(matches!(
            s.apply(&recover(0, vec![0]), (10, 1)),
            Applied::Refused(_)
        ));
        assert!(matches!(
            s.apply(&recover(0, vec![7]), (10, 1)),
            Applied::Refused(_)
        ));
        assert_eq!(
            s.apply(&recover(0, vec![2]), (11, 1)),
            Applied::Recovered {
                survivor: 0,
                lost: vec![2],
                demoted: vec![1],
                moved: 0,
                lost_slots: 32
            }
        );
        assert_eq!(s.member_state(2), Some(MemberState::Left));
        assert_eq!(s.live_voters().collect::<Vec<_>>(), [0]);
        assert_eq!(s.map().slots_of(2), 0);
    }

    #[test]
    fn the_state_reads_back_from_its_bytes() {
        let mut s = three();
        s.apply(&Command::MarkFailed { member: 1 }, (9, 3));
        // The group's member_timeout: within bounds, and kept.
        assert_eq!(s.member_timeout(), Some(std::time::Duration::from_secs(1)));
        let bad = Command::SetMemberTimeout { ms: 100 };
        assert!(matches!(s.apply(&bad, (10, 3)), Applied::Refused(_)));
        let set = Command::SetMemberTimeout { ms: 1500 };
        assert_eq!(s.apply(&set, (11, 3)), Applied::MemberTimeout(1500));
        assert_eq!(s.apply(&set, (12, 3)), Applied::Nothing);
        let back = ClusterState::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
        // A state from before the group agreed on it: each member's own.
        let mut old: serde_json::Value = serde_json::from_slice(&s.encode()).unwrap();
        old.as_object_mut().unwrap().remove("member_timeout_ms");
        let old = ClusterState::decode(&serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(old.member_timeout(), None);
        assert!(ClusterState::decode(b"{}").is_err());
        let c = Command::Readdress {
            member: 1,
            addr: addr(7101),
            bulk_port: 5,
        };
        assert_eq!(Command::decode(&c.encode()).unwrap(), c);
        assert!(Command::decode(b"{\"command\":\"launch\"}").is_err());
    }
}
