//! What can go wrong, each as the one line the operator reads.

use kvs_proto::MemberId;
use std::net::SocketAddr;

use kvs_client::{ControlError, TokenError};
use kvs_proto::control::RecoveryProgress;
use kvs_proto::shard::BadMap;

use crate::args::SlotRange;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// `--server` does not name an address.
    #[error("cannot resolve {name}: {why}")]
    Resolve {
        /// What was given.
        name: String,
        /// Why it failed.
        why: String,
    },
    /// The auth token could not be read.
    #[error("auth token: {0}")]
    Token(#[from] TokenError),
    /// The device could not be opened.
    #[error("device: {0}")]
    Device(#[from] mlx5::device::DeviceError),
    /// A request failed: no connection, no answer, a refused token, or an
    /// answer that does not parse.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A server answered with an error.
    #[error("{what} refused by {addr}: {message}")]
    Refused {
        /// The server.
        addr: SocketAddr,
        /// The request.
        what: &'static str,
        /// What it said, verbatim.
        message: String,
    },
    /// A member answered that it is loading its records from its data dir
    /// ([`ControlReply::Recovering`](kvs_proto::control::ControlReply::Recovering)):
    /// until it serves it answers only status and its map.
    #[error(
        "{what} refused by {addr}: the member is recovering its records from its data dir: \
         {}; ask again once it serves (kvs-admin status shows how far it got)",
        crate::status::recovery_text(progress)
    )]
    Recovering {
        /// The server.
        addr: SocketAddr,
        /// The request.
        what: &'static str,
        /// How far its workers got, summed.
        progress: RecoveryProgress,
    },
    /// A server answered with something other than what the request calls
    /// for.
    #[error("{addr}: unexpected answer to {what}: {got}")]
    Unexpected {
        /// The server.
        addr: SocketAddr,
        /// The request.
        what: &'static str,
        /// The answer.
        got: String,
    },
    /// A server's map does not decode.
    #[error("{addr}: {source}")]
    BadMap {
        /// The server.
        addr: SocketAddr,
        /// What is wrong with it.
        source: BadMap,
    },
    /// Keeper redirects that do not end at a keeper.
    #[error("no keeper found: {0}")]
    KeeperLoop(String),
    /// `--slots` reaches past the cluster's slots.
    #[error("slot range {range} out of bounds: the cluster has {slots} slots (0-{last})", last = slots.saturating_sub(1))]
    SlotsOutOfBounds {
        /// The range given.
        range: SlotRange,
        /// The cluster's slot count.
        slots: u32,
    },
    /// `--to` names a member id the cluster does not have.
    #[error("no member {id}: the cluster has {}", members_phrase(*members))]
    NoMember {
        id: MemberId,
        /// How many members the cluster has.
        members: usize,
    },
    /// `--to` names an address no member has.
    #[error("unknown server {given}: no member of the cluster is at that address")]
    UnknownServer {
        /// The address given.
        given: String,
    },
    /// The keeper stopped reporting the migration being followed.
    #[error(
        "{addr}: the keeper no longer reports a migration (did it restart?); see kvs-admin status"
    )]
    MigrationGone {
        /// The keeper.
        addr: SocketAddr,
    },
    /// A member kvs-admin did not ask, for the control group's standing of
    /// it.
    #[error("not asked: the control group marks it {state}")]
    NotAsked {
        /// Its standing: failed or left.
        state: &'static str,
    },
    /// The keeper could not be asked for progress for too long.
    #[error("lost the keeper while following the migration: {last}; kvs-admin status shows it once the keeper answers again")]
    LostKeeper {
        /// The last failure.
        last: String,
    },
    /// The migration ended with an error.
    #[error("migration failed after {done} of {total} slots: {message}")]
    MigrationFailed {
        /// Slots whose move is final.
        done: u32,
        /// Slots the migration was to move.
        total: u32,
        /// The keeper's reason, verbatim.
        message: String,
    },
    /// A cancel stopped the migration.
    #[error("migration cancelled after {done} of {total} slots moved")]
    MigrationCancelled {
        /// Slots whose move is final.
        done: u32,
        /// Slots the migration was to move.
        total: u32,
    },
    /// The group keeps more copies than it has members up to hold them.
    #[error(
        "replicas is {replicas}, but only {up} member{are} up: {under} slots stay \
         under-replicated until more members join (kvs-admin status shows them)",
        are = if *up == 1 { " is" } else { "s are" }
    )]
    TooFewMembers {
        /// The copies asked for.
        replicas: u8,
        /// Members up.
        up: usize,
        /// Slots short of copies now.
        under: u32,
    },
    /// The count changed again while kvs-admin waited for it.
    #[error(
        "replicas changed to {now} while waiting for {wanted} to be reached (another \
         kvs-admin?); kvs-admin status shows where it stands"
    )]
    ReplicasChanged {
        /// The copies asked for.
        wanted: u8,
        /// The count the group has now.
        now: u8,
    },
    /// The copies were not all made within the wait's limit.
    #[error(
        "{under} slots still under-replicated after {waited}; the servers carry on copying, \
         and kvs-admin status shows under_replicated_slots falling to 0"
    )]
    ReplicationSlow {
        /// Slots short of copies.
        under: u32,
        /// How long kvs-admin waited.
        waited: String,
    },
    /// No member answered for too long while kvs-admin waited for copies.
    #[error("lost the cluster while waiting for the copies: {last}; kvs-admin status shows them once members answer again")]
    LostCluster {
        /// The last failure.
        last: String,
    },
    /// The member to drain or snapshot did not answer.
    #[error("cannot reach member {member} to {to}: {why}")]
    MemberUnreachable {
        member: MemberId,
        /// What it was to do: "drain it", "snapshot it".
        to: &'static str,
        /// Why (with where it was asked), and the control group's standing
        /// of it if that explains it.
        why: String,
    },
    /// The drain was not applied within the wait's limit.
    #[error(
        "member {member} is not drained after {waited}: it serves nothing until the control \
         group applies its drain (is a majority of the group's voters up?); kvs-admin status \
         shows it drained once that is done"
    )]
    DrainSlow {
        member: MemberId,
        /// How long kvs-admin waited.
        waited: String,
    },
    /// The draining member stopped answering for too long.
    #[error(
        "lost member {member} while waiting for its drain: {last}; kvs-admin status shows \
         whether it was drained"
    )]
    LostMember {
        member: MemberId,
        /// The last failure.
        last: String,
    },
    /// The member refused to snapshot (it keeps its records in memory
    /// only: `durability = "none"`).
    #[error("member {member} ({addr}) refused the snapshot: {message}")]
    SnapshotRefused {
        member: MemberId,
        /// Where it was asked.
        addr: SocketAddr,
        /// What it said, verbatim.
        message: String,
    },
    /// The member restarted while kvs-admin waited for its snapshot: the
    /// request went with the old process.
    #[error(
        "member {member} restarted while kvs-admin waited for its snapshot ({evidence}): the \
         request went with the old process; kvs-admin snapshot {member} asks the new one"
    )]
    MemberRestarted {
        member: MemberId,
        /// What shows it: a counter that went back, start figures that
        /// changed.
        evidence: String,
    },
    /// A worker's snapshot ended without being put in place.
    #[error(
        "member {member}: the snapshot of worker {worker} ended without being put in place \
         (it failed: the member's log says why, such as a full disk); its logs are all kept, \
         and kvs-admin snapshot {member} asks again once the cause is fixed"
    )]
    SnapshotFailed {
        member: MemberId,
        /// The worker whose snapshot failed.
        worker: u16,
    },
    /// The snapshot was not done within the wait's limit.
    #[error(
        "member {member} has not finished its snapshot after {waited} ({progress}); it \
         carries on, and kvs-admin status shows it (a snapshot that fails is in the member's \
         log)"
    )]
    SnapshotSlow {
        member: MemberId,
        /// Where it stood: its workers done, the slots copied.
        progress: String,
        /// How long kvs-admin waited.
        waited: String,
    },
    /// The member stopped answering for too long while kvs-admin waited
    /// for its snapshot.
    #[error(
        "lost member {member} while waiting for its snapshot: {last}; kvs-admin status shows \
         its snapshots once it answers again"
    )]
    LostSnapshot {
        member: MemberId,
        /// The last failure.
        last: String,
    },
    /// Asked of several members, some did not snapshot (each said
    /// before).
    #[error(
        "{done} of {asked} members snapshotted; not {} (said above)",
        members_list(missing)
    )]
    SnapshotsIncomplete {
        /// Members whose snapshot is done (or, with --no-wait, asked).
        done: usize,
        /// Members asked.
        asked: usize,
        /// The others.
        missing: Vec<MemberId>,
    },
    /// Writing the output failed (a closed pipe).
    #[error("output: {0}")]
    Output(#[from] std::io::Error),
    /// Another surviving member has committed more of the control log than
    /// the contact asked to recover from.
    #[error(
        "member {member} at {addr} has committed the control log up to index {theirs}, \
         {contact} only up to {ours}: recover from it (kvs-admin --server {addr} \
         unsafe-recover ...), or entries the group committed are lost"
    )]
    NotMostAdvanced {
        /// The contact.
        contact: SocketAddr,
        /// Its highest committed index.
        ours: u64,
        /// The member ahead of it.
        member: MemberId,
        /// Where that member is reached.
        addr: SocketAddr,
        /// Its highest committed index.
        theirs: u64,
    },
}

