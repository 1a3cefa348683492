//! The control plane's errors.

use kvs_proto::MemberId;
use std::path::PathBuf;

use kvs_proto::shard::BadMap;

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
    /// Something else this member cannot take: a configuration that does
    /// not hold together, a snapshot of another cluster, an entry it cannot
    /// apply, a recovery it cannot lead.
    #[error("{0}")]
    Rejected(String),
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
