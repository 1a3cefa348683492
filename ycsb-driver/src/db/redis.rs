//! Redis, with Java YCSB's RedisClient data model: a hash per record (field
//! name → value) and a sorted set `_indices` scored by Java's
//! `String.hashCode` of the key, for scans.
//!
//! The operations submitted before a [`Db::wait`] go out as one pipeline and
//! the wait reads all their answers (as `redis-benchmark -P` does); a scan
//! takes a second round trip in the same wait (the keys, then the records).

use std::time::Duration;

use ::redis::{Connection, Pipeline, RedisError, Value};

use super::{Answer, Cleanup, Db, Fields, Init, Lost, Refused, UseDb};
use crate::measure::Status;

const INDEX_KEY: &str = "_indices";

/// A Redis server.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    /// Its URL, `redis://host:port/`.
    pub url: String,
}

impl RedisTarget {
    /// Connects and runs `user` with the connection.
    pub(super) fn open<U: UseDb>(&self, init: &Init<'_>, user: U) -> Result<U::Output, String> {
        let client = ::redis::Client::open(self.url.as_str()).map_err(|e| e.to_string())?;
        let con = client.get_connection().map_err(|e| e.to_string())?;
        let (nf, fl) = init.layout();
        Ok(user.run(RedisDb {
            con,
            names: init.wl.field_names().to_vec(),
            field_length: fl,
            record: init.opts.verify.then(|| vec![0; nf * fl]),
            round: ::redis::pipe(),
            ops: Vec::with_capacity(init.opts.depth),
        }))
    }
}

/// Java's `String.hashCode` (the score Java's binding gives a key).
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// A key's score in the index.
fn score(key: &[u8]) -> i32 {
    java_string_hash(&String::from_utf8_lossy(key))
}

/// What an operation in the pipeline is.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// HGETALL.
    Read,
    /// HSET.
    Update,
    /// HSET, then ZADD to the index.
    Insert,
    /// ZRANGEBYSCORE on the index, then HGETALL of each key.
    Scan,
    /// DEL, then ZREM from the index.
    Delete,
}

impl Kind {
    /// Commands it puts in the first round.
    fn commands(self) -> usize {
        match self {
            Kind::Insert | Kind::Delete => 2,
            _ => 1,
        }
    }
}

/// An operation in the pipeline.
#[derive(Debug, Clone, Copy)]
struct Op {
    tag: u32,
    kind: Kind,
}

/// A connection with the operations submitted since the last wait.
struct RedisDb {
    con: Connection,
    /// The field names (`field0`, …).
    names: Vec<String>,
    field_length: usize,
    /// Where a read's fields are put together when values are checked.
    record: Option<Vec<u8>>,
    /// The first round's commands.
    round: Pipeline,
    ops: Vec<Op>,
}

impl RedisDb {
    fn push(&mut self, tag: u32, kind: Kind) -> Result<(), Refused> {
        self.ops.push(Op { tag, kind });
        Ok(())
    }

    /// Sends the first round and reads its answers.
    fn first_round(&mut self) -> Result<Vec<Value>, RedisError> {
        let r = self.round.query(&mut self.con);
        self.round.clear();
        r
    }

    /// The scans' records: for each scan whose keys came back, HGETALL of
    /// each key, all in one pipeline; the answers in the scans' order.
    fn scan_round(&mut self, first: &[Value]) -> Result<Vec<Value>, RedisError> {
        let mut p = ::redis::pipe();
        let mut at = 0;
        for op in &self.ops {
            if let (Kind::Scan, Some(Value::Array(keys))) = (op.kind, first.get(at)) {
                for k in keys {
                    match k {
                        Value::BulkString(k) => p.cmd("HGETALL").arg(&k[..]),
                        _ => p.cmd("HGETALL").arg(""),
                    };
                }
            }
            at += op.kind.commands();
        }
        if p.is_empty() {
            return Ok(Vec::new());
        }
        p.query(&mut self.con)
    }

    /// A read's answer: not found (Java's binding answers ERROR), the
    /// record put together for checking, or OK.
    fn read_answer(&mut self, v: &Value) -> Answer<'_> {
        let pairs = match v {
            Value::Map(m) if !m.is_empty() => m.iter().map(|(a, b)| (a, b)).collect::<Vec<_>>(),
            Value::Array(a) if !a.is_empty() => a.chunks_exact(2).map(|c| (&c[0], &c[1])).collect(),
            _ => return Answer::Done(Status::Error),
        };
        let Some(record) = self.record.as_mut() else {
            return Answer::Done(Status::Ok);
        };
        if pairs.len() != self.names.len() {
            return Answer::Done(Status::UnexpectedState);
        }
        let fl = self.field_length;
        for (name, val) in pairs {
            let (Value::BulkString(n), Value::BulkString(b)) = (name, val) else {
                return Answer::Done(Status::UnexpectedState);
            };
            let Some(f) = self.names.iter().position(|x| x.as_bytes() == &n[..]) else {
                return Answer::Done(Status::UnexpectedState);
            };
            if b.len() != fl {
                return Answer::Done(Status::UnexpectedState);
            }
            record[f * fl..(f + 1) * fl].copy_from_slice(b);
        }
        Answer::Record(record)
    }
}

/// A write's status.
fn ok_status(v: Option<&Value>) -> Status {
    match v {
        Some(Value::Int(_) | Value::Okay | Value::SimpleString(_)) => Status::Ok,
        _ => Status::Error,
    }
}

