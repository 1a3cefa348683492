//! A migration as the control group runs it: the moves asked for, cut into
//! chunks, handed over one at a time, and what the targets reported. Part of
//! the replicated state ([`crate::ClusterState`]): every member applies the
//! same commands to it and makes the same map changes, so a new leader
//! carries on where the old one stopped. Deterministic: times are the
//! proposers' wall clocks, carried in the commands.
//!
//! A chunk moves one of two ways:
//! - **Pulled** (one copy of each slot, `replicas = 1`): the target owns
//!   the chunk at once and pulls the records from the source, as
//!   Rocksteady does.
//! - **Copied, then handed over** (`replicas` 2 or 3): the target becomes
//!   one more backup of the chunk, copied by the source as any new backup
//!   is, while the source goes on serving with its backups. Once the
//!   target's copy is ready, the source stops taking writes of the chunk,
//!   waits until every write it took is on every backup, and asks for the
//!   hand-over ([`ShardMap::hand_over`]): the target becomes the primary,
//!   and the source and the other backups stay ready backups, so the
//!   chunk never has fewer ready copies than before. The group then drops
//!   the copy one too many.

use std::collections::VecDeque;
use std::ops::Range;

use kvs_proto::control::MigrationStatus;
use kvs_proto::{MemberId, ShardMap};
use serde::{Deserialize, Serialize};

use crate::refusal::Refusal;

/// The most slots handed over at once: an eighth of the map's, and no
/// fewer than 64 (each chunk costs two map versions and a bulk connection
/// per target worker, so chunks must not be too small; a cancel waits for
/// one, so they must not be too large).
pub fn chunk_slots(slots: u32) -> u32 {
    (slots / 8).max(64)
}

/// Consecutive slots with one source, moving to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// The first slot.
    pub first: u32,
    /// One past the last.
    pub end: u32,
    /// The source.
    pub from: MemberId,
    /// The target.
    pub to: MemberId,
    /// A backup moving (a rebalance spreading copies): `from` is the member
    /// whose backup of the slots goes once `to`'s copy is ready.
    #[serde(default)]
    pub backup: bool,
}

/// The chunk being moved: the map version that started it, and the ranges
/// no target has reported yet (a copied chunk: its whole range until it is
/// handed over or given up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Current {
    chunk: Chunk,
    version: u32,
    pending: Vec<Range<u32>>,
    /// Copied to the target as a backup, then handed over (see the
    /// [module docs](self)).
    #[serde(default)]
    copied: bool,
}

/// A migration the control group runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    moves: Vec<(u32, u32, MemberId)>,
    todo: VecDeque<Chunk>,
    current: Option<Current>,
    slots_total: u32,
    slots_done: u32,
    records: u64,
    bytes: u64,
    /// Wall-clock milliseconds (Unix time) of the start and the end, as the
    /// proposing leader's clock had them.
    started_ms: u64,
    ended_ms: Option<u64>,
    cancelled: bool,
    error: Option<String>,
    /// The latest proposer's clock carried by a command that stepped it
    /// (for steps taken on entries that carry none).
    #[serde(default)]
    last_ms: u64,
    /// A rebalance with replicas: once the primaries are spread, backups
    /// are too (planned then, on the map as it is).
    #[serde(default)]
    spread: bool,
    #[serde(default)]
    spread_planned: bool,
}

/// Backup moves `(slots, from, to)` planned on a map.
pub type Spread<'a> = &'a dyn Fn(&ShardMap) -> Vec<(Range<u32>, MemberId, MemberId)>;

/// The contiguous parts of `slots` where `member` holds no copy.
fn without(m: &ShardMap, slots: Range<u32>, member: MemberId) -> Vec<Range<u32>> {
    let mut out: Vec<Range<u32>> = Vec::new();
    for s in slots {
        if m.owner_of_slot(s).member == member
            || m.backups(s).iter().any(|b| b.owner.member == member)
        {
            continue;
        }
        match out.last_mut() {
            Some(r) if r.end == s => r.end += 1,
            _ => out.push(s..s + 1),
        }
    }
    out
}

