//! Replication: what a slot's primary worker sends the workers that back
//! the slot up, on a connection to each backup worker's endpoint (a worker
//! hello with the cluster token). One message per copyrpc call; copyrpc
//! batches a poll's messages to one backup into one WRITE_IMM.
//!
//! ```text
//! replicate: op u8 (11) | kind u8 | key_len u16 | slot u32 | epoch u32
//!            | primary_member u16 | primary_worker u16 | seq u64 | offset u32
//!            | val_len u32 | client u64 | request u64 | key | value
//! ```
//! All integers little-endian. `kind` says what it carries ([`Kind`]): a
//! write the primary applied (PUT, DELETE, UPDATE_RANGE at `offset`), with
//! the slot's next sequence number `seq`; or a step of copying the slot to
//! a new backup (begin at `seq`, request ids, end), or of a backup's
//! catch-up (the ask, the begin, the records it lacks, request ids, end). `epoch` is the slot's
//! epoch in the primary's map ([`crate::shard::replicas`]). A write carries
//! the client's request id (`client`, `request`; both 0: none), which the
//! backup remembers as the primary does, so that a re-sent write is applied
//! once even after a failover. The answer is
//! a response header: OK once applied, [`Status::Fenced`] (with a message)
//! when the backup does not take writes of that slot from that primary,
//! [`Status::TryAgain`] when the backup has not yet applied the map the
//! message needs.
//!
//! [`Status::Fenced`]: crate::proto::Status::Fenced
//! [`Status::TryAgain`]: crate::proto::Status::TryAgain

use std::ops::Range;

use crate::ids::{MemberId, Ticket};
use crate::proto::{Op, RequestId, WireError};
use crate::Owner;

mod field {
    use std::ops::Range;
    pub const OP: usize = 0;
    pub const KIND: usize = 1;
    pub const KEY_LEN: Range<usize> = 2..4;
    pub const SLOT: Range<usize> = 4..8;
    pub const EPOCH: Range<usize> = 8..12;
    pub const PRIMARY_MEMBER: Range<usize> = 12..14;
    pub const PRIMARY_WORKER: Range<usize> = 14..16;
    pub const SEQ: Range<usize> = 16..24;
    pub const OFFSET: Range<usize> = 24..28;
    pub const VAL_LEN: Range<usize> = 28..32;
    pub const CLIENT: Range<usize> = 32..40;
    pub const REQUEST: Range<usize> = 40..48;
}

/// Header bytes of a replication message.
pub const REPLICATE_HEADER: usize = field::REQUEST.end;

/// What a replication message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// The primary set `key` to `value`.
    Put = 1,
    /// The primary deleted `key`.
    Delete = 2,
    /// The primary overwrote `value.len()` bytes of `key`'s value at
    /// `offset`.
    Patch = 3,
    /// The primary starts copying the slot: the backup drops what it held
    /// of it, takes the writes numbered from `seq + 1` on, and pulls the
    /// snapshot the key and value name ([`CopyBegin`]) from the primary's
    /// bulk port; a pulled record never overwrites a key written or
    /// deleted since the begin.
    CopyBegin = 4,
    /// One record of a catch-up ([`Kind::CatchUp`]): `key`'s value as
    /// the primary held it at the catch-up's begin, or (`offset` bit
    /// [`FILL_ABSENT`]) the key was deleted.
    Fill = 5,
    /// Whether the copy is complete: answered OK once every pulled record
    /// is applied, TRY_AGAIN while the pull goes on.
    CopyEnd = 6,
    /// Request ids the primary remembers for the slot (writes applied
    /// before the copy began), so that the new backup, once promoted,
    /// applies none of them again: the value is entries of [`IDS_ENTRY`]
    /// bytes, `client u64 | top u64 | floor u64 | applied u128` (a
    /// client's window, [`IdsEntry`]). `offset` bit [`IDS_FORGOT`] says the
    /// primary forgot some clients of the slot.
    CopyIds = 7,
    /// Where the backup's complete copy of the slot stands in the
    /// primary's stream numbered `seq` (the stream, not a write): the OK
    /// answer carries the last write of that stream the copy holds plus
    /// one, as a `u64` after the response header (0: the copy is not in
    /// that stream, or not complete).
    CopyAsk = 8,
    /// The primary catches the backup up instead of copying the slot: the
    /// backup keeps its copy, which stands at `from` in stream `stream`
    /// (the value, [`CatchUp`]), takes the writes numbered from `seq + 1`
    /// on, and the [`Kind::Fill`] records that follow give it every key
    /// the stream wrote after `from`. Refused if the copy does not stand
    /// there.
    CatchUp = 9,
}

