//! A completed request's answer: borrowed ([`Reply`], in the callback) or
//! owned ([`OwnedReply`], from the blocking helpers).

use crate::scan::ScanReply;

/// A completed request's answer, borrowed until the callback returns.
#[derive(Debug)]
pub enum Reply<'a> {
    /// GET: the value.
    Value(&'a [u8]),
    /// PUT, DELETE, UPDATE_RANGE: done.
    Done,
    /// GET, DELETE, UPDATE_RANGE: no such key.
    NotFound,
    /// SCAN: the records.
    Scan(ScanReply<'a>),
}

/// A completed request's answer, owned (for the blocking helpers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedReply {
    /// GET: the value.
    Value(Vec<u8>),
    /// Done.
    Done,
    /// No such key.
    NotFound,
    /// SCAN: the records, and whether the scan is complete.
    Scan(Vec<(Vec<u8>, Vec<u8>)>, bool),
}

impl From<Reply<'_>> for OwnedReply {
    fn from(r: Reply<'_>) -> Self {
        match r {
            Reply::Value(v) => OwnedReply::Value(v.to_vec()),
            Reply::Done => OwnedReply::Done,
            Reply::NotFound => OwnedReply::NotFound,
            Reply::Scan(s) => OwnedReply::Scan(
                s.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect(),
                s.complete(),
            ),
        }
    }
}