/// The chunks that carry out `moves` on map `m`: slots the target owns
/// already are left out.
pub fn chunks(m: &ShardMap, moves: &[(Range<u32>, MemberId)]) -> Vec<Chunk> {
    let most = chunk_slots(m.slots());
    let mut out: Vec<Chunk> = Vec::new();
    for (r, to) in moves {
        for s in r.clone() {
            let from = m.owner_of_slot(s).member;
            if from == *to {
                continue;
            }
            match out.last_mut() {
                Some(c)
                    if c.end == s && c.from == from && c.to == *to && c.end - c.first < most =>
                {
                    c.end += 1
                }
                _ => out.push(Chunk {
                    first: s,
                    end: s + 1,
                    from,
                    to: *to,
                    backup: false,
                }),
            }
        }
    }
    out
}

impl Migration {
    /// A migration of `moves` on map `m`, started at `now_ms`, that then
    /// spreads the backups if `spread`; an error if nothing would move.
    pub fn new(
        m: &ShardMap,
        moves: &[(Range<u32>, MemberId)],
        now_ms: u64,
        spread: bool,
    ) -> Result<Migration, Refusal> {
        let todo: VecDeque<Chunk> = chunks(m, moves).into();
        if todo.is_empty() && !spread {
            return Err(Refusal::NothingToMove);
        }
        Ok(Migration {
            moves: moves.iter().map(|(r, t)| (r.start, r.end, *t)).collect(),
            slots_total: todo.iter().map(|c| c.end - c.first).sum(),
            todo,
            current: None,
            slots_done: 0,
            records: 0,
            bytes: 0,
            started_ms: now_ms,
            ended_ms: None,
            cancelled: false,
            error: None,
            last_ms: now_ms,
            spread,
            spread_planned: false,
        })
    }

    /// Whether it is still running.
    pub fn running(&self) -> bool {
        self.ended_ms.is_none()
    }

    /// The next step, applied to `m` (the committed map; the caller gives
    /// it the next version, `version`), at `now_ms` (`None`: the entry
    /// carries no clock), with `replicas` copies of each slot kept and the
    /// members `up`: the chunk being moved, if complete, becomes final, and
    /// the next chunk, if any and not cancelled, is started (pulled with
    /// one copy, copied to the target as a backup with more). Returns the
    /// chunk started. Ends the migration when nothing is left (a rebalance
    /// that spreads backups first plans their moves, with `spread`).
    pub fn step(
        &mut self,
        m: &mut ShardMap,
        version: u32,
        (now_ms, replicas, up): (Option<u64>, u8, &[MemberId]),
        spread: Spread<'_>,
    ) -> Option<Chunk> {
        if let Some(t) = now_ms {
            self.last_ms = self.last_ms.max(t);
        }
        if !self.running() {
            return None;
        }
        if self.current.as_ref().is_some_and(|c| c.copied) {
            self.tend(m, up);
        }
        if let Some(c) = &self.current {
            if !c.pending.is_empty() {
                return None;
            }
            if !c.copied {
                let _ = m.finish_import(c.chunk.first..c.chunk.end);
            }
            self.slots_done += c.chunk.end - c.chunk.first;
            self.current = None;
        }
        if self.cancelled {
            self.todo.clear();
        }
        if self.todo.is_empty() && self.spread && !self.spread_planned && !self.cancelled {
            self.spread_planned = true;
            let most = chunk_slots(m.slots());
            for (r, from, to) in spread(m) {
                let mut a = r.start;
                while a < r.end {
                    let b = (a + most).min(r.end);
                    self.todo.push_back(Chunk {
                        first: a,
                        end: b,
                        from,
                        to,
                        backup: true,
                    });
                    self.slots_total += b - a;
                    a = b;
                }
            }
        }
        // A chunk's source may have changed since it was cut (a failover):
        // a chunk whose slots the target owns is skipped, one whose
        // slots another member took is left where it is.
        while let Some(c) = self.todo.pop_front() {
            if c.backup {
                if !(c.first..c.end).all(|s| {
                    m.backups(s).iter().any(|b| b.owner.member == c.from)
                        && m.owner_of_slot(s).member != c.to
                }) || !up.contains(&c.to)
                {
                    // The copies moved since it was planned: left as they are.
                    self.slots_done += c.end - c.first;
                    continue;
                }
                return Some(self.start_copy(m, c, version));
            }
            if (c.first..c.end).all(|s| m.owner_of_slot(s).member == c.to) {
                self.slots_done += c.end - c.first;
                continue;
            }
            if replicas >= 2 {
                if (c.first..c.end).any(|s| m.owner_of_slot(s).member != c.from) {
                    self.slots_done += c.end - c.first;
                    self.error = Some(format!(
                        "slots {}..{} changed primary during the migration (a failover): not \
                         moved; run it again",
                        c.first, c.end
                    ));
                    continue;
                }
                return Some(self.start_copy(m, c, version));
            }
            if m.assign(c.first..c.end, c.to, Some(c.from)).is_err() {
                self.error = Some(format!("cannot hand over slots {}..{}", c.first, c.end));
                break;
            }
            self.current = Some(Current {
                chunk: c.clone(),
                version,
                pending: std::iter::once(c.first..c.end).collect(),
                copied: false,
            });
            return Some(c);
        }
        self.ended_ms = Some(self.last_ms);
        None
    }

