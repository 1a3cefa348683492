//! The key-value cluster's control plane: its configuration — members, the
//! shard map, which members failed — as a replicated log in a Raft group,
//! run by tikv's raft-rs and persisted in each member's data dir.
//!
//! - [`Group`]: one member's part in the group, with the lease that lets it
//!   serve and the leader's failure detection. Deterministic: it reads no
//!   clock and does no network I/O (the caller passes the time and carries
//!   the messages), so tests step several members in one thread.
//! - [`ClusterState`]: the state machine every member applies the committed
//!   log to, and the [`Command`]s and [`Membership`] changes the log holds.
//! - [`DiskStorage`]: the Raft log's storage, crash-safe, flushed before
//!   the messages that depend on it leave.
//! - [`Identity`]: the cluster's and the member's ids, kept in the data dir
//!   so that a restart resumes its membership and never starts a second
//!   cluster.
//!
//! The server (kvs-server) carries the group's messages over the members'
//! control connections and serves by the committed map while
//! [`Group::lease_valid`].

#![deny(unsafe_code)]
// Tests pass lists of slot ranges that often hold one range.
#![cfg_attr(test, allow(clippy::single_range_in_vec_init))]

mod error;
mod fragment;
mod group;
mod identity;
mod lease;
mod limits;
mod log_pos;
mod member_state;
mod migration;
mod raft_log;
mod refusal;
mod replication;
mod state;
mod storage;
mod wal;

pub use error::{BadTiming, DecodeError, GroupError, StorageError};
pub use group::{Event, Group, GroupConfig, GroupStatus, PeerMessage, MIN_MAX_MESSAGE};
pub use identity::Identity;
pub use limits::{MEMBER_TIMEOUT_MS, REPLICAS};
pub use log_pos::LogPos;
pub use member_state::MemberState;
pub use migration::{chunk_slots, chunks, Chunk, Migration};
pub use refusal::Refusal;
pub use state::{Applied, ClusterState, Command, Founding, Membership};
pub use storage::{DiskStorage, Recovery};
