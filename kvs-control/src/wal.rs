//! The write-ahead log: one append-only file of checksummed records,
//! flushed to disk once per batch, in the workspace's log format
//! ([`kvs_wal`]: its framing, torn-tail rules, replay and rewrite).
//!
//! ```text
//! file:   magic 8 ("KVSWAL\0\x01") | record*
//! record: length u32 | crc u32 | kind u8 | payload (length - 1 bytes)
//! ```
//! Kinds: an entry of the Raft log (its protobuf), the Raft hard state (its
//! protobuf), and the mark of an installed snapshot (its index and term,
//! u64 little-endian each), which discards every entry before it
//! ([`crate::storage`] gives them meaning).
//!
//! The log only grows, except when [`Wal::rewrite`] replaces it whole (to
//! shed what a snapshot covers): the new file is written beside it as
//! `wal.partial`, flushed, renamed over it, and the directory flushed. A
//! `wal.partial` found at opening is what a crash left of a rewrite, and is
//! removed.
//!
//! A crash can tear only the last batch written (records are appended and
//! the file is flushed before anything that depends on it is sent): replay
//! drops a last record that is short or fails its checksum, and truncates
//! the file there. A crash can also leave the file extended with zeros where
//! the batch's data never reached the disk (ext4 and xfs update the size
//! first): a bad record with only zero bytes after it, or a run of zeros up
//! to the end of the file, is torn the same way. A bad record with anything
//! else after it is not a crash but damage, and is an error.

use std::path::Path;

use kvs_wal::{Batch, Format, Log, TooLarge, Writer};
use protobuf::Message as _;
use raft::eraftpb::{Entry, HardState};

use crate::error::StorageError;

mod field {
    pub const KIND_ENTRY: u8 = 1;
    pub const KIND_HARD_STATE: u8 = 2;
    pub const KIND_INSTALL: u8 = 3;
}

/// The control log's magic, and its largest record (larger is damage).
const FORMAT: Format = Format::new(*b"KVSWAL\0\x01", 64 << 20);

/// One record of the log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Record {
    /// An entry of the Raft log; it replaces any entry at its index or after.
    Entry(Entry),
    /// The Raft hard state (term, vote, commit); the last one counts.
    HardState(HardState),
    /// A snapshot at `index` and `term` was installed: the entries before
    /// this record are gone.
    Install {
        /// The snapshot's index.
        index: u64,
        /// Its term.
        term: u64,
    },
}

/// A record of the log that does not decode.
#[derive(Debug, thiserror::Error)]
enum BadRecord {
    #[error("an entry that does not parse: {0}")]
    Entry(protobuf::ProtobufError),
    #[error("a hard state that does not parse: {0}")]
    HardState(protobuf::ProtobufError),
    #[error("a record of unknown kind {kind} or size {len}")]
    Unknown { kind: u8, len: usize },
}

impl Record {
    fn kind(&self) -> u8 {
        match self {
            Record::Entry(_) => field::KIND_ENTRY,
            Record::HardState(_) => field::KIND_HARD_STATE,
            Record::Install { .. } => field::KIND_INSTALL,
        }
    }

    /// Appends the record's payload to `out`.
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Record::Entry(e) => e.write_to_vec(out).expect("a protobuf entry encodes"),
            Record::HardState(h) => h.write_to_vec(out).expect("a protobuf hard state encodes"),
            Record::Install { index, term } => {
                out.extend_from_slice(&index.to_le_bytes());
                out.extend_from_slice(&term.to_le_bytes());
            }
        }
    }

    /// Adds the record to `b`, its payload encoded in place.
    fn push_to(&self, b: &mut Batch) -> Result<(), TooLarge> {
        b.push_with(self.kind(), |out| self.encode(out))
    }

    fn decode(kind: u8, payload: &[u8]) -> Result<Record, BadRecord> {
        match kind {
            field::KIND_ENTRY => Entry::parse_from_bytes(payload)
                .map(Record::Entry)
                .map_err(BadRecord::Entry),
            field::KIND_HARD_STATE => HardState::parse_from_bytes(payload)
                .map(Record::HardState)
                .map_err(BadRecord::HardState),
            field::KIND_INSTALL if payload.len() == 16 => {
                let (index, term) = payload.split_at(8);
                Ok(Record::Install {
                    index: u64::from_le_bytes(index.try_into().expect("8 bytes")),
                    term: u64::from_le_bytes(term.try_into().expect("8 bytes")),
                })
            }
            kind => Err(BadRecord::Unknown {
                kind,
                len: payload.len() + 1,
            }),
        }
    }
}