    /// Starts chunk `c` (under map `version`) by making its target a
    /// backup of the slots it holds no copy of.
    fn start_copy(&mut self, m: &mut ShardMap, c: Chunk, version: u32) -> Chunk {
        for r in without(m, c.first..c.end, c.to) {
            if m.add_backup(r.clone(), c.to).is_err() {
                self.error = Some(format!("cannot copy slots {}..{}", r.start, r.end));
            }
        }
        self.current = Some(Current {
            chunk: c.clone(),
            version,
            pending: std::iter::once(c.first..c.end).collect(),
            copied: true,
        });
        c
    }

    /// A copied chunk's upkeep on map `m` with members `up`: done once the
    /// target owns every slot; given up if a slot changed primary otherwise
    /// (a failover) or the source is not up; else the target is made a
    /// backup again of slots it lost its copy of (it was down a while).
    fn tend(&mut self, m: &mut ShardMap, up: &[MemberId]) {
        let Some(c) = self.current.as_mut() else {
            return;
        };
        let k = c.chunk.clone();
        if k.backup {
            // Done once the new copy is ready everywhere: the old one goes.
            // Given up (nothing is lost) if the new one's member is down.
            let ready = (k.first..k.end).all(|s| {
                m.backups(s)
                    .iter()
                    .any(|b| b.owner.member == k.to && b.ready)
                    || m.backups(s).iter().all(|b| b.owner.member != k.from)
            });
            if ready {
                let _ = m.drop_backup(k.first..k.end, k.from);
            }
            if ready || !up.contains(&k.to) {
                c.pending.clear();
            } else {
                for r in without(m, k.first..k.end, k.to) {
                    let _ = m.add_backup(r, k.to);
                }
            }
            return;
        }
        if c.pending.is_empty() || (k.first..k.end).all(|s| m.owner_of_slot(s).member == k.to) {
            c.pending.clear();
            return;
        }
        let moved = (k.first..k.end).any(|s| m.owner_of_slot(s).member != k.from);
        if moved || !up.contains(&k.from) || !up.contains(&k.to) {
            c.pending.clear();
            self.error = Some(format!(
                "slots {}..{} were not handed to member {}: it or their primary, member {}, \
                 failed or left during the copy; run the migration again",
                k.first, k.end, k.to, k.from
            ));
            return;
        }
        if up.contains(&k.to) {
            for r in without(m, k.first..k.end, k.to) {
                let _ = m.add_backup(r, k.to);
            }
        }
    }

    /// Member `member`'s copies of `slots` are ready, `records` and `bytes`
    /// of them: counted if it is the target of the chunk being copied.
    pub fn copied(&mut self, member: MemberId, slots: &[Range<u32>], records: u64, bytes: u64) {
        let Some(c) = self.current.as_ref().filter(|c| c.copied) else {
            return;
        };
        let k = &c.chunk;
        if k.to == member && slots.iter().any(|r| r.start < k.end && k.first < r.end) {
            self.records += records;
            self.bytes += bytes;
        }
    }

