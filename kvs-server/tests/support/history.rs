//! A recorded history of operations on keys, and its check: every
//! acknowledged write reads back, and no read returns a value older than the
//! last write acknowledged before the read began.
//!
//! Each key is written by one worker at a time with values that carry a
//! sequence number that grows with every write of that key (`"<key>:<seq>"`),
//! so a read's value says which write it saw. An operation is recorded when
//! it is invoked and when it completes, with its outcome: `Ok`, `Fail` (it
//! certainly did nothing: refused before it was sent, or a read), or
//! `Unknown` (a write whose answer never came: it may have been applied).

use std::sync::Mutex;
use std::time::Instant;

/// What an operation was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A write of sequence number `seq`.
    Write(u64),
    /// A read; what it returned (`None`: not found), once complete.
    Read(Option<u64>),
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged.
    Ok,
    /// Certainly not applied (a failed read, or a write refused unsent).
    Fail,
    /// No answer: a write may or may not have been applied.
    Unknown,
}

/// One operation.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub key: u32,
    pub kind: Kind,
    /// Nanoseconds since the history began, at invocation and completion.
    pub invoked: u64,
    pub completed: u64,
    pub outcome: Outcome,
}

/// Operations recorded by several threads.
pub struct History {
    start: Instant,
    ops: Mutex<Vec<Op>>,
}

impl History {
    pub fn new() -> History {
        History {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Now, as the history counts time.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Records an operation invoked at `invoked` (from [`now`](Self::now)),
    /// complete now.
    pub fn record(&self, key: u32, kind: Kind, invoked: u64, outcome: Outcome) {
        let completed = self.now();
        self.ops.lock().unwrap().push(Op {
            key,
            kind,
            invoked,
            completed,
            outcome,
        });
    }

    /// Every operation so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }
}

/// The value of write `seq` of `key`.
pub fn value(key: u32, seq: u64) -> Vec<u8> {
    format!("{key}:{seq}").into_bytes()
}

/// The sequence number in a value read for `key`, if it is one of its
/// values.
pub fn seq_of(key: u32, v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?;
    let (k, seq) = s.split_once(':')?;
    (k.parse::<u32>().ok()? == key).then_some(())?;
    seq.parse().ok()
}

/// What a check found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub writes_ok: usize,
    pub writes_unknown: usize,
    pub reads_ok: usize,
}

/// Checks a history (see the module docs): the summary, or every violation
/// found, each naming the key and the operations involved.
pub fn check(ops: &[Op]) -> Result<Summary, Vec<String>> {
    let mut errors = Vec::new();
    let mut sum = Summary::default();
    let mut keys: Vec<u32> = ops.iter().map(|o| o.key).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let of_key: Vec<&Op> = ops.iter().filter(|o| o.key == key).collect();
        let writes: Vec<(u64, &Op)> = of_key
            .iter()
            .filter_map(|o| match o.kind {
                Kind::Write(s) if o.outcome != Outcome::Fail => Some((s, *o)),
                _ => None,
            })
            .collect();
        for (_, w) in &writes {
            match w.outcome {
                Outcome::Ok => sum.writes_ok += 1,
                _ => sum.writes_unknown += 1,
            }
        }
        for r in of_key.iter().filter(|o| o.outcome == Outcome::Ok) {
            let Kind::Read(got) = r.kind else { continue };
            sum.reads_ok += 1;
            // The newest write acknowledged before the read began.
            let floor = writes
                .iter()
                .filter(|(_, w)| w.outcome == Outcome::Ok && w.completed < r.invoked)
                .map(|(s, _)| *s)
                .max();
            match (got, floor) {
                (None, Some(f)) => errors.push(format!(
                    "key {key}: a read at {}..{} ns found nothing, though write {f} was \
                     acknowledged before it began (a lost write)",
                    r.invoked, r.completed
                )),
                (Some(s), Some(f)) if s < f => errors.push(format!(
                    "key {key}: a read at {}..{} ns returned write {s}, older than write {f} \
                     acknowledged before it began (a stale read)",
                    r.invoked, r.completed
                )),
                (Some(s), _)
                    if !writes
                        .iter()
                        .any(|(ws, w)| *ws == s && w.invoked < r.completed) =>
                {
                    errors.push(format!(
                        "key {key}: a read at {}..{} ns returned write {s}, which was never \
                         invoked before it ended",
                        r.invoked, r.completed
                    ))
                }
                _ => {}
            }
        }
    }
    if errors.is_empty() {
        Ok(sum)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: u32, kind: Kind, invoked: u64, completed: u64, outcome: Outcome) -> Op {
        Op {
            key,
            kind,
            invoked,
            completed,
            outcome,
        }
    }

    #[test]
    fn a_history_that_keeps_every_write_passes() {
        let ops = [
            op(1, Kind::Write(1), 0, 10, Outcome::Ok),
            op(1, Kind::Read(Some(1)), 11, 20, Outcome::Ok),
            // A write whose answer was lost: a later read may see it or not.
            op(1, Kind::Write(2), 21, 30, Outcome::Unknown),
            op(1, Kind::Read(Some(1)), 31, 40, Outcome::Ok),
            op(1, Kind::Read(Some(2)), 41, 50, Outcome::Ok),
            // Concurrent with a write: either value.
            op(1, Kind::Write(3), 51, 70, Outcome::Ok),
            op(1, Kind::Read(Some(2)), 55, 60, Outcome::Ok),
            op(2, Kind::Read(None), 0, 5, Outcome::Ok),
            op(2, Kind::Read(None), 6, 7, Outcome::Fail),
        ];
        let s = check(&ops).unwrap();
        assert_eq!((s.writes_ok, s.writes_unknown, s.reads_ok), (2, 1, 5));
    }

    #[test]
    fn lost_stale_and_invented_values_are_caught() {
        let lost = [
            op(1, Kind::Write(1), 0, 10, Outcome::Ok),
            op(1, Kind::Read(None), 11, 20, Outcome::Ok),
        ];
        let e = check(&lost).unwrap_err();
        assert!(e[0].contains("lost write"), "{e:?}");
        let stale = [
            op(1, Kind::Write(1), 0, 10, Outcome::Ok),
            op(1, Kind::Write(2), 11, 20, Outcome::Ok),
            op(1, Kind::Read(Some(1)), 21, 30, Outcome::Ok),
        ];
        let e = check(&stale).unwrap_err();
        assert!(e[0].contains("stale read"), "{e:?}");
        let invented = [
            op(1, Kind::Write(1), 0, 10, Outcome::Ok),
            op(1, Kind::Read(Some(7)), 11, 20, Outcome::Ok),
            op(1, Kind::Write(7), 21, 30, Outcome::Ok),
        ];
        let e = check(&invented).unwrap_err();
        assert!(e[0].contains("never invoked"), "{e:?}");
    }

    #[test]
    fn values_carry_their_key_and_sequence() {
        assert_eq!(seq_of(4, &value(4, 17)), Some(17));
        assert_eq!(seq_of(5, &value(4, 17)), None);
        assert_eq!(seq_of(4, b"junk"), None);
    }
}
