//! The history's check, by an established checker: stateright's
//! `LinearizabilityTester`, one register per key. Each key's operations are
//! replayed to it in real-time order (an invocation before a completion
//! stamped the same nanosecond, so that a tie counts as concurrent), and it
//! searches for a total order that a single register could have produced.
//!
//! Every acknowledged write reading back is part of the same check: after
//! the faults, one last read of every key runs alone, and a register
//! admits it only if it returns the last write of some valid order.
//!
//! The search is exponential in the worst case, in the operations left
//! open above all: writes of unknown outcome whose value no read returned
//! are left out first (they change no verdict). Each key runs on a thread
//! of its own against a deadline, and a key whose search does not end in
//! time is reported as unchecked (a run with one does not pass).
// Shared with the tests that borrow the nemesis's parts.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use stateright::semantics::register::{Register, RegisterOp, RegisterRet};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester};

use crate::history::{Entry, Key, Op, Ret};

/// What the check of one key found.
#[derive(Debug)]
pub enum Verdict {
    /// A register could have given these answers.
    Linearizable,
    /// None could: the key's operations, for the report.
    Anomaly(String),
}

/// The checks of every key.
#[derive(Debug, Default)]
pub struct Report {
    /// Keys checked.
    pub keys: usize,
    /// Keys no register explains, each with its operations.
    pub anomalies: Vec<(Key, String)>,
    /// Keys whose search ran out of time.
    pub unchecked: Vec<Key>,
    /// The longest search of one key.
    pub slowest: Duration,
}

type Tester = LinearizabilityTester<u32, Register<Option<u64>>>;

/// Replays one key's operations to the tester in real-time order.
fn tester_of(ops: &[Entry]) -> Result<Tester, String> {
    // (time, 0 = invoke / 1 = complete, index)
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(ops.len() * 2);
    for (i, e) in ops.iter().enumerate() {
        events.push((e.invoked, 0, i));
        if let Some((t, _)) = e.done {
            events.push((t.max(e.invoked), 1, i));
        }
    }
    events.sort_unstable();
    let mut t = Tester::new(Register(None));
    for (_, kind, i) in events {
        let e = &ops[i];
        if kind == 0 {
            let op = match e.op {
                Op::Read => RegisterOp::Read,
                Op::Write(v) => RegisterOp::Write(Some(v)),
            };
            t.on_invoke(e.process, op)?;
        } else {
            let ret = match e.done {
                Some((_, Ret::Read(v))) => RegisterRet::ReadOk(v),
                _ => RegisterRet::WriteOk,
            };
            t.on_return(e.process, ret)?;
        }
    }
    Ok(t)
}

/// `ops` without the writes of unknown outcome whose value no read
/// returned. Each write stores a value of its own, so such a write, if it
/// took effect at all, was overwritten before any read: the history
/// without it is linearizable exactly when the history with it is. The
/// search is exponential in the operations left open, and a member that
/// cannot serve a key (killed, with one copy) leaves a run of them.
pub fn without_unseen_writes(ops: &[Entry]) -> Vec<Entry> {
    let seen: std::collections::BTreeSet<u64> = ops
        .iter()
        .filter_map(|e| match e.done {
            Some((_, Ret::Read(Some(v)))) => Some(v),
            _ => None,
        })
        .collect();
    ops.iter()
        .filter(|e| !matches!((e.op, e.done), (Op::Write(v), None) if !seen.contains(&v)))
        .copied()
        .collect()
}

/// Checks one key's operations.
pub fn check_key(ops: &[Entry]) -> Verdict {
    match tester_of(&without_unseen_writes(ops)) {
        Ok(t) if t.is_consistent() => Verdict::Linearizable,
        Ok(_) => Verdict::Anomaly(describe(ops)),
        Err(e) => Verdict::Anomaly(format!("the history itself is malformed: {e}")),
    }
}

