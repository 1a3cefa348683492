//! What the control thread shares with the rest of the server: the member's
//! id, the map version in force, the control group's view, and migration
//! totals (for [`crate::Server`] and the metrics endpoint).

use kvs_control::MemberState;
use kvs_proto::MemberId;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};

use crate::bulk::export::ExportCounters;

/// The member's view of the cluster.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// This member's id.
    pub member: MemberId,
    /// The map version in force.
    pub version: AtomicU32,
    /// The member that leads the control group, plus one (0: none known).
    pub leader: AtomicU32,
    /// The control group's term.
    pub term: AtomicU64,
    /// Whether this member holds a lease (serves its slots).
    pub leased: AtomicBool,
    /// Asked to drain (SIGTERM, `kvs-admin drain`), and drained: the group
    /// moved its slots to their backups.
    pub drain: AtomicBool,
    pub drained: AtomicBool,
    /// The drain is the process's stop (SIGTERM, [`crate::Server::hand_off`]):
    /// the workers keep the copies it takes away, on disk, for the restart
    /// to catch up from. A drain `kvs-admin drain` asks for empties them.
    pub stopping: AtomicBool,
    /// Fault injection (tests): the control thread neither sends nor takes
    /// the control group's messages, as if a partition cut it off from the
    /// group while clients and backups still reach it.
    pub cut_off: AtomicBool,
    /// Records and bytes of keys and values this member pulled as a
    /// migration's target.
    pub pulled_records: AtomicU64,
    pub pulled_bytes: AtomicU64,
    /// What it sent as a source, of migrations and copies.
    pub export: Arc<ExportCounters>,
    /// The cluster as this member's copy of the control state has it.
    pub figures: Mutex<ClusterFigures>,
}

/// The cluster as a member's copy of the control state has it, for the
/// metrics endpoint (alert rules read any member's): refreshed by the
/// control thread when it applies an entry, read by scrapes.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ClusterFigures {
    /// Every member the group knows, and its state.
    pub members: Vec<(MemberId, MemberState)>,
    /// Slots with fewer ready copies than `replicas`.
    pub under_replicated: u32,
    /// Slots the running migration has still to move (0: none runs).
    pub migration_remaining: u32,
}

impl ClusterFigures {
    /// The figures of control state `s`.
    pub fn of(s: &kvs_control::ClusterState) -> ClusterFigures {
        ClusterFigures {
            members: s
                .member_ids()
                .map(|m| (m, s.member_state(m).unwrap_or(MemberState::Up)))
                .collect(),
            under_replicated: s.under_replicated(),
            migration_remaining: s
                .migration_status(0)
                .filter(|g| !g.finished)
                .map_or(0, |g| g.slots_total.saturating_sub(g.slots_done)),
        }
    }
}