/// A scan's status: its keys came back, and a record for each.
fn scan_status(keys: Option<&Value>, records: &[Value], at: &mut usize) -> Status {
    let Some(Value::Array(keys)) = keys else {
        return Status::Error;
    };
    let got = records.get(*at..*at + keys.len());
    *at += keys.len();
    match got {
        Some(r)
            if r.iter()
                .all(|v| matches!(v, Value::Map(_) | Value::Array(_))) =>
        {
            Status::Ok
        }
        _ => Status::Error,
    }
}

/// A delete's status, as Java's binding: an error only when neither the
/// record nor its index entry was there.
fn delete_status(del: Option<&Value>, zrem: Option<&Value>) -> Status {
    match (del, zrem) {
        (Some(Value::Int(0)), Some(Value::Int(0))) => Status::Error,
        (Some(Value::Int(_)), Some(Value::Int(_))) => Status::Ok,
        _ => Status::Error,
    }
}

/// A lost connection, or an error the operations answer with.
fn failure(e: &RedisError) -> Option<Lost> {
    (e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error())
        .then(|| Lost(format!("redis: {e}")))
}

impl Db for RedisDb {
    fn read(&mut self, key: &[u8], tag: u32) -> Result<(), Refused> {
        self.round.cmd("HGETALL").arg(key);
        self.push(tag, Kind::Read)
    }

    fn scan(&mut self, start: &[u8], count: usize, tag: u32) -> Result<(), Refused> {
        self.round
            .cmd("ZRANGEBYSCORE")
            .arg(INDEX_KEY)
            .arg(score(start))
            .arg("+inf")
            .arg("LIMIT")
            .arg(0)
            .arg(count);
        self.push(tag, Kind::Scan)
    }

    fn update(&mut self, key: &[u8], fields: Fields<'_>, tag: u32) -> Result<(), Refused> {
        let c = self.round.cmd("HSET").arg(key);
        let chunks = fields.data.chunks(self.field_length);
        for (name, v) in self.names[fields.first..].iter().zip(chunks) {
            c.arg(name).arg(v);
        }
        self.push(tag, Kind::Update)
    }

    fn insert(&mut self, key: &[u8], record: &[u8], tag: u32) -> Result<(), Refused> {
        let c = self.round.cmd("HSET").arg(key);
        for (name, v) in self.names.iter().zip(record.chunks(self.field_length)) {
            c.arg(name).arg(v);
        }
        self.round
            .cmd("ZADD")
            .arg(INDEX_KEY)
            .arg(score(key))
            .arg(key);
        self.push(tag, Kind::Insert)
    }

    fn delete(&mut self, key: &[u8], tag: u32) -> Result<(), Refused> {
        self.round.cmd("DEL").arg(key);
        self.round.cmd("ZREM").arg(INDEX_KEY).arg(key);
        self.push(tag, Kind::Delete)
    }

    fn in_flight(&self) -> usize {
        self.ops.len()
    }

    fn wait(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(u32, Answer<'_>),
    ) -> Result<(), Lost> {
        if self.ops.is_empty() {
            std::thread::sleep(timeout);
            return Ok(());
        }
        let rounds = self
            .first_round()
            .and_then(|first| Ok((self.scan_round(&first)?, first)));
        let ops = std::mem::take(&mut self.ops);
        let (records, first) = match rounds {
            Ok(r) => r,
            Err(e) => {
                // Every operation of the pipeline fails alike.
                let lost = failure(&e);
                for op in &ops {
                    match &lost {
                        Some(l) => done(op.tag, Answer::Lost(l.clone())),
                        None => done(op.tag, Answer::Done(Status::Error)),
                    }
                }
                self.ops = ops;
                self.ops.clear();
                return Ok(());
            }
        };
        let (mut at, mut scanned) = (0, 0);
        for op in &ops {
            let a = first.get(at);
            let answer = match op.kind {
                Kind::Read => self.read_answer(a.unwrap_or(&Value::Nil)),
                Kind::Update => Answer::Done(ok_status(a)),
                // The record, then its index entry.
                Kind::Insert => Answer::Done(match ok_status(a) {
                    Status::Ok => ok_status(first.get(at + 1)),
                    bad => bad,
                }),
                Kind::Scan => Answer::Done(scan_status(a, &records, &mut scanned)),
                Kind::Delete => Answer::Done(delete_status(a, first.get(at + 1))),
            };
            done(op.tag, answer);
            at += op.kind.commands();
        }
        self.ops = ops;
        self.ops.clear();
        Ok(())
    }

    fn cleanup(self) -> Cleanup {
        Cleanup::default()
    }
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

    #[test]
    fn a_delete_fails_only_when_nothing_was_there() {
        let (one, zero) = (Value::Int(1), Value::Int(0));
        assert_eq!(delete_status(Some(&one), Some(&one)), Status::Ok);
        assert_eq!(delete_status(Some(&one), Some(&zero)), Status::Ok);
        assert_eq!(delete_status(Some(&zero), Some(&zero)), Status::Error);
        assert_eq!(delete_status(None, None), Status::Error);
    }

    #[test]
    fn a_scan_needs_its_keys_and_a_record_for_each() {
        let keys = Value::Array(vec![Value::BulkString(b"a".to_vec()); 2]);
        let rec = Value::Array(vec![]);
        let mut at = 0;
        assert_eq!(
            scan_status(Some(&keys), &[rec.clone(), rec.clone()], &mut at),
            Status::Ok
        );
        assert_eq!(at, 2);
        let mut at = 0;
        assert_eq!(
            scan_status(Some(&keys), &[rec, Value::Nil], &mut at),
            Status::Error
        );
        assert_eq!(scan_status(Some(&Value::Nil), &[], &mut 0), Status::Error);
    }
}