    /// The target's backup the chunk being copied needs kept (see
    /// `replication::reconcile`).
    pub fn kept(&self) -> Option<(Range<u32>, MemberId)> {
        self.current
            .as_ref()
            .filter(|c| c.copied && !c.pending.is_empty())
            .map(|c| (c.chunk.first..c.chunk.end, c.chunk.to))
    }

    /// The chunk being copied, if its source may hand it over on map `m`:
    /// the source is still every slot's primary, and the target is a ready
    /// backup of every one.
    pub fn hand_over_due(&self, m: &ShardMap) -> Option<Chunk> {
        let c = self
            .current
            .as_ref()
            .filter(|c| c.copied && !c.chunk.backup && !c.pending.is_empty())?;
        let k = &c.chunk;
        (k.first..k.end)
            .all(|s| {
                m.owner_of_slot(s).member == k.from
                    && m.backups(s)
                        .iter()
                        .any(|b| b.owner.member == k.to && b.ready)
            })
            .then(|| k.clone())
    }

    /// A target's report that `slots` are in (under a map of version
    /// `version` or later). Returns whether the chunk is now complete.
    pub fn imported(
        &mut self,
        version: u32,
        slots: &[Range<u32>],
        records: u64,
        bytes: u64,
        lost: Option<String>,
    ) -> bool {
        let Some(c) = self.current.as_mut() else {
            return false;
        };
        if version < c.version || c.copied {
            return false;
        }
        let before: u32 = c.pending.iter().map(|r| r.end - r.start).sum();
        for s in slots {
            let (a, b) = (s.start, s.end);
            c.pending = c
                .pending
                .iter()
                .flat_map(|r| {
                    let left = r.start..r.end.min(a);
                    let right = r.start.max(b)..r.end;
                    [left, right]
                })
                .filter(|r| r.start < r.end)
                .collect();
        }
        let after: u32 = c.pending.iter().map(|r| r.end - r.start).sum();
        if after < before {
            self.records += records;
            self.bytes += bytes;
            if let Some(why) = lost {
                self.error = Some(why);
            }
        }
        c.pending.is_empty()
    }

    /// Member `member` is forgotten: chunks from or to it that were not
    /// handed over are dropped, and the chunk being pulled, if it is from or
    /// to it, counts as done (the records not pulled from a forgotten
    /// source are lost, and the migration says so). Whether it changed.
    pub fn forget(&mut self, member: MemberId) -> bool {
        let before = self.todo.len();
        self.todo.retain(|c| c.from != member && c.to != member);
        let mut changed = self.todo.len() != before;
        if let Some(c) = self.current.as_mut() {
            if c.chunk.from == member || c.chunk.to == member {
                if c.chunk.from == member && !c.pending.is_empty() && !c.copied {
                    self.error = Some(format!(
                        "the records of slots {}..{} not pulled yet were lost with member \
                         {member}, forgotten",
                        c.chunk.first, c.chunk.end
                    ));
                }
                c.pending.clear();
                changed = true;
            }
        }
        changed
    }

    /// The members the chunk being moved goes from and to, or the next
    /// one's (a chunk whose member failed waits in the queue), while it
    /// runs.
    pub fn moving(&self) -> Option<(MemberId, MemberId)> {
        if !self.running() {
            return None;
        }
        let c = self.current.as_ref().map(|c| &c.chunk);
        let c = c.or_else(|| self.todo.front())?;
        Some((c.from, c.to))
    }

    /// Stops after the chunk being pulled.
    pub fn cancel(&mut self) {
        self.cancelled = true;
    }

