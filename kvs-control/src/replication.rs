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
//!   count, are dropped. Slots being imported get none until the import
//!   ends (their new owner is still pulling records that backups would not
//!   see).

use std::ops::Range;

use kvs_proto::ShardMap;

/// Promotes, for every slot `member` is primary of, its first ready backup
/// on a member `up` says is up, and drops `member`'s backups. Returns how
/// many slots changed primary.
pub(crate) fn failover(map: &mut ShardMap, member: u16, up: impl Fn(u16) -> bool) -> u32 {
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

/// Drops and adds backups so every slot that is not being imported has
/// `replicas - 1` of them on members in `up`, as the [module
/// documentation](self) says; `zone` gives a member's zone (`None`: a zone
/// of its own). Returns whether the map changed.
pub(crate) fn reconcile(
    map: &mut ShardMap,
    replicas: usize,
    up: &[u16],
    zone: impl Fn(u16) -> Option<String>,
) -> bool {
    let want = replicas.saturating_sub(1);
    let before = map.clone();
    // Backups on members that are not up, then the ones past the count
    // (not-ready ones first, then the latest added).
    for s in 0..map.slots() {
        let gone: Vec<u16> = map
            .backups(s)
            .iter()
            .map(|b| b.owner.member)
            .filter(|m| !up.contains(m))
            .collect();
        for m in gone {
            let _ = map.drop_backup(s..s + 1, m);
        }
        while map.backups(s).len() > want {
            let b = map.backups(s);
            let victim = b.iter().rev().find(|b| !b.ready).unwrap_or(&b[b.len() - 1]);
            let m = victim.owner.member;
            let _ = map.drop_backup(s..s + 1, m);
        }
    }
    // New backups, run by run (a primary that is not up cannot copy).
    for run in short_runs(map, want) {
        if !up.contains(&map.owner_of_slot(run.start).member) {
            continue;
        }
        let primary = map.owner_of_slot(run.start);
        let mut holders: Vec<u16> = std::iter::once(primary.member)
            .chain(map.backups(run.start).iter().map(|b| b.owner.member))
            .collect();
        for _ in map.backups(run.start).len()..want {
            let Some(m) = pick(up, &holders, primary.member, &zone) else {
                break;
            };
            if map.add_backup(run.clone(), m).is_err() {
                break;
            }
            holders.push(m);
        }
    }
    *map != before
}

/// Runs of consecutive slots with one primary and one backup set, not
/// being imported, with fewer than `want` backups.
fn short_runs(map: &ShardMap, want: usize) -> Vec<Range<u32>> {
    let mut out: Vec<Range<u32>> = Vec::new();
    for s in 0..map.slots() {
        if map.importing_from(s).is_some() || map.backups(s).len() >= want {
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
/// preferring one whose zone holds none.
fn pick(
    up: &[u16],
    holders: &[u16],
    primary: u16,
    zone: &impl Fn(u16) -> Option<String>,
) -> Option<u16> {
    let mut ring: Vec<u16> = up
        .iter()
        .copied()
        .filter(|m| !holders.contains(m))
        .collect();
    ring.sort_unstable_by_key(|&m| m.wrapping_sub(primary).wrapping_sub(1));
    let taken: Vec<String> = holders.iter().filter_map(|&h| zone(h)).collect();
    let fresh = |m: u16| zone(m).is_none_or(|z| !taken.contains(&z));
    ring.iter()
        .copied()
        .find(|&m| fresh(m))
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
            m.assign(i * per..(i + 1) * per, i as u16, None).unwrap();
        }
    }

    #[test]
    fn backups_go_round_the_ring_in_runs_and_respect_zones() {
        let mut m = map(3, 30);
        spread(&mut m);
        assert!(reconcile(&mut m, 2, &[0, 1, 2], |_| None));
        m.set_version(2);
        // Member i's slots are backed up on member i + 1.
        for s in 0..30 {
            let p = m.owner_of_slot(s).member;
            assert_eq!(m.backups(s).len(), 1);
            assert_eq!(m.backups(s)[0].owner.member, (p + 1) % 3, "{s}");
        }
        assert!(!reconcile(&mut m, 2, &[0, 1, 2], |_| None), "stable");
        // Three copies: every member holds every slot.
        assert!(reconcile(&mut m, 3, &[0, 1, 2], |_| None));
        assert!((0..30).all(|s| m.backups(s).len() == 2));
        // Zones: 0 and 1 in rack a, 2 in rack b: member 0's backup goes to
        // rack b, skipping member 1.
        let mut z = map(3, 30);
        spread(&mut z);
        let rack = |m: u16| Some(if m == 2 { "b" } else { "a" }.to_string());
        reconcile(&mut z, 2, &[0, 1, 2], rack);
        assert_eq!(z.backups(0)[0].owner.member, 2);
        assert_eq!(z.backups(29)[0].owner.member, 0);
        // Back to one copy: the backups go.
        assert!(reconcile(&mut m, 1, &[0, 1, 2], |_| None));
        assert!((0..30).all(|s| m.backups(s).is_empty()));
        // A run per primary's worker, not a run a slot.
        assert!(z.runs().len() <= 6, "{}", z.runs().len());
    }

    #[test]
    fn failover_promotes_ready_backups_and_leaves_the_rest_unavailable() {
        let mut m = map(3, 30);
        spread(&mut m);
        reconcile(&mut m, 3, &[0, 1, 2], |_| None);
        // Member 0's slots 0..5 are ready on member 1 only.
        m.set_backup_ready(0..5, 1).unwrap();
        m.set_backup_ready(10..30, 2).unwrap();
        m.set_version(2);
        let promoted = failover(&mut m, 0, |x| x != 0);
        m.set_version(3);
        assert_eq!(promoted, 5);
        for s in 0..5 {
            assert_eq!(m.owner_of_slot(s).member, 1);
            assert_eq!(m.epoch(s), 3);
            // The other backup is copied anew.
            assert!(m.backups(s).iter().all(|b| !b.ready && b.owner.member == 2));
        }
        // No ready backup: still member 0's, unavailable.
        assert_eq!(m.owner_of_slot(7).member, 0);
        // Member 0 backs up nothing any more.
        assert_eq!(m.backup_slots_of(0), 0);
        // A backup on a failed member is not promoted.
        let mut m2 = m.clone();
        assert_eq!(failover(&mut m2, 1, |x| x == 1), 0);
        // Reconciling among the members left refills member 2's share
        // without member 0.
        assert!(reconcile(&mut m, 2, &[1, 2], |_| None));
        for s in 0..30 {
            let p = m.owner_of_slot(s).member;
            if p != 0 {
                assert_eq!(m.backups(s).len(), 1, "{s}");
                assert!(m.backups(s)[0].owner.member != 0);
            }
        }
    }

    #[test]
    fn imported_slots_get_backups_once_the_import_ends() {
        let mut m = map(2, 8);
        m.assign(0..4, 1, Some(0)).unwrap();
        reconcile(&mut m, 2, &[0, 1], |_| None);
        assert!((0..4).all(|s| m.backups(s).is_empty()));
        assert!((4..8).all(|s| m.backups(s).len() == 1));
        m.finish_import(0..4).unwrap();
        assert!(reconcile(&mut m, 2, &[0, 1], |_| None));
        assert!((0..4).all(|s| m.backups(s)[0].owner.member == 0));
    }
}
