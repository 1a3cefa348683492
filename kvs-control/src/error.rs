//! The control plane's errors.

use std::path::PathBuf;

use kvs_proto::shard::BadMap;
use kvs_proto::{ClusterId, MemberId};

use crate::refusal::Refusal;

/// The data dir could not be read or written, or holds something it should
/// not.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is damaged (not just cut short by a crash).
    #[error("{path} is damaged at byte {offset}: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// What is wrong.
        why: String,
    },
    /// The write-ahead log, or a file replaced atomically, could not be
    /// read or written, or is damaged (the message names the file, and the
    /// byte where there is one).
    #[error(transparent)]
    Wal(#[from] kvs_wal::WalError),
    /// The data dir belongs to another cluster or member than asked for.
    #[error("{0}")]
    Identity(String),
}

/// Why the group refused or could not do something.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The data dir.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Only the leader takes proposals; `leader` is the member this one
    /// believes leads, if it knows of one.
    #[error("{}", match leader {
        Some(l) => format!("member {l} leads the control group, not this member"),
        None => "the control group has no leader right now (an election is under way, or this member is cut off)".to_string(),
    })]
    NotLeader {
        /// The leader, as far as this member knows.
        leader: Option<MemberId>,
    },
    /// The proposal is not valid against the committed state.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A timing that does not hold together ([`GroupConfig::validate`]).
    ///
    /// [`GroupConfig::validate`]: crate::GroupConfig::validate
    #[error(transparent)]
    Timing(#[from] BadTiming),
    /// A snapshot sent by a member of another cluster.
    #[error("a snapshot of cluster {theirs}, not {ours}")]
    OtherCluster {
        /// The snapshot's cluster.
        theirs: ClusterId,
        /// This member's.
        ours: ClusterId,
    },
    /// A committed entry this member cannot apply: the log is not one it
    /// can follow.
    #[error("entry {index}: {why}")]
    BadLog {
        /// The entry's index.
        index: u64,
        /// What is wrong with it.
        why: String,
    },
    /// This member has not been given the cluster's state yet.
    #[error("this member has not been given the cluster's state")]
    NoState,
    /// An unsafe recovery on a member that could not take the lead.
    #[error(
        "this member could not take the lead (a configuration change it has committed but not \
         applied yet): try again"
    )]
    NotLeading,
    /// Another membership change is being committed (Raft takes one at a
    /// time): the same proposal may succeed shortly.
    #[error("another membership change is being committed; try again shortly")]
    Busy,
    /// A peer's message does not decode.
    #[error("a control-group message from member {from} does not decode: {why}")]
    BadMessage {
        /// Who sent it.
        from: MemberId,
        /// Why.
        why: String,
    },
    /// raft-rs refused (a bug here, or a peer of another cluster).
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
}

/// Bytes of the log that do not decode: a state (a snapshot's), a
/// [`Command`](crate::Command) or a [`Membership`](crate::Membership)
/// change.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not the JSON of one.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The state's map does not decode.
    #[error(transparent)]
    Map(#[from] BadMap),
    /// The state has standings for another number of members than its map.
    #[error("{standings} members' standings for a map of {members}")]
    Standings {
        /// Members' standings.
        standings: usize,
        /// Members in the map.
        members: usize,
    },
}

/// A [`GroupConfig`](crate::GroupConfig)'s timing that does not hold
/// together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadTiming {
    /// A tick or heartbeat of zero.
    #[error("the tick and the heartbeat must be longer than zero")]
    Zero,
    /// An election timeout not longer than the heartbeat.
    #[error("an election timeout must be longer than the heartbeat")]
    ElectionTooShort,
    /// Messages too small for the group's.
    #[error("messages must be allowed {min} bytes at least, not {max}")]
    MessagesTooSmall {
        /// The least allowed.
        min: usize,
        /// What was configured.
        max: usize,
    },
    /// A lease that could outlast the group's patience.
    #[error(
        "a lease of {lease:?} plus two election timeouts of {election:?} must not be longer \
         than member_timeout ({member_timeout:?}): a member cut off could still serve after \
         the group marks it failed"
    )]
    LeaseTooLong {
        /// The lease.
        lease: std::time::Duration,
        /// The election timeout.
        election: std::time::Duration,
        /// The member timeout.
        member_timeout: std::time::Duration,
    },
}
