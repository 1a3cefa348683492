//! What the kills of every member lost ([`crate::faults::Kind::KillAll`]):
//! the acknowledged writes that did not read back after a kill, and how
//! long before it each was acknowledged.
//!
//! A write `w` of a key, acknowledged before a kill, is lost when a read
//! of the key invoked after the kill (and completed before the next one)
//! returns nothing, or the value of a write that completed before `w` was
//! invoked: a value that `w` had certainly overwritten. Reads of writes
//! concurrent with `w`, of writes of unknown outcome and of writes
//! invoked after the kill say nothing. The workload never deletes, so
//! nothing read back means every acknowledged write of the key was lost.
//! A lost write's age is counted to the first kill after it was last seen
//! (acknowledged, or read back): keys are often read only at the end,
//! after several kills.
//!
//! Under `durability = "everysec"` a kill may lose about the last second
//! of acknowledged writes (the flush once a second), and no older one: a
//! write lost older than [`EVERYSEC_BOUND`] fails the run. Under `always`
//! it may lose none (the linearizability check says so too).
// Shared with the tests that borrow the nemesis's parts.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::history::{Entry, Key, Op, Ret};

/// How long before a kill of every member an acknowledged write may have
/// been acknowledged and still be lost under `everysec`. The log is
/// flushed once a second, so a write(2) made before an answer is on disk
/// at most a second plus one flush later; on two cores shared with other
/// builds the flushing thread may wait its turn and the flush itself may
/// take hundreds of milliseconds, hence one second more. (A `kill -9`
/// leaves the page cache, which the write(2) before each answer fills:
/// such a kill should lose nothing at all.)
pub const EVERYSEC_BOUND: Duration = Duration::from_secs(2);

/// An acknowledged write that did not read back after a kill.
#[derive(Debug, Clone, Copy)]
pub struct Lost {
    /// Its key.
    pub key: Key,
    /// The value it wrote.
    pub value: u64,
    /// How long before the kill it was acknowledged.
    pub age: Duration,
}

/// What the kills lost.
#[derive(Debug, Default)]
pub struct Loss {
    /// Kills of every member.
    pub kills: usize,
    /// Writes acknowledged within [`EVERYSEC_BOUND`] before a kill: the
    /// writes a kill may lose under `everysec`.
    pub at_risk: usize,
    /// The writes lost, each at the first kill after it was last seen.
    pub lost: Vec<Lost>,
}

impl Loss {
    /// How long before its kill the oldest lost write was acknowledged.
    pub fn oldest(&self) -> Option<Duration> {
        self.lost.iter().map(|l| l.age).max()
    }

    /// The lost writes acknowledged longer than `bound` before their kill.
    pub fn older_than(&self, bound: Duration) -> impl Iterator<Item = &Lost> {
        self.lost.iter().filter(move |l| l.age > bound)
    }

    /// The loss in a line.
    pub fn line(&self) -> String {
        let times = match self.kills {
            1 => "once".to_string(),
            n => format!("{n} times"),
        };
        let oldest = match self.oldest() {
            Some(d) => format!(", the oldest acknowledged {:.0} ms before its kill", ms(d)),
            None => String::new(),
        };
        format!(
            "every member killed {times}: {} acknowledged writes lost (of {} acknowledged \
             within {:?} before a kill){oldest}",
            self.lost.len(),
            self.at_risk,
            EVERYSEC_BOUND
        )
    }

