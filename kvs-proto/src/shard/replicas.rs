//! A slot's replica set: its primary (the map's owner) and up to
//! [`MAX_BACKUPS`] backups, members' workers that hold a synchronous copy.
//!
//! The primary forwards every write of the slot to each backup and answers
//! the client only once all have applied it, so every acknowledged write is
//! on every backup. A backup is *ready* once its copy of the slot is
//! complete (the records the slot held when the backup was added, and every
//! write since); only a ready backup may be promoted when the primary
//! fails. Every change of a slot's replica set (its primary, a backup added
//! or dropped) moves the slot's *epoch* to the version of the map that
//! makes it: a backup refuses writes forwarded under an older epoch, which
//! is what keeps a deposed primary from getting a write acknowledged.

use std::ops::Range;

use super::{block_worker, BadMap, Owner, ShardMap, NO_MEMBER};
use crate::ids::MemberId;

/// The most backups a slot may have: `replicas` is 1 to 3, so a slot has
/// at most two, and one more while a migration copies it to its next
/// primary ([`ShardMap::hand_over`]).
pub const MAX_BACKUPS: usize = 3;

/// One backup of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Backup {
    /// The member and worker holding the copy.
    pub owner: Owner,
    /// Whether its copy is complete (it may be promoted).
    pub ready: bool,
}

/// A slot's backups, in the order they were added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Backups {
    items: [Backup; MAX_BACKUPS],
    len: u8,
}

impl Backups {
    /// The backups.
    pub fn as_slice(&self) -> &[Backup] {
        &self.items[..usize::from(self.len)]
    }
    /// The backups, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Backup> + '_ {
        self.as_slice().iter()
    }
    /// How many.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
    /// None.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// How many are ready.
    pub fn ready(&self) -> usize {
        self.iter().filter(|b| b.ready).count()
    }
    /// Whether `member` holds one of them.
    pub fn holds(&self, member: MemberId) -> bool {
        self.iter().any(|b| b.owner.member == member)
    }
    /// `member`'s backup, if it holds one.
    pub fn of(&self, member: MemberId) -> Option<Backup> {
        self.iter().copied().find(|b| b.owner.member == member)
    }
    /// The backups in use, to change. The fields past them stay at their
    /// default (which reads as member 0's backup): the encoding leaves them
    /// out, so a change there would make a map differ from its own bytes.
    fn in_use(&mut self) -> &mut [Backup] {
        &mut self.items[..usize::from(self.len)]
    }
    /// Adds `b` (the caller checked there is room).
    pub(super) fn push(&mut self, b: Backup) {
        self.items[usize::from(self.len)] = b;
        self.len += 1;
    }
    /// Removes `member`'s backup; whether there was one.
    fn remove(&mut self, member: MemberId) -> bool {
        let Some(i) = self.iter().position(|b| b.owner.member == member) else {
            return false;
        };
        let n = usize::from(self.len);
        self.items.copy_within(i + 1..n, i);
        self.items[n - 1] = Backup::default();
        self.len -= 1;
        true
    }
}

impl ShardMap {
    /// `slot`'s backups (`slot < slots()`).
    #[inline]
    pub fn backups(&self, slot: u32) -> &[Backup] {
        self.backups[slot as usize].as_slice()
    }

    /// `slot`'s backups as a value.
    pub fn backup_set(&self, slot: u32) -> Backups {
        self.backups[slot as usize]
    }

    /// The version at which `slot`'s replica set last changed.
    #[inline]
    pub fn epoch(&self, slot: u32) -> u32 {
        self.epoch[slot as usize]
    }

    /// Makes `member` a backup of every slot in `slots` (not yet ready),
    /// dealt to its workers in contiguous blocks. Refused for a slot its
    /// primary owns, one it backs up already, one with no room for
    /// another backup, and one being imported (a migration's target pulls
    /// records its backups would not see). The caller sets the version.
    pub fn add_backup(&mut self, slots: Range<u32>, member: MemberId) -> Result<(), BadMap> {
        self.add_backup_on(slots, member, |_| None)
    }

