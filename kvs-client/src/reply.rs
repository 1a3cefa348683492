//! A completed request's answer: borrowed ([`Reply`], in the callback) or
//! owned ([`OwnedReply`], from the blocking helpers).

use crate::scan::ScanReply;

/// A completed request's answer, borrowed until the callback returns.
///
/// A GET's value is handed over where it lies: in the client's receive
/// ring, which the next poll hands back to the server for new answers. The
/// borrow checker keeps the value from outliving the callback; keep a copy
/// of what is needed later:
///
/// ```no_run
/// # fn f(client: &mut kvs_client::Client<u32>) {
/// let mut kept: Option<Vec<u8>> = None;
/// client.poll(|_, r| {
///     if let Ok(kvs_client::Reply::Value(v)) = r {
///         kept = Some(v.to_vec());
///     }
/// });
/// # }
/// ```
///
/// Keeping the borrowed value itself does not compile:
///
/// ```compile_fail
/// # fn f(client: &mut kvs_client::Client<u32>) {
/// let mut kept: Option<&[u8]> = None;
/// client.poll(|_, r| {
///     if let Ok(kvs_client::Reply::Value(v)) = r {
///         kept = Some(v); // borrowed data escapes the closure
///     }
/// });
/// # let _ = kept;
/// # }
/// ```
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
