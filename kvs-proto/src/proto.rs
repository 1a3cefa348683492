//! The KV protocol: one request and one response per copyrpc call. All
//! integers little-endian; one zero-copy view per format, byte ranges in the
//! private `field` module.
//!
//! ```text
//! request:  op u8 | flags u8 | key_len u16 | map_version u32 | val_len u32 | offset u32 | key | value
//!           [| client u64 | request u64]   (with FLAG_ID)
//! response: status u8 | flags u8 | reserved u16 | len u32 | payload
//! scan payload: (key_len u16 | val_len u32 | key | value)*
//! ```
//! A request's `val_len` is the value's length for PUT, UPDATE_RANGE, CONTROL
//! and SET_MAP, and the most records wanted for SCAN. A GET answer's payload
//! is the value; a SCAN answer's the records in key order; a MAP answer's the
//! shard map ([`crate::ShardMap::encode`]); a REDIRECT's where the key's slot
//! lives now ([`Redirect`]); an error's a UTF-8 message.
//!
//! CONTROL, SET_MAP and PULL go to a server's control endpoint (hello worker
//! [`crate::hello::CONTROL`]), never to a worker: CONTROL carries a JSON
//! [`crate::control::ControlRequest`] and is answered with a JSON
//! [`crate::control::ControlReply`]; SET_MAP carries an encoded map.

use std::fmt;

mod field {
    use std::ops::Range;
    pub const OP: usize = 0;
    pub const FLAGS: usize = 1;
    pub const KEY_LEN: Range<usize> = 2..4;
    pub const MAP_VERSION: Range<usize> = 4..8;
    pub const VAL_LEN: Range<usize> = 8..12;
    pub const OFFSET: Range<usize> = 12..16;

    pub const STATUS: usize = 0;
    pub const RFLAGS: usize = 1;
    pub const LEN: Range<usize> = 4..8;
}

/// Request header bytes.
pub const REQUEST_HEADER: usize = 16;
/// Response header bytes.
pub const RESPONSE_HEADER: usize = 8;
/// Bytes a scan record takes besides its key and value.
pub const SCAN_RECORD_HEADER: usize = 6;

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// The value of a key.
    Get = 1,
    /// Sets a key's value.
    Put = 2,
    /// Removes a key.
    Delete = 3,
    /// Up to `val_len` records from `key` on, in key order.
    Scan = 4,
    /// Overwrites part of an existing value at `offset` (as Redis SETRANGE,
    /// but never growing the value).
    UpdateRange = 5,
    /// The server's shard map.
    Map = 6,
    /// A control request (JSON in the value), to the control endpoint.
    Control = 7,
    /// A batch of the control group's Raft messages from another member
    /// ([`crate::group`]), to the control endpoint. (Code 8 is not used:
    /// members once pushed maps with it; now they take maps only from the
    /// group's log.)
    Raft = 10,
    /// A migration's priority pull: the value of `key` among the records a
    /// source holds for the target that now owns its slot (to the source's
    /// control endpoint). Answered as GET is, from the source's frozen copy.
    Pull = 9,
    /// A slot's primary worker to a worker backing the slot up: a write to
    /// apply, or a step of copying the slot ([`crate::replica`], its own
    /// format).
    Replicate = 11,
}

impl Op {
    /// From the wire.
    pub fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Get,
            2 => Op::Put,
            3 => Op::Delete,
            4 => Op::Scan,
            5 => Op::UpdateRange,
            6 => Op::Map,
            7 => Op::Control,
            9 => Op::Pull,
            10 => Op::Raft,
            11 => Op::Replicate,
            _ => return None,
        })
    }
}

