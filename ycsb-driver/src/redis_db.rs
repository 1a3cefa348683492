//! The Redis backend: the same workloads against a Redis server, with Java
//! YCSB's RedisClient data model (a hash per record, field name → value; a
//! sorted set `_indices` scored by Java's `String.hashCode` of the key for
//! scans). A thread sends up to `depth` operations as one pipeline and
//! waits for all the answers (as `redis-benchmark -P` does); operations that
//! need a second round trip (scan: the keys, then the records;
//! read-modify-write: the read, then the write) take it in a second pipeline.

use std::time::Instant;

use redis::Value;

use crate::measure::{Measurements, OpKind, Status};
use crate::rng::Rng;
use crate::runner::{deterministic_chunk, fill_field, Job, Phase, RunError};
use crate::workload::{Op, ALL_FIELDS};

const INDEX_KEY: &str = "_indices";

/// Java's `String.hashCode` (the score Java's binding gives a key).
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Read,
    Update(usize),
    Insert(u64),
    Scan(usize),
    Rmw(usize),
}

struct Pending {
    kind: Kind,
    key: String,
    status: Status,
    /// Where its answer(s) sit in the first round's results.
    first: usize,
}

/// One driver thread against Redis at `url`.
pub(crate) fn drive(job: Job<'_>, url: &str) -> Result<(Measurements, u64), RunError> {
    let Job {
        wl,
        phase,
        opts,
        thread,
        threads,
        count,
        progress,
        ..
    } = job;
    let fail = |why: String| RunError::Connect { thread, why };
    let client = redis::Client::open(url).map_err(|e| fail(e.to_string()))?;
    let mut con = client.get_connection().map_err(|e| fail(e.to_string()))?;
    let mut st = wl.thread_state(thread, threads);
    let mut rng = Rng::for_stream(opts.seed, thread as u64);
    let (nf, fl) = (wl.field_count(), wl.field_length());
    let names = wl.field_names().to_vec();
    let depth = opts.depth.clamp(1, 1 << 12);
    let mut m = Measurements::new();
    if !opts.status {
        m = m.without_intervals();
    }
    let mut value = vec![0u8; fl];
    let mut batch: Vec<Pending> = Vec::with_capacity(depth);
    let mut done = 0u64;
    let t0 = Instant::now();
    let per_thread_rate = opts.target_ops.map(|t| t / threads as f64);
    while done < count {
        if opts.max_time.is_some_and(|d| t0.elapsed() >= d)
            || opts.interrupt.load(std::sync::atomic::Ordering::Relaxed)
        {
            break;
        }
        if let Some(rate) = per_thread_rate {
            let due = t0 + std::time::Duration::from_secs_f64(done as f64 / rate);
            while Instant::now() < due {
                std::thread::yield_now();
            }
        }
        // Round one.
        batch.clear();
        let mut p = redis::pipe();
        let mut cmds = 0;
        let n = (count - done).min(depth as u64);
        for _ in 0..n {
            let mut key = String::new();
            let kind = match phase {
                Phase::Load => Kind::Insert(st.next_load(&mut rng, &mut key)),
                Phase::Run => match st.next_op(&mut rng, &mut key) {
                    Op::Read => Kind::Read,
                    Op::Update { field } => Kind::Update(field),
                    Op::Insert { keynum } => Kind::Insert(keynum),
                    Op::Scan { len } => Kind::Scan(len),
                    Op::ReadModifyWrite { field } => Kind::Rmw(field),
                },
            };
            let first = cmds;
            match kind {
                Kind::Read | Kind::Rmw(_) => {
                    p.cmd("HGETALL").arg(&key);
                    cmds += 1;
                }
                Kind::Update(f) => {
                    let c = p.cmd("HSET").arg(&key);
                    let fields = if f == ALL_FIELDS { 0..nf } else { f..f + 1 };
                    for i in fields {
                        fill_field(opts.verify, &mut rng, key.as_bytes(), i, &mut value);
                        c.arg(&names[i]).arg(&value[..]);
                    }
                    cmds += 1;
                }
                Kind::Insert(_) => {
                    let c = p.cmd("HSET").arg(&key);
                    for (i, name) in names.iter().enumerate() {
                        fill_field(opts.verify, &mut rng, key.as_bytes(), i, &mut value);
                        c.arg(name).arg(&value[..]);
                    }
                    p.cmd("ZADD")
                        .arg(INDEX_KEY)
                        .arg(java_string_hash(&key))
                        .arg(&key);
                    cmds += 2;
                }
                Kind::Scan(len) => {
                    p.cmd("ZRANGEBYSCORE")
                        .arg(INDEX_KEY)
                        .arg(java_string_hash(&key))
                        .arg("+inf")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(len);
                    cmds += 1;
                }
            }
            batch.push(Pending {
                kind,
                key,
                status: Status::Ok,
                first,
            });
        }
        let start = Instant::now();
        let r1: Vec<Value> = match p.query(&mut con) {
            Ok(v) => v,
            Err(_) => vec![Value::Nil; cmds],
        };
        // Round two: scans' records, read-modify-writes' writes.
        let mut p2 = redis::pipe();
        let mut second = false;
        for op in batch.iter_mut() {
            let a = r1.get(op.first).unwrap_or(&Value::Nil);
            op.status = match op.kind {
                Kind::Read | Kind::Rmw(_) => read_status(a, &op.key, &names, fl, opts.verify),
                Kind::Update(_) => ok_status(a),
                // The record, then its index entry.
                Kind::Insert(_) => match ok_status(a) {
                    Status::Ok => ok_status(r1.get(op.first + 1).unwrap_or(&Value::Nil)),
                    bad => bad,
                },
                Kind::Scan(_) => match a {
                    Value::Array(keys) => {
                        for k in keys {
                            if let Value::BulkString(k) = k {
                                p2.cmd("HGETALL").arg(&k[..]);
                            } else {
                                p2.cmd("HGETALL").arg("");
                            }
                        }
                        second |= !keys.is_empty();
                        Status::Ok
                    }
                    _ => Status::Error,
                },
            };
            if let (Kind::Rmw(f), Status::Ok) = (op.kind, op.status) {
                let f = if f == ALL_FIELDS { 0 } else { f };
                fill_field(opts.verify, &mut rng, op.key.as_bytes(), f, &mut value);
                p2.cmd("HSET").arg(&op.key).arg(&names[f]).arg(&value[..]);
                second = true;
            }
        }
        let read_done = start.elapsed().as_micros() as u64;
        let r2: Vec<Value> = if second {
            p2.query(&mut con).unwrap_or_default()
        } else {
            Vec::new()
        };
        let us = start.elapsed().as_micros() as u64;
        let mut at = 0;
        for op in &batch {
            match op.kind {
                Kind::Read => m.record(OpKind::Read, op.status, us),
                Kind::Update(_) => m.record(OpKind::Update, op.status, us),
                Kind::Insert(k) => {
                    st.acknowledge(k);
                    m.record(OpKind::Insert, op.status, us);
                }
                Kind::Scan(_) => {
                    let n = match r1.get(op.first) {
                        Some(Value::Array(keys)) => keys.len(),
                        _ => 0,
                    };
                    let all = (at..at + n)
                        .all(|i| matches!(r2.get(i), Some(Value::Map(_) | Value::Array(_))));
                    at += n;
                    let s = if op.status == Status::Ok && all {
                        Status::Ok
                    } else {
                        Status::Error
                    };
                    m.record(OpKind::Scan, s, us);
                }
                Kind::Rmw(_) => {
                    m.record(OpKind::Read, op.status, read_done);
                    if op.status == Status::Ok {
                        let w = ok_status(r2.get(at).unwrap_or(&Value::Nil));
                        at += 1;
                        m.record(OpKind::Update, w, us);
                    }
                    m.record_latency(OpKind::ReadModifyWrite, us);
                }
            }
        }
        done += batch.len() as u64;
        progress
            .done
            .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if opts.status {
            if let Ok(mut g) = progress.interval.try_lock() {
                m.drain_interval_into(&mut g);
            }
        }
    }
    Ok((m, done))
}

