//! Applying the commands of normal entries to the state.

use std::net::SocketAddr;
use std::ops::Range;

use kvs_proto::{MemberId, ShardMap};

use super::{Applied, ClusterState, Command};
use crate::limits::{MEMBER_TIMEOUT_MS, REPLICAS};
use crate::log_pos::LogPos;
use crate::member_state::MemberState;
use crate::refusal::Refusal;
use crate::replication::Rejoining;

impl ClusterState {
    /// Applies a command committed at `at`: a `match` of one
    /// arm per command, each small or a call to the command's own step.
    pub fn apply(&mut self, cmd: &Command, at: LogPos) -> Applied {
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
                    self.members[member.index()].state = MemberState::Failed;
                    self.fail_over(member, at);
                    Applied::Failed(member)
                }
                state => Applied::Refused(Refusal::NotUp { member, state }),
            },
            &Command::MarkUp { member } => match self.member_state(member) {
                Some(MemberState::Failed) => {
                    self.members[member.index()].state = MemberState::Up;
                    self.step_migration(at, None);
                    self.reconcile(at);
                    Applied::Up(member)
                }
                state => Applied::Refused(Refusal::NotFailed { member, state }),
            },
            Command::Restarted {
                member,
                nonce,
                kept,
            } => self.restarted(*member, *nonce, kept, at),
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

    /// A `Drain` command: an up `member` is marked drained, and each slot
    /// it is primary of goes to its ready backup.
    fn drain(&mut self, member: MemberId, at: LogPos) -> Applied {
        match self.member_state(member) {
            Some(MemberState::Up) => {
                self.members[member.index()].drained = true;
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

    /// A `Restarted` command: `member`, up or failed, is up again and not
    /// drained; its slots go to their ready backups and its copies are
    /// dropped; the backups it is given again prefer what it `kept`.
    fn restarted(
        &mut self,
        member: MemberId,
        nonce: u64,
        kept: &[(u32, u32, u16)],
        at: LogPos,
    ) -> Applied {
        match self.member_state(member) {
            Some(MemberState::Up | MemberState::Failed) => {
                let st = &mut self.members[member.index()];
                st.state = MemberState::Up;
                st.drained = false;
                let rejoining = Rejoining::new(member, kept, self.map.slots());
                self.fail_over_rejoining(member, at, &rejoining);
                Applied::Restarted { member, nonce }
            }
            state => Applied::Refused(Refusal::NotRestartable { member, state }),
        }
    }

    /// A `SetReplicas` command: the cluster keeps `replicas` copies of
    /// each slot (1 to 3), and the map is reconciled to it.
    fn set_replicas(&mut self, replicas: u8, at: LogPos) -> Applied {
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
    fn replace_map(&mut self, map: &[u8], at: LogPos) -> Applied {
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

    /// A `BackupStale` command: `member`'s backups of `slots` are not
    /// ready.
    fn backups_stale(&mut self, member: MemberId, slots: &[Range<u32>], at: LogPos) -> Applied {
        let mut map = self.map.clone();
        for r in slots {
            let _ = map.set_backup_unready(r.start..r.end.min(map.slots()), member);
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
        member: MemberId,
        slots: &[Range<u32>],
        since: u32,
        (records, bytes): (u64, u64),
        at: LogPos,
    ) -> Applied {
        let mut map = self.map.clone();
        for r in slots {
            for s in r.start..r.end.min(map.slots()) {
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
        member: MemberId,
        addr: SocketAddr,
        bulk_port: u16,
        at: LogPos,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::*;
    use crate::state::*;

    #[test]
    fn a_map_command_must_follow_the_version_and_keep_the_members() {
        let mut s = three();
        let mut m = s.map().clone();
        m.assign(0..16, MemberId(2), Some(MemberId(0))).unwrap();
        m.set_version(s.map().version() + 1);
        let mut b = Vec::new();
        m.encode(&mut b);
        let cmd = Command::Map { map: b };
        assert_eq!(s.apply(&cmd, LogPos::new(10, 2)), Applied::Map(4));
        assert_eq!(s.map().owner_of_slot(3).member, MemberId(2));
        assert_eq!(s.map_committed_at(), LogPos::new(10, 2));
        // The same command again is out of order.
        assert!(matches!(
            s.apply(&cmd, LogPos::new(11, 2)),
            Applied::Refused(_)
        ));
        assert!(matches!(
            s.apply(&Command::Map { map: vec![1, 2, 3] }, LogPos::new(12, 2)),
            Applied::Refused(_)
        ));
    }

    #[test]
    fn failure_marks_and_forgetting() {
        let mut s = three();
        assert_eq!(
            s.apply(
                &Command::MarkFailed {
                    member: MemberId(2)
                },
                LogPos::new(5, 1)
            ),
            Applied::Failed(MemberId(2))
        );
        assert!(matches!(
            s.apply(
                &Command::MarkFailed {
                    member: MemberId(2)
                },
                LogPos::new(6, 1)
            ),
            Applied::Refused(_)
        ));
        assert_eq!(s.member_state(MemberId(2)), Some(MemberState::Failed));
        assert_eq!(
            s.apply(
                &Command::MarkUp {
                    member: MemberId(2)
                },
                LogPos::new(7, 1)
            ),
            Applied::Up(MemberId(2))
        );
        // Member 0 owns every slot: forgetting it needs force.
        let f = Membership::Forget {
            member: MemberId(0),
            force: false,
            at_ms: 0,
        };
        let Applied::Refused(why) = s.apply_membership(&f, LogPos::new(8, 1)) else {
            panic!("forget of a member with slots went through")
        };
        assert!(why.to_string().contains("owns 64 slots"), "{why}");
        // Member 2 owns nothing: it goes.
        let f2 = Membership::Forget {
            member: MemberId(2),
            force: false,
            at_ms: 0,
        };
        assert_eq!(
            s.apply_membership(&f2, LogPos::new(9, 1)),
            Applied::Left {
                member: MemberId(2),
                moved: 0,
                lost_slots: 0
            }
        );
        assert_eq!(s.member_at(addr(7002)), None);
        assert_eq!(
            s.live_members().collect::<Vec<_>>(),
            [MemberId(0), MemberId(1)]
        );
        // With force, member 0's slots go, empty, to member 1 (a voter now,
        // so the group keeps one).
        let v = Membership::Voter {
            member: MemberId(1),
            voter: true,
        };
        assert!(matches!(
            s.apply_membership(&v, LogPos::new(10, 1)),
            Applied::Voter { .. }
        ));
        s.apply(
            &Command::MarkFailed {
                member: MemberId(0),
            },
            LogPos::new(10, 1),
        );
        let ff = Membership::Forget {
            member: MemberId(0),
            force: true,
            at_ms: 0,
        };
        assert_eq!(
            s.apply_membership(&ff, LogPos::new(11, 1)),
            Applied::Left {
                member: MemberId(0),
                moved: 0,
                lost_slots: 64
            }
        );
        assert_eq!(s.map().slots_of(MemberId(1)), 64);
        // The last voter cannot go.
        let last = Membership::Forget {
            member: MemberId(1),
            force: true,
            at_ms: 0,
        };
        assert!(matches!(
            s.apply_membership(&last, LogPos::new(12, 1)),
            Applied::Refused(_)
        ));
    }

    #[test]
    fn a_restarted_member_gets_its_copies_back_on_the_workers_that_kept_them() {
        let mut s = three();
        spread(&mut s);
        s.apply(&Command::SetReplicas { replicas: 3 }, LogPos::new(10, 1));
        let since = s.map().version();
        for m in 0..3 {
            s.apply(
                &ready_cmd(MemberId(m), vec![0..64], since),
                LogPos::new(11, 1),
            );
        }
        assert_eq!(s.under_replicated(), 0);
        // Member 0 restarts, having kept 21..42 on worker 1 and 42..64 on
        // worker 0 (the reverse of how they were dealt), and 0..21, which
        // it led, on worker 1. The command goes through its encoding.
        let kept = vec![(0, 21, 1), (21, 42, 1), (42, 64, 0)];
        let restart = Command::Restarted {
            member: MemberId(0),
            nonce: 3,
            kept,
        };
        let restart = Command::decode(&restart.encode()).unwrap();
        s.apply(&restart, LogPos::new(12, 1));
        let worker = |s: &ClusterState, slot: u32| s.map().backup_set(slot).of(MemberId(0));
        assert!((0..64).all(|x| worker(&s, x).is_some_and(|b| !b.ready)));
        assert!((0..42).all(|x| worker(&s, x).unwrap().owner.worker == 1));
        assert!((42..64).all(|x| worker(&s, x).unwrap().owner.worker == 0));
        // One from before members named their kept copies: dealt in
        // blocks.
        let old = br#"{"command":"restarted","member":0,"nonce":4}"#;
        let old = Command::decode(old).unwrap();
        assert_eq!(
            old,
            Command::Restarted {
                member: MemberId(0),
                nonce: 4,
                kept: Vec::new()
            }
        );
        s.apply(&old, LogPos::new(13, 1));
        assert_eq!(worker(&s, 21).unwrap().owner.worker, 0);
        assert_eq!(worker(&s, 63).unwrap().owner.worker, 1);
    }

    #[test]
    fn replicas_place_backups_fail_over_and_refill() {
        let mut s = three();
        spread(&mut s);
        assert_eq!(s.replicas(), 1);
        assert_eq!(s.under_replicated(), 0);
        let bad = Command::SetReplicas { replicas: 4 };
        assert!(matches!(
            s.apply(&bad, LogPos::new(10, 1)),
            Applied::Refused(_)
        ));
        let v = s.map().version();
        assert_eq!(
            s.apply(&Command::SetReplicas { replicas: 2 }, LogPos::new(11, 1)),
            Applied::Map(v + 1)
        );
        assert_eq!(s.under_replicated(), 64, "no copy is ready yet");
        assert!((0..64).all(|x| s.map().backups(x).len() == 1));
        let since = s.map().version();
        // A report for a copy begun under an older replica set is stale.
        let stale = ready_cmd(MemberId(1), vec![0..21], since - 1);
        assert_eq!(s.apply(&stale, LogPos::new(12, 1)), Applied::Nothing);
        let ready = |member, a, b| ready_cmd(member, vec![a..b], since);
        assert!(matches!(
            s.apply(&ready(MemberId(1), 0, 21), LogPos::new(13, 1)),
            Applied::Map(_)
        ));
        assert!(matches!(
            s.apply(&ready(MemberId(2), 21, 42), LogPos::new(14, 1)),
            Applied::Map(_)
        ));
        assert_eq!(s.under_replicated(), 22);
        // A stale backup is not ready, and ready again once copied.
        let stale = Command::BackupStale {
            member: MemberId(2),
            slots: vec![21..42],
        };
        assert!(matches!(
            s.apply(&stale, LogPos::new(14, 1)),
            Applied::Map(_)
        ));
        assert_eq!(s.under_replicated(), 43);
        assert_eq!(s.apply(&stale, LogPos::new(14, 1)), Applied::Nothing);
        assert!(matches!(
            s.apply(&ready(MemberId(2), 21, 42), LogPos::new(14, 1)),
            Applied::Map(_)
        ));
        // Member 0 fails: its slots go to member 1, whose copies were
        // ready, and get new backups on member 2.
        assert_eq!(
            s.apply(
                &Command::MarkFailed {
                    member: MemberId(0)
                },
                LogPos::new(15, 1)
            ),
            Applied::Failed(MemberId(0))
        );
        assert_eq!(s.map().slots_of(MemberId(0)), 0);
        assert_eq!(s.map().slots_of(MemberId(1)), 42);
        assert!((0..21).all(|x| s.map().backups(x)[0].owner.member == MemberId(2)));
        assert_eq!(s.map().backup_slots_of(MemberId(0)), 0);
        // Member 2's slots had their backups on member 0: gone, and not
        // replaced on a failed member.
        assert!((42..64).all(|x| s.map().backups(x)[0].owner.member == MemberId(1)));
        // It comes back, restarted: nothing of it is kept, and it takes
        // backups again.
        assert_eq!(
            s.apply(
                &Command::Restarted {
                    member: MemberId(0),
                    nonce: 7,
                    kept: Vec::new(),
                },
                LogPos::new(16, 1)
            ),
            Applied::Restarted {
                member: MemberId(0),
                nonce: 7
            }
        );
        assert_eq!(s.member_state(MemberId(0)), Some(MemberState::Up));
        assert_eq!(s.map().slots_of(MemberId(0)), 0);
        // Three copies: member 0 is the only member with room for them.
        s.apply(&Command::SetReplicas { replicas: 3 }, LogPos::new(17, 1));
        assert_eq!(s.map().backup_slots_of(MemberId(0)), 64);
        // Drained: member 1's slots go to their ready backups (none are
        // ready on member 0 yet: they stay), it keeps no copies, and it
        // takes none until it restarts.
        s.apply(&Command::SetReplicas { replicas: 2 }, LogPos::new(18, 1));
        let since = s.map().version();
        let r = ready_cmd(MemberId(2), vec![0..42], since);
        s.apply(&r, LogPos::new(19, 1));
        assert_eq!(
            s.apply(
                &Command::Drain {
                    member: MemberId(1)
                },
                LogPos::new(20, 1)
            ),
            Applied::Drained {
                member: MemberId(1),
                moved: 42
            }
        );
        assert!(s.drained(MemberId(1)));
        assert_eq!(s.map().slots_of(MemberId(1)), 0);
        assert_eq!(s.map().backup_slots_of(MemberId(1)), 0);
        assert!(!s.up_members().any(|m| m == MemberId(1)));
        let back = Command::Restarted {
            member: MemberId(1),
            nonce: 9,
            kept: Vec::new(),
        };
        s.apply(&back, LogPos::new(21, 1));
        assert!(!s.drained(MemberId(1)));
        // The state survives a snapshot.
        assert_eq!(ClusterState::decode(&s.encode()).unwrap(), s);
    }
}
