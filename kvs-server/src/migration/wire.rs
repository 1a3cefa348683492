//! The bytes of a migration's bulk transfer: batches of records that the
//! source sends into the target's receive buffers over mpib, and the setup
//! request that names the slots. Peer input: every batch is checked whole
//! before any record is used.
//!
//! ```text
//! setup:  magic "KVP1" | map_version u32 | first u32 | end u32 | ticket 16 | rails u8
//! batch:  magic "KVB1" | seq u32 | flags u16 | reserved u16 | next_slot u32
//!         | records u32 | bytes u32 | record*
//! record: key_len u16 | val_len u32 | key | value
//! ```
//! `seq` counts batches from 0; `bytes` is the length of the records;
//! `next_slot` is the first slot not yet complete (every record of the
//! slots before it has been sent, in this batch or earlier ones); flag
//! [`LAST`] ends the transfer.

use kvs_proto::proto::SCAN_RECORD_HEADER;
use kvs_proto::shard::slot_of;

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const SEQ: Range<usize> = 4..8;
    pub const FLAGS: Range<usize> = 8..10;
    pub const NEXT_SLOT: Range<usize> = 12..16;
    pub const RECORDS: Range<usize> = 16..20;
    pub const BYTES: Range<usize> = 20..24;

    pub const S_MAGIC: Range<usize> = 0..4;
    pub const S_VERSION: Range<usize> = 4..8;
    pub const S_FIRST: Range<usize> = 8..12;
    pub const S_END: Range<usize> = 12..16;
}

/// Batch header bytes.
pub const BATCH_HEADER: usize = 24;
/// Setup request bytes before the token.
const SETUP_HEADER: usize = 16;
/// Batch flag: the transfer's last batch.
pub const LAST: u16 = 1;

const BATCH_MAGIC: &[u8; 4] = b"KVB1";
const SETUP_MAGIC: &[u8; 4] = b"KVP1";

fn le16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// What a target asks a source for: the records of slots `first..end`, as
/// handed over by map `version`, with the ticket the source gave it for
/// them on its control endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSetup {
    /// The map version that handed the slots to the target.
    pub version: u32,
    /// First slot.
    pub first: u32,
    /// One past the last.
    pub end: u32,
    /// The ticket.
    pub ticket: [u8; 16],
    /// The rails the target uses (bit 0: rail 0, bit 1: rail 1); the
    /// source answers on the same ones.
    pub rails: u8,
}

impl PullSetup {
    /// Encoded (mpib setup private data: at most 256 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(SETUP_HEADER + 17);
        b.extend_from_slice(SETUP_MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.first.to_le_bytes());
        b.extend_from_slice(&self.end.to_le_bytes());
        b.extend_from_slice(&self.ticket);
        b.push(self.rails);
        b
    }
    /// From a peer's private data.
    pub fn parse(b: &[u8]) -> Option<PullSetup> {
        if b.len() != SETUP_HEADER + 17 || &b[field::S_MAGIC] != SETUP_MAGIC {
            return None;
        }
        let (first, end) = (le32(&b[field::S_FIRST]), le32(&b[field::S_END]));
        let rails = b[SETUP_HEADER + 16];
        if first >= end || !(0b01..=0b11).contains(&rails) {
            return None;
        }
        Some(PullSetup {
            version: le32(&b[field::S_VERSION]),
            first,
            end,
            ticket: b[SETUP_HEADER..SETUP_HEADER + 16].try_into().ok()?,
            rails,
        })
    }
}

/// Builds a batch in a reusable vector.
#[derive(Debug)]
pub struct BatchWriter {
    buf: Vec<u8>,
    records: u32,
    cap: usize,
}

impl BatchWriter {
    /// A writer of batches of at most `cap` bytes.
    pub fn new(cap: usize) -> BatchWriter {
        BatchWriter {
            buf: Vec::with_capacity(cap),
            records: 0,
            cap,
        }
    }
    /// Starts batch `seq`.
    pub fn begin(&mut self, seq: u32) {
        self.buf.clear();
        self.buf.extend_from_slice(BATCH_MAGIC);
        self.buf.extend_from_slice(&seq.to_le_bytes());
        self.buf.resize(BATCH_HEADER, 0);
        self.records = 0;
    }
    /// Appends a record if it fits; false if the batch is full.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> bool {
        let n = SCAN_RECORD_HEADER + key.len() + value.len();
        if self.buf.len() + n > self.cap {
            return false;
        }
        kvs_proto::proto::push_scan_record(&mut self.buf, key, value);
        self.records += 1;
        true
    }
    /// Finishes the batch; its bytes.
    pub fn finish(&mut self, next_slot: u32, flags: u16) -> &[u8] {
        let bytes = (self.buf.len() - BATCH_HEADER) as u32;
        self.buf[field::FLAGS].copy_from_slice(&flags.to_le_bytes());
        self.buf[field::NEXT_SLOT].copy_from_slice(&next_slot.to_le_bytes());
        self.buf[field::RECORDS].copy_from_slice(&self.records.to_le_bytes());
        self.buf[field::BYTES].copy_from_slice(&bytes.to_le_bytes());
        &self.buf
    }
}

