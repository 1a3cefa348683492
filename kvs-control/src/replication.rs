//! Where slots' backups go, and what a member's failure does to them: pure
//! functions of the map and the members' standing, so every member applying
//! the same entry computes the same map.
//!
//! - **Failover** ([`failover`]): each slot the failed member was primary of
//!   goes to its first ready backup on a member that is up (every
//!   acknowledged write is on every backup, so any ready one has them all);
//!   a slot with none stays with the failed member, unavailable, as without
//!   replicas. The member's backups are dropped.
//! - **Placement** ([`reconcile`]): a slot with fewer than `replicas - 1`
//!   backups gets new ones (not ready until its primary has copied the slot
//!   to them), on members that are up and hold no copy of it, in ring order
//!   after the primary, preferring a zone that holds no copy yet. Runs of
//!   slots with one primary get one backup member each, so the map stays a
//!   few runs. Backups on members that are not up, and backups past the
//!   count, are dropped: a not-ready one first, else the one on the member
//!   that backs up the most slots. Slots being imported get none until the
//!   import ends (their new owner is still pulling records that backups
//!   would not see). A migration's target, copied as one more backup
//!   before it takes the slots over, is kept and not counted.

use std::ops::Range;

use kvs_proto::{MemberId, ShardMap};

/// Promotes, for every slot `member` is primary of, its first ready backup
/// on a member `up` says is up, and drops `member`'s backups. Returns how
/// many slots changed primary.
pub(crate) fn failover(map: &mut ShardMap, member: MemberId, up: impl Fn(MemberId) -> bool) -> u32 {
    let mut promoted = 0;
    for s in 0..map.slots() {
        if map.owner_of_slot(s).member != member {
            continue;
        }
        let heir = map
            .backups(s)
            .iter()
            .find(|b| b.ready && up(b.owner.member))
            .map(|b| b.owner.member);
        if let Some(h) = heir {
            if map.promote(s, h).is_ok() {
                promoted += 1;
            }
        }
    }
    let _ = map.drop_backup(0..map.slots(), member);
    promoted
}

/// A backup a migration is making (its target, copied before it becomes
/// the primary): never dropped as one too many, and not counted.
pub(crate) type Kept = Option<(Range<u32>, MemberId)>;

/// A member that restarted, and the slots whose copies its files kept on
/// each of its workers (copies that know their place in their primary's
/// writes, so a catch-up can complete them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejoining {
    /// The member.
    pub member: MemberId,
    /// `(first, end, worker)` runs, in order, apart.
    runs: Vec<(u32, u32, u16)>,
}

impl Rejoining {
    /// `member`'s kept `runs` as it named them, in a map of `slots` slots:
    /// empty runs, runs past the slots and runs that overlap one before
    /// them are left out (a member's proposal is not trusted to be sane).
    pub fn new(member: MemberId, runs: &[(u32, u32, u16)], slots: u32) -> Rejoining {
        let mut sorted: Vec<(u32, u32, u16)> = runs
            .iter()
            .copied()
            .filter(|&(first, end, _)| first < end && end <= slots)
            .collect();
        sorted.sort_unstable();
        let mut out: Vec<(u32, u32, u16)> = Vec::with_capacity(sorted.len());
        for r in sorted {
            if out.last().is_none_or(|l| l.1 <= r.0) {
                out.push(r);
            }
        }
        Rejoining { member, runs: out }
    }

    /// The worker that kept `slot`, if one did.
    fn worker(&self, slot: u32) -> Option<u16> {
        let i = self.runs.partition_point(|r| r.1 <= slot);
        self.runs.get(i).filter(|r| r.0 <= slot).map(|r| r.2)
    }

    /// Whether every slot of `slots` was kept.
    fn keeps_all(&self, slots: &Range<u32>) -> bool {
        let i = self.runs.partition_point(|r| r.1 <= slots.start);
        let mut at = slots.start;
        for r in &self.runs[i..] {
            if r.0 > at || at >= slots.end {
                break;
            }
            at = r.1;
        }
        at >= slots.end
    }

    /// `run` cut where a kept run begins or ends, so each part is kept
    /// whole or not at all.
    fn split(&self, run: Range<u32>) -> Vec<Range<u32>> {
        let mut cuts: Vec<u32> = self
            .runs
            .iter()
            .flat_map(|r| [r.0, r.1])
            .filter(|c| run.start < *c && *c < run.end)
            .collect();
        cuts.push(run.end);
        let mut at = run.start;
        cuts.into_iter()
            .map(|c| {
                let part = at..c;
                at = c;
                part
            })
            .collect()
    }
}