/// How a request went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Done (GET: the value follows; SCAN: the records follow).
    Ok = 0,
    /// No such key.
    NotFound = 1,
    /// This server's worker does not own the key's shard; the payload says
    /// who does, and under which map version ([`Redirect`]).
    Redirect = 2,
    /// The key or value exceeds the server's limits (message in the payload).
    TooLarge = 3,
    /// The request is malformed (message in the payload).
    BadRequest = 4,
    /// The server is shutting down and takes no new work.
    ShuttingDown = 5,
    /// The answer does not fit the response size the caller allowed; the
    /// payload is the size needed (u32).
    AllowanceTooSmall = 6,
    /// UPDATE_RANGE outside the existing value.
    OutOfRange = 7,
    /// The write would take the server past its memory cap (`max_memory`);
    /// the message in the payload says how much it holds. Reads, deletes and
    /// writes that do not grow still work.
    OutOfMemory = 8,
    /// The key's slot is changing hands and this server has not yet seen the
    /// map the request was routed by: send it again shortly.
    TryAgain = 9,
    /// The server may not answer for the key's slot now: it holds no lease
    /// from the control group (cut off from it, or an election is under
    /// way), or the group marked it failed. The message in the payload says
    /// which; the slot is served again once the member is back in touch.
    Unavailable = 10,
    /// A backup refused a replication message: the sender is not the
    /// slot's primary in the backup's map, or the backup does not back the
    /// slot up, or the message does not follow the last one it applied.
    /// The message in the payload says which.
    Fenced = 11,
    /// The connection may not send this request: a replication message (a
    /// member's, between workers) on a connection set up with the client
    /// token. The message in the payload says why.
    Forbidden = 12,
    /// A write sent again ([`FLAG_RESENT`]) whose request id is older than
    /// what the server remembers of its client for the slot: whether it
    /// was applied before cannot be told, and it was not applied now. The
    /// message in the payload says so. Never a success.
    TooOld = 13,
    /// The write was not applied: the disk that holds the worker's log
    /// (`durability`) is full, and a write it cannot log is not taken. The
    /// message in the payload says which log; reads go on, and writes are
    /// taken again once there is room.
    DiskFull = 14,
}

impl Status {
    /// From the wire.
    pub fn from_u8(v: u8) -> Option<Status> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::NotFound,
            2 => Status::Redirect,
            3 => Status::TooLarge,
            4 => Status::BadRequest,
            5 => Status::ShuttingDown,
            6 => Status::AllowanceTooSmall,
            7 => Status::OutOfRange,
            8 => Status::OutOfMemory,
            9 => Status::TryAgain,
            10 => Status::Unavailable,
            11 => Status::Fenced,
            12 => Status::Forbidden,
            13 => Status::TooOld,
            14 => Status::DiskFull,
            _ => return None,
        })
    }
}

/// Request flag: a request id follows the value ([`Request::id`]): the
/// client's random id and the request's number, the same on every re-send,
/// so a server applies a re-sent write once.
pub const FLAG_ID: u8 = 1;

/// Request flag: the client sent this request before and that send may
/// have been applied with no answer saying so (its connection died, or its
/// primary answered [`Status::Unavailable`]); a send only redirected or
/// told to try again was not applied, and does not set it. A server that cannot tell whether it was (its request id is
/// older than what the server remembers of the client) answers
/// [`Status::TooOld`] instead of applying it; a request without the flag
/// is a first send, which cannot have been applied.
pub const FLAG_RESENT: u8 = 2;

/// Marks an encoded request as sent before ([`FLAG_RESENT`]).
pub fn mark_resent(req: &mut [u8]) {
    if let Some(f) = req.get_mut(field::FLAGS) {
        *f |= FLAG_RESENT;
    }
}

/// Bytes of a request id.
pub const REQUEST_ID: usize = 16;

/// A write's request id ([`FLAG_ID`]): the client's random id and the
/// request's number, which together name one write across re-sends and
/// failovers. On the wire `client u64 | request u64`, little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestId {
    /// The client's random id (0: no id).
    pub client: u64,
    /// The request's number, growing per client.
    pub request: u64,
}

impl RequestId {
    /// `client`'s request number `request`.
    pub const fn new(client: u64, request: u64) -> RequestId {
        RequestId { client, request }
    }
}