/// [`Kind::Fill`] `offset` bit: the key is deleted.
pub const FILL_ABSENT: u32 = 1;

/// What a [`Kind::CatchUp`] carries (its value): the stream, and where
/// the backup's copy stands in it.
///
/// ```text
/// value: stream u64 | from u64
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUp {
    /// The stream (the slot's primary drew it, never 0).
    pub stream: u64,
    /// The last write of it the backup's copy holds.
    pub from: u64,
}

impl CatchUp {
    /// Bytes of the value.
    pub const VALUE: usize = 16;

    /// The value's bytes.
    pub fn value(&self) -> [u8; Self::VALUE] {
        let mut v = [0u8; Self::VALUE];
        v[..8].copy_from_slice(&self.stream.to_le_bytes());
        v[8..].copy_from_slice(&self.from.to_le_bytes());
        v
    }

    /// From a catch-up's value; `None` if it is not one.
    pub fn parse(value: &[u8]) -> Option<CatchUp> {
        if value.len() != Self::VALUE {
            return None;
        }
        let stream = le64(&value[..8]);
        (stream != 0).then(|| CatchUp {
            stream,
            from: le64(&value[8..]),
        })
    }
}

/// Request numbers a [`Kind::CopyIds`] entry's window covers.
pub const IDS_WINDOW: u64 = 128;
/// Bytes of a [`Kind::CopyIds`] entry.
pub const IDS_ENTRY: usize = 8 + 8 + 8 + 16;
/// [`Kind::CopyIds`] `offset` bit: the primary dropped some clients' ids
/// of the slot (more clients wrote to it than it keeps), so a write sent
/// again by a client it does not know may have been applied.
pub const IDS_FORGOT: u32 = 1;

/// One client's window in a [`Kind::CopyIds`] message: which of its
/// writes the slot applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdsEntry {
    /// The client's id.
    pub client: u64,
    /// Its highest request number applied.
    pub top: u64,
    /// Numbers up to this one are not known either way (the slot forgot
    /// the client once).
    pub floor: u64,
    /// Bit `i`: number `top - i` was applied ([`IDS_WINDOW`] numbers).
    pub applied: u128,
}

/// Appends a [`Kind::CopyIds`] entry to `value`.
pub fn push_ids_entry(value: &mut Vec<u8>, e: &IdsEntry) {
    value.extend_from_slice(&e.client.to_le_bytes());
    value.extend_from_slice(&e.top.to_le_bytes());
    value.extend_from_slice(&e.floor.to_le_bytes());
    value.extend_from_slice(&e.applied.to_le_bytes());
}

/// The entries of a [`Kind::CopyIds`] value; `None` if its length is not a
/// whole number of entries.
pub fn ids_entries(value: &[u8]) -> Option<impl Iterator<Item = IdsEntry> + '_> {
    if value.len() % IDS_ENTRY != 0 {
        return None;
    }
    Some(value.chunks_exact(IDS_ENTRY).map(|e| IdsEntry {
        client: le64(e),
        top: le64(&e[8..]),
        floor: le64(&e[16..]),
        applied: u128::from(le64(&e[24..])) | (u128::from(le64(&e[32..])) << 64),
    }))
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Put,
            2 => Kind::Delete,
            3 => Kind::Patch,
            4 => Kind::CopyBegin,
            5 => Kind::Fill,
            6 => Kind::CopyEnd,
            7 => Kind::CopyIds,
            8 => Kind::CopyAsk,
            9 => Kind::CatchUp,
            _ => return None,
        })
    }

    /// Whether it is a write with a sequence number.
    pub fn is_write(self) -> bool {
        matches!(self, Kind::Put | Kind::Delete | Kind::Patch)
    }
}

/// A replication message's fields, to encode one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What it carries.
    pub kind: Kind,
    /// The slot.
    pub slot: u32,
    /// The slot's epoch in the sender's map.
    pub epoch: u32,
    /// The sender: the slot's primary.
    pub primary: Owner,
    /// The write's sequence number (a copy's start: the last one before it).
    pub seq: u64,
    /// Where a patch goes in the value.
    pub offset: u32,
    /// The client's request id of a write (client 0: none).
    pub id: RequestId,
}