/// "member 1", "members 1, 3".
fn members_list(m: &[MemberId]) -> String {
    let each: Vec<String> = m.iter().map(ToString::to_string).collect();
    format!(
        "member{} {}",
        if m.len() == 1 { "" } else { "s" },
        each.join(", ")
    )
}

/// "members 0-2", "only member 0".
fn members_phrase(n: usize) -> String {
    match n {
        0 => "no members".to_string(),
        1 => "only member 0".to_string(),
        n => format!("members 0-{}", n - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_errors_read_clearly() {
        let e = AdminError::SlotsOutOfBounds {
            range: "0-9999".parse().unwrap(),
            slots: 1024,
        };
        assert_eq!(
            e.to_string(),
            "slot range 0-9999 out of bounds: the cluster has 1024 slots (0-1023)"
        );
        let e = AdminError::NoMember {
            id: MemberId(7),
            members: 3,
        };
        assert_eq!(e.to_string(), "no member 7: the cluster has members 0-2");
        let e = AdminError::NoMember {
            id: MemberId(1),
            members: 1,
        };
        assert_eq!(e.to_string(), "no member 1: the cluster has only member 0");
        let e = AdminError::UnknownServer {
            given: "10.0.0.9:7000".into(),
        };
        assert!(e.to_string().starts_with("unknown server 10.0.0.9:7000"));
        let e = AdminError::TooFewMembers {
            replicas: 3,
            up: 1,
            under: 256,
        };
        assert_eq!(
            e.to_string(),
            "replicas is 3, but only 1 member is up: 256 slots stay under-replicated until \
             more members join (kvs-admin status shows them)"
        );
        let e = AdminError::TooFewMembers {
            replicas: 3,
            up: 2,
            under: 9,
        };
        assert!(e.to_string().contains("only 2 members are up"), "{e}");
    }
}