fn ok_status(v: &Value) -> Status {
    match v {
        Value::Int(_) | Value::Okay | Value::SimpleString(_) => Status::Ok,
        _ => Status::Error,
    }
}

/// A record read back: Java's binding answers ERROR for a missing one; with
/// `verify`, every field must be the value derived from key and field.
fn read_status(v: &Value, key: &str, names: &[String], fl: usize, verify: bool) -> Status {
    let pairs: Vec<(&Value, &Value)> = match v {
        Value::Map(m) => m.iter().map(|(a, b)| (a, b)).collect(),
        Value::Array(a) => a.chunks_exact(2).map(|c| (&c[0], &c[1])).collect(),
        _ => return Status::Error,
    };
    if pairs.is_empty() {
        return Status::Error;
    }
    if !verify {
        return Status::Ok;
    }
    if pairs.len() != names.len() {
        return Status::UnexpectedState;
    }
    let mut want = vec![0u8; fl];
    for (name, val) in pairs {
        let (Value::BulkString(n), Value::BulkString(b)) = (name, val) else {
            return Status::UnexpectedState;
        };
        let Some(f) = names.iter().position(|x| x.as_bytes() == &n[..]) else {
            return Status::UnexpectedState;
        };
        deterministic_chunk(key.as_bytes(), f, 0, &mut want);
        if b[..] != want[..] {
            return Status::UnexpectedState;
        }
    }
    Status::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_string_hash_codes() {
        // Values of "…".hashCode() in Java.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("user1"), 111578566);
        assert_eq!(java_string_hash("hello world"), 1794106052);
        assert_eq!(java_string_hash("user6284781860667377211"), {
            let mut h = 0i32;
            for c in "user6284781860667377211".bytes() {
                h = h.wrapping_mul(31).wrapping_add(i32::from(c));
            }
            h
        });
    }
}