/// What a [`Kind::CopyBegin`] carries: the ticket (its key) that opens the
/// snapshot on the primary's bulk port, and (its value) the slots the
/// snapshot covers with its size, for progress, and the slot's stream
/// (the copy's position in it is the begin's `seq`).
///
/// ```text
/// key:   ticket[16]
/// value: first u32 | end u32 | records u64 | bytes u64 | stream u64
/// ```
/// One snapshot may cover several slots copied to the same backup at once
/// (`first..end` holds them all; the slots between that are not copied
/// carry no records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyBegin {
    /// Opens the snapshot.
    pub ticket: Ticket,
    /// The first slot the snapshot covers.
    pub first: u32,
    /// One past the last.
    pub end: u32,
    /// Records in the snapshot.
    pub records: u64,
    /// Bytes of their keys and values.
    pub bytes: u64,
    /// The slot's stream of writes (0: the primary keeps none).
    pub stream: u64,
}

impl CopyBegin {
    /// Bytes of the value.
    pub const VALUE: usize = 32;

    /// The slots the snapshot covers.
    pub fn slots(&self) -> Range<u32> {
        self.first..self.end
    }

    /// The value's bytes.
    pub fn value(&self) -> [u8; Self::VALUE] {
        let mut v = [0u8; Self::VALUE];
        v[..4].copy_from_slice(&self.first.to_le_bytes());
        v[4..8].copy_from_slice(&self.end.to_le_bytes());
        v[8..16].copy_from_slice(&self.records.to_le_bytes());
        v[16..24].copy_from_slice(&self.bytes.to_le_bytes());
        v[24..].copy_from_slice(&self.stream.to_le_bytes());
        v
    }

    /// From a begin's key and value; `None` if they are not one.
    pub fn parse(key: &[u8], value: &[u8]) -> Option<CopyBegin> {
        let ticket = Ticket::from_bytes(key.try_into().ok()?);
        if value.len() != Self::VALUE {
            return None;
        }
        let (first, end) = (le32(&value[..4]), le32(&value[4..8]));
        if first >= end {
            return None;
        }
        Some(CopyBegin {
            ticket,
            first,
            end,
            records: le64(&value[8..16]),
            bytes: le64(&value[16..24]),
            stream: le64(&value[24..]),
        })
    }
}

/// Writes a replication message into `out` (cleared first).
pub fn write_replicate(out: &mut Vec<u8>, h: &Header, key: &[u8], value: &[u8]) {
    out.clear();
    out.push(Op::Replicate as u8);
    out.push(h.kind as u8);
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(&h.slot.to_le_bytes());
    out.extend_from_slice(&h.epoch.to_le_bytes());
    out.extend_from_slice(&h.primary.member.to_le_bytes());
    out.extend_from_slice(&h.primary.worker.to_le_bytes());
    out.extend_from_slice(&h.seq.to_le_bytes());
    out.extend_from_slice(&h.offset.to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&h.id.client.to_le_bytes());
    out.extend_from_slice(&h.id.request.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// A replication message, read in place.
#[derive(Clone, Copy)]
pub struct Replicate<'a> {
    buf: &'a [u8],
}

impl<'a> Replicate<'a> {
    /// Checks the header and lengths; never panics on any input.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        if buf.len() < REPLICATE_HEADER {
            return Err(WireError::Short(buf.len()));
        }
        if buf[field::OP] != Op::Replicate as u8 {
            return Err(WireError::BadCode(buf[field::OP]));
        }
        Kind::from_u8(buf[field::KIND]).ok_or(WireError::BadCode(buf[field::KIND]))?;
        let key = usize::from(u16::from_le_bytes([buf[2], buf[3]]));
        let val = le32(&buf[field::VAL_LEN]) as usize;
        if REPLICATE_HEADER + key + val != buf.len() {
            return Err(WireError::BadLength);
        }
        Ok(Replicate { buf })
    }

    /// The header's fields.
    pub fn header(&self) -> Header {
        let b = self.buf;
        Header {
            kind: Kind::from_u8(b[field::KIND]).unwrap_or(Kind::CopyEnd),
            slot: le32(&b[field::SLOT]),
            epoch: le32(&b[field::EPOCH]),
            primary: Owner {
                member: MemberId(le16(&b[field::PRIMARY_MEMBER])),
                worker: le16(&b[field::PRIMARY_WORKER]),
            },
            seq: le64(&b[field::SEQ]),
            offset: le32(&b[field::OFFSET]),
            id: RequestId::new(le64(&b[field::CLIENT]), le64(&b[field::REQUEST])),
        }
    }

    /// The key.
    pub fn key(&self) -> &'a [u8] {
        let n = usize::from(le16(&self.buf[field::KEY_LEN]));
        &self.buf[REPLICATE_HEADER..REPLICATE_HEADER + n]
    }

    /// The value.
    pub fn value(&self) -> &'a [u8] {
        let n = usize::from(le16(&self.buf[field::KEY_LEN]));
        &self.buf[REPLICATE_HEADER + n..]
    }
}

