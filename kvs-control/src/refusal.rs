//! Why the state machine refuses an entry: it is not valid against the
//! state it meets, and changes nothing (on every member alike). The leader
//! asks the same checks before it proposes, to answer with the reason.

use kvs_proto::MemberId;
use std::net::SocketAddr;

use kvs_proto::shard::BadMap;

use crate::limits::{MAX_MAP_BYTES, MEMBER_TIMEOUT_MS};
use crate::member_state::MemberState;

/// Why a command, a membership change or a recovery is refused
/// ([`Applied::Refused`](crate::Applied::Refused), the state's `check_*`
/// methods). Its text is what operators read in kvs-admin's answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A cancel with no migration running.
    #[error("no migration is running")]
    NoMigration,
    /// A migration is running; one at a time.
    #[error(
        "a migration is already running ({done} of {total} slots moved); wait for it or cancel it"
    )]
    MigrationRunning {
        /// Slots moved so far.
        done: u32,
        /// Slots it moves in all.
        total: u32,
    },
    /// A migration's slot range is empty or past the cluster's slots.
    #[error(
        "slot range {first}..{end} out of bounds: the cluster has {slots} slots (0-{last})",
        last = .slots.saturating_sub(1)
    )]
    SlotsOutOfBounds {
        /// The range's first slot.
        first: u32,
        /// One past its last.
        end: u32,
        /// The cluster's slots.
        slots: u32,
    },
    /// A migration's target has no id.
    #[error(
        "no member {member}: the cluster has members 0-{last}",
        last = .members.saturating_sub(1)
    )]
    NoTarget {
        /// The target named.
        member: MemberId,
        /// How many member ids were given.
        members: u16,
    },
    /// A migration's target is not up.
    #[error("member {member} is {state:?}; it cannot take slots")]
    TargetNotUp {
        /// The target.
        member: MemberId,
        /// Its standing.
        state: MemberState,
    },
    /// A migration (or a rebalance) that would move slots off a member
    /// that is not up: their records are there alone (a ready backup
    /// would have taken them over), and nothing can copy them out.
    #[error(
        "slots {first}-{last} are on member {member}, which is {state:?}, and have no ready copy \
         elsewhere: they cannot move while it is down. Start it again (from its data dir, with \
         durability, it comes back with its records), or give them up: `kvs-admin forget \
         {member} --force` hands them, empty, to the members that are up, their records lost",
        last = .end.saturating_sub(1)
    )]
    SourceDown {
        /// The first of the slots.
        first: u32,
        /// One past the last.
        end: u32,
        /// The member they are on.
        member: MemberId,
        /// Its standing.
        state: MemberState,
    },
    /// A rebalance with the slots (and copies) spread evenly already.
    #[error("nothing to move: the slots are spread evenly already")]
    Balanced,
    /// A migration whose target owns every slot it names.
    #[error("nothing to move: the target already owns those slots")]
    NothingToMove,
    /// The map after a migration would not fit the group's messages
    /// (48 KiB).
    #[error(
        "the map after this migration would cut the slots into {runs} runs ({bytes} bytes), \
         more than the {max} bytes the control group carries for a map: \
         move longer ranges of contiguous slots",
        max = MAX_MAP_BYTES
    )]
    MapTooLarge {
        /// Runs of slots with one owner.
        runs: usize,
        /// The encoded map's size.
        bytes: usize,
    },
    /// A join under an id that is not the next.
    #[error("the next member id is {next}, not {member}")]
    NotNextId {
        /// The id asked for.
        member: MemberId,
        /// The next id.
        next: MemberId,
    },
    /// A join at an address a member has.
    #[error("{addr} is member {member} already")]
    MemberAlready {
        /// The address.
        addr: SocketAddr,
        /// The member there.
        member: MemberId,
    },
    /// A join with no workers, or more than a map holds.
    #[error("{0} workers is out of range")]
    Workers(u16),
    /// A join with every member id given.
    #[error("the cluster has as many members as it may")]
    Full,
    /// A member that has no id, or left.
    #[error("there is no member {0}")]
    NoMember(MemberId),
    /// A voter change that changes nothing.
    #[error(
        "member {member} {} already",
        if *.voter { "votes" } else { "does not vote" }
    )]
    VoterAlready {
        /// The member.
        member: MemberId,
        /// Whether it votes.
        voter: bool,
    },
    /// A change that would leave the control group without a voter.
    #[error("member {0} is the control group's last voter")]
    LastVoter(MemberId),
    /// A member forgotten twice.
    #[error("member {0} was forgotten already")]
    Forgotten(MemberId),
    /// A member forgotten without `force` while it owns or exports slots.
    #[error(
        "member {member} owns {held} slots; move them away first \
         (kvs-admin migrate), or forget it with --force: slots with a \
         ready backup fail over to it, the others' records are lost"
    )]
    OwnsSlots {
        /// The member.
        member: MemberId,
        /// Slots it owns.
        held: u32,
    },
    /// A member forgotten with slots and no other member up to take them.
    #[error("no other member is up to take member {0}'s slots")]
    NoTaker(MemberId),
    /// A forgotten member's slots could not be given to a member up.
    #[error("cannot give slots {first}..{end} to member {to}")]
    CannotGive {
        /// The run's first slot.
        first: u32,
        /// One past its last.
        end: u32,
        /// The member it would go to.
        to: MemberId,
    },
    /// A map that does not decode, or a member the map cannot take.
    #[error(transparent)]
    Map(#[from] BadMap),
    /// A mark failed or a drain of a member that is not up.
    #[error("member {member} is {state:?}, not up")]
    NotUp {
        /// The member.
        member: MemberId,
        /// Its standing, if it has an id.
        state: Option<MemberState>,
    },
    /// A mark up of a member that is not failed.
    #[error("member {member} is {state:?}, not failed")]
    NotFailed {
        /// The member.
        member: MemberId,
        /// Its standing, if it has an id.
        state: Option<MemberState>,
    },
    /// A restart of a member that left, or has no id.
    #[error("member {member} is {state:?}")]
    NotRestartable {
        /// The member.
        member: MemberId,
        /// Its standing, if it has an id.
        state: Option<MemberState>,
    },
    /// A replica count outside [`REPLICAS`](crate::REPLICAS).
    #[error("replicas = {0}: a cluster keeps 1 to 3 copies of each slot")]
    Replicas(u8),
    /// A `member_timeout` outside [`MEMBER_TIMEOUT_MS`], in milliseconds.
    #[error(
        "member_timeout = {0} ms: it must be within {lo}..={hi} ms",
        lo = MEMBER_TIMEOUT_MS.start(),
        hi = MEMBER_TIMEOUT_MS.end()
    )]
    MemberTimeout(u64),
    /// A map command whose map is not the next version.
    #[error("map version {version} does not follow {current}")]
    MapVersion {
        /// The command's map's version.
        version: u32,
        /// The committed map's.
        current: u32,
    },
    /// A map command that changes more than owners.
    #[error("a map command may change owners only, not slots or members")]
    MapShape,
    /// A map command that gives slots to a member that left.
    #[error("slots {first}..{end} given to member {member}, which left")]
    GivenToLeft {
        /// The run's first slot.
        first: u32,
        /// One past its last.
        end: u32,
        /// The member.
        member: MemberId,
    },
    /// A hand-over of a chunk that is not the one due.
    #[error("slots {first}..{end} are not ready to be handed to member {to}")]
    HandOverNotDue {
        /// The chunk's first slot.
        first: u32,
        /// One past its last.
        end: u32,
        /// The target.
        to: MemberId,
    },
    /// A hand-over the map does not allow.
    #[error("slots {first}..{end} cannot be handed to member {to}: {why}")]
    HandOver {
        /// The chunk's first slot.
        first: u32,
        /// One past its last.
        end: u32,
        /// The target.
        to: MemberId,
        /// What the map said.
        why: BadMap,
    },
    /// A readdress to another member's address.
    #[error("{addr} is member {member}'s address")]
    AddressOf {
        /// The address.
        addr: SocketAddr,
        /// The member there.
        member: MemberId,
    },
    /// An unsafe recovery run on a member that does not vote.
    #[error(
        "member {0} does not vote in the control group: run unsafe-recover on \
         a surviving voter"
    )]
    SurvivorNotVoter(MemberId),
    /// An unsafe recovery that names no lost member.
    #[error("name the members lost for good")]
    NoneLost,
    /// An unsafe recovery that names its survivor lost.
    #[error("member {0} is the one recovering, not lost")]
    SurvivorLost(MemberId),
    /// An unsafe recovery that names a member with no id, or one that left.
    #[error("there is no member {0} (or it was forgotten)")]
    NoLostMember(MemberId),
    /// A normal entry that does not decode; the decoder's words.
    #[error("an entry that does not decode: {0}")]
    BadEntry(String),
    /// A configuration change whose context does not decode; the
    /// decoder's words.
    #[error("a membership change that does not decode: {0}")]
    BadChange(String),
    /// A joint configuration change (the group makes none).
    #[error("joint configuration changes are not used")]
    JointChange,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_read_as_operators_and_tests_know_them() {
        let cases = [
            (
                Refusal::NoTarget {
                    member: MemberId(7),
                    members: 2,
                },
                "no member 7: the cluster has members 0-1",
            ),
            (
                Refusal::SlotsOutOfBounds {
                    first: 0,
                    end: 2000,
                    slots: 1024,
                },
                "slot range 0..2000 out of bounds: the cluster has 1024 slots (0-1023)",
            ),
            (
                Refusal::OwnsSlots {
                    member: MemberId(1),
                    held: 16,
                },
                "member 1 owns 16 slots; move them away first (kvs-admin migrate), or forget \
                 it with --force: slots with a ready backup fail over to it, the others' \
                 records are lost",
            ),
            (
                Refusal::VoterAlready {
                    member: MemberId(2),
                    voter: false,
                },
                "member 2 does not vote already",
            ),
            (
                Refusal::NotUp {
                    member: MemberId(3),
                    state: Some(MemberState::Failed),
                },
                "member 3 is Some(Failed), not up",
            ),
            (
                Refusal::MemberTimeout(100),
                "member_timeout = 100 ms: it must be within 200..=60000 ms",
            ),
            (
                Refusal::MapTooLarge {
                    runs: 16384,
                    bytes: 60000,
                },
                "the map after this migration would cut the slots into 16384 runs (60000 \
                 bytes), more than the 49152 bytes the control group carries for a map: move \
                 longer ranges of contiguous slots",
            ),
            (
                Refusal::Map(BadMap("too many members")),
                "bad shard map: too many members",
            ),
        ];
        for (r, text) in cases {
            assert_eq!(r.to_string(), text);
        }
    }
}