/// What [`Wal::open`] found.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// The records, in order.
    pub records: Vec<Record>,
    /// Bytes of a torn last record that were cut off.
    pub torn_bytes: u64,
}

/// The log file, open for appending.
#[derive(Debug)]
pub(crate) struct Wal {
    w: Writer,
}

impl Wal {
    /// Opens the log at `path` (creating an empty one if there is none) and
    /// reads it all; a torn last record is cut off the file.
    pub fn open(path: &Path) -> Result<(Wal, Replay), StorageError> {
        let mut records = Vec::new();
        let replayed = Log::open(path, FORMAT)?.replay(&mut |kind, payload: &[u8], _| {
            records.push(Record::decode(kind, payload)?);
            Ok(())
        })?;
        let torn_bytes = replayed.torn_bytes();
        let w = replayed.append()?;
        Ok((
            Wal { w },
            Replay {
                records,
                torn_bytes,
            },
        ))
    }

    /// Replaces the log with one holding just `records`: how the log sheds
    /// what a snapshot covers. Records pushed and not synced are dropped.
    ///
    /// The new log is written beside the old one and flushed, renamed over
    /// it, and the directory flushed: a crash at any point leaves the old
    /// log whole (and perhaps part of the new one beside it, which
    /// [`Wal::open`] removes) or the new one whole.
    pub fn rewrite(&mut self, records: &[Record]) -> Result<(), StorageError> {
        self.w
            .rewrite(|b| records.iter().try_for_each(|r| r.push_to(b)))?;
        Ok(())
    }

    /// Adds `r` to the batch that [`Wal::sync`] writes. A record larger
    /// than the log takes is refused.
    pub fn push(&mut self, r: &Record) -> Result<(), StorageError> {
        self.w.push_with(r.kind(), |out| r.encode(out))?;
        Ok(())
    }

    /// Writes the batch and flushes the file to disk: the records pushed
    /// so far survive a crash once this returns.
    pub fn sync(&mut self) -> Result<(), StorageError> {
        self.w.commit()?;
        Ok(())
    }

    /// Whether records were pushed and not yet synced.
    pub fn dirty(&self) -> bool {
        self.w.pending() > 0
    }