impl std::fmt::Debug for Replicate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicate")
            .field("header", &self.header())
            .field("key_len", &self.key().len())
            .field("value_len", &self.value().len())
            .finish()
    }
}

fn le16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}
fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_and_nothing_else_parses() {
        let h = Header {
            kind: Kind::Patch,
            slot: 77,
            epoch: 9,
            primary: Owner {
                member: MemberId(2),
                worker: 1,
            },
            seq: 1 << 40,
            offset: 5,
            id: RequestId::new(0xc11e, 77),
        };
        let mut b = Vec::new();
        write_replicate(&mut b, &h, b"key", b"value");
        let r = Replicate::new_checked(&b).unwrap();
        assert_eq!(r.header(), h);
        assert_eq!((r.key(), r.value()), (&b"key"[..], &b"value"[..]));
        for n in 0..b.len() {
            assert!(Replicate::new_checked(&b[..n]).is_err(), "{n}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(Replicate::new_checked(&long).is_err());
        let mut c = b.clone();
        c[1] = 10;
        assert!(Replicate::new_checked(&c).is_err());
        c = b.clone();
        c[0] = Op::Put as u8;
        assert!(Replicate::new_checked(&c).is_err());
        // Any byte changed: a message or an error, never a panic.
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0xff;
            let _ = Replicate::new_checked(&c).map(|r| (r.header(), r.key(), r.value()));
        }
        assert!(Kind::Put.is_write() && !Kind::CopyBegin.is_write());
    }

    #[test]
    fn request_ids_round_trip_in_whole_entries() {
        let mut v = Vec::new();
        let a = IdsEntry {
            client: 77,
            top: 300,
            floor: 12,
            applied: (1u128 << 127) | (5 << 60) | 1,
        };
        let b = IdsEntry {
            client: 78,
            top: 1,
            floor: 0,
            applied: u128::MAX,
        };
        push_ids_entry(&mut v, &a);
        push_ids_entry(&mut v, &b);
        let got: Vec<_> = ids_entries(&v).unwrap().collect();
        assert_eq!(got, [a, b]);
        assert!(ids_entries(&v[..v.len() - 1]).is_none());
    }

    #[test]
    fn a_copy_begin_round_trips_and_refuses_what_is_not_one() {
        let c = CopyBegin {
            ticket: Ticket::from_bytes([7; 16]),
            first: 10,
            end: 12,
            records: 3,
            bytes: 1 << 33,
            stream: 0xfeed,
        };
        let key = c.ticket.bytes();
        assert_eq!(CopyBegin::parse(&key, &c.value()), Some(c));
        assert_eq!(CopyBegin::parse(&key[..15], &c.value()), None);
        assert_eq!(CopyBegin::parse(&key, &c.value()[..31]), None);
        let empty = CopyBegin { end: 10, ..c };
        assert_eq!(CopyBegin::parse(&key, &empty.value()), None);
    }

    #[test]
    fn a_catch_up_round_trips_and_refuses_what_is_not_one() {
        let c = CatchUp {
            stream: 0xabc,
            from: 1 << 40,
        };
        assert_eq!(CatchUp::parse(&c.value()), Some(c));
        assert_eq!(CatchUp::parse(&c.value()[..15]), None);
        assert_eq!(CatchUp::parse(&CatchUp { stream: 0, ..c }.value()), None);
        for k in [5u8, 8, 9] {
            assert!(Kind::from_u8(k).is_some_and(|k| !k.is_write()));
        }
    }
}