/// Response flag: the SCAN answer stopped early because the response
/// allowance was full; more records may follow the last one.
pub const FLAG_TRUNCATED: u8 = 1;

/// Response flag: the server serves by a newer shard map than the one the
/// request was routed by (the answer stands; the client may fetch the map
/// when it likes). This is how a client learns of map changes that move
/// none of the slots it uses, without polling.
pub const FLAG_MAP_NEWER: u8 = 2;

/// The map version a request was routed by, from its header (0 if it is
/// too short to have one).
#[inline]
pub fn routed_by(req: &[u8]) -> u32 {
    match req.get(field::MAP_VERSION) {
        Some(b) => le32(b),
        None => 0,
    }
}

/// A malformed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than its header.
    #[error("message of {0} bytes is shorter than its header")]
    Short(usize),
    /// The lengths in the header disagree with the message's size.
    #[error("header lengths disagree with the message size")]
    BadLength,
    /// Unknown op or status code.
    #[error("unknown code {0}")]
    BadCode(u8),
}

fn le16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// A request, read in place.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    buf: &'a [u8],
}

impl<'a> Request<'a> {
    /// Checks the header and lengths; never panics on any input.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        if buf.len() < REQUEST_HEADER {
            return Err(WireError::Short(buf.len()));
        }
        let r = Request { buf };
        Op::from_u8(buf[field::OP]).ok_or(WireError::BadCode(buf[field::OP]))?;
        let key = usize::from(le16(&buf[field::KEY_LEN]));
        let body = match r.op() {
            Op::Put | Op::UpdateRange | Op::Control | Op::Raft => {
                le32(&buf[field::VAL_LEN]) as usize
            }
            _ => 0,
        };
        if REQUEST_HEADER + key + body + r.id_len() != buf.len() {
            return Err(WireError::BadLength);
        }
        Ok(r)
    }
    /// Bytes of the request id at the end (0: none).
    #[inline]
    fn id_len(&self) -> usize {
        if self.buf[field::FLAGS] & FLAG_ID != 0 {
            REQUEST_ID
        } else {
            0
        }
    }
    /// The request's id, if it carries one.
    #[inline]
    pub fn id(&self) -> Option<RequestId> {
        if self.id_len() == 0 {
            return None;
        }
        let t = &self.buf[self.buf.len() - REQUEST_ID..];
        Some(RequestId {
            client: u64::from_le_bytes(t[..8].try_into().ok()?),
            request: u64::from_le_bytes(t[8..].try_into().ok()?),
        })
    }
    /// The operation.
    pub fn op(&self) -> Op {
        Op::from_u8(self.buf[field::OP]).unwrap_or(Op::Map)
    }
    /// Request flags ([`FLAG_ID`], [`FLAG_RESENT`]).
    pub fn flags(&self) -> u8 {
        self.buf[field::FLAGS]
    }
    /// Whether the client sent it before ([`FLAG_RESENT`]).
    #[inline]
    pub fn resent(&self) -> bool {
        self.buf[field::FLAGS] & FLAG_RESENT != 0
    }
    /// The shard-map version the client routed with.
    pub fn map_version(&self) -> u32 {
        le32(&self.buf[field::MAP_VERSION])
    }
    /// The key.
    pub fn key(&self) -> &'a [u8] {
        let n = usize::from(le16(&self.buf[field::KEY_LEN]));
        &self.buf[REQUEST_HEADER..REQUEST_HEADER + n]
    }
    /// The value (PUT, UPDATE_RANGE, CONTROL, SET_MAP).
    pub fn value(&self) -> &'a [u8] {
        let n = usize::from(le16(&self.buf[field::KEY_LEN]));
        &self.buf[REQUEST_HEADER + n..self.buf.len() - self.id_len()]
    }
    /// The most records wanted (SCAN).
    pub fn scan_count(&self) -> u32 {
        le32(&self.buf[field::VAL_LEN])
    }
    /// Where the bytes go (UPDATE_RANGE).
    pub fn offset(&self) -> u32 {
        le32(&self.buf[field::OFFSET])
    }
}

