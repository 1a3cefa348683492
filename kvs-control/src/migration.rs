//! A migration as the control group runs it: the moves asked for, cut into
//! chunks, handed over one at a time, and what the targets reported. Part of
//! the replicated state ([`crate::ClusterState`]): every member applies the
//! same commands to it and makes the same map changes, so a new leader
//! carries on where the old one stopped. Deterministic: times are the
//! proposers' wall clocks, carried in the commands.

use std::collections::VecDeque;
use std::ops::Range;

use kvs_proto::control::MigrationStatus;
use kvs_proto::ShardMap;
use serde::{Deserialize, Serialize};

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
    pub from: u16,
    /// The target.
    pub to: u16,
}

/// The chunk being pulled: the map version that handed it over, and the
/// ranges no target has reported yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Current {
    chunk: Chunk,
    version: u32,
    pending: Vec<Range<u32>>,
}

/// A migration the control group runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    moves: Vec<(u32, u32, u16)>,
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
}

/// The chunks that carry out `moves` on map `m`: slots the target owns
/// already are left out.
pub fn chunks(m: &ShardMap, moves: &[(Range<u32>, u16)]) -> Vec<Chunk> {
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
                }),
            }
        }
    }
    out
}

impl Migration {
    /// A migration of `moves` on map `m`, started at `now_ms`; an error if
    /// nothing would move.
    pub fn new(
        m: &ShardMap,
        moves: &[(Range<u32>, u16)],
        now_ms: u64,
    ) -> Result<Migration, String> {
        let todo: VecDeque<Chunk> = chunks(m, moves).into();
        if todo.is_empty() {
            return Err("nothing to move: the target already owns those slots".into());
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
        })
    }

    /// Whether it is still running.
    pub fn running(&self) -> bool {
        self.ended_ms.is_none()
    }

    /// The next step, applied to `m` (the committed map; the caller gives
    /// it the next version, `version`), at `now_ms`: the chunk being
    /// pulled, if complete, becomes final, and the next chunk, if any and
    /// not cancelled, is handed over. Returns the chunk handed over. Ends
    /// the migration when nothing is left.
    pub fn step(&mut self, m: &mut ShardMap, version: u32, now_ms: u64) -> Option<Chunk> {
        if let Some(c) = &self.current {
            if !c.pending.is_empty() {
                return None;
            }
            let _ = m.finish_import(c.chunk.first..c.chunk.end);
            self.slots_done += c.chunk.end - c.chunk.first;
            self.current = None;
        }
        if self.cancelled {
            self.todo.clear();
        }
        // A chunk's source may have changed since it was cut (it cannot
        // while this migration runs; a chunk whose slots the target owns
        // is skipped all the same).
        while let Some(c) = self.todo.pop_front() {
            if (c.first..c.end).all(|s| m.owner_of_slot(s).member == c.to) {
                self.slots_done += c.end - c.first;
                continue;
            }
            if m.assign(c.first..c.end, c.to, Some(c.from)).is_err() {
                self.error = Some(format!("cannot hand over slots {}..{}", c.first, c.end));
                break;
            }
            self.current = Some(Current {
                chunk: c.clone(),
                version,
                pending: std::iter::once(c.first..c.end).collect(),
            });
            return Some(c);
        }
        self.ended_ms = Some(now_ms);
        None
    }

    /// A target's report that `slots` are in (under a map of version
    /// `version` or later). Returns whether the chunk is now complete.
    pub fn imported(
        &mut self,
        version: u32,
        slots: &[(u32, u32)],
        records: u64,
        bytes: u64,
        lost: Option<String>,
    ) -> bool {
        let Some(c) = self.current.as_mut() else {
            return false;
        };
        if version < c.version {
            return false;
        }
        let before: u32 = c.pending.iter().map(|r| r.end - r.start).sum();
        for &(a, b) in slots {
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
    pub fn forget(&mut self, member: u16) -> bool {
        let before = self.todo.len();
        self.todo.retain(|c| c.from != member && c.to != member);
        let mut changed = self.todo.len() != before;
        if let Some(c) = self.current.as_mut() {
            if c.chunk.from == member || c.chunk.to == member {
                if c.chunk.from == member && !c.pending.is_empty() {
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

    /// Stops after the chunk being pulled.
    pub fn cancel(&mut self) {
        self.cancelled = true;
    }

    /// For status, as of `now_ms`.
    pub fn status(&self, now_ms: u64) -> MigrationStatus {
        let mut moves: Vec<(u32, u32, u16)> = Vec::new();
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::Member;

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
        m.assign(100..110, 2, None).unwrap();
        let c = chunks(&m, &[(90..200, 1)]);
        let spans: Vec<(u32, u32, u16)> = c.iter().map(|c| (c.first, c.end, c.from)).collect();
        assert_eq!(
            spans,
            [(90, 100, 0), (100, 110, 2), (110, 174, 0), (174, 200, 0)]
        );
        assert!(chunks(&m, &[(100..110, 2)]).is_empty());
        assert!(Migration::new(&m, &[(100..110, 2)], 0).is_err());
    }

    #[test]
    fn a_migration_hands_over_one_chunk_at_a_time_and_finishes_it_on_reports() {
        let mut m = map();
        let mut g = Migration::new(&m, &[(0..100, 1)], 0).unwrap();
        let c = g.step(&mut m, 2, 500).unwrap();
        assert_eq!((c.first, c.end, c.from, c.to), (0, 64, 0, 1));
        assert_eq!(m.importing_from(10), Some(0));
        assert_eq!(m.owner_of_slot(10).member, 1);
        // Nothing moves on until the chunk is in.
        assert!(g.step(&mut m, 3, 500).is_none());
        assert!(g.running());
        // Reports per target worker; an old version or a stranger's is
        // ignored.
        assert!(!g.imported(1, &[(0, 64)], 1, 1, None));
        assert!(!g.imported(2, &[(0, 32)], 10, 100, None));
        assert!(g.imported(3, &[(32, 64)], 10, 100, None));
        let c = g.step(&mut m, 3, 500).unwrap();
        assert_eq!((c.first, c.end), (64, 100));
        assert_eq!(m.importing_from(10), None);
        assert_eq!(m.importing_from(70), Some(0));
        let s = g.status(1000);
        assert_eq!(
            (s.slots_done, s.slots_moving, s.records, s.bytes),
            (64, 36, 20, 200)
        );
        // Cancelled: the chunk being pulled finishes, nothing more starts.
        g.cancel();
        assert!(g.imported(3, &[(64, 100)], 0, 0, None));
        assert!(g.step(&mut m, 4, 500).is_none());
        assert!(!g.running());
        let s = g.status(1000);
        assert!(s.finished && s.cancelled);
        assert_eq!(s.slots_done, 100);
        assert!(!m.migrating());
    }

    #[test]
    fn cancelling_stops_before_the_next_chunk() {
        let mut m = map();
        let mut g = Migration::new(&m, &[(0..200, 2)], 0).unwrap();
        g.step(&mut m, 2, 500).unwrap();
        g.cancel();
        assert!(g.imported(2, &[(0, 64)], 0, 0, None));
        assert!(g.step(&mut m, 3, 500).is_none());
        assert_eq!(m.slots_of(2), 64);
        assert_eq!(g.status(1000).slots_done, 64);
    }
}
