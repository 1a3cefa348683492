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
//! `seq` counts a connection's batches from 0, on across the pulls it
//! carries (a target keeps its connection to a source for the chunks of a
//! migration, sending each pull's setup after the first over it, tagged
//! with its own count); `bytes` is the length of the records;
//! `next_slot` is the first slot not yet complete (every record of the
//! slots before it has been sent, in this batch or earlier ones); flag
//! [`LAST`] ends the transfer.

use crate::bulk::BatchError;
use kvs_proto::proto::SCAN_RECORD_HEADER;
use kvs_proto::shard::slot_of;
use kvs_proto::Ticket;

use crate::store::Ready;

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
    pub ticket: Ticket,
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
        b.extend_from_slice(&self.ticket.bytes());
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
            ticket: Ticket::from_bytes(b[SETUP_HEADER..SETUP_HEADER + 16].try_into().ok()?),
            rails,
        })
    }
}

/// Builds a batch in place, in the registered buffer it is sent from
/// ([`BatchWriter::over`]), which spares the source a copy of every record;
/// tests build theirs in a vector (`BatchWriter::new`).
#[derive(Debug)]
pub struct BatchWriter<B = Vec<u8>> {
    buf: B,
    /// Bytes written, header included.
    len: usize,
    records: u32,
}

#[cfg(test)]
impl BatchWriter<Vec<u8>> {
    /// A writer of batches of at most `cap` bytes.
    pub fn new(cap: usize) -> BatchWriter {
        BatchWriter {
            buf: vec![0; cap.max(BATCH_HEADER)],
            len: 0,
            records: 0,
        }
    }
}

impl<'a> BatchWriter<&'a mut [u8]> {
    /// A writer of batches into `buf` (at most its length; at least a
    /// header's).
    pub fn over(buf: &'a mut [u8]) -> BatchWriter<&'a mut [u8]> {
        BatchWriter {
            buf,
            len: 0,
            records: 0,
        }
    }
}

impl<B: AsMut<[u8]> + AsRef<[u8]>> BatchWriter<B> {
    /// Starts batch `seq`.
    pub fn begin(&mut self, seq: u32) {
        let b = self.buf.as_mut();
        b[field::MAGIC].copy_from_slice(BATCH_MAGIC);
        b[field::SEQ].copy_from_slice(&seq.to_le_bytes());
        b[field::SEQ.end..BATCH_HEADER].fill(0);
        self.len = BATCH_HEADER;
        self.records = 0;
    }
    /// Appends a record if it fits; false if the batch is full.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> bool {
        let b = self.buf.as_mut();
        let end = self.len + SCAN_RECORD_HEADER + key.len() + value.len();
        if end > b.len() {
            return false;
        }
        let (k, v) = (
            self.len + SCAN_RECORD_HEADER,
            self.len + SCAN_RECORD_HEADER + key.len(),
        );
        b[self.len..self.len + 2].copy_from_slice(&(key.len() as u16).to_le_bytes());
        b[self.len + 2..k].copy_from_slice(&(value.len() as u32).to_le_bytes());
        b[k..v].copy_from_slice(key);
        b[v..end].copy_from_slice(value);
        self.len = end;
        self.records += 1;
        true
    }
    /// Records in the batch.
    pub fn records(&self) -> u32 {
        self.records
    }
    /// Finishes the batch; its bytes.
    pub fn finish(&mut self, next_slot: u32, flags: u16) -> &[u8] {
        let bytes = (self.len - BATCH_HEADER) as u32;
        let b = self.buf.as_mut();
        b[field::FLAGS].copy_from_slice(&flags.to_le_bytes());
        b[field::NEXT_SLOT].copy_from_slice(&next_slot.to_le_bytes());
        b[field::RECORDS].copy_from_slice(&self.records.to_le_bytes());
        b[field::BYTES].copy_from_slice(&bytes.to_le_bytes());
        &self.buf.as_ref()[..self.len]
    }
}

/// A checked batch's records, ready for the worker, and what its header
/// said of the pull's progress.
#[derive(Debug)]
pub struct Taken {
    /// The records, with their allocations made.
    pub ready: Vec<Ready>,
    /// Whether it is the pull's last batch.
    pub last: bool,
    /// The first slot not yet complete.
    pub next_slot: u32,
    /// Bytes of keys and values.
    pub payload_len: usize,
}

/// A checked batch, read in place.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    buf: &'a [u8],
}

