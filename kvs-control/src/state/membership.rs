//! Membership in the state: joins, voters, members forgotten, and the
//! unsafe recovery that forgets the lost members of a group.

use kvs_proto::{Member, MemberId};

use super::{Applied, ClusterState, Membership, Standing};
use crate::log_pos::LogPos;
use crate::member_state::MemberState;
use crate::refusal::Refusal;
use crate::replication;

impl ClusterState {
    /// Whether `change` would be applied, checked against this state (the
    /// leader asks before proposing; applying asks again).
    pub fn check_membership(&self, change: &Membership) -> Result<(), Refusal> {
        match change {
            Membership::Join {
                member,
                addr,
                workers,
                ..
            } => {
                if *member != self.next_member() {
                    return Err(Refusal::NotNextId {
                        member: *member,
                        next: self.next_member(),
                    });
                }
                if let Some(m) = self.member_at(*addr) {
                    return Err(Refusal::MemberAlready {
                        addr: *addr,
                        member: m,
                    });
                }
                if *workers == 0 || *workers > kvs_proto::shard::MAX_WORKERS {
                    return Err(Refusal::Workers(*workers));
                }
                if self.member_count() >= kvs_proto::shard::MAX_MEMBERS {
                    return Err(Refusal::Full);
                }
                Ok(())
            }
            Membership::Voter { member, voter } => match self.member_state(*member) {
                None | Some(MemberState::Left) => Err(Refusal::NoMember(*member)),
                _ if self.is_voter(*member) == *voter => Err(Refusal::VoterAlready {
                    member: *member,
                    voter: *voter,
                }),
                _ if !voter && self.live_voters().count() <= 1 => Err(Refusal::LastVoter(*member)),
                _ => Ok(()),
            },
            Membership::Forget { member, force, .. } => {
                match self.member_state(*member) {
                    None => return Err(Refusal::NoMember(*member)),
                    Some(MemberState::Left) => return Err(Refusal::Forgotten(*member)),
                    _ => {}
                }
                let held = self.map.slots_of(*member);
                let importing =
                    (0..self.map.slots()).any(|s| self.map.importing_from(s) == Some(*member));
                if (held > 0 || importing) && !force {
                    return Err(Refusal::OwnsSlots {
                        member: *member,
                        held,
                    });
                }
                let others = self
                    .live_members()
                    .filter(|&m| m != *member && self.member_state(m) == Some(MemberState::Up))
                    .count();
                if held > 0 && others == 0 {
                    return Err(Refusal::NoTaker(*member));
                }
                if self.is_voter(*member) && self.live_voters().filter(|v| v != member).count() == 0
                {
                    return Err(Refusal::LastVoter(*member));
                }
                Ok(())
            }
        }
    }