/// Drops and adds backups so every slot that is not being imported has
/// `replicas - 1` of them on members in `up`, as the [module
/// documentation](self) says, besides the backup `kept`; `zone` gives a
/// member's zone (`None`: a zone of its own). Returns whether the map
/// changed.
#[cfg(test)]
pub(crate) fn reconcile(
    map: &mut ShardMap,
    replicas: usize,
    up: &[MemberId],
    kept: &Kept,
    zone: impl Fn(MemberId) -> Option<String>,
) -> bool {
    reconcile_rejoining(map, replicas, up, (kept, None), zone)
}

/// As [`reconcile`], the backups it adds also preferring, for the slots
/// `rejoining` kept copies of, that member and the worker that kept each.
pub(crate) fn reconcile_rejoining(
    map: &mut ShardMap,
    replicas: usize,
    up: &[MemberId],
    (kept, rejoining): (&Kept, Option<&Rejoining>),
    zone: impl Fn(MemberId) -> Option<String>,
) -> bool {
    let want = replicas.saturating_sub(1);
    let before = map.clone();
    let is_kept = |s: u32, m: MemberId| {
        kept.as_ref()
            .is_some_and(|(r, k)| *k == m && r.contains(&s))
    };
    let counted = |map: &ShardMap, s: u32| {
        map.backups(s)
            .iter()
            .filter(|b| !is_kept(s, b.owner.member))
            .count()
    };
    // Backups on members that are not up.
    for s in 0..map.slots() {
        let gone: Vec<MemberId> = map
            .backups(s)
            .iter()
            .map(|b| b.owner.member)
            .filter(|m| !up.contains(m))
            .collect();
        for m in gone {
            let _ = map.drop_backup(s..s + 1, m);
        }
    }
    // Backups past the count, a run at a time (so the map stays a few
    // runs): a not-ready one first, the latest added; else the ready one
    // on the member that backs up the most slots (a migration's hand-over
    // leaves the old primary as one more: this spreads the copies).
    let mut load = vec![0u32; map.members().len()];
    for s in 0..map.slots() {
        for b in map.backups(s) {
            load[b.owner.member.index()] += 1;
        }
    }
    for run in runs_where(map, |m, s| counted(m, s) > want) {
        while counted(map, run.start) > want {
            let b: Vec<_> = map
                .backups(run.start)
                .iter()
                .copied()
                .filter(|b| !is_kept(run.start, b.owner.member))
                .collect();
            let victim = match b.iter().rev().find(|b| !b.ready) {
                Some(v) => v.owner.member,
                // Ties: the latest added (after a hand-over, the old
                // primary).
                None => {
                    b.iter()
                        .max_by_key(|b| load[b.owner.member.index()])
                        .expect("more than wanted")
                        .owner
                        .member
                }
            };
            let _ = map.drop_backup(run.clone(), victim);
            load[victim.index()] -= run.end - run.start;
        }
    }
    // New backups, run by run (a primary that is not up cannot copy).
    for run in runs_where(map, |m, s| counted(m, s) < want) {
        if !up.contains(&map.owner_of_slot(run.start).member) {
            continue;
        }
        let parts = match rejoining {
            Some(r) => r.split(run),
            None => vec![run],
        };
        for part in parts {
            let want = want - counted(map, part.start);
            add_backups(map, part, want, up, rejoining, &zone);
        }
    }
    *map != before
}

/// Gives the slots of `run` (one primary, one backup set) `n` more backups,
/// picked from `up`; `rejoining`'s member first where it kept them all, on
/// the workers that kept them.
fn add_backups(
    map: &mut ShardMap,
    run: Range<u32>,
    n: usize,
    up: &[MemberId],
    rejoining: Option<&Rejoining>,
    zone: &impl Fn(MemberId) -> Option<String>,
) {
    let primary = map.owner_of_slot(run.start);
    let mut holders: Vec<MemberId> = std::iter::once(primary.member)
        .chain(map.backups(run.start).iter().map(|b| b.owner.member))
        .collect();
    let prefer = rejoining.filter(|r| r.keeps_all(&run)).map(|r| r.member);
    for _ in 0..n {
        let Some(m) = pick(up, &holders, primary.member, zone, prefer) else {
            break;
        };
        let kept = rejoining.filter(|r| r.member == m);
        if map
            .add_backup_on(run.clone(), m, |s| kept.and_then(|r| r.worker(s)))
            .is_err()
        {
            break;
        }
        holders.push(m);
    }
}