/// A malformed batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Not a batch, or cut short.
    #[error("not a batch ({0})")]
    Malformed(&'static str),
    /// Out of order.
    #[error("batch {got} where {want} was due")]
    Sequence {
        /// Its number.
        got: u32,
        /// The one due.
        want: u32,
    },
    /// A record of a slot that was not asked for.
    #[error("a record of slot {0}, outside the slots pulled")]
    ForeignSlot(u32),
    /// `next_slot` went backwards or past the range.
    #[error("progress mark {0} out of order")]
    Progress(u32),
}

/// A checked batch, read in place.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    buf: &'a [u8],
}

impl<'a> Batch<'a> {
    /// Checks batch `want` of a pull of `first..end` (of `slots` slots)
    /// whose progress mark was `mark`: header, sequence, every record's
    /// framing and slot. Never panics on any input.
    pub fn new_checked(
        buf: &'a [u8],
        want: u32,
        first: u32,
        end: u32,
        slots: u32,
        mark: u32,
    ) -> Result<Batch<'a>, BatchError> {
        if buf.len() < BATCH_HEADER || &buf[field::MAGIC] != BATCH_MAGIC {
            return Err(BatchError::Malformed("header"));
        }
        let b = Batch { buf };
        if b.seq() != want {
            return Err(BatchError::Sequence { got: b.seq(), want });
        }
        if BATCH_HEADER + le32(&buf[field::BYTES]) as usize != buf.len() {
            return Err(BatchError::Malformed("length"));
        }
        let next = b.next_slot();
        if next < mark || next > end || (b.last() && next != end) {
            return Err(BatchError::Progress(next));
        }
        let mut n = 0u32;
        for r in b.records() {
            let (k, _) = r.ok_or(BatchError::Malformed("record"))?;
            let s = slot_of(k, slots);
            if s < first || s >= end {
                return Err(BatchError::ForeignSlot(s));
            }
            n += 1;
        }
        if n != le32(&buf[field::RECORDS]) {
            return Err(BatchError::Malformed("record count"));
        }
        Ok(b)
    }
    /// Its number.
    pub fn seq(&self) -> u32 {
        le32(&self.buf[field::SEQ])
    }
    /// Whether it is the last.
    pub fn last(&self) -> bool {
        le16(&self.buf[field::FLAGS]) & LAST != 0
    }
    /// The first slot not yet complete.
    pub fn next_slot(&self) -> u32 {
        le32(&self.buf[field::NEXT_SLOT])
    }
    /// Bytes of keys and values.
    pub fn payload_len(&self) -> usize {
        self.buf.len() - BATCH_HEADER
    }
    /// The records (each `None` if malformed; a checked batch has none).
    pub fn records(&self) -> impl Iterator<Item = Option<(&'a [u8], &'a [u8])>> + 'a {
        kvs_proto::proto::ScanRecords::new(&self.buf[BATCH_HEADER..]).map(Result::ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_every_corruption_is_caught() {
        let slots = 64;
        let keys: Vec<Vec<u8>> = (0..400)
            .map(|i| format!("key{i}").into_bytes())
            .filter(|k| (8..16).contains(&slot_of(k, slots)))
            .take(5)
            .collect();
        let mut w = BatchWriter::new(200);
        w.begin(3);
        for k in &keys {
            assert!(w.push(k, b"value"));
        }
        assert!(!w.push(b"k", &[0; 200]), "a record past the cap");
        let b = w.finish(9, 0).to_vec();
        let ok = Batch::new_checked(&b, 3, 8, 16, slots, 8).unwrap();
        assert_eq!((ok.seq(), ok.last(), ok.next_slot()), (3, false, 9));
        assert_eq!(ok.records().count(), keys.len());
        assert_eq!(
            Batch::new_checked(&b, 4, 8, 16, slots, 8).unwrap_err(),
            BatchError::Sequence { got: 3, want: 4 }
        );
        // Records of slots not pulled.
        assert!(matches!(
            Batch::new_checked(&b, 3, 8, 10, slots, 8),
            Err(BatchError::ForeignSlot(_) | BatchError::Progress(_))
        ));
        // The progress mark may not go back.
        assert_eq!(
            Batch::new_checked(&b, 3, 8, 16, slots, 10).unwrap_err(),
            BatchError::Progress(9)
        );
        for n in 0..b.len() {
            assert!(Batch::new_checked(&b[..n], 3, 8, 16, slots, 8).is_err());
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x41;
            // Anything but a changed key or value byte is caught; a changed
            // key may still hash into the range.
            let _ = Batch::new_checked(&c, 3, 8, 16, slots, 8);
        }
        // The last batch must complete the range.
        w.begin(4);
        let last = w.finish(15, LAST).to_vec();
        assert!(Batch::new_checked(&last, 4, 8, 16, slots, 9).is_err());
        w.begin(4);
        let last = w.finish(16, LAST).to_vec();
        assert!(Batch::new_checked(&last, 4, 8, 16, slots, 9)
            .unwrap()
            .last());
    }

    #[test]
    fn setups_round_trip() {
        let s = PullSetup {
            version: 7,
            first: 10,
            end: 20,
            ticket: [7; 16],
            rails: 0b11,
        };
        assert_eq!(PullSetup::parse(&s.encode()), Some(s.clone()));
        assert_eq!(PullSetup::parse(&s.encode()[..15]), None);
        let no_rails = PullSetup {
            rails: 0,
            ..s.clone()
        };
        assert_eq!(PullSetup::parse(&no_rails.encode()), None);
        let empty = PullSetup { first: 20, ..s };
        assert_eq!(PullSetup::parse(&empty.encode()), None);
    }
}