    /// As [`add_backup`](Self::add_backup), but slot `s` goes to worker
    /// `worker(s)` where that names one of the member's workers (the
    /// worker that kept a copy of it, say), and the others are dealt in
    /// blocks as there.
    pub fn add_backup_on(
        &mut self,
        slots: Range<u32>,
        member: MemberId,
        worker: impl Fn(u32) -> Option<u16>,
    ) -> Result<(), BadMap> {
        self.check_range(&slots)?;
        let workers = self
            .members
            .get(member.index())
            .ok_or(BadMap("no such member"))?
            .workers;
        for s in slots.clone() {
            let i = s as usize;
            if self.owner[i].member == member || self.backups[i].holds(member) {
                return Err(BadMap("the member holds a copy of the slot already"));
            }
            if self.backups[i].len() == MAX_BACKUPS {
                return Err(BadMap("the slot has as many backups as it may"));
            }
            if self.from[i] != NO_MEMBER {
                return Err(BadMap("the slot is being imported"));
            }
        }
        let (first, n) = (slots.start, slots.end - slots.start);
        let next = self.version + 1;
        for s in slots {
            let i = s as usize;
            self.backups[i].push(Backup {
                owner: Owner {
                    member,
                    worker: worker(s)
                        .filter(|&w| w < workers)
                        .unwrap_or_else(|| block_worker(s - first, n, workers)),
                },
                ready: false,
            });
            self.epoch[i] = next;
        }
        Ok(())
    }

    /// Marks `member`'s backups of `slots` ready (their copies are
    /// complete); returns how many changed. The epoch stays: the write path
    /// is the same either way. The caller sets the version.
    pub fn set_backup_ready(&mut self, slots: Range<u32>, member: MemberId) -> Result<u32, BadMap> {
        self.check_range(&slots)?;
        let mut changed = 0;
        for s in slots {
            for b in self.backups[s as usize].in_use() {
                if b.owner.member == member && !b.ready {
                    b.ready = true;
                    changed += 1;
                }
            }
        }
        Ok(changed)
    }

    /// Marks `member`'s backups of `slots` not ready (their copies must be
    /// made anew); returns how many changed. The caller sets the version.
    pub fn set_backup_unready(
        &mut self,
        slots: Range<u32>,
        member: MemberId,
    ) -> Result<u32, BadMap> {
        self.check_range(&slots)?;
        let mut changed = 0;
        for s in slots {
            for b in self.backups[s as usize].in_use() {
                if b.owner.member == member && b.ready {
                    b.ready = false;
                    changed += 1;
                }
            }
        }
        Ok(changed)
    }

    /// Drops `member`'s backups of `slots`; returns how many it held. The
    /// caller sets the version.
    pub fn drop_backup(&mut self, slots: Range<u32>, member: MemberId) -> Result<u32, BadMap> {
        self.check_range(&slots)?;
        let next = self.version + 1;
        let mut dropped = 0;
        for s in slots {
            let i = s as usize;
            if self.backups[i].remove(member) {
                self.epoch[i] = next;
                dropped += 1;
            }
        }
        Ok(dropped)
    }

    /// Makes `slot`'s ready backup on `member` its primary, on the worker
    /// that holds the copy; the old primary holds nothing of it any more.
    /// The other backups stay, not ready: they applied the old primary's
    /// stream up to where it stopped, which may differ from the new
    /// primary's, so each is copied anew. The caller sets the version.
    pub fn promote(&mut self, slot: u32, member: MemberId) -> Result<(), BadMap> {
        let i = slot as usize;
        if i >= self.owner.len() {
            return Err(BadMap("slot out of range"));
        }
        let b = self.backups[i]
            .of(member)
            .ok_or(BadMap("the member is not a backup of the slot"))?;
        if !b.ready {
            return Err(BadMap("the backup's copy is not complete"));
        }
        self.backups[i].remove(member);
        for o in self.backups[i].in_use() {
            o.ready = false;
        }
        self.owner[i] = b.owner;
        self.epoch[i] = self.version + 1;
        Ok(())
    }

    /// Makes `member`, a ready backup of every slot in `slots`, their
    /// primary, on the workers that hold its copies; the old primary stays
    /// as a ready backup, on the worker that held the slot, and so do the
    /// other backups: a migration's hand-over, which the old primary asks
    /// for only once it has stopped taking writes of the slots and every
    /// write it took is on every backup, so all copies are the same. (A
    /// failover, [`promote`](Self::promote), cannot know that.) The epoch
    /// moves on; the caller sets the version.
    pub fn hand_over(&mut self, slots: Range<u32>, member: MemberId) -> Result<(), BadMap> {
        self.check_range(&slots)?;
        for s in slots.clone() {
            let i = s as usize;
            if self.from[i] != NO_MEMBER {
                return Err(BadMap("the slot is being imported"));
            }
            if !self.backups[i].of(member).is_some_and(|b| b.ready) {
                return Err(BadMap("the member is not a ready backup of the slot"));
            }
        }
        let next = self.version + 1;
        for s in slots {
            let i = s as usize;
            let b = self.backups[i].of(member).expect("checked above");
            let old = self.owner[i];
            self.backups[i].remove(member);
            self.backups[i].push(Backup {
                owner: old,
                ready: true,
            });
            self.owner[i] = b.owner;
            self.epoch[i] = next;
        }
        Ok(())
    }