impl fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("op", &self.op())
            .field("key_len", &self.key().len())
            .field("value_len", &self.value().len())
            .finish()
    }
}

/// Writes a request into `out` (cleared first). The caller checks the key
/// fits in 16 bits.
pub fn write_request(
    out: &mut Vec<u8>,
    op: Op,
    map_version: u32,
    key: &[u8],
    value: &[u8],
    val_len: u32,
    offset: u32,
) {
    // The header built whole, and one reservation: a request is written
    // per operation, and each push or extend checks the capacity.
    let mut head = [0u8; REQUEST_HEADER];
    head[field::OP] = op as u8;
    head[field::KEY_LEN].copy_from_slice(&(key.len() as u16).to_le_bytes());
    head[field::MAP_VERSION].copy_from_slice(&map_version.to_le_bytes());
    head[field::VAL_LEN].copy_from_slice(&val_len.to_le_bytes());
    head[field::OFFSET].copy_from_slice(&offset.to_le_bytes());
    out.clear();
    out.reserve(REQUEST_HEADER + key.len() + value.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends a request id to a request [`write_request`] wrote (and flags
/// it).
pub fn add_request_id(out: &mut Vec<u8>, id: RequestId) {
    out[field::FLAGS] |= FLAG_ID;
    out.extend_from_slice(&id.client.to_le_bytes());
    out.extend_from_slice(&id.request.to_le_bytes());
}

/// A REDIRECT answer's payload: the owner of the key's slot in the
/// answering server's map, and that map's version.
///
/// ```text
/// redirect: map_version u32 | member u16 | worker u16
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirect {
    /// The answering server's map version.
    pub map_version: u32,
    /// The slot's owner under it.
    pub owner: crate::shard::Owner,
}

/// A redirect payload's bytes.
pub const REDIRECT_LEN: usize = 8;

impl Redirect {
    /// Reads a REDIRECT payload.
    pub fn parse(b: &[u8]) -> Result<Redirect, WireError> {
        if b.len() != REDIRECT_LEN {
            return Err(WireError::BadLength);
        }
        Ok(Redirect {
            map_version: le32(&b[0..4]),
            owner: crate::shard::Owner {
                member: crate::ids::MemberId(le16(&b[4..6])),
                worker: le16(&b[6..8]),
            },
        })
    }
    /// Appends the payload.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.map_version.to_le_bytes());
        out.extend_from_slice(&self.owner.member.to_le_bytes());
        out.extend_from_slice(&self.owner.worker.to_le_bytes());
    }
}

/// A response, read in place.
#[derive(Clone, Copy, Debug)]
pub struct Response<'a> {
    buf: &'a [u8],
}

impl<'a> Response<'a> {
    /// Checks the header and length; never panics on any input.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        if buf.len() < RESPONSE_HEADER {
            return Err(WireError::Short(buf.len()));
        }
        Status::from_u8(buf[field::STATUS]).ok_or(WireError::BadCode(buf[field::STATUS]))?;
        if RESPONSE_HEADER + le32(&buf[field::LEN]) as usize != buf.len() {
            return Err(WireError::BadLength);
        }
        Ok(Response { buf })
    }
    /// How it went.
    pub fn status(&self) -> Status {
        Status::from_u8(self.buf[field::STATUS]).unwrap_or(Status::BadRequest)
    }
    /// Response flags ([`FLAG_TRUNCATED`]).
    pub fn flags(&self) -> u8 {
        self.buf[field::RFLAGS]
    }
    /// The payload.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[RESPONSE_HEADER..]
    }
}

/// Starts a response in `out` (cleared first); finish it with
/// [`finish_response`] once the payload is appended.
pub fn begin_response(out: &mut Vec<u8>, status: Status, flags: u8) {
    out.clear();
    out.extend_from_slice(&[status as u8, flags, 0, 0, 0, 0, 0, 0]);
}