impl<'a> Batch<'a> {
    /// Checks batch `want` of a pull of `first..end` (of `slots` slots)
    /// whose progress mark was `mark` (header, sequence, every record's
    /// framing and slot; never panics on any input), and makes its records
    /// ready for the store ([`Ready`]) in the same pass, each key hashed
    /// once for its slot: allocated on the thread that received
    /// the batch, so that the worker only files them. Read where the batch
    /// arrived: nothing is copied but into the records.
    pub fn take_checked(
        buf: &'a [u8],
        want: u32,
        first: u32,
        end: u32,
        slots: u32,
        mark: u32,
    ) -> Result<Taken, BatchError> {
        let b = Batch::header_checked(buf, want, end, mark)?;
        // The count is the peer's word: no more records than the payload
        // can frame.
        let most = b.payload_len() / SCAN_RECORD_HEADER;
        let mut ready = Vec::with_capacity((b.count() as usize).min(most));
        b.each_record_checked(first, end, slots, |s, k, v| ready.push(Ready::new(s, k, v)))?;
        Ok(Taken {
            ready,
            last: b.last(),
            next_slot: b.next_slot(),
            payload_len: b.payload_len(),
        })
    }

    /// The header's checks: magic, sequence `want`, length, and a progress
    /// mark between `mark` and `end` (`end` if last).
    fn header_checked(
        buf: &'a [u8],
        want: u32,
        end: u32,
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
        Ok(b)
    }

    /// Checks every record's framing and slot (in `first..end` of `slots`)
    /// and the header's record count, giving each record with its slot to
    /// `each` as it goes.
    fn each_record_checked(
        &self,
        first: u32,
        end: u32,
        slots: u32,
        mut each: impl FnMut(u32, &'a [u8], &'a [u8]),
    ) -> Result<(), BatchError> {
        let mut n = 0u32;
        for r in self.records() {
            let (k, v) = r.ok_or(BatchError::Malformed("record"))?;
            let s = slot_of(k, slots);
            if s < first || s >= end {
                return Err(BatchError::ForeignSlot(s));
            }
            each(s, k, v);
            n += 1;
        }
        if n != self.count() {
            return Err(BatchError::Malformed("record count"));
        }
        Ok(())
    }

    /// The record count its header gives.
    fn count(&self) -> u32 {
        le32(&self.buf[field::RECORDS])
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
        let check = |b: &[u8], want, end, mark| Batch::take_checked(b, want, 8, end, slots, mark);
        let ok = check(&b, 3, 16, 8).unwrap();
        assert_eq!((ok.last, ok.next_slot), (false, 9));
        let got: Vec<u32> = ok.ready.iter().map(Ready::slot).collect();
        let want: Vec<u32> = keys.iter().map(|k| slot_of(k, slots)).collect();
        assert_eq!(got, want);
        assert_eq!(ok.payload_len, b.len() - BATCH_HEADER);
        assert_eq!(
            check(&b, 4, 16, 8).unwrap_err(),
            BatchError::Sequence { got: 3, want: 4 }
        );
        // Records of slots not pulled.
        assert!(matches!(
            check(&b, 3, 10, 8),
            Err(BatchError::ForeignSlot(_) | BatchError::Progress(_))
        ));
        // The progress mark may not go back.
        assert_eq!(check(&b, 3, 16, 10).unwrap_err(), BatchError::Progress(9));
        for n in 0..b.len() {
            assert!(check(&b[..n], 3, 16, 8).is_err());
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x41;
            // Anything but a changed key or value byte is caught; a changed
            // key may still hash into the range.
            let _ = check(&c, 3, 16, 8);
        }
        // A record count past what the bytes hold is an error, not a huge
        // allocation.
        let mut c = b.clone();
        c[field::RECORDS].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            check(&c, 3, 16, 8).unwrap_err(),
            BatchError::Malformed("record count")
        );
        // The last batch must complete the range.
        w.begin(4);
        let last = w.finish(15, LAST).to_vec();
        assert!(check(&last, 4, 16, 9).is_err());
        w.begin(4);
        let last = w.finish(16, LAST).to_vec();
        assert!(check(&last, 4, 16, 9).unwrap().last);
    }

    #[test]
    fn a_batch_built_in_place_is_the_batch_built_in_a_vector() {
        let recs: [(&[u8], &[u8]); 3] = [(b"a", b"1"), (b"bb", b""), (b"", b"333")];
        let mut v = BatchWriter::new(64);
        let mut raw = [0xAAu8; 64];
        let mut p = BatchWriter::over(&mut raw[..]);
        v.begin(9);
        p.begin(9);
        for (k, val) in recs {
            assert_eq!(v.push(k, val), p.push(k, val));
        }
        assert!(!p.push(b"k", &[0; 64]), "a record past the buffer");
        assert_eq!(p.records(), 3);
        let want = v.finish(5, LAST).to_vec();
        assert_eq!(p.finish(5, LAST), &want[..]);
        assert_eq!(
            want.len(),
            BATCH_HEADER + 3 * SCAN_RECORD_HEADER + 1 + 1 + 2 + 3
        );
    }

    #[test]
    fn setups_round_trip() {
        let s = PullSetup {
            version: 7,
            first: 10,
            end: 20,
            ticket: Ticket::from_bytes([7; 16]),
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