    /// Adds `other`'s kills and losses (a long run's totals).
    pub fn add(&mut self, other: &Loss) {
        self.kills += other.kills;
        self.at_risk += other.at_risk;
        self.lost.extend_from_slice(&other.lost);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The writes that the kills at `kills` (ns of the history's clock) lost
/// in `history`.
pub fn measure(history: &[Entry], kills: &[u64]) -> Loss {
    let mut kills = kills.to_vec();
    kills.sort_unstable();
    let mut by_key: BTreeMap<Key, Vec<&Entry>> = BTreeMap::new();
    for e in history {
        by_key.entry(e.key).or_default().push(e);
    }
    let mut loss = Loss {
        kills: kills.len(),
        ..Loss::default()
    };
    let bound = EVERYSEC_BOUND.as_nanos() as u64;
    for ops in by_key.values() {
        // Each write's invocation and acknowledgement (u64::MAX: unknown).
        let writes: BTreeMap<u64, (u64, u64)> = ops
            .iter()
            .filter_map(|e| match (e.op, e.done) {
                (Op::Write(v), Some((t, _))) => Some((v, (e.invoked, t))),
                (Op::Write(v), None) => Some((v, (e.invoked, u64::MAX))),
                _ => None,
            })
            .collect();
        let acked = |before: u64| {
            writes
                .iter()
                .filter(move |(_, &(_, done))| done < before)
                .map(|(&v, &t)| (v, t))
        };
        let mut missed = BTreeSet::new();
        for (i, &k) in kills.iter().enumerate() {
            loss.at_risk += acked(k).filter(|(_, (_, d))| k - d <= bound).count();
            let until = kills.get(i + 1).copied().unwrap_or(u64::MAX);
            for e in ops {
                let Some((done, Ret::Read(got))) = e.done else {
                    continue;
                };
                if e.invoked < k || done > until {
                    continue;
                }
                // What the read shows was overwritten: writes invoked
                // after the write it saw completed (every write, if it
                // saw none).
                let floor = match got {
                    None => 0,
                    Some(v) => match writes.get(&v) {
                        Some(&(invoked, _)) if invoked >= k => continue,
                        Some(&(_, seen_done)) if seen_done == u64::MAX => continue,
                        Some(&(_, seen_done)) => seen_done + 1,
                        // A value never written: the linearizability check's.
                        None => continue,
                    },
                };
                for (v, (invoked, d)) in acked(k) {
                    if invoked >= floor && missed.insert(v) {
                        let at = lost_at(ops, v, d, &kills[..=i]);
                        loss.lost.push(Lost {
                            key: e.key,
                            value: v,
                            age: Duration::from_nanos(at - d),
                        });
                    }
                }
            }
        }
    }
    loss
}

/// The kill that lost the write of `v` acknowledged at `acked`, among
/// `kills` (the last one is the first a read missed it after): the first
/// after it was last seen, acknowledged or read back. A read after the
/// last kill may be the first of the key after several, and a write lost
/// by the first of them is not as old as the last makes it.
fn lost_at(ops: &[&Entry], v: u64, acked: u64, kills: &[u64]) -> u64 {
    let seen = ops
        .iter()
        .filter(|e| matches!(e.done, Some((_, Ret::Read(Some(x)))) if x == v))
        .map(|e| e.invoked)
        .fold(acked, u64::max);
    let last = kills[kills.len() - 1];
    kills.iter().copied().find(|&k| k > seen).unwrap_or(last)
}

/// `history` with the writes in `lost` as writes of unknown outcome: a
/// write a kill lost within the bound is one whose answer the client
/// might as well never have had. (One a read had seen before the kill
/// still fails the linearizability check.)
pub fn forgiven(history: &[Entry], lost: &[Lost]) -> Vec<Entry> {
    let lost: BTreeSet<(Key, u64)> = lost.iter().map(|l| (l.key, l.value)).collect();
    history
        .iter()
        .map(|e| match e.op {
            Op::Write(v) if lost.contains(&(e.key, v)) => Entry { done: None, ..*e },
            _ => *e,
        })
        .collect()
}

/// Shows that the measure finds a loss and spares what is not one, before
/// a run relies on it.
pub fn self_test() -> Result<(), String> {
    let e = |process, op, invoked, done: Option<(u64, Ret)>| Entry {
        key: 0,
        process,
        op,
        invoked,
        done,
    };
    let w = Op::Write;
    let ok = |t| Some((t, Ret::Written));
    let read = |t, v| Some((t, Ret::Read(v)));
    let s = 1_000_000_000u64;
    // Writes acknowledged 3 s and 0.5 s before a kill at 10 s.
    let h = vec![
        e(1, w(1), 6 * s, ok(7 * s)),
        e(1, w(2), 9 * s, ok(9 * s + s / 2)),
        e(2, w(3), 9 * s + s / 2, None),
        e(3, Op::Read, 12 * s, read(13 * s, Some(1))),
    ];
    let l = measure(&h, &[10 * s]);
    if l.lost.len() != 1 || l.lost[0].value != 2 || l.oldest() != Some(Duration::from_millis(500)) {
        return Err(format!("a write lost 0.5 s before the kill: {l:?}"));
    }
    let l = measure(
        &h[..3]
            .iter()
            .copied()
            .chain([e(3, Op::Read, 12 * s, read(13 * s, None))])
            .collect::<Vec<_>>(),
        &[10 * s],
    );
    if l.older_than(EVERYSEC_BOUND).count() != 1 || l.lost.len() != 2 {
        return Err(format!("every write lost: {l:?}"));
    }
    // Two kills, the key read only after the second: lost by the first
    // (0.5 s), unless read back between them (then 10.5 s by the second).
    let mut two = h.clone();
    two[3] = e(3, Op::Read, 22 * s, read(23 * s, Some(1)));
    let l = measure(&two, &[10 * s, 20 * s]);
    if l.oldest() != Some(Duration::from_millis(500)) {
        return Err(format!("a write lost by the first of two kills: {l:?}"));
    }
    two.push(e(4, Op::Read, 12 * s, read(13 * s, Some(2))));
    let l = measure(&two, &[10 * s, 20 * s]);
    if l.oldest() != Some(Duration::from_millis(10_500)) {
        return Err(format!(
            "a write read back, then lost by a second kill: {l:?}"
        ));
    }
    // Read back: the last write, the unknown one, or before the kill.
    for (got, at) in [(Some(2), 12 * s), (Some(3), 12 * s), (Some(1), 8 * s)] {
        let mut h = h.clone();
        h[3] = e(3, Op::Read, at, read(at + 1, got));
        let l = measure(&h, &[10 * s]);
        if !l.lost.is_empty() {
            return Err(format!("{got:?} read at {at} ns counted a loss: {l:?}"));
        }
    }
    Ok(())
}
