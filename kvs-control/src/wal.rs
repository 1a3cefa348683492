//! The write-ahead log: one append-only file of checksummed records, flushed
//! to disk once per batch.
//!
//! ```text
//! file:   magic 8 ("KVSWAL\0\x01") | record*
//! record: length u32 | crc u32 | kind u8 | payload (length - 1 bytes)
//! ```
//! Integers are little-endian; `crc` is CRC-32 (IEEE) of kind and payload.
//! Kinds: an entry of the Raft log, the Raft hard state, and the mark of an
//! installed snapshot (its index and term), which discards every entry
//! before it ([`crate::storage`] gives them meaning).
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

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{Entry, HardState};

use crate::error::StorageError;

mod field {
    pub const MAGIC: &[u8; 8] = b"KVSWAL\0\x01";
    /// length and crc.
    pub const HEADER: usize = 8;
    pub const KIND_ENTRY: u8 = 1;
    pub const KIND_HARD_STATE: u8 = 2;
    pub const KIND_INSTALL: u8 = 3;
}

/// The most a record may claim to hold: larger means damage.
const MAX_RECORD: usize = 64 << 20;

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

impl Record {
    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; field::HEADER]);
        match self {
            Record::Entry(e) => {
                out.push(field::KIND_ENTRY);
                e.write_to_vec(out).expect("a protobuf entry encodes");
            }
            Record::HardState(h) => {
                out.push(field::KIND_HARD_STATE);
                h.write_to_vec(out).expect("a protobuf hard state encodes");
            }
            Record::Install { index, term } => {
                out.push(field::KIND_INSTALL);
                out.extend_from_slice(&index.to_le_bytes());
                out.extend_from_slice(&term.to_le_bytes());
            }
        }
        let body = &out[start + field::HEADER..];
        let (len, crc) = (body.len() as u32, crc32fast::hash(body));
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }

    fn decode(body: &[u8]) -> Result<Record, String> {
        let (&kind, payload) = body.split_first().ok_or("an empty record")?;
        match kind {
            field::KIND_ENTRY => Entry::parse_from_bytes(payload)
                .map(Record::Entry)
                .map_err(|e| format!("an entry that does not parse: {e}")),
            field::KIND_HARD_STATE => HardState::parse_from_bytes(payload)
                .map(Record::HardState)
                .map_err(|e| format!("a hard state that does not parse: {e}")),
            field::KIND_INSTALL if payload.len() == 16 => Ok(Record::Install {
                index: u64::from_le_bytes(payload[..8].try_into().expect("8 bytes")),
                term: u64::from_le_bytes(payload[8..].try_into().expect("8 bytes")),
            }),
            k => Err(format!(
                "a record of unknown kind {k} or size {}",
                body.len()
            )),
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
    path: PathBuf,
    file: File,
    /// Bytes in the file, flushed or not.
    len: u64,
    /// Records encoded and not yet written.
    buf: Vec<u8>,
}

impl Wal {
    /// Opens the log at `path` (creating an empty one if there is none) and
    /// reads it all; a torn last record is cut off the file.
    pub fn open(path: &Path) -> Result<(Wal, Replay), StorageError> {
        let io = |source| StorageError::Io {
            path: path.to_path_buf(),
            source,
        };
        crate::files::remove_partial(path).map_err(io)?;
        if !path.exists() {
            crate::files::write_atomic(path, field::MAGIC).map_err(io)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let corrupt = |offset: usize, why: String| StorageError::Corrupt {
            path: path.to_path_buf(),
            offset: offset as u64,
            why,
        };
        if bytes.len() < field::MAGIC.len() || &bytes[..field::MAGIC.len()] != field::MAGIC {
            return Err(corrupt(0, "not a write-ahead log of this version".into()));
        }
        let mut replay = Replay::default();
        let mut at = field::MAGIC.len();
        while at < bytes.len() {
            match record_at(&bytes, at) {
                Ok((r, next)) => {
                    replay.records.push(r);
                    at = next;
                }
                Err(Torn::Tail) => break,
                // A crash that extended the file before its data reached
                // the disk leaves zeros: nothing after the bad record.
                Err(Torn::Damage(_)) if zeros(&bytes[at..]) => break,
                Err(Torn::Damage(why)) => return Err(corrupt(at, why)),
            }
        }
        if at < bytes.len() {
            replay.torn_bytes = (bytes.len() - at) as u64;
            file.set_len(at as u64).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        Ok((
            Wal {
                path: path.to_path_buf(),
                file,
                len: at as u64,
                buf: Vec::new(),
            },
            replay,
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
        let io = |source| StorageError::Io {
            path: self.path.clone(),
            source,
        };
        let mut bytes = field::MAGIC.to_vec();
        for r in records {
            r.encode(&mut bytes);
        }
        let (file, tmp) = crate::files::write_partial(&self.path, &bytes).map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        // The new file was opened before the rename, so that appends go to
        // the file the path names even if flushing the directory fails.
        self.file = file;
        self.len = bytes.len() as u64;
        self.buf.clear();
        crate::files::sync_dir(&self.path).map_err(io)
    }

    /// Adds `r` to the batch that [`Wal::sync`] writes.
    pub fn push(&mut self, r: &Record) {
        r.encode(&mut self.buf);
    }

    /// Writes the batch and flushes the file to disk: the records pushed
    /// so far survive a crash once this returns.
    pub fn sync(&mut self) -> Result<(), StorageError> {
        let io = |source| StorageError::Io {
            path: self.path.clone(),
            source,
        };
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf).map_err(io)?;
            self.len += self.buf.len() as u64;
            self.buf.clear();
        }
        self.file.sync_data().map_err(io)
    }

    /// Whether records were pushed and not yet synced.
    pub fn dirty(&self) -> bool {
        !self.buf.is_empty()
    }

    /// The file's length in bytes (written records only).
    pub fn len(&self) -> u64 {
        self.len
    }
}

enum Torn {
    /// The file ends inside this record: a write a crash cut short.
    Tail,
    /// A bad record with more of the file after it.
    Damage(String),
}

/// The record at `at` and where the next one starts.
fn record_at(bytes: &[u8], at: usize) -> Result<(Record, usize), Torn> {
    let rest = &bytes[at..];
    if rest.len() < field::HEADER {
        return Err(Torn::Tail);
    }
    let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    if len > MAX_RECORD {
        return Err(Torn::Damage(format!("a record of {len} bytes")));
    }
    let end = field::HEADER + len;
    if rest.len() < end {
        return Err(Torn::Tail);
    }
    let body = &rest[field::HEADER..end];
    if crc32fast::hash(body) != crc {
        // The last record, cut short by a crash; or followed only by the
        // zeros of a file extended before its data reached the disk.
        return Err(if zeros(&rest[end..]) {
            Torn::Tail
        } else {
            Torn::Damage("a record whose checksum does not match".into())
        });
    }
    let r = Record::decode(body).map_err(Torn::Damage)?;
    Ok((r, at + end))
}

/// Whether `b` is all zero bytes (or empty).
fn zeros(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::TempDir;

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
            w.push(r);
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
            w.push(r);
            w.sync().unwrap();
            ends.push(w.len());
        }
        drop(w);
        let full = std::fs::read(&p).unwrap();
        for cut in field::MAGIC.len()..=full.len() {
            std::fs::write(&p, &full[..cut]).unwrap();
            let (w, r) = Wal::open(&p).unwrap();
            let whole = ends.iter().filter(|&&e| e <= cut as u64).count();
            assert_eq!(r.records, recs[..whole], "cut at {cut}");
            let kept = if whole == 0 {
                field::MAGIC.len() as u64
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
        w.push(&entry(1, 1));
        w.push(&entry(2, 1));
        w.sync().unwrap();
        drop(w);
        let mut b = std::fs::read(&p).unwrap();
        // A flipped bit in the first record's payload.
        b[field::MAGIC.len() + field::HEADER + 3] ^= 1;
        std::fs::write(&p, &b).unwrap();
        match Wal::open(&p) {
            Err(StorageError::Corrupt { offset, .. }) => {
                assert_eq!(offset, field::MAGIC.len() as u64)
            }
            other => panic!("expected damage, got {other:?}"),
        }
        std::fs::write(&p, b"not a log at all").unwrap();
        assert!(matches!(
            Wal::open(&p),
            Err(StorageError::Corrupt { offset: 0, .. })
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
            w.push(r);
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
        b[starts[2] + field::HEADER..].fill(0);
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
                Err(StorageError::Corrupt { offset, .. }) => assert_eq!(offset, bad as u64),
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
            w.push(&entry(i, 1));
        }
        w.sync().unwrap();
        let before = w.len();
        w.rewrite(&[hs(2, 48), entry(49, 1)]).unwrap();
        assert!(w.len() < before);
        w.push(&entry(50, 2));
        w.sync().unwrap();
        drop(w);
        let (_, r) = Wal::open(&p).unwrap();
        assert_eq!(r.records, [hs(2, 48), entry(49, 1), entry(50, 2)]);
    }
}