    /// The file's length in bytes (written records only).
    pub fn len(&self) -> u64 {
        self.w.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_wal::{field as wire, Damage, WalError};
    use test_support::TempDir;

    const MAGIC_LEN: usize = wire::MAGIC.end;

    fn entry(index: u64, term: u64) -> Record {
        Record::Entry(Entry {
            index,
            term,
            data: vec![index as u8; 20].into(),
            ..Default::default()
        })
    }

    fn hs(term: u64, commit: u64) -> Record {
        Record::HardState(HardState {
            term,
            vote: 2,
            commit,
            ..Default::default()
        })
    }

    #[test]
    fn records_read_back_in_order_across_opens() {
        let d = TempDir::new("kvs-control", "wal");
        let p = d.path().join("wal");
        let (mut w, r) = Wal::open(&p).unwrap();
        assert!(r.records.is_empty());
        let recs = [
            entry(1, 1),
            hs(1, 1),
            Record::Install { index: 9, term: 3 },
            entry(10, 3),
        ];
        for r in &recs {
            w.push(r).unwrap();
        }
        assert!(w.dirty());
        w.sync().unwrap();
        drop(w);
        let (w, r) = Wal::open(&p).unwrap();
        assert_eq!(r.records, recs);
        assert_eq!(r.torn_bytes, 0);
        assert_eq!(w.len(), std::fs::metadata(&p).unwrap().len());
    }

    #[test]
    fn a_log_cut_anywhere_reads_back_the_whole_records_before_the_cut() {
        let d = TempDir::new("kvs-control", "wal");
        let p = d.path().join("wal");
        let (mut w, _) = Wal::open(&p).unwrap();
        let recs = [entry(1, 1), hs(1, 0), entry(2, 1), hs(1, 2)];
        let mut ends = Vec::new();
        for r in &recs {
            w.push(r).unwrap();
            w.sync().unwrap();
            ends.push(w.len());
        }
        drop(w);
        let full = std::fs::read(&p).unwrap();
        for cut in MAGIC_LEN..=full.len() {
            std::fs::write(&p, &full[..cut]).unwrap();
            let (w, r) = Wal::open(&p).unwrap();
            let whole = ends.iter().filter(|&&e| e <= cut as u64).count();
            assert_eq!(r.records, recs[..whole], "cut at {cut}");
            let kept = if whole == 0 {
                MAGIC_LEN as u64
            } else {
                ends[whole - 1]
            };
            assert_eq!(r.torn_bytes, cut as u64 - kept);
            assert_eq!(w.len(), kept);
            assert_eq!(std::fs::metadata(&p).unwrap().len(), kept);
        }
    }

    #[test]
    fn a_bad_record_with_good_ones_after_it_is_damage_not_a_torn_write() {
        let d = TempDir::new("kvs-control", "wal");
        let p = d.path().join("wal");
        let (mut w, _) = Wal::open(&p).unwrap();
        w.push(&entry(1, 1)).unwrap();
        w.push(&entry(2, 1)).unwrap();
        w.sync().unwrap();
        drop(w);
        let mut b = std::fs::read(&p).unwrap();
        // A flipped bit in the first record's payload.
        b[MAGIC_LEN + wire::HEADER_LEN + 3] ^= 1;
        std::fs::write(&p, &b).unwrap();
        match Wal::open(&p) {
            Err(StorageError::Wal(WalError::Corrupt { offset, .. })) => {
                assert_eq!(offset, MAGIC_LEN as u64)
            }
            other => panic!("expected damage, got {other:?}"),
        }
        std::fs::write(&p, b"not a log at all").unwrap();
        assert!(matches!(
            Wal::open(&p),
            Err(StorageError::Wal(WalError::Corrupt {
                offset: 0,
                why: Damage::BadMagic,
                ..
            }))
        ));
    }

    /// A log of three records flushed, and the offsets their records start
    /// at.
    fn three_records(p: &Path) -> (Vec<Record>, Vec<u8>, Vec<usize>) {
        let (mut w, _) = Wal::open(p).unwrap();
        let recs = vec![entry(1, 1), hs(1, 1), entry(2, 1)];
        let mut starts = Vec::new();
        for r in &recs {
            starts.push(w.len() as usize);
            w.push(r).unwrap();
            w.sync().unwrap();
        }
        (recs, std::fs::read(p).unwrap(), starts)
    }

    /// A crash can leave the file longer than what reached the disk, the
    /// rest zeros: zeros after the last good record, or a last record cut
    /// short by zeros, are a torn write and are cut off.
    #[test]
    fn a_tail_of_zeros_is_a_torn_write() {
        let d = TempDir::new("kvs-control", "wal");
        let p = d.path().join("wal");
        let (recs, full, starts) = three_records(&p);
        let last = starts[2];
        // (the file's bytes, the records that stand)
        let mut cases = Vec::new();
        for zeros in [1, 7, 8, 9, 100, 4096] {
            let mut b = full.clone();
            b.resize(full.len() + zeros, 0);
            cases.push((b, 3));
        }
        for from in last..full.len() {
            for more in [0, 1, 4096] {
                let mut b = full[..from].to_vec();
                b.resize(full.len() + more, 0);
                cases.push((b, 2));
            }
        }
        for (b, whole) in cases {
            std::fs::write(&p, &b).unwrap();
            let at = format!("{} bytes, {whole} records whole", b.len());
            let (w, r) = Wal::open(&p).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(r.records, recs[..whole], "{at}");
            let kept = if whole == 3 { full.len() } else { last };
            assert_eq!(r.torn_bytes, (b.len() - kept) as u64, "{at}");
            assert_eq!(w.len(), kept as u64, "{at}");
            assert_eq!(std::fs::metadata(&p).unwrap().len(), kept as u64);
        }
    }

    /// Zeros are a torn write only when nothing but zeros follows them.
    #[test]
    fn a_bad_record_with_anything_but_zeros_after_it_is_damage() {
        let d = TempDir::new("kvs-control", "wal");
        let p = d.path().join("wal");
        let (_, full, starts) = three_records(&p);
        let mut cases = Vec::new();
        // The first record zeroed, the others whole after it.
        let mut b = full.clone();
        b[starts[0]..starts[1]].fill(0);
        cases.push((b, starts[0]));
        // The last record cut short by zeros, and a stray byte after them.
        let mut b = full.clone();
        b[starts[2] + wire::HEADER_LEN..].fill(0);
        b.resize(full.len() + 100, 0);
        b.push(1);
        cases.push((b, starts[2]));
        // Zeros after the last record, then something.
        let mut b = full.clone();
        b.resize(full.len() + 4096, 0);
        b.push(0x80);
        cases.push((b, full.len()));
        for (b, bad) in cases {
            std::fs::write(&p, &b).unwrap();
            match Wal::open(&p) {
                Err(StorageError::Wal(WalError::Corrupt { offset, .. })) => {
                    assert_eq!(offset, bad as u64)
                }
                other => panic!("damage at {bad} expected, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_rewritten_log_holds_only_the_new_records_and_takes_appends() {
        let d = TempDir::new("kvs-control", "wal");
        let p = d.path().join("wal");
        let (mut w, _) = Wal::open(&p).unwrap();
        for i in 1..50 {
            w.push(&entry(i, 1)).unwrap();
        }
        w.sync().unwrap();
        let before = w.len();
        w.rewrite(&[hs(2, 48), entry(49, 1)]).unwrap();
        assert!(w.len() < before);
        w.push(&entry(50, 2)).unwrap();
        w.sync().unwrap();
        drop(w);
        let (_, r) = Wal::open(&p).unwrap();
        assert_eq!(r.records, [hs(2, 48), entry(49, 1), entry(50, 2)]);
    }

    /// A log written before the format moved to kvs-wal (the bytes are
    /// that code's output) opens, and takes appends after its records.
    #[test]
    fn a_log_written_by_the_earlier_code_still_opens() {
        const OLD: &str = "4b565357414c00010e000000009cd13301100218052207707574206b2076\
                           07000000244eca3f020802100118051100000004a381c90309000000000000\
                           000300000000000000";
        let old: Vec<u8> = (0..OLD.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&OLD[i..i + 2], 16).unwrap())
            .collect();
        let d = TempDir::new("kvs-control", "wal");
        let p = d.path().join("wal");
        std::fs::write(&p, &old).unwrap();
        let (mut w, r) = Wal::open(&p).unwrap();
        let want = [
            Record::Entry(Entry {
                index: 5,
                term: 2,
                data: b"put k v".to_vec().into(),
                ..Default::default()
            }),
            Record::HardState(HardState {
                term: 2,
                vote: 1,
                commit: 5,
                ..Default::default()
            }),
            Record::Install { index: 9, term: 3 },
        ];
        assert_eq!(r.records, want);
        assert_eq!((r.torn_bytes, w.len()), (0, old.len() as u64));
        // What this code writes is what the earlier code wrote.
        let again = d.path().join("again");
        let (mut w2, _) = Wal::open(&again).unwrap();
        for r in &want {
            w2.push(r).unwrap();
        }
        w2.sync().unwrap();
        assert_eq!(std::fs::read(&again).unwrap(), old);
        w.push(&entry(6, 2)).unwrap();
        w.sync().unwrap();
        drop(w);
        let (_, r) = Wal::open(&p).unwrap();
        assert_eq!(r.records.len(), 4);
    }

    #[test]
    fn a_record_larger_than_the_log_takes_is_refused_not_written() {
        let d = TempDir::new("kvs-control", "wal");
        let p = d.path().join("wal");
        let (mut w, _) = Wal::open(&p).unwrap();
        let big = Record::Entry(Entry {
            index: 1,
            term: 1,
            data: vec![0; FORMAT.max_record() as usize].into(),
            ..Default::default()
        });
        let e = w.push(&big).unwrap_err();
        assert!(
            matches!(e, StorageError::Wal(WalError::TooLarge { .. })),
            "{e}"
        );
        assert!(!w.dirty());
        assert!(w.rewrite(&[big]).is_err());
        w.push(&entry(1, 1)).unwrap();
        w.sync().unwrap();
        drop(w);
        assert_eq!(Wal::open(&p).unwrap().1.records, [entry(1, 1)]);
    }
}