/// Backup moves that even out how many slots the members in `up` back
/// up: `(slots, from, to)`, from the busiest backup of a run of slots to
/// the least busy member that holds no copy of the run and whose zone
/// holds none (besides `from`'s), while `from` backs up at least two slots
/// more; passes over the runs until nothing moves, each slot's backup
/// moving once at most. What a rebalance does after it moved the
/// primaries.
pub(crate) fn spread(
    map: &ShardMap,
    up: &[MemberId],
    zone: impl Fn(MemberId) -> Option<String>,
) -> Vec<(Range<u32>, MemberId, MemberId)> {
    let mut map = map.clone();
    let mut load = vec![0u32; map.members().len()];
    for s in 0..map.slots() {
        for b in map.backups(s) {
            load[b.owner.member.index()] += 1;
        }
    }
    let eligible = up.len().max(1) as u32;
    let total: u32 = up.iter().map(|&m| load[m.index()]).sum();
    let (lo, hi) = (total / eligible, total.div_ceil(eligible));
    let mut moved = vec![false; map.slots() as usize];
    let mut out = Vec::new();
    // First toward each member's share; then, for what a member cannot
    // take (it is the runs' primary), pairwise.
    for pass in 0..8 {
        let to_share = pass < 4;
        let before = out.len();
        for run in runs_where(&map, |_, s| !moved[s as usize]) {
            let holders: Vec<MemberId> = std::iter::once(map.owner_of_slot(run.start).member)
                .chain(map.backups(run.start).iter().map(|b| b.owner.member))
                .collect();
            let Some(from) = holders[1..]
                .iter()
                .copied()
                .filter(|b| up.contains(b))
                .max_by_key(|&b| load[b.index()])
            else {
                continue;
            };
            let taken: Vec<String> = holders
                .iter()
                .filter(|&&h| h != from)
                .filter_map(|&h| zone(h))
                .collect();
            let Some(to) = up
                .iter()
                .copied()
                .filter(|m| !holders.contains(m))
                .filter(|&m| zone(m).is_none_or(|z| !taken.contains(&z)))
                .min_by_key(|&m| load[m.index()])
            else {
                continue;
            };
            let (lf, lt) = (load[from.index()], load[to.index()]);
            let n = if to_share {
                if lf <= lo || lt >= hi {
                    continue;
                }
                (run.end - run.start).min(lf - lo).min(hi - lt)
            } else {
                if lf <= lt + 1 {
                    continue;
                }
                (run.end - run.start).min((lf - lt) / 2)
            };
            let r = run.start..run.start + n;
            if map.add_backup(r.clone(), to).is_err() {
                continue;
            }
            let _ = map.drop_backup(r.clone(), from);
            load[from.index()] -= n;
            load[to.index()] += n;
            moved[r.start as usize..r.end as usize].fill(true);
            out.push((r, from, to));
        }
        if out.len() == before && !to_share {
            break;
        }
    }
    out
}

/// Runs of consecutive slots with one primary and one backup set, not
/// being imported, for which `pred` holds.
fn runs_where(map: &ShardMap, pred: impl Fn(&ShardMap, u32) -> bool) -> Vec<Range<u32>> {
    let mut out: Vec<Range<u32>> = Vec::new();
    for s in 0..map.slots() {
        if map.importing_from(s).is_some() || !pred(map, s) {
            continue;
        }
        match out.last_mut() {
            Some(r)
                if r.end == s
                    && map.owner_of_slot(r.start).member == map.owner_of_slot(s).member
                    && map.backup_set(r.start) == map.backup_set(s) =>
            {
                r.end = s + 1
            }
            _ => out.push(s..s + 1),
        }
    }
    out
}

