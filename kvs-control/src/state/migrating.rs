//! Migrations in the state: the checks before one starts, its start, its
//! steps as targets report and sources hand chunks over.

use kvs_proto::control::MigrationStatus;
use kvs_proto::{MemberId, ShardMap};

use super::{Applied, ClusterState, Command};
use crate::limits::MAX_MAP_BYTES;
use crate::log_pos::LogPos;
use crate::member_state::MemberState;
use crate::migration::Migration;
use crate::refusal::Refusal;
use crate::replication;

impl ClusterState {
    /// The migration running, or the last one, as of `now_ms` (Unix
    /// milliseconds).
    pub fn migration_status(&self, now_ms: u64) -> Option<MigrationStatus> {
        let g = self.migration.as_ref()?;
        let mut s = g.status(now_ms);
        s.stalled = g.moving().and_then(|(from, to)| self.stalled_on(from, to));
        Some(s)
    }

    /// Why a chunk from `from` to `to` cannot move: one of them is not up.
    fn stalled_on(&self, from: MemberId, to: MemberId) -> Option<String> {
        let down = |m: MemberId| {
            let st = self.member_state(m)?;
            (st != MemberState::Up).then_some(st)
        };
        let (role, m, st) = match (down(from), down(to)) {
            (Some(st), _) => ("source", from, st),
            (None, Some(st)) => ("target", to, st),
            (None, None) => return None,
        };
        let st = match st {
            MemberState::Failed => "marked failed",
            MemberState::Left => "forgotten",
            MemberState::Up => "up",
        };
        Some(format!(
            "waiting for member {m}, the chunk's {role}, {st}: start it again, or \
             `kvs-admin forget {m} --force` to go on without it (records it alone holds are lost)"
        ))
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
        // A slot's records are on its owner: one that is down (with no
        // ready backup, which would have taken over) cannot send them.
        let chunks = crate::migration::chunks(&self.map, &moves);
        if let Some((c, state)) = chunks.iter().find_map(|c| {
            self.member_state(c.from)
                .filter(|s| *s != MemberState::Up)
                .map(|s| (c, s))
        }) {
            return Err(Refusal::SourceDown {
                first: c.first,
                end: c.end,
                member: c.from,
                state,
            });
        }
        Migration::new(&self.map, &moves, 0, spread)?;
        // The map after it must fit the messages the group carries.
        let mut after = self.map.clone();
        for c in chunks {
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
    fn spread_moves(&self, map: &ShardMap) -> Vec<(std::ops::Range<u32>, MemberId, MemberId)> {
        let up: Vec<MemberId> = self.up_members().collect();
        replication::spread(map, &up, |m| self.zone(m).map(str::to_string))
    }

    fn rebalance_moves(&self) -> Vec<(std::ops::Range<u32>, MemberId)> {
        let up: Vec<MemberId> = self.up_members().collect();
        self.map.rebalance_moves_among(&up)
    }

    /// A `Migrate` or `Rebalance` command (`cmd`) at `at_ms`: plans its
    /// moves, when no migration runs, and takes the first step.
    pub(super) fn start_migration(&mut self, cmd: &Command, at_ms: u64, at: LogPos) -> Applied {
        if let Err(why) = self.check_migration(cmd) {
            return Applied::Refused(why);
        }
        let moves: Vec<(std::ops::Range<u32>, MemberId)> = match cmd {
            Command::Migrate { moves, .. } => moves.iter().map(|&(a, b, to)| (a..b, to)).collect(),
            _ => self.rebalance_moves(),
        };
        match Migration::new(&self.map, &moves, at_ms, self.spreads(cmd)) {
            Ok(g) => self.migration = Some(g),
            Err(why) => return Applied::Refused(why),
        }
        self.step_migration(at, Some(at_ms))
    }

    /// A `HandOver` command: the running migration's due chunk `slots`
    /// goes to member `to`; the copy one too many goes, and the migration
    /// steps on.
    pub(super) fn hand_over_chunk(
        &mut self,
        slots: std::ops::Range<u32>,
        to: MemberId,
        at_ms: u64,
        at: LogPos,
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

    /// The migration's next step, if it takes one: a new map.
    pub(super) fn step_migration(&mut self, at: LogPos, now_ms: Option<u64>) -> Applied {
        let up: Vec<MemberId> = self.up_members().collect();
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::*;
    use crate::state::*;

    /// Member 2 failed owning slots 42..64 with no copy elsewhere
    /// (replicas = 1): no migration or rebalance can move them, and the
    /// refusal says why and what can be done; slots on members that are up
    /// still move. Once it is up again, they move too.
    #[test]
    fn slots_of_a_failed_member_without_a_copy_are_refused_up_front() {
        let mut s = three();
        spread(&mut s);
        let failed = Command::MarkFailed {
            member: MemberId(2),
        };
        assert_eq!(
            s.apply(&failed, LogPos::new(10, 1)),
            Applied::Failed(MemberId(2))
        );
        assert_eq!(
            s.map().owner_of_slot(50).member,
            MemberId(2),
            "no copy took over"
        );
        let off_2 = Command::Migrate {
            moves: vec![(40, 48, MemberId(0))],
            at_ms: 1,
        };
        let Applied::Refused(why) = s.apply(&off_2, LogPos::new(11, 1)) else {
            panic!("a migration off a failed member was accepted");
        };
        assert_eq!(
            why,
            Refusal::SourceDown {
                first: 42,
                end: 48,
                member: MemberId(2),
                state: MemberState::Failed
            }
        );
        let text = why.to_string();
        assert!(
            text.contains("slots 42-47 are on member 2, which is Failed")
                && text.contains("kvs-admin forget 2 --force"),
            "{text}"
        );
        assert!(!s.migrating());
        // A rebalance would move some of them too.
        assert!(matches!(
            s.apply(&Command::Rebalance { at_ms: 1 }, LogPos::new(12, 1)),
            Applied::Refused(Refusal::SourceDown { .. })
        ));
        // Slots on a member that is up still move.
        let off_1 = Command::Migrate {
            moves: vec![(21, 30, MemberId(0))],
            at_ms: 1,
        };
        assert_eq!(s.check_migration(&off_1), Ok(()));
        let up = Command::MarkUp {
            member: MemberId(2),
        };
        assert_eq!(s.apply(&up, LogPos::new(13, 1)), Applied::Up(MemberId(2)));
        // Member 2's slots alone, one chunk from it.
        let only_2 = Command::Migrate {
            moves: vec![(42, 48, MemberId(0))],
            at_ms: 1,
        };
        assert!(matches!(
            s.apply(&only_2, LogPos::new(14, 1)),
            Applied::Map(_)
        ));
        assert_eq!(s.migration_status(2).unwrap().stalled, None);
        // The source fails while its chunk is pulled: status says what the
        // migration waits for.
        s.apply(&failed, LogPos::new(15, 1));
        let st = s.migration_status(2).unwrap();
        assert!(!st.finished, "{st:?}");
        let why = st.stalled.expect("a stalled migration says why");
        assert!(
            why.starts_with("waiting for member 2, the chunk's source, marked failed")
                && why.contains("kvs-admin forget 2 --force"),
            "{why}"
        );
    }

    #[test]
    fn with_replicas_a_migration_copies_then_hands_over_on_the_sources_word() {
        let mut s = three();
        s.apply(&Command::SetReplicas { replicas: 2 }, LogPos::new(10, 1));
        // Member 0's slots are backed up on member 1, ready.
        let since = s.map().version();
        let ready = |member, a, b| ready_cmd(member, vec![a..b], since);
        s.apply(&ready(MemberId(1), 0, 64), LogPos::new(11, 1));
        assert_eq!(s.under_replicated(), 0);
        let go = Command::Migrate {
            moves: vec![(0, 32, MemberId(2))],
            at_ms: 1,
        };
        assert!(matches!(s.apply(&go, LogPos::new(12, 1)), Applied::Map(_)));
        // Member 2 is copied the chunk as one more backup; member 0 keeps
        // serving it with its ready backup.
        assert_eq!(s.map().owner_of_slot(5).member, MemberId(0));
        assert_eq!(s.map().backups(5).len(), 2);
        assert_eq!(s.under_replicated(), 0);
        assert!(s.hand_over_due().is_none());
        let over = Command::HandOver {
            first: 0,
            end: 32,
            to: MemberId(2),
            at_ms: 2,
        };
        assert!(matches!(
            s.apply(&over, LogPos::new(13, 1)),
            Applied::Refused(_)
        ));
        // A reconcile (here, on the replicas entry) keeps the copy.
        s.apply(&Command::SetReplicas { replicas: 2 }, LogPos::new(14, 1));
        assert_eq!(s.map().backups(5).len(), 2);
        let since = s.map().version();
        let copied = Command::BackupReady {
            member: MemberId(2),
            slots: vec![0..32],
            since,
            records: 5,
            bytes: 500,
        };
        s.apply(&copied, LogPos::new(15, 1));
        let due = s.hand_over_due().unwrap();
        assert_eq!(
            (due.first, due.end, due.from, due.to),
            (0, 32, MemberId(0), MemberId(2))
        );
        // Another chunk, or another target, is refused.
        let wrong = Command::HandOver {
            first: 0,
            end: 16,
            to: MemberId(2),
            at_ms: 2,
        };
        assert!(matches!(
            s.apply(&wrong, LogPos::new(16, 1)),
            Applied::Refused(_)
        ));
        assert!(matches!(
            s.apply(&over, LogPos::new(17, 1)),
            Applied::Map(_)
        ));
        // Member 2 serves the chunk with one ready backup (the busier of
        // members 0 and 1 gave up its copy), and the migration is over.
        for x in 0..32 {
            assert_eq!(s.map().owner_of_slot(x).member, MemberId(2));
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
            member: MemberId(1),
            addr: addr(7001),
            workers: 1,
            bulk_port: 9001,
            zone: None,
        };
        assert_eq!(
            s.apply_membership(&j, LogPos::new(2, 1)),
            Applied::Joined(MemberId(1))
        );
        // Every other slot: 16 384 runs.
        let shred = Command::Migrate {
            moves: (0..16384)
                .step_by(2)
                .map(|a| (a, a + 1, MemberId(1)))
                .collect(),
            at_ms: 0,
        };
        let e = s.check_migration(&shred).unwrap_err().to_string();
        assert!(
            e.contains("16384 runs") && e.contains("longer ranges"),
            "{e}"
        );
        let v = s.map().version();
        assert!(matches!(
            s.apply(&shred, LogPos::new(3, 1)),
            Applied::Refused(_)
        ));
        assert_eq!(s.map().version(), v, "a refused entry changes nothing");
        // Half the slots in one range: two runs.
        let half = Command::Migrate {
            moves: vec![(0, 8192, MemberId(1))],
            at_ms: 0,
        };
        s.check_migration(&half).unwrap();
        // Up to the limit's worth of runs is fine.
        let runs = (MAX_MAP_BYTES / kvs_proto::shard::RUN_BYTES / 2) as u32 - 16;
        let many = Command::Migrate {
            moves: (0..runs).map(|i| (4 * i, 4 * i + 2, MemberId(1))).collect(),
            at_ms: 0,
        };
        s.check_migration(&many).unwrap();
    }

    #[test]
    fn a_migration_runs_in_the_log_chunk_by_chunk_on_the_targets_reports() {
        let mut s = three();
        let v0 = s.map().version();
        let bad = Command::Migrate {
            moves: vec![(0, 300, MemberId(1))],
            at_ms: 0,
        };
        assert!(s
            .check_migration(&bad)
            .unwrap_err()
            .to_string()
            .contains("out of bounds"));
        let go = Command::Migrate {
            moves: vec![(0, 40, MemberId(1))],
            at_ms: 1000,
        };
        s.check_migration(&go).unwrap();
        // The handover: the target owns the chunk and imports it.
        assert_eq!(s.apply(&go, LogPos::new(20, 2)), Applied::Map(v0 + 1));
        assert_eq!(s.map().owner_of_slot(5).member, MemberId(1));
        assert_eq!(s.map().importing_from(5), Some(MemberId(0)));
        assert!(s.migrating());
        assert!(s
            .check_migration(&go)
            .unwrap_err()
            .to_string()
            .contains("already running"));
        // A report of another version or of part of the chunk: no step.
        let report = |version, a, b| Command::ImportDone {
            version,
            slots: vec![a..b],
            records: 3,
            bytes: 30,
            lost: None,
            at_ms: 3000,
        };
        assert_eq!(
            s.apply(&report(v0, 0, 40), LogPos::new(21, 2)),
            Applied::Nothing
        );
        assert_eq!(
            s.apply(&report(v0 + 1, 0, 20), LogPos::new(22, 2)),
            Applied::Nothing
        );
        // The whole chunk in: the map ends the import, and the migration.
        assert_eq!(
            s.apply(&report(v0 + 1, 20, 40), LogPos::new(23, 2)),
            Applied::Map(v0 + 2)
        );
        assert_eq!(s.map().importing_from(5), None);
        let st = s.migration_status(9000).unwrap();
        assert!(st.finished && st.slots_done == 40 && st.records == 6);
        assert_eq!(st.seconds, 2.0);
        // Rebalance spreads over the members that are up only.
        s.apply(
            &Command::MarkFailed {
                member: MemberId(2),
            },
            LogPos::new(24, 2),
        );
        assert_eq!(
            s.apply(&Command::Rebalance { at_ms: 0 }, LogPos::new(25, 2)),
            Applied::Map(v0 + 3)
        );
        assert!(s.map().runs().iter().all(|r| r.owner.member != MemberId(2)));
        assert!(matches!(
            s.apply(&Command::Rebalance { at_ms: 0 }, LogPos::new(26, 2)),
            Applied::Refused(_)
        ));
        // Cancel stops after the chunk being pulled.
        assert_eq!(
            s.apply(&Command::Cancel { at_ms: 0 }, LogPos::new(27, 2)),
            Applied::Nothing
        );
        assert!(!s.migrating() || s.migration_status(0).unwrap().cancelled);
    }

    #[test]
    fn forgetting_a_migrations_source_ends_its_chunk_with_the_loss_named() {
        let mut s = three();
        s.apply(
            &Command::Migrate {
                moves: vec![(0, 64, MemberId(1))],
                at_ms: 0,
            },
            LogPos::new(20, 2),
        );
        assert!(s.migrating());
        assert_eq!(s.map().importing_from(3), Some(MemberId(0)));
        // Member 1 (the target) holds nothing yet; member 0, the source, dies.
        let v = Membership::Voter {
            member: MemberId(1),
            voter: true,
        };
        s.apply_membership(&v, LogPos::new(21, 2));
        s.apply(
            &Command::MarkFailed {
                member: MemberId(0),
            },
            LogPos::new(22, 2),
        );
        let f = Membership::Forget {
            member: MemberId(0),
            force: true,
            at_ms: 5,
        };
        assert!(matches!(
            s.apply_membership(&f, LogPos::new(23, 2)),
            Applied::Left {
                member: MemberId(0),
                ..
            }
        ));
        let st = s.migration_status(10).unwrap();
        assert!(st.finished, "{st:?}");
        assert!(
            st.error.as_deref().unwrap().contains("lost with member 0"),
            "{st:?}"
        );
        assert_eq!(s.map().importing_from(3), None);
        assert_eq!(s.map().slots_of(MemberId(0)), 0);
    }
}