/// Writes into `out` (cleared first) the header of a response whose
/// `len`-byte payload does not follow it there: the caller writes the
/// payload after the header where the response is sent from.
pub fn response_header(out: &mut Vec<u8>, status: Status, flags: u8, len: usize) {
    begin_response(out, status, flags);
    out[field::LEN].copy_from_slice(&(len as u32).to_le_bytes());
}

/// Writes into `out` (cleared first) a whole response of `status` with
/// `payload`; or, if that would pass `max_response` bytes (the asker's
/// allowance), [`Status::AllowanceTooSmall`] with the size it needs (as a
/// `u32`, if the allowance has room for it).
pub fn write_response(out: &mut Vec<u8>, status: Status, payload: &[u8], max_response: usize) {
    if RESPONSE_HEADER + payload.len() > max_response {
        begin_response(out, Status::AllowanceTooSmall, 0);
        if max_response >= RESPONSE_HEADER + 4 {
            out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        }
    } else {
        begin_response(out, status, 0);
        out.extend_from_slice(payload);
    }
    finish_response(out, 0);
}

/// Sets the payload length of the response in `out`, and its flags.
pub fn finish_response(out: &mut [u8], flags: u8) {
    let len = (out.len() - RESPONSE_HEADER) as u32;
    out[field::RFLAGS] = flags;
    out[field::LEN].copy_from_slice(&len.to_le_bytes());
}

/// Appends one scan record.
pub fn push_scan_record(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// The records of a SCAN answer, in order; stops (returning `Err`) at the
/// first malformed one.
#[derive(Debug, Clone)]
pub struct ScanRecords<'a> {
    rest: &'a [u8],
}

impl<'a> ScanRecords<'a> {
    /// Over a SCAN answer's payload.
    pub fn new(payload: &'a [u8]) -> Self {
        ScanRecords { rest: payload }
    }
}

impl ScanRecords<'_> {
    /// Bytes not read yet (where the next record begins, from the end).
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }
}