    fn live_voters(&self) -> impl Iterator<Item = MemberId> + '_ {
        self.live_members().filter(|&m| self.is_voter(m))
    }

    /// How many voters the group should have: the largest odd number not
    /// above `control_voters` nor the members that have not left. An odd
    /// count, because an even one tolerates no more failures than the odd
    /// one below it and needs more members for a quorum (two voters: either
    /// one's death stops the group).
    pub fn voter_target(&self) -> usize {
        let n = self
            .live_members()
            .count()
            .min(usize::from(self.control_voters));
        if n == 0 {
            0
        } else if n % 2 == 1 {
            n
        } else {
            n - 1
        }
    }

    /// The next change of voters toward [`voter_target`](Self::voter_target),
    /// if one is due: `(member, true)` makes a learner that is up a voter
    /// (the lowest-numbered in a zone with no voter that is up, else the
    /// lowest-numbered); `(member, false)` makes a voter a learner (a failed
    /// one first, else the highest-numbered; never `leader`).
    ///
    /// A voter marked failed while a learner is up makes way for it:
    /// demoted first, then the learner promoted. The failed voter still
    /// counts toward the quorum, so without the swap a second failure would
    /// stop the group although members enough to vote are up. The mark
    /// already waited out `member_timeout`, so a voter that only paused is
    /// not swapped; one that comes back stays a learner, the group having
    /// its voters. Demoting before promoting keeps every step's quorum
    /// within the members that are up (two of two, then two of three),
    /// whatever the learner's log.
    pub fn voter_change(&self, leader: MemberId) -> Option<(MemberId, bool)> {
        let voters: Vec<MemberId> = self.live_voters().collect();
        let target = self.voter_target();
        if voters.len() < target {
            return self.next_voter().map(|m| (m, true));
        }
        let failed = voters
            .iter()
            .copied()
            .find(|&v| v != leader && self.member_state(v) == Some(MemberState::Failed));
        if voters.len() > target {
            let highest = voters.iter().copied().rev().find(|&v| v != leader);
            return failed.or(highest).map(|m| (m, false));
        }
        failed
            .filter(|_| self.next_voter().is_some())
            .map(|m| (m, false))
    }

    /// The learner that is up to make a voter next: the lowest-numbered in
    /// a zone where no voter is up (a member without a zone is a zone of
    /// its own), else the lowest-numbered, so the voters spread over zones
    /// and one zone's loss takes as few as it can.
    fn next_voter(&self) -> Option<MemberId> {
        let voting_zones: Vec<&str> = self
            .live_voters()
            .filter(|&v| self.member_state(v) == Some(MemberState::Up))
            .filter_map(|v| self.zone(v))
            .collect();
        let learners: Vec<MemberId> = self.up_members().filter(|&m| !self.is_voter(m)).collect();
        learners
            .iter()
            .copied()
            .find(|&m| self.zone(m).is_none_or(|z| !voting_zones.contains(&z)))
            .or_else(|| learners.first().copied())
    }

    /// Applies a membership change committed at `at`; the
    /// caller applies the Raft configuration change only if this is not
    /// [`Applied::Refused`].
    pub fn apply_membership(&mut self, change: &Membership, at: LogPos) -> Applied {
        if let Err(why) = self.check_membership(change) {
            return Applied::Refused(why);
        }
        match *change {
            Membership::Join {
                member,
                addr,
                workers,
                bulk_port,
                ref zone,
            } => {
                let mut map = self.map.clone();
                if let Err(e) = map.add_member(Member {
                    addr,
                    workers,
                    bulk_port,
                }) {
                    return Applied::Refused(e.into());
                }
                self.members.push(Standing {
                    state: MemberState::Up,
                    voter: false,
                    zone: zone.clone(),
                    drained: false,
                });
                self.set_map(map, at);
                self.reconcile(at);
                Applied::Joined(member)
            }
            Membership::Voter { member, voter } => {
                self.members[member.index()].voter = voter;
                Applied::Voter { member, voter }
            }
            Membership::Forget { member, at_ms, .. } => self.forget(member, at_ms, at),
        }
    }

    /// A `Forget` change (checked): `member` leaves. Each slot it is primary
    /// of goes to its first ready backup on a member that is up, as a
    /// failover does (every acknowledged write is on that copy); only the
    /// slots with no such backup go, empty, to the members that are up in
    /// turn, their records lost.
    fn forget(&mut self, member: MemberId, at_ms: u64, at: LogPos) -> Applied {
        // A migration from or to it goes on without it.
        let unblocked = self
            .migration
            .as_mut()
            .filter(|g| g.running())
            .is_some_and(|g| g.forget(member));
        let mut map = self.map.clone();
        let up: Vec<MemberId> = self.up_members().filter(|&m| m != member).collect();
        let moved = replication::failover(&mut map, member, |m| up.contains(&m));
        let lost = map.slots_of(member);
        let takers: Vec<MemberId> = self
            .live_members()
            .filter(|&m| m != member && self.member_state(m) == Some(MemberState::Up))
            .collect();
        // Runs of the slots left go, empty, to the members that are up in
        // turn.
        let mut turn = 0usize;
        for r in map.clone().runs() {
            // No member up to take them (only an unsafe recovery whose
            // survivor is marked failed): they stay, unavailable.
            if r.owner.member == member && !takers.is_empty() {
                let to = takers[turn % takers.len()];
                turn += 1;
                if map.assign(r.slots.clone(), to, None).is_err() {
                    return Applied::Refused(Refusal::CannotGive {
                        first: r.slots.start,
                        end: r.slots.end,
                        to,
                    });
                }
            }
        }
        // Imports from it end: what was not pulled is lost.
        for s in 0..map.slots() {
            if map.importing_from(s) == Some(member) {
                let _ = map.finish_import(s..s + 1);
            }
        }
        self.members[member.index()] = Standing {
            state: MemberState::Left,
            voter: false,
            zone: None,
            drained: false,
        };
        self.set_map(map, at);
        if unblocked {
            self.step_migration(at, Some(at_ms));
        }
        self.reconcile(at);
        Applied::Left {
            member,
            moved,
            lost_slots: lost,
        }
    }

    /// Whether `survivor` may recover the group without `lost`
    /// ([`Command::UnsafeRecover`](crate::Command::UnsafeRecover)): it is a voter and not lost, and each
    /// lost member is a member that has not left.
    pub fn check_recovery(&self, survivor: MemberId, lost: &[MemberId]) -> Result<(), Refusal> {
        if !self.is_voter(survivor) {
            return Err(Refusal::SurvivorNotVoter(survivor));
        }
        if lost.is_empty() {
            return Err(Refusal::NoneLost);
        }
        for &m in lost {
            match self.member_state(m) {
                _ if m == survivor => return Err(Refusal::SurvivorLost(m)),
                None | Some(MemberState::Left) => return Err(Refusal::NoLostMember(m)),
                _ => {}
            }
        }
        Ok(())
    }

    /// An `UnsafeRecover` command: the `lost` members are forgotten, as
    /// with `forget --force`, and the voters other than `survivor` become
    /// learners.
    pub(super) fn unsafe_recover(
        &mut self,
        survivor: MemberId,
        lost: &[MemberId],
        at_ms: u64,
        at: LogPos,
    ) -> Applied {
        if let Err(why) = self.check_recovery(survivor, lost) {
            return Applied::Refused(why);
        }
        let (mut moved, mut lost_slots) = (0, 0);
        let mut lost: Vec<MemberId> = lost.to_vec();
        lost.sort_unstable();
        lost.dedup();
        // None of them takes another's slots or is promoted for them.
        for &m in &lost {
            self.members[m.index()].state = MemberState::Failed;
        }
        for &m in &lost {
            if let Applied::Left {
                moved: mv,
                lost_slots: ls,
                ..
            } = self.forget(m, at_ms, at)
            {
                moved += mv;
                lost_slots += ls;
            }
        }
        let demoted: Vec<MemberId> = self.live_voters().filter(|&v| v != survivor).collect();
        for &v in &demoted {
            self.members[v.index()].voter = false;
        }
        Applied::Recovered {
            survivor,
            lost,
            demoted,
            moved,
            lost_slots,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::*;
    use crate::state::*;

    #[test]
    fn joins_take_the_next_id_and_the_voters_stay_odd() {
        let mut s = three();
        assert_eq!(s.member_count(), 3);
        assert_eq!(s.map().version(), 3);
        assert_eq!(s.map_committed_at(), LogPos::new(3, 1));
        // Joined as learners; control_voters = 2 and 3 members: one voter.
        assert!(s.is_voter(MemberId(0)) && !s.is_voter(MemberId(1)) && !s.is_voter(MemberId(2)));
        assert_eq!(s.voter_target(), 1);
        assert_eq!(s.voter_change(MemberId(0)), None);
        s.control_voters = 5;
        assert_eq!(s.voter_target(), 3);
        assert_eq!(s.voter_change(MemberId(0)), Some((MemberId(1), true)));
        let v = Membership::Voter {
            member: MemberId(1),
            voter: true,
        };
        assert_eq!(
            s.apply_membership(&v, LogPos::new(4, 1)),
            Applied::Voter {
                member: MemberId(1),
                voter: true
            }
        );
        assert!(matches!(
            s.apply_membership(&v, LogPos::new(5, 1)),
            Applied::Refused(_)
        ));
        assert_eq!(s.voter_change(MemberId(0)), Some((MemberId(2), true)));
        // Four members with five allowed: three voters, so one goes back.
        s.members[2].voter = true;
        s.members.push(Standing {
            state: MemberState::Up,
            voter: true,
            zone: None,
            drained: false,
        });
        s.map
            .add_member(Member {
                addr: addr(7003),
                workers: 1,
                bulk_port: 0,
            })
            .unwrap();
        assert_eq!(s.voter_change(MemberId(3)), Some((MemberId(2), false)));
        s.members[1].state = MemberState::Failed;
        assert_eq!(
            s.voter_change(MemberId(3)),
            Some((MemberId(1), false)),
            "a failed voter first"
        );
        assert_eq!(s.member_at(addr(7002)), Some(MemberId(2)));
        let mut s2 = s.clone();
        let again = Membership::Join {
            member: MemberId(3),
            addr: addr(7001),
            workers: 2,
            bulk_port: 1,
            zone: None,
        };
        assert!(matches!(
            s2.apply_membership(&again, LogPos::new(9, 1)),
            Applied::Refused(_)
        ));
        let stale = Membership::Join {
            member: MemberId(2),
            addr: addr(7009),
            workers: 2,
            bulk_port: 1,
            zone: None,
        };
        assert!(matches!(
            s2.apply_membership(&stale, LogPos::new(9, 1)),
            Applied::Refused(_)
        ));
        assert_eq!(s2, s, "a refused change changes nothing");
    }

    #[test]
    fn a_failed_voter_makes_way_for_a_learner_in_a_zone_without_a_voter() {
        // Voters 0, 1, 2 in zones a, b, c; learners 3 (zone a) and 4 (d).
        let map = ShardMap::single(addr(7000), 64, 2).unwrap();
        let mut f = founding(3);
        f.zone = Some("a".into());
        let mut s = ClusterState::bootstrap(ClusterId::from_bytes([7; 16]), f, map);
        for (i, z) in [(1, "b"), (2, "c"), (3, "a"), (4, "d")].map(|(i, z)| (MemberId(i), z)) {
            let j = Membership::Join {
                member: i,
                addr: addr(7000 + i.0),
                workers: 2,
                bulk_port: 9000 + i.0,
                zone: Some(z.into()),
            };
            assert_eq!(
                s.apply_membership(&j, LogPos::new(u64::from(i.0) + 1, 1)),
                Applied::Joined(i)
            );
        }
        let mut at = 10;
        let mut apply = |s: &mut ClusterState, (member, voter)| {
            at += 1;
            let v = Membership::Voter { member, voter };
            assert!(matches!(
                s.apply_membership(&v, LogPos::new(at, 1)),
                Applied::Voter { .. }
            ));
        };
        while let Some(c) = s.voter_change(MemberId(0)) {
            apply(&mut s, c);
        }
        assert_eq!(
            s.live_voters().collect::<Vec<_>>(),
            [MemberId(0), MemberId(1), MemberId(2)]
        );
        // Member 1 fails: it goes back to learning, and the learner in a
        // zone with no voter (d, not a) votes in its place.
        s.apply(
            &Command::MarkFailed {
                member: MemberId(1),
            },
            LogPos::new(20, 1),
        );
        assert_eq!(s.voter_change(MemberId(0)), Some((MemberId(1), false)));
        apply(&mut s, (MemberId(1), false));
        assert_eq!(s.voter_change(MemberId(0)), Some((MemberId(4), true)));
        apply(&mut s, (MemberId(4), true));
        assert_eq!(s.voter_change(MemberId(0)), None);
        // Back up, it stays a learner: the group has its voters.
        s.apply(
            &Command::MarkUp {
                member: MemberId(1),
            },
            LogPos::new(21, 1),
        );
        assert_eq!(s.voter_change(MemberId(0)), None);
        // A failed voter with no learner up to take its place stays.
        s.apply(
            &Command::MarkFailed {
                member: MemberId(1),
            },
            LogPos::new(22, 1),
        );
        s.apply(
            &Command::MarkFailed {
                member: MemberId(3),
            },
            LogPos::new(23, 1),
        );
        s.apply(
            &Command::MarkFailed {
                member: MemberId(2),
            },
            LogPos::new(24, 1),
        );
        assert_eq!(s.voter_change(MemberId(0)), None);
    }

    #[test]
    fn forget_with_force_fails_slots_over_to_ready_backups_and_loses_the_rest() {
        let mut s = three();
        spread(&mut s);
        s.apply(&Command::SetReplicas { replicas: 2 }, LogPos::new(10, 1));
        // Member 2's slots are backed up on member 0; 42..53 are copied.
        assert!((42..64).all(|x| s.map().backups(x)[0].owner.member == MemberId(0)));
        let since = s.map().version();
        s.apply(
            &ready_cmd(MemberId(0), vec![42..53], since),
            LogPos::new(11, 1),
        );
        let heirs: Vec<_> = (42..53).map(|x| s.map().backups(x)[0].owner).collect();
        // Member 2 dies and is forgotten before the leader marks it failed
        // (an operator who knows the machine is gone).
        let f = Membership::Forget {
            member: MemberId(2),
            force: true,
            at_ms: 0,
        };
        assert_eq!(
            s.apply_membership(&f, LogPos::new(12, 1)),
            Applied::Left {
                member: MemberId(2),
                moved: 11,
                lost_slots: 11
            },
            "only slots without a ready copy are lost"
        );
        // The copied slots are their backups' now, records and all: the
        // owner is the backup's worker, with nothing to import.
        for (x, heir) in (42..53).zip(heirs) {
            assert_eq!(s.map().owner_of_slot(x), heir, "slot {x}");
            assert_eq!(s.map().importing_from(x), None);
        }
        // The others went out empty, to the members that are up.
        assert!((53..64).all(|x| s.map().owner_of_slot(x).member != MemberId(2)));
        assert_eq!(s.map().slots_of(MemberId(2)), 0);
    }

    #[test]
    fn an_unsafe_recovery_forgets_the_lost_and_leaves_one_voter() {
        let mut s = three();
        for m in [1, 2] {
            s.members[m].voter = true;
        }
        let mut m = s.map.clone();
        m.assign(0..32, MemberId(2), None).unwrap();
        s.set_map(m, LogPos::new(9, 1));
        let recover = |survivor, lost: Vec<MemberId>| Command::UnsafeRecover {
            survivor,
            lost,
            at_ms: 0,
        };
        assert!(matches!(
            s.apply(&recover(MemberId(0), vec![MemberId(0)]), LogPos::new(10, 1)),
            Applied::Refused(_)
        ));
        assert!(matches!(
            s.apply(&recover(MemberId(0), vec![MemberId(7)]), LogPos::new(10, 1)),
            Applied::Refused(_)
        ));
        assert_eq!(
            s.apply(&recover(MemberId(0), vec![MemberId(2)]), LogPos::new(11, 1)),
            Applied::Recovered {
                survivor: MemberId(0),
                lost: vec![MemberId(2)],
                demoted: vec![MemberId(1)],
                moved: 0,
                lost_slots: 32
            }
        );
        assert_eq!(s.member_state(MemberId(2)), Some(MemberState::Left));
        assert_eq!(s.live_voters().collect::<Vec<_>>(), [MemberId(0)]);
        assert_eq!(s.map().slots_of(MemberId(2)), 0);
    }
}