    /// Slots with fewer than `replicas - 1` ready backups.
    pub fn under_replicated(&self, replicas: usize) -> u32 {
        let want = replicas.saturating_sub(1);
        self.backups.iter().filter(|b| b.ready() < want).count() as u32
    }

    /// How many slots `member` backs up.
    pub fn backup_slots_of(&self, member: MemberId) -> u32 {
        self.backups.iter().filter(|b| b.holds(member)).count() as u32
    }

    fn check_range(&self, slots: &Range<u32>) -> Result<(), BadMap> {
        if slots.start > slots.end || slots.end > self.slots() {
            return Err(BadMap("slot range out of bounds"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::Member;
    use std::net::SocketAddr;

    fn three() -> ShardMap {
        let addr = |p: u16| SocketAddr::from(([10, 0, 0, 1], p));
        let mut m = ShardMap::single(addr(7000), 16, 2).unwrap();
        for p in [7001, 7002] {
            m.add_member(Member {
                addr: addr(p),
                workers: 2,
                bulk_port: 0,
            })
            .unwrap();
        }
        m
    }

    fn round_trip(m: &ShardMap) {
        let mut e = Vec::new();
        m.encode(&mut e);
        assert_eq!(e.len(), m.encoded_len());
        assert_eq!(ShardMap::decode(&e).as_ref(), Ok(m));
    }

    #[test]
    fn backups_are_added_made_ready_promoted_and_dropped_under_new_epochs() {
        let mut m = three();
        m.add_backup(0..8, MemberId(1)).unwrap();
        m.add_backup(0..4, MemberId(2)).unwrap();
        m.set_version(2);
        assert_eq!(m.epoch(0), 2);
        assert_eq!(m.epoch(12), 1);
        assert_eq!(m.backups(3).len(), 2);
        assert_eq!(m.backups(3)[0].owner.member, MemberId(1));
        // Dealt in blocks over the backup member's workers.
        assert_eq!(m.backups(0)[0].owner.worker, 0);
        assert_eq!(m.backups(7)[0].owner.worker, 1);
        assert_eq!(m.under_replicated(2), 16);
        round_trip(&m);
        // Refused: the owner, a second copy.
        assert!(m.add_backup(0..1, MemberId(0)).is_err());
        assert!(m.add_backup(0..1, MemberId(1)).is_err());
        assert_eq!(m.backups(0).len(), 2);
        // Ready: no new epoch.
        assert_eq!(m.set_backup_ready(0..8, MemberId(1)), Ok(8));
        m.set_version(3);
        assert_eq!(m.epoch(0), 2);
        assert_eq!(m.under_replicated(2), 8);
        assert_eq!(m.under_replicated(3), 16);
        round_trip(&m);
        // Not ready: cannot be promoted.
        assert!(m.promote(2, MemberId(2)).is_err());
        m.promote(2, MemberId(1)).unwrap();
        m.set_version(4);
        assert_eq!(m.owner_of_slot(2).member, MemberId(1));
        assert_eq!(m.epoch(2), 4);
        assert_eq!(m.backups(2).len(), 1);
        assert_eq!(m.backups(2)[0].owner.member, MemberId(2));
        assert!(!m.backups(2)[0].ready);
        round_trip(&m);
        assert_eq!(m.drop_backup(0..16, MemberId(2)), Ok(4));
        m.set_version(5);
        assert_eq!(m.backup_slots_of(MemberId(2)), 0);
        assert_eq!(m.epoch(3), 5);
        round_trip(&m);
        // A new owner by migration starts with no backups.
        m.assign(0..1, MemberId(2), Some(MemberId(0))).unwrap();
        m.set_version(6);
        assert!(m.backups(0).is_empty());
        assert_eq!(m.epoch(0), 6);
        assert!(m.add_backup(0..1, MemberId(1)).is_err(), "importing");
        round_trip(&m);
    }

    #[test]
    fn a_backup_goes_to_the_worker_asked_for_where_there_is_one() {
        let mut m = three();
        // Slots 0..4 asked on worker 1, slot 5 on worker 7 (member 1 has
        // two): the rest, and slot 5, dealt in blocks over 0..8.
        m.add_backup_on(0..8, MemberId(1), |s| match s {
            0..=3 => Some(1),
            5 => Some(7),
            _ => None,
        })
        .unwrap();
        m.set_version(2);
        let workers: Vec<u16> = (0..8).map(|s| m.backups(s)[0].owner.worker).collect();
        assert_eq!(workers, [1, 1, 1, 1, 1, 1, 1, 1]);
        m.add_backup_on(0..8, MemberId(2), |s| (s >= 4).then_some(0))
            .unwrap();
        m.set_version(3);
        let workers: Vec<u16> = (0..8).map(|s| m.backups(s)[1].owner.worker).collect();
        assert_eq!(workers, [0, 0, 0, 0, 0, 0, 0, 0]);
        round_trip(&m);
        // The same refusals as without.
        assert!(m.add_backup_on(0..1, MemberId(0), |_| Some(0)).is_err());
    }

    #[test]
    fn member_zero_as_a_backup_changes_only_its_own_backups() {
        // The unused backup fields read as member 0's: readying member 0
        // must not touch them, or the map differs from its own bytes (a
        // member given the map in a snapshot would apply the next entry
        // otherwise than the members that built it).
        let mut m = three();
        m.assign(0..8, MemberId(1), None).unwrap();
        m.add_backup(0..8, MemberId(0)).unwrap();
        m.set_version(2);
        assert_eq!(m.set_backup_ready(0..8, MemberId(0)), Ok(8));
        m.set_version(3);
        round_trip(&m);
        assert_eq!(m.set_backup_unready(0..4, MemberId(0)), Ok(4));
        m.set_version(4);
        round_trip(&m);
        m.set_backup_ready(0..4, MemberId(0)).unwrap();
        m.add_backup(0..8, MemberId(2)).unwrap();
        m.set_version(5);
        round_trip(&m);
        // Slots with one replica set compare equal, as their runs need.
        assert_eq!(m.backup_set(0), m.backup_set(3));
        m.promote(0, MemberId(0)).unwrap();
        m.set_version(6);
        round_trip(&m);
    }

    #[test]
    fn bad_backups_are_refused_on_decode() {
        let mut m = three();
        m.add_backup(0..16, MemberId(1)).unwrap();
        m.set_version(2);
        let mut e = Vec::new();
        m.encode(&mut e);
        let run0 = super::super::field::HEADER + 3 * super::super::field::MEMBER;
        let b0 = run0 + super::super::field::R_BACKUP;
        let bad = |at: usize, v: &[u8]| {
            let mut c = e.clone();
            c[at..at + v.len()].copy_from_slice(v);
            ShardMap::decode(&c)
        };
        // The owner as its own backup; a backup past the members; its
        // worker out of range; a ready flag of 2; an unused field set;
        // four backups; an epoch past the version.
        assert!(bad(b0, &0u16.to_le_bytes()).is_err());
        assert!(bad(b0, &9u16.to_le_bytes()).is_err());
        assert!(bad(b0 + 2, &2u16.to_le_bytes()).is_err());
        assert!(bad(b0 + 4, &[2]).is_err());
        assert!(bad(b0 + 5, &[1]).is_err());
        assert!(bad(run0 + super::super::field::R_BACKUPS, &[4]).is_err());
        assert!(bad(run0 + 14, &3u32.to_le_bytes()).is_err());
        assert!(bad(run0 + 14, &0u32.to_le_bytes()).is_err());
        assert!(bad(b0, &1u16.to_le_bytes()).is_ok());
    }

    #[test]
    fn a_hand_over_keeps_every_copy_ready() {
        let mut m = three();
        m.add_backup(0..8, MemberId(1)).unwrap();
        m.add_backup(0..8, MemberId(2)).unwrap();
        m.set_version(2);
        // Not ready: refused.
        assert!(m.hand_over(0..8, MemberId(2)).is_err());
        m.set_backup_ready(0..8, MemberId(1)).unwrap();
        m.set_backup_ready(0..4, MemberId(2)).unwrap();
        m.set_version(3);
        assert!(
            m.hand_over(0..8, MemberId(2)).is_err(),
            "slots 4..8 not ready there"
        );
        assert!(m.hand_over(8..9, MemberId(1)).is_err(), "not a backup");
        let before: Vec<Owner> = (0..4).map(|s| m.owner_of_slot(s)).collect();
        let copy: Vec<Owner> = (0..4).map(|s| m.backups(s)[1].owner).collect();
        m.hand_over(0..4, MemberId(2)).unwrap();
        m.set_version(4);
        for s in 0..4u32 {
            let i = s as usize;
            // The copy's worker is the primary now; the old primary is a
            // ready backup on its worker, the other backup stays ready.
            assert_eq!(m.owner_of_slot(s), copy[i]);
            assert_eq!(m.epoch(s), 4);
            let b = m.backups(s);
            assert_eq!(b.len(), 2);
            assert!(b.iter().all(|b| b.ready));
            assert_eq!(b[0].owner.member, MemberId(1));
            assert_eq!(b[1].owner, before[i]);
        }
        // Slots 0..4 keep two ready backups: only 4..16 are short.
        assert_eq!(m.under_replicated(3), 12);
        round_trip(&m);
        // A slot being imported is not handed over.
        m.assign(8..9, MemberId(1), Some(MemberId(0))).unwrap();
        assert!(m.hand_over(8..9, MemberId(2)).is_err());
    }
}
