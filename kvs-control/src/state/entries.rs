//! The log's entries as the state machine reads them: a [`Command`] in a
//! normal entry, a [`Membership`] change in a Raft configuration change's
//! context, and what applying one did ([`Applied`]).

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::error::DecodeError;
use crate::refusal::Refusal;

/// A change to the configuration, carried in a normal entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "command")]
pub enum Command {
    /// A new shard map, encoded ([`ShardMap::encode`](kvs_proto::ShardMap::encode)): it must have the
    /// next version, the same slots, and the same members.
    Map {
        /// The map's bytes.
        map: Vec<u8>,
    },
    /// The leader lost touch with a member.
    MarkFailed {
        /// The member.
        member: MemberId,
    },
    /// A failed member was heard from again.
    MarkUp {
        /// The member.
        member: MemberId,
    },
    /// Start moving slots: each `(first, end, to)` range to member `to`.
    Migrate {
        /// The moves.
        moves: Vec<(u32, u32, MemberId)>,
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
        /// The slots (`[first, end]` pairs in the entry).
        #[serde(with = "kvs_proto::shard::range_pairs")]
        slots: Vec<Range<u32>>,
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
        member: MemberId,
        /// The slots (`[first, end]` pairs in the entry).
        #[serde(with = "kvs_proto::shard::range_pairs")]
        slots: Vec<Range<u32>>,
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
        member: MemberId,
        /// The slots (`[first, end]` pairs in the entry).
        #[serde(with = "kvs_proto::shard::range_pairs")]
        slots: Vec<Range<u32>>,
    },
    /// The source of the chunk a migration is copying (with replicas) asks
    /// for the hand-over: it stopped taking writes of slots `first..end`,
    /// and every write it took is on every backup, the target's included.
    /// Applied only while the chunk is the one being copied, its source is
    /// still each slot's primary and the target a ready backup of each
    /// ([`ShardMap::hand_over`](kvs_proto::ShardMap::hand_over)).
    HandOver {
        /// The chunk's first slot.
        first: u32,
        /// One past its last.
        end: u32,
        /// The target.
        to: MemberId,
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
        member: MemberId,
    },
    /// A member started again: its slots go to their ready backups and its
    /// copies are dropped, as if it had failed, and it stays up. It serves
    /// nothing until this entry is applied; `nonce` tells it which start it
    /// was. The records it recovered from its files count for nothing here:
    /// the backups it is given again are copies to make, which `kept`
    /// shortens.
    Restarted {
        /// The member.
        member: MemberId,
        /// Its start's random number.
        nonce: u64,
        /// Where its files kept a copy that knows its place in its
        /// primary's writes: `(first, end, worker)`, slots `first..end` on
        /// that worker. A backup of those slots given to the member goes to
        /// that worker, and the member is preferred for it, so the copy is
        /// a catch-up and not a whole one. Empty from a member without
        /// files, and from one built before members named them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kept: Vec<(u32, u32, u16)>,
    },
    /// The group's `member_timeout` becomes `ms` milliseconds (within
    /// [`MEMBER_TIMEOUT_MS`](crate::MEMBER_TIMEOUT_MS)): every member derives its timing from it
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
        survivor: MemberId,
        /// The members lost for good.
        lost: Vec<MemberId>,
        /// The proposer's wall clock, in Unix milliseconds.
        at_ms: u64,
    },
    /// A member came back with a new bulk port (or, listening on an
    /// unspecified address, learned the one others reach it at).
    Readdress {
        /// The member.
        member: MemberId,
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
    /// makes voters of learners as [`ClusterState::voter_change`](crate::ClusterState::voter_change) says).
    Join {
        /// The id it gets (the number of members so far).
        member: MemberId,
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
        member: MemberId,
        /// Whether it votes from now on.
        voter: bool,
    },
    /// A member removed for good. Refused while it owns slots unless
    /// `force`, which fails its slots over to their ready backups on
    /// members that are up, and gives those with none, empty, to the
    /// members that are up.
    Forget {
        /// The member.
        member: MemberId,
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
    Joined(MemberId),
    /// A member became a voter, or a learner.
    Voter {
        /// The member.
        member: MemberId,
        /// Whether it votes now.
        voter: bool,
    },
    /// A member was marked failed.
    Failed(MemberId),
    /// The group's `member_timeout` changed; its new value in milliseconds.
    MemberTimeout(u64),
    /// A failed member is up again.
    Up(MemberId),
    /// A member was drained; how many of its slots moved to backups.
    Drained {
        /// The member.
        member: MemberId,
        /// Slots it was primary of that it no longer is.
        moved: u32,
    },
    /// A member that started again without its records is back in service.
    Restarted {
        /// The member.
        member: MemberId,
        /// Its start's number.
        nonce: u64,
    },
    /// A member was forgotten; how many of its slots failed over to their
    /// ready backups, and how many it lost (with `force`).
    Left {
        /// The member.
        member: MemberId,
        /// Slots that went to a ready backup, records and all.
        moved: u32,
        /// Slots given away empty: their records are lost.
        lost_slots: u32,
    },
    /// A minority restored service after a majority of the voters was lost
    /// ([`Command::UnsafeRecover`]).
    Recovered {
        /// The only voter now.
        survivor: MemberId,
        /// The members forgotten.
        lost: Vec<MemberId>,
        /// The other voters, learners now.
        demoted: Vec<MemberId>,
        /// The lost members' slots that failed over to a ready backup.
        moved: u32,
        /// Their slots given away empty: their records are lost.
        lost_slots: u32,
    },
    /// The entry was not valid against the state, and changed nothing.
    Refused(Refusal),
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