impl<'a> Iterator for ScanRecords<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), WireError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let r = self.rest;
        if r.len() < SCAN_RECORD_HEADER {
            self.rest = &[];
            return Some(Err(WireError::Short(r.len())));
        }
        let k = usize::from(le16(&r[0..2]));
        let v = le32(&r[2..6]) as usize;
        let end = SCAN_RECORD_HEADER + k + v;
        if end > r.len() {
            self.rest = &[];
            return Some(Err(WireError::BadLength));
        }
        self.rest = &r[end..];
        Some(Ok((
            &r[SCAN_RECORD_HEADER..SCAN_RECORD_HEADER + k],
            &r[SCAN_RECORD_HEADER + k..end],
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemberId;

    #[test]
    fn requests_round_trip_and_lengths_are_checked() {
        let mut b = Vec::new();
        write_request(&mut b, Op::Put, 7, b"user1", b"value!", 6, 0);
        assert_eq!(b.len(), REQUEST_HEADER + 5 + 6);
        let r = Request::new_checked(&b).unwrap();
        assert_eq!(
            (r.op(), r.map_version(), r.key(), r.value()),
            (Op::Put, 7, &b"user1"[..], &b"value!"[..])
        );
        // One byte short, one too many, a bad op: errors, never panics.
        assert_eq!(
            Request::new_checked(&b[..b.len() - 1]).unwrap_err(),
            WireError::BadLength
        );
        let mut long = b.clone();
        long.push(0);
        assert_eq!(
            Request::new_checked(&long).unwrap_err(),
            WireError::BadLength
        );
        b[0] = 99;
        assert_eq!(
            Request::new_checked(&b).unwrap_err(),
            WireError::BadCode(99)
        );
        assert_eq!(
            Request::new_checked(&b[..3]).unwrap_err(),
            WireError::Short(3)
        );
        // A request id at the end, outside the value.
        write_request(&mut b, Op::Put, 7, b"user1", b"value!", 6, 0);
        assert_eq!(Request::new_checked(&b).unwrap().id(), None);
        add_request_id(&mut b, RequestId::new(0xfeed, 42));
        let r = Request::new_checked(&b).unwrap();
        assert_eq!((r.key(), r.value()), (&b"user1"[..], &b"value!"[..]));
        assert_eq!(r.id(), Some(RequestId::new(0xfeed, 42)));
        assert!(Request::new_checked(&b[..b.len() - 1]).is_err());
        let mut d = Vec::new();
        write_request(&mut d, Op::Delete, 1, b"k", &[], 0, 0);
        add_request_id(&mut d, RequestId::new(1, 2));
        assert_eq!(
            Request::new_checked(&d).unwrap().id(),
            Some(RequestId::new(1, 2))
        );
        // Marked as sent again, it keeps its id.
        assert!(!Request::new_checked(&d).unwrap().resent());
        mark_resent(&mut d);
        let r = Request::new_checked(&d).unwrap();
        assert!(r.resent() && r.id() == Some(RequestId::new(1, 2)));
        // A SCAN carries the count, not a value.
        write_request(&mut b, Op::Scan, 1, b"k", &[], 100, 0);
        let r = Request::new_checked(&b).unwrap();
        assert_eq!(
            (r.op(), r.scan_count(), r.value()),
            (Op::Scan, 100, &b""[..])
        );
    }

    #[test]
    fn status_codes_round_trip() {
        for v in 0..=u8::MAX {
            match Status::from_u8(v) {
                Some(st) => assert_eq!(st as u8, v),
                None => assert!(v > 10, "{v}"),
            }
        }
        assert_eq!(Status::from_u8(8), Some(Status::OutOfMemory));
        for v in 0..=u8::MAX {
            if let Some(op) = Op::from_u8(v) {
                assert_eq!(op as u8, v);
            }
        }
    }

    #[test]
    fn redirects_round_trip() {
        let r = Redirect {
            map_version: 7,
            owner: crate::shard::Owner {
                member: MemberId(2),
                worker: 3,
            },
        };
        let mut b = Vec::new();
        r.write(&mut b);
        assert_eq!(Redirect::parse(&b), Ok(r));
        assert!(Redirect::parse(&b[..7]).is_err());
        // Control requests and group batches carry their value.
        let mut q = Vec::new();
        write_request(&mut q, Op::Raft, 0, b"", b"batch", 5, 0);
        assert_eq!(Request::new_checked(&q).unwrap().value(), b"batch");
        // The retired map push is no request at all.
        q[field::OP] = 8;
        assert!(Request::new_checked(&q).is_err());
    }

    #[test]
    fn every_truncation_of_every_message_is_an_error_not_a_panic() {
        let mut b = Vec::new();
        write_request(&mut b, Op::UpdateRange, 1, b"key", b"abc", 3, 9);
        for n in 0..b.len() {
            assert!(Request::new_checked(&b[..n]).is_err());
        }
        let mut r = Vec::new();
        begin_response(&mut r, Status::Ok, 0);
        push_scan_record(&mut r, b"a", b"1");
        push_scan_record(&mut r, b"bb", b"22");
        finish_response(&mut r, FLAG_TRUNCATED);
        let resp = Response::new_checked(&r).unwrap();
        assert_eq!(resp.flags(), FLAG_TRUNCATED);
        let recs: Vec<_> = ScanRecords::new(resp.payload()).collect();
        assert_eq!(
            recs,
            vec![Ok((&b"a"[..], &b"1"[..])), Ok((&b"bb"[..], &b"22"[..]))]
        );
        for n in 0..r.len() {
            assert!(Response::new_checked(&r[..n]).is_err());
        }
        // A truncated record list ends in an error.
        let p = resp.payload();
        for n in 1..p.len() {
            let recs: Vec<_> = ScanRecords::new(&p[..n]).collect();
            if n != 8 {
                assert!(recs.last().unwrap().is_err(), "{n}");
            }
        }
    }
}