/// The next backup for a slot held by `holders` (its primary first): the
/// first member in `up` after `primary` in ring order that holds no copy,
/// preferring one whose zone holds none; `prefer` before all, if it may
/// be picked and its zone holds none.
fn pick(
    up: &[MemberId],
    holders: &[MemberId],
    primary: MemberId,
    zone: &impl Fn(MemberId) -> Option<String>,
    prefer: Option<MemberId>,
) -> Option<MemberId> {
    let mut ring: Vec<MemberId> = up
        .iter()
        .copied()
        .filter(|m| !holders.contains(m))
        .collect();
    ring.sort_unstable_by_key(|&m| m.0.wrapping_sub(primary.0).wrapping_sub(1));
    let taken: Vec<String> = holders.iter().filter_map(|&h| zone(h)).collect();
    let fresh = |m: MemberId| zone(m).is_none_or(|z| !taken.contains(&z));
    prefer
        .filter(|&p| ring.contains(&p) && fresh(p))
        .or_else(|| ring.iter().copied().find(|&m| fresh(m)))
        .or_else(|| ring.first().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::Member;
    use std::net::SocketAddr;

    fn map(members: u16, slots: u32) -> ShardMap {
        let addr = |p: u16| SocketAddr::from(([10, 0, 0, 1], p));
        let mut m = ShardMap::single(addr(7000), slots, 2).unwrap();
        for i in 1..members {
            m.add_member(Member {
                addr: addr(7000 + i),
                workers: 2,
                bulk_port: 0,
            })
            .unwrap();
        }
        m
    }

    fn spread(m: &mut ShardMap) {
        let n = m.members().len() as u32;
        let per = m.slots() / n;
        for i in 1..n {
            m.assign(i * per..(i + 1) * per, MemberId(i as u16), None)
                .unwrap();
        }
    }

    #[test]
    fn a_rejoining_member_gets_back_the_copies_it_kept_on_their_workers() {
        let all = [MemberId(0), MemberId(1), MemberId(2), MemberId(3)];
        let mut m = map(4, 40);
        spread(&mut m);
        reconcile(&mut m, 2, &all, &None, |_| None);
        for i in 0..4 {
            m.set_backup_ready(0..40, MemberId(i)).unwrap();
        }
        m.set_version(2);
        // Member 1 (primary of 10..20, backup of 0..10) restarts: 10..20
        // go to member 2, and its backups are dropped.
        let mut without = m.clone();
        assert_eq!(failover(&mut m, MemberId(1), |_| true), 10);
        m.set_version(3);
        failover(&mut without, MemberId(1), |_| true);
        without.set_version(3);
        // It kept 0..10 on worker 1 and 12..18 on worker 0; the rest of
        // what it names is no run (empty, past the slots, overlapping).
        let kept = [(0, 10, 1), (12, 18, 0), (50, 60, 0), (5, 3, 0), (14, 16, 1)];
        let r = Rejoining::new(MemberId(1), &kept, 40);
        assert_eq!(r.runs, [(0, 10, 1), (12, 18, 0)]);
        assert!(reconcile_rejoining(
            &mut m,
            2,
            &all,
            (&None, Some(&r)),
            |_| None
        ));
        reconcile(&mut without, 2, &all, &None, |_| None);
        let backup = |m: &ShardMap, s: u32| {
            let b = m.backups(s)[0].owner;
            (b.member.0, b.worker)
        };
        // 0..10: member 1 either way (next on the ring), but each slot on
        // the worker that kept it, not dealt in blocks.
        assert!((0..10).all(|s| backup(&m, s) == (1, 1)));
        assert_eq!(backup(&without, 0), (1, 0));
        // 12..18: member 1 on worker 0 instead of member 3 (the next after
        // member 2 on the ring); 10..12 and 18..20 as without.
        assert!((12..18).all(|s| backup(&m, s) == (1, 0)), "{m:?}");
        assert!((10..20).all(|s| backup(&without, s).0 == 3));
        for s in [10, 11, 18, 19] {
            assert_eq!(backup(&m, s).0, 3, "slot {s}");
        }
        // A zone that holds a copy already is still avoided: members 1 and
        // 2 in one rack, 12..18 go elsewhere.
        let mut z = without.clone();
        failover(&mut z, MemberId(3), |_| true);
        let rack = |x: MemberId| Some(if x.0 == 1 || x.0 == 2 { "a" } else { "b" }.to_string());
        reconcile_rejoining(&mut z, 2, &all, (&None, Some(&r)), rack);
        assert!((12..18).all(|s| z.backups(s)[0].owner.member != MemberId(1)));
    }

    #[test]
    fn backups_go_round_the_ring_in_runs_and_respect_zones() {
        let mut m = map(3, 30);
        spread(&mut m);
        assert!(reconcile(
            &mut m,
            2,
            &[MemberId(0), MemberId(1), MemberId(2)],
            &None,
            |_| None
        ));
        m.set_version(2);
        // Member i's slots are backed up on member i + 1.
        for s in 0..30 {
            let p = m.owner_of_slot(s).member;
            assert_eq!(m.backups(s).len(), 1);
            assert_eq!(m.backups(s)[0].owner.member.0, (p.0 + 1) % 3, "{s}");
        }
        assert!(
            !reconcile(
                &mut m,
                2,
                &[MemberId(0), MemberId(1), MemberId(2)],
                &None,
                |_| None
            ),
            "stable"
        );
        // Three copies: every member holds every slot.
        assert!(reconcile(
            &mut m,
            3,
            &[MemberId(0), MemberId(1), MemberId(2)],
            &None,
            |_| None
        ));
        assert!((0..30).all(|s| m.backups(s).len() == 2));
        // Zones: 0 and 1 in rack a, 2 in rack b: member 0's backup goes to
        // rack b, skipping member 1.
        let mut z = map(3, 30);
        spread(&mut z);
        let rack = |m: MemberId| Some(if m == MemberId(2) { "b" } else { "a" }.to_string());
        reconcile(
            &mut z,
            2,
            &[MemberId(0), MemberId(1), MemberId(2)],
            &None,
            rack,
        );
        assert_eq!(z.backups(0)[0].owner.member, MemberId(2));
        assert_eq!(z.backups(29)[0].owner.member, MemberId(0));
        // Back to one copy: the backups go.
        assert!(reconcile(
            &mut m,
            1,
            &[MemberId(0), MemberId(1), MemberId(2)],
            &None,
            |_| None
        ));
        assert!((0..30).all(|s| m.backups(s).is_empty()));
        // A run per primary's worker, not a run a slot.
        assert!(z.runs().len() <= 6, "{}", z.runs().len());
    }

    #[test]
    fn failover_promotes_ready_backups_and_leaves_the_rest_unavailable() {
        let mut m = map(3, 30);
        spread(&mut m);
        reconcile(
            &mut m,
            3,
            &[MemberId(0), MemberId(1), MemberId(2)],
            &None,
            |_| None,
        );
        // Member 0's slots 0..5 are ready on member 1 only.
        m.set_backup_ready(0..5, MemberId(1)).unwrap();
        m.set_backup_ready(10..30, MemberId(2)).unwrap();
        m.set_version(2);
        let promoted = failover(&mut m, MemberId(0), |x| x != MemberId(0));
        m.set_version(3);
        assert_eq!(promoted, 5);
        for s in 0..5 {
            assert_eq!(m.owner_of_slot(s).member, MemberId(1));
            assert_eq!(m.epoch(s), 3);
            // The other backup is copied anew.
            assert!(m
                .backups(s)
                .iter()
                .all(|b| !b.ready && b.owner.member == MemberId(2)));
        }
        // No ready backup: still member 0's, unavailable.
        assert_eq!(m.owner_of_slot(7).member, MemberId(0));
        // Member 0 backs up nothing any more.
        assert_eq!(m.backup_slots_of(MemberId(0)), 0);
        // A backup on a failed member is not promoted.
        let mut m2 = m.clone();
        assert_eq!(failover(&mut m2, MemberId(1), |x| x == MemberId(1)), 0);
        // Reconciling among the members left refills member 2's share
        // without member 0.
        assert!(reconcile(
            &mut m,
            2,
            &[MemberId(1), MemberId(2)],
            &None,
            |_| None
        ));
        for s in 0..30 {
            let p = m.owner_of_slot(s).member;
            if p != MemberId(0) {
                assert_eq!(m.backups(s).len(), 1, "{s}");
                assert!(m.backups(s)[0].owner.member != MemberId(0));
            }
        }
    }

    #[test]
    fn imported_slots_get_backups_once_the_import_ends() {
        let mut m = map(2, 8);
        m.assign(0..4, MemberId(1), Some(MemberId(0))).unwrap();
        reconcile(&mut m, 2, &[MemberId(0), MemberId(1)], &None, |_| None);
        assert!((0..4).all(|s| m.backups(s).is_empty()));
        assert!((4..8).all(|s| m.backups(s).len() == 1));
        m.finish_import(0..4).unwrap();
        assert!(reconcile(
            &mut m,
            2,
            &[MemberId(0), MemberId(1)],
            &None,
            |_| None
        ));
        assert!((0..4).all(|s| m.backups(s)[0].owner.member == MemberId(0)));
    }

    #[test]
    fn a_migrations_target_is_kept_and_the_busiest_backup_goes() {
        let mut m = map(3, 30);
        spread(&mut m);
        reconcile(
            &mut m,
            2,
            &[MemberId(0), MemberId(1), MemberId(2)],
            &None,
            |_| None,
        );
        for member in (0..3).map(MemberId) {
            m.set_backup_ready(0..30, member).unwrap();
        }
        m.set_version(2);
        // Member 2 is copied member 0's slots 0..10 (it backs up none of
        // them): not dropped, not counted.
        m.add_backup(0..10, MemberId(2)).unwrap();
        m.set_version(3);
        let kept = Some((0..10, MemberId(2)));
        let all = [MemberId(0), MemberId(1), MemberId(2)];
        assert!(!reconcile(&mut m, 2, &all, &kept, |_| None));
        assert_eq!(m.backups(5).len(), 2);
        // Without the migration it is one too many, and not ready: it goes.
        let mut n = m.clone();
        assert!(reconcile(
            &mut n,
            2,
            &[MemberId(0), MemberId(1), MemberId(2)],
            &None,
            |_| None
        ));
        assert!(
            (0..10).all(|s| n.backups(s).len() == 1 && n.backups(s)[0].owner.member == MemberId(1))
        );
        // Handed over: member 2 is primary; 1 and 0 are ready backups. One
        // goes: member 0, which would back up 20 slots to member 1's 10.
        m.set_backup_ready(0..10, MemberId(2)).unwrap();
        m.hand_over(0..10, MemberId(2)).unwrap();
        m.set_version(4);
        assert!(reconcile(
            &mut m,
            2,
            &[MemberId(0), MemberId(1), MemberId(2)],
            &None,
            |_| None
        ));
        for s in 0..10 {
            assert_eq!(m.owner_of_slot(s).member, MemberId(2));
            assert_eq!(m.backups(s).len(), 1);
            assert_eq!(m.backups(s)[0].owner.member, MemberId(1), "{s}");
            assert!(m.backups(s)[0].ready);
        }
    }

    #[test]
    fn backups_spread_to_members_that_back_up_less() {
        // Three members, member 0 primary of everything, backed up on
        // member 1 alone: half of the backups go to member 2.
        let mut m = map(3, 30);
        m.add_backup(0..30, MemberId(1)).unwrap();
        m.set_version(2);
        let moves = super::spread(&m, &[MemberId(0), MemberId(1), MemberId(2)], |_| None);
        let to_2: u32 = moves
            .iter()
            .map(|(r, from, to)| {
                assert_eq!((*from, *to), (MemberId(1), MemberId(2)));
                r.end - r.start
            })
            .sum();
        assert_eq!(to_2, 15, "{moves:?}");
        // Member 2 in member 1's zone, member 0 elsewhere: nothing breaks
        // a zone rule (2 takes over from 1, same zone).
        let z = |x: MemberId| Some(if x == MemberId(0) { "a" } else { "b" }.to_string());
        assert_eq!(
            super::spread(&m, &[MemberId(0), MemberId(1), MemberId(2)], z),
            moves
        );
        // But a member in the primary's zone does not take a copy.
        let z = |x: MemberId| Some(if x == MemberId(1) { "b" } else { "a" }.to_string());
        assert!(super::spread(&m, &[MemberId(0), MemberId(1), MemberId(2)], z).is_empty());
        // Even already: nothing.
        m.add_backup(0..15, MemberId(2)).unwrap();
        m.drop_backup(0..15, MemberId(1)).unwrap();
        m.set_version(3);
        assert!(super::spread(&m, &[MemberId(0), MemberId(1), MemberId(2)], |_| None).is_empty());
        // A member that is not up neither gives nor takes.
        assert!(super::spread(&m, &[MemberId(0), MemberId(1)], |_| None).is_empty());
        // Three primaries, members 0 and 1 backing up each other's slots
        // and member 2's: member 2 ends up with its share.
        let mut m = map(3, 300);
        spread(&mut m);
        m.add_backup(0..100, MemberId(1)).unwrap();
        m.add_backup(100..200, MemberId(0)).unwrap();
        m.add_backup(200..250, MemberId(0)).unwrap();
        m.add_backup(250..300, MemberId(1)).unwrap();
        m.set_version(2);
        for (r, from, to) in super::spread(&m, &[MemberId(0), MemberId(1), MemberId(2)], |_| None) {
            m.add_backup(r.clone(), to).unwrap();
            m.drop_backup(r, from).unwrap();
        }
        let backed: Vec<u32> = (0..3).map(|x| m.backup_slots_of(MemberId(x))).collect();
        assert!(
            backed.iter().all(|&b| (98..=102).contains(&b)),
            "{backed:?}"
        );
    }
}