    /// For status, as of `now_ms`.
    pub fn status(&self, now_ms: u64) -> MigrationStatus {
        let mut moves: Vec<(u32, u32, MemberId)> = Vec::new();
        if let Some(c) = &self.current {
            moves.push((c.chunk.first, c.chunk.end, c.chunk.to));
        }
        moves.extend(self.todo.iter().map(|c| (c.first, c.end, c.to)));
        if moves.is_empty() && self.ended_ms.is_none() {
            moves = self.moves.clone();
        }
        MigrationStatus {
            moves,
            slots_total: self.slots_total,
            slots_done: self.slots_done,
            slots_moving: self
                .current
                .as_ref()
                .map_or(0, |c| c.chunk.end - c.chunk.first),
            records: self.records,
            bytes: self.bytes,
            seconds: self
                .ended_ms
                .unwrap_or(now_ms)
                .saturating_sub(self.started_ms) as f64
                / 1000.0,
            started_ms: self.started_ms,
            finished: self.ended_ms.is_some(),
            cancelled: self.cancelled,
            error: self.error.clone(),
            stalled: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::Member;

    fn none(_: &ShardMap) -> Vec<(Range<u32>, MemberId, MemberId)> {
        Vec::new()
    }

    fn map() -> ShardMap {
        let mut m = ShardMap::single("10.0.0.1:7000".parse().unwrap(), 256, 2).unwrap();
        for p in [7001, 7002] {
            m.add_member(Member {
                addr: format!("10.0.0.1:{p}").parse().unwrap(),
                workers: 2,
                bulk_port: 1,
            })
            .unwrap();
        }
        m
    }

    #[test]
    fn moves_are_cut_into_chunks_of_one_source() {
        let mut m = map();
        m.assign(100..110, MemberId(2), None).unwrap();
        let c = chunks(&m, &[(90..200, MemberId(1))]);
        let spans: Vec<(u32, u32, MemberId)> = c.iter().map(|c| (c.first, c.end, c.from)).collect();
        assert_eq!(
            spans,
            [(90, 100, 0), (100, 110, 2), (110, 174, 0), (174, 200, 0)].map(|(a, b, m)| (
                a,
                b,
                MemberId(m)
            ))
        );
        assert!(chunks(&m, &[(100..110, MemberId(2))]).is_empty());
        assert!(Migration::new(&m, &[(100..110, MemberId(2))], 0, false).is_err());
    }

    #[test]
    fn a_migration_hands_over_one_chunk_at_a_time_and_finishes_it_on_reports() {
        let mut m = map();
        let mut g = Migration::new(&m, &[(0..100, MemberId(1))], 0, false).unwrap();
        let c = g
            .step(
                &mut m,
                2,
                (Some(500), 1, &[MemberId(0), MemberId(1), MemberId(2)]),
                &none,
            )
            .unwrap();
        assert_eq!(
            (c.first, c.end, c.from, c.to),
            (0, 64, MemberId(0), MemberId(1))
        );
        assert_eq!(m.importing_from(10), Some(MemberId(0)));
        assert_eq!(m.owner_of_slot(10).member, MemberId(1));
        // Nothing moves on until the chunk is in.
        assert!(g
            .step(
                &mut m,
                3,
                (Some(500), 1, &[MemberId(0), MemberId(1), MemberId(2)]),
                &none
            )
            .is_none());
        assert!(g.running());
        // Reports per target worker; an old version or a stranger's is
        // ignored.
        assert!(!g.imported(1, &[0..64], 1, 1, None));
        assert!(!g.imported(2, &[0..32], 10, 100, None));
        assert!(g.imported(3, &[32..64], 10, 100, None));
        let c = g
            .step(
                &mut m,
                3,
                (Some(500), 1, &[MemberId(0), MemberId(1), MemberId(2)]),
                &none,
            )
            .unwrap();
        assert_eq!((c.first, c.end), (64, 100));
        assert_eq!(m.importing_from(10), None);
        assert_eq!(m.importing_from(70), Some(MemberId(0)));
        let s = g.status(1000);
        assert_eq!(
            (s.slots_done, s.slots_moving, s.records, s.bytes),
            (64, 36, 20, 200)
        );
        // Cancelled: the chunk being pulled finishes, nothing more starts.
        g.cancel();
        assert!(g.imported(3, &[64..100], 0, 0, None));
        assert!(g
            .step(
                &mut m,
                4,
                (Some(500), 1, &[MemberId(0), MemberId(1), MemberId(2)]),
                &none
            )
            .is_none());
        assert!(!g.running());
        let s = g.status(1000);
        assert!(s.finished && s.cancelled);
        assert_eq!(s.slots_done, 100);
        assert!(!m.migrating());
    }

    #[test]
    fn cancelling_stops_before_the_next_chunk() {
        let mut m = map();
        let mut g = Migration::new(&m, &[(0..200, MemberId(2))], 0, false).unwrap();
        g.step(
            &mut m,
            2,
            (Some(500), 1, &[MemberId(0), MemberId(1), MemberId(2)]),
            &none,
        )
        .unwrap();
        g.cancel();
        assert!(g.imported(2, &[0..64], 0, 0, None));
        assert!(g
            .step(
                &mut m,
                3,
                (Some(500), 1, &[MemberId(0), MemberId(1), MemberId(2)]),
                &none
            )
            .is_none());
        assert_eq!(m.slots_of(MemberId(2)), 64);
        assert_eq!(g.status(1000).slots_done, 64);
    }

    #[test]
    fn with_replicas_a_chunk_is_copied_to_its_target_then_handed_over() {
        let mut m = map();
        // Member 0's slots are backed up on member 1.
        m.add_backup(0..256, MemberId(1)).unwrap();
        m.set_backup_ready(0..256, MemberId(1)).unwrap();
        m.set_version(2);
        let up = [MemberId(0), MemberId(1), MemberId(2)];
        let mut g = Migration::new(&m, &[(0..100, MemberId(2))], 0, false).unwrap();
        let c = g.step(&mut m, 3, (Some(500), 2, &up), &none).unwrap();
        m.set_version(3);
        assert_eq!(
            (c.first, c.end, c.from, c.to),
            (0, 64, MemberId(0), MemberId(2))
        );
        // The source keeps the slots; the target is one more backup, kept.
        assert_eq!(m.owner_of_slot(10).member, MemberId(0));
        assert_eq!(m.importing_from(10), None);
        assert!(m
            .backups(10)
            .iter()
            .any(|b| b.owner.member == MemberId(2) && !b.ready));
        assert_eq!(g.kept(), Some((0..64, MemberId(2))));
        // Not ready: nothing to hand over, nothing moves on; a pull's
        // report does not count.
        assert!(g.hand_over_due(&m).is_none());
        assert!(!g.imported(3, &[0..64], 1, 1, None));
        assert!(g.step(&mut m, 4, (Some(600), 2, &up), &none).is_none());
        m.set_backup_ready(0..64, MemberId(2)).unwrap();
        assert_eq!(g.hand_over_due(&m), Some(c));
        m.hand_over(0..64, MemberId(2)).unwrap();
        m.set_version(4);
        // Handed over: the next chunk starts.
        let c = g.step(&mut m, 5, (Some(700), 2, &up), &none).unwrap();
        m.set_version(5);
        assert_eq!((c.first, c.end), (64, 100));
        assert_eq!(g.status(800).slots_done, 64);
        // The target lost its copies (it restarted without its records):
        // they are made again.
        m.drop_backup(0..256, MemberId(2)).unwrap();
        m.set_version(6);
        assert!(m.backups(70).iter().all(|b| b.owner.member != MemberId(2)));
        assert!(g.step(&mut m, 7, (None, 2, &up), &none).is_none());
        assert!(m.backups(70).iter().any(|b| b.owner.member == MemberId(2)));
        m.set_version(7);
        // The source failed over to its backup: the chunk is given up, and
        // the migration ends, saying so.
        for s in 64..100 {
            m.promote(s, MemberId(1)).unwrap();
        }
        m.set_version(8);
        assert!(g
            .step(
                &mut m,
                9,
                (Some(900), 2, &[MemberId(1), MemberId(2)]),
                &none
            )
            .is_none());
        assert!(!g.running());
        let st = g.status(1000);
        assert!(
            st.error.as_deref().unwrap_or("").contains("failed or left"),
            "{st:?}"
        );
        assert_eq!(g.kept(), None);
    }
}