/// A key's operations in invocation order, one per line, for a report.
pub fn describe(ops: &[Entry]) -> String {
    let mut v: Vec<&Entry> = ops.iter().collect();
    v.sort_by_key(|e| e.invoked);
    let ms = |ns: u64| ns as f64 / 1e6;
    v.iter()
        .map(|e| {
            let what = match e.op {
                Op::Read => "read".to_string(),
                Op::Write(x) => format!("write {x}"),
            };
            let out = match e.done {
                None => "unknown".to_string(),
                Some((t, Ret::Written)) => format!("ok at {:.3}", ms(t)),
                Some((t, Ret::Read(r))) => format!("-> {r:?} at {:.3}", ms(t)),
            };
            format!(
                "  p{:<5} {:>10.3} ms  {what:<24} {out}",
                e.process,
                ms(e.invoked)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks every key of `history`, `threads` keys at a time, giving up on a
/// key whose search runs past `deadline` from the start.
pub fn check(history: &[Entry], threads: usize, deadline: Duration) -> Report {
    let mut by_key: BTreeMap<Key, Vec<Entry>> = BTreeMap::new();
    for e in history {
        by_key.entry(e.key).or_default().push(*e);
    }
    let mut report = Report {
        keys: by_key.len(),
        ..Report::default()
    };
    let keys: Vec<Key> = by_key.keys().copied().collect();
    let mut finished = std::collections::BTreeSet::new();
    let until = Instant::now() + deadline;
    let queue = std::sync::Arc::new(std::sync::Mutex::new(by_key.into_iter()));
    let (tx, rx) = mpsc::channel::<(Key, Verdict, Duration)>();
    for _ in 0..threads.max(1) {
        let (queue, tx) = (queue.clone(), tx.clone());
        // A deep search recurses once per operation: a large stack. The
        // thread is detached, so that one that never ends cannot hold the
        // run; the process exits after the report.
        let _ = std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(move || loop {
                let next = queue.lock().unwrap().next();
                let Some((k, ops)) = next else { break };
                let t = Instant::now();
                let v = check_key(&ops);
                if tx.send((k, v, t.elapsed())).is_err() {
                    break;
                }
            });
    }
    drop(tx);
    let mut done = 0;
    while done < report.keys {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((k, v, took)) => {
                done += 1;
                report.slowest = report.slowest.max(took);
                finished.insert(k);
                match v {
                    Verdict::Linearizable => {}
                    Verdict::Anomaly(why) => report.anomalies.push((k, why)),
                }
            }
            Err(_) => break,
        }
    }
    // The keys still searched, or never started, are unchecked.
    report
        .unchecked
        .extend(keys.into_iter().filter(|k| !finished.contains(k)));
    report
}

/// Shows that the checker can fail, before a run relies on it: a stale
/// read, a lost acknowledged write and a value never written are
/// anomalies; reads concurrent with a write, a write of unknown outcome
/// seen or not, and a run of them never seen (at once) are not.
pub fn self_test() -> Result<(), String> {
    let e = |process, op, invoked, done| Entry {
        key: 0,
        process,
        op,
        invoked,
        done,
    };
    let w = |v| Op::Write(v);
    let read = |v| Some(Ret::Read(v));
    let ok = Some(Ret::Written);
    let at = |t: u64, r: Option<Ret>| r.map(|r| (t, r));
    let bad: [(&str, Vec<Entry>); 3] = [
        (
            "a stale read",
            vec![
                e(1, w(1), 0, at(10, ok)),
                e(2, w(2), 20, at(30, ok)),
                e(1, Op::Read, 40, at(50, read(Some(1)))),
            ],
        ),
        (
            "a lost acknowledged write",
            vec![
                e(1, w(1), 0, at(10, ok)),
                e(2, Op::Read, 20, at(30, read(None))),
            ],
        ),
        (
            "a value never written",
            vec![
                e(1, w(1), 0, None),
                e(2, Op::Read, 20, at(30, read(Some(7)))),
            ],
        ),
    ];
    for (what, h) in bad {
        if let Verdict::Linearizable = check_key(&h) {
            return Err(format!("the checker passed {what}"));
        }
    }
    let mut unseen: Vec<Entry> = (0..10)
        .map(|i| e(i, w(100 + u64::from(i)), 10 * u64::from(i), None))
        .collect();
    unseen.push(e(99, Op::Read, 1000, at(1010, read(None))));
    let good: [(&str, Vec<Entry>); 3] = [
        (
            "reads concurrent with a write",
            vec![
                e(1, w(1), 0, at(100, ok)),
                e(2, Op::Read, 10, at(20, read(Some(1)))),
                e(3, Op::Read, 2, at(8, read(None))),
                e(2, Op::Read, 50, at(60, read(Some(1)))),
            ],
        ),
        (
            "a write of unknown outcome, seen once",
            vec![
                e(1, w(1), 0, at(10, ok)),
                e(2, w(2), 20, None),
                e(3, Op::Read, 30, at(40, read(Some(2)))),
            ],
        ),
        ("ten writes of unknown outcome, never seen", unseen),
    ];
    for (what, h) in good {
        if let Verdict::Anomaly(_) = check_key(&h) {
            return Err(format!("the checker refused {what}"));
        }
    }
    Ok(())
}
