//! The member's status, as the control thread answers it: its workers'
//! figures, its imports and copies, and the control group as it sees it.

use std::sync::atomic::Ordering;

use kvs_control::MemberState;
use kvs_proto::control::{DiskStatus, GroupMember, GroupView, MemberStatus, WorkerStatus};
use kvs_proto::Owner;

use super::{now_ms, State};

impl State {
    /// This member's figures, and the group as it sees it.
    pub(super) fn status(&self) -> MemberStatus {
        let mut workers: Vec<WorkerStatus> = self
            .stats
            .iter()
            .map(|s| WorkerStatus {
                slots: 0,
                keys: s.keys.load(Ordering::Relaxed),
                backup_keys: s.backup_keys.load(Ordering::Relaxed),
                bytes: s.memory_used.load(Ordering::Relaxed),
                disk: s.disk().map(|d| DiskStatus {
                    log_bytes: d.log_bytes,
                    snapshot_bytes: d.snapshot_bytes,
                    snapshots: d.snapshots,
                    snapshotting: d.snapshotting,
                    recovered_bytes: d.recovered.bytes,
                    recovery_ms: d.recovered.took.as_millis() as u64,
                    disk_full: d.disk_full,
                    answered: d.answered,
                }),
                recovering: None,
            })
            .collect();
        for s in 0..self.map.slots() {
            let Owner { member, worker } = self.map.owner_of_slot(s);
            if member == self.me {
                if let Some(w) = workers.get_mut(usize::from(worker)) {
                    w.slots += 1;
                }
            }
        }
        let g = self.group.status();
        let group = self.group.state().map(|s| GroupView {
            cluster_id: s.cluster_id(),
            leader: g.leader,
            term: g.term,
            commit: g.commit,
            applied: g.applied,
            lease: self.shared.leased.load(Ordering::Relaxed),
            replicas: s.replicas(),
            under_replicated_slots: s.under_replicated(),
            members: s
                .member_ids()
                .map(|m| GroupMember {
                    id: m,
                    addr: s.map().members()[m.index()].addr,
                    state: match s.member_state(m) {
                        Some(MemberState::Up) | None => "up",
                        Some(MemberState::Failed) => "failed",
                        Some(MemberState::Left) => "left",
                    }
                    .into(),
                    voter: s.is_voter(m),
                    zone: s.zone(m).map(str::to_string),
                    drained: s.drained(m),
                })
                .collect(),
        });
        MemberStatus {
            member: self.me,
            map_version: self.map.version(),
            workers,
            imports: self.imports.values().map(|p| p.status()).collect(),
            migration: self
                .group
                .state()
                .and_then(|s| s.migration_status(now_ms())),
            held: {
                let (slots, _, bytes) = self.source_slots.held();
                (slots as u32, bytes as u64)
            },
            drained: self.group.state().is_some_and(|s| s.drained(self.me)),
            copies: self.copies.status(),
            group,
            bulk_served: (
                self.shared.export.connections.load(Ordering::Relaxed),
                self.shared.export.pulls.load(Ordering::Relaxed),
            ),
            recovering: false,
        }
    }
}
