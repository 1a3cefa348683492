//! The Raft log's durable storage in a member's data dir, as raft-rs reads
//! it ([`raft::Storage`]).
//!
//! Two files under `raft/`:
//! - `wal`: the write-ahead log ([`crate::wal`]) of entries, hard states
//!   and snapshot installs. Everything a `Ready` asks to keep is appended
//!   and flushed with one `fdatasync` before the messages that depend on it
//!   leave ([`DiskStorage::sync`]).
//! - `snapshot`: the newest snapshot (its metadata, the configuration of
//!   the group at its index, and the cluster state), replaced whole.
//!
//! A compaction (the member's own snapshot) writes the snapshot file and
//! keeps the log as it is, unless the log has grown past
//! [`DiskStorage::set_rewrite_at`] (4 MiB): then the log is rewritten to
//! hold the snapshot's install mark, the hard state and the entries after
//! the snapshot, in that order, written beside the old log and renamed over
//! it ([`crate::wal`]). The mark is what tells recovery that the entries
//! before it are gone because of this snapshot, not replaced by a leader's.
//!
//! Recovery after a crash between any two writes:
//! - a torn last record of the log is cut off (it was never flushed, so
//!   nothing that depended on it was sent);
//! - a snapshot written whose install mark is not in the log: if the log
//!   holds the snapshot's last entry (same index and term) the snapshot was
//!   a compaction and the entries after it stand; otherwise it came from
//!   the leader to replace a log that diverged, and the log's entries go;
//! - entries the snapshot covers are dropped, and the hard state's commit
//!   and term are raised to the snapshot's.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState};

use crate::error::StorageError;
use crate::wal::{Record, Wal};

mod field {
    pub const SNAPSHOT_MAGIC: &[u8; 8] = b"KVSSNAP\x01";
    /// magic, then crc u32 of the protobuf snapshot that follows.
    pub const SNAPSHOT_HEADER: usize = 12;
}

/// The log file is rewritten without the entries a new snapshot covers
/// once it is larger than this.
const REWRITE_AT: u64 = 4 << 20;

/// What opening found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes of a torn last log record that were cut off.
    pub torn_bytes: u64,
    /// The snapshot's index (0: none).
    pub snapshot_index: u64,
    /// The last entry's index.
    pub last_index: u64,
    /// Entries dropped because a snapshot from the leader had replaced
    /// them before the crash.
    pub replaced_entries: u64,
}

/// The Raft log of one member, in memory and on disk.
#[derive(Debug)]
pub struct DiskStorage {
    dir: PathBuf,
    wal: Wal,
    hard: HardState,
    /// The newest snapshot, with its data.
    snap: Snapshot,
    /// The entries after the snapshot, consecutive.
    entries: Vec<Entry>,
    /// Raft asked for a snapshot this one cannot serve: it predates the
    /// peer's joining, and raft-rs refuses a snapshot whose configuration
    /// lacks the receiver. The group takes a new one ([`Self::take_wanted`]).
    wanted: Cell<bool>,
    /// The log file's size past which a compaction rewrites it.
    rewrite_at: u64,
}

impl DiskStorage {
    /// The directory under a data dir that holds the log.
    pub fn dir_in(data_dir: &Path) -> PathBuf {
        data_dir.join("raft")
    }

    /// Opens (or creates, empty) the log in `dir`, recovering from a crash.
    pub fn open(dir: &Path) -> Result<(DiskStorage, Recovery), StorageError> {
        std::fs::create_dir_all(dir).map_err(|source| StorageError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let snap = read_snapshot(&dir.join("snapshot"))?;
        let (wal, replay) = Wal::open(&dir.join("wal"))?;
        let mut hard = HardState::default();
        let mut entries: Vec<Entry> = Vec::new();
        let mut installed = (0, 0);
        for r in replay.records {
            match r {
                Record::Entry(e) => {
                    if let Some(first) = entries.first().map(|f| f.index) {
                        if e.index < first {
                            entries.clear();
                        } else {
                            entries.truncate((e.index - first) as usize);
                        }
                    }
                    entries.push(e);
                }
                Record::HardState(h) => hard = h,
                Record::Install { index, term } => {
                    entries.clear();
                    installed = (index, term);
                }
            }
        }
        let meta = snap.get_metadata();
        let (si, st) = (meta.index, meta.term);
        let mut replaced = 0;
        if si > 0 && installed != (si, st) {
            let holds = entries.iter().any(|e| e.index == si && e.term == st);
            if !holds {
                replaced = entries.iter().filter(|e| e.index > si).count() as u64;
                entries.clear();
            }
        }
        entries.retain(|e| e.index > si);
        let corrupt = |why: String| StorageError::Corrupt {
            path: dir.join("wal"),
            offset: 0,
            why,
        };
        if let Some(f) = entries.first() {
            if f.index != si + 1 {
                return Err(corrupt(format!(
                    "the log resumes at entry {} after a snapshot at {si}",
                    f.index
                )));
            }
        }
        if entries.windows(2).any(|w| w[1].index != w[0].index + 1) {
            return Err(corrupt("the log's entries are not consecutive".into()));
        }
        if hard.commit < si {
            hard.commit = si;
        }
        if hard.term < st {
            hard.term = st;
        }
        let last = entries.last().map_or(si, |e| e.index);
        if hard.commit > last {
            return Err(corrupt(format!(
                "entry {} is committed but the log ends at {last}",
                hard.commit
            )));
        }
        let rec = Recovery {
            torn_bytes: replay.torn_bytes,
            snapshot_index: si,
            last_index: last,
            replaced_entries: replaced,
        };
        Ok((
            DiskStorage {
                dir: dir.to_path_buf(),
                wal,
                hard,
                snap,
                entries,
                wanted: Cell::new(false),
                rewrite_at: REWRITE_AT,
            },
            rec,
        ))
    }

    /// Sets the log file's size past which [`compact`](Self::compact)
    /// rewrites it without the entries the snapshot covers (4 MiB unless
    /// set; tests set it small so that a few entries make it happen).
    pub fn set_rewrite_at(&mut self, bytes: u64) {
        self.rewrite_at = bytes;
    }

    /// Whether the log has nothing at all: a member that has not yet been
    /// given the group's state.
    pub fn is_empty(&self) -> bool {
        self.snap.get_metadata().index == 0 && self.entries.is_empty()
    }

    /// The hard state as kept.
    pub fn hard_state(&self) -> &HardState {
        &self.hard
    }

    /// The newest snapshot.
    pub fn latest_snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// Adds entries from a `Ready`; an entry replaces the one at its index
    /// and everything after. Kept on disk at the next [`sync`](Self::sync).
    pub fn append(&mut self, ents: &[Entry]) -> Result<(), StorageError> {
        let Some(first) = ents.first() else {
            return Ok(());
        };
        let si = self.snap.get_metadata().index;
        if first.index <= si {
            return Err(self.corrupt(format!(
                "raft appended entry {} under the snapshot at {si}",
                first.index
            )));
        }
        let keep = (first.index - si - 1) as usize;
        if keep > self.entries.len() {
            return Err(self.corrupt(format!(
                "raft appended entry {} after a log that ends at {}",
                first.index,
                si + self.entries.len() as u64
            )));
        }
        self.entries.truncate(keep);
        for e in ents {
            self.wal.push(&Record::Entry(e.clone()))?;
            self.entries.push(e.clone());
        }
        Ok(())
    }

    /// Sets the hard state (kept at the next [`sync`](Self::sync)).
    pub fn set_hard_state(&mut self, hs: &HardState) {
        if *hs != self.hard {
            self.hard = hs.clone();
            // Three varints: far below the largest record.
            self.wal
                .push(&Record::HardState(hs.clone()))
                .expect("a hard state fits in a record");
        }
    }

    /// Raises the commit index.
    pub fn set_commit(&mut self, commit: u64) {
        if commit > self.hard.commit {
            let mut hs = self.hard.clone();
            hs.commit = commit;
            self.set_hard_state(&hs);
        }
    }

    /// Installs a snapshot from the leader: it replaces the whole log. The
    /// snapshot file is on disk when this returns; its mark in the log at
    /// the next [`sync`](Self::sync).
    pub fn install(&mut self, snap: &Snapshot) -> Result<(), StorageError> {
        write_snapshot(&self.dir.join("snapshot"), snap)?;
        let m = snap.get_metadata();
        self.wal.push(&Record::Install {
            index: m.index,
            term: m.term,
        })?;
        self.entries.clear();
        let mut hs = self.hard.clone();
        hs.commit = hs.commit.max(m.index);
        hs.term = hs.term.max(m.term);
        self.snap = snap.clone();
        self.set_hard_state(&hs);
        Ok(())
    }

    /// Keeps `snap`, the member's own snapshot of the state at an applied
    /// index, and sheds the entries it covers (rewriting the log file once
    /// it has grown large). Syncs first: what is pushed is written.
    pub fn compact(&mut self, snap: &Snapshot) -> Result<(), StorageError> {
        let index = snap.get_metadata().index;
        if index <= self.snap.get_metadata().index {
            return Ok(());
        }
        if self.term_of(index) != Some(snap.get_metadata().term) {
            return Err(self.corrupt(format!("a snapshot at {index} that the log does not hold")));
        }
        self.sync()?;
        write_snapshot(&self.dir.join("snapshot"), snap)?;
        let si = self.snap.get_metadata().index;
        self.entries.drain(..(index - si) as usize);
        self.snap = snap.clone();
        if self.wal.len() > self.rewrite_at {
            // The install mark first: without it, opening would find a
            // snapshot whose last entry the log does not hold, take it for
            // one that replaced a diverged log, and drop every entry.
            let m = snap.get_metadata();
            let mut recs = vec![
                Record::Install {
                    index: m.index,
                    term: m.term,
                },
                Record::HardState(self.hard.clone()),
            ];
            recs.extend(self.entries.iter().cloned().map(Record::Entry));
            self.wal.rewrite(&recs)?;
        }
        Ok(())
    }

    /// Writes and flushes what was pushed: afterwards it survives a crash.
    pub fn sync(&mut self) -> Result<(), StorageError> {
        if self.wal.dirty() {
            self.wal.sync()?;
        }
        Ok(())
    }

    /// Whether raft-rs asked for a snapshot newer than the one kept (and
    /// forgets that it did).
    pub fn take_wanted(&self) -> bool {
        self.wanted.replace(false)
    }

    /// The log file's size in bytes.
    pub fn log_bytes(&self) -> u64 {
        self.wal.len()
    }

    fn term_of(&self, index: u64) -> Option<u64> {
        let m = self.snap.get_metadata();
        if index == m.index {
            return Some(m.term);
        }
        let first = self.entries.first()?.index;
        self.entries
            .get(index.checked_sub(first)? as usize)
            .map(|e| e.term)
    }

    fn corrupt(&self, why: String) -> StorageError {
        StorageError::Corrupt {
            path: self.dir.join("wal"),
            offset: 0,
            why,
        }
    }

    fn first(&self) -> u64 {
        self.snap.get_metadata().index + 1
    }

    fn last(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.snap.get_metadata().index, |e| e.index)
    }
}

impl raft::Storage for DiskStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let conf: ConfState = self.snap.get_metadata().get_conf_state().clone();
        Ok(RaftState::new(self.hard.clone(), conf))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        let from = (low - self.first()) as usize;
        let to = (high - self.first()) as usize;
        let mut out = self.entries[from..to].to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.snap.get_metadata().index {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        self.term_of(idx)
            .ok_or(raft::Error::Store(raft::StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let m = self.snap.get_metadata();
        let cs = m.get_conf_state();
        let knows_to = cs.voters.contains(&to) || cs.learners.contains(&to);
        if m.index < request_index.max(1) || !knows_to {
            self.wanted.set(true);
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snap.clone())
    }
}

fn read_snapshot(path: &Path) -> Result<Snapshot, StorageError> {
    kvs_wal::remove_partial(path)?;
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Snapshot::default()),
        Err(source) => {
            return Err(StorageError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let corrupt = |why: &str| StorageError::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        why: why.into(),
    };
    if bytes.len() < field::SNAPSHOT_HEADER || &bytes[..8] != field::SNAPSHOT_MAGIC {
        return Err(corrupt("not a snapshot of this version"));
    }
    let crc = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let body = &bytes[field::SNAPSHOT_HEADER..];
    if crc32fast::hash(body) != crc {
        return Err(corrupt("its checksum does not match"));
    }
    Snapshot::parse_from_bytes(body).map_err(|e| corrupt(&e.to_string()))
}

fn write_snapshot(path: &Path, snap: &Snapshot) -> Result<(), StorageError> {
    let body = snap.write_to_bytes().expect("a protobuf snapshot encodes");
    let mut bytes = field::SNAPSHOT_MAGIC.to_vec();
    bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    bytes.extend_from_slice(&body);
    kvs_wal::write_atomic(path, &bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage as _;
    use test_support::TempDir;

    fn e(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: format!("entry {index}@{term}").into_bytes().into(),
            ..Default::default()
        }
    }

    fn snap(index: u64, term: u64, voters: &[u64]) -> Snapshot {
        let mut s = Snapshot::default();
        s.mut_metadata().index = index;
        s.mut_metadata().term = term;
        s.mut_metadata()
            .set_conf_state(ConfState::from((voters.to_vec(), vec![])));
        s.data = format!("state at {index}").into_bytes().into();
        s
    }

    fn hs(term: u64, vote: u64, commit: u64) -> HardState {
        HardState {
            term,
            vote,
            commit,
            ..Default::default()
        }
    }

    fn indexes(s: &DiskStorage) -> Vec<(u64, u64)> {
        s.entries.iter().map(|e| (e.index, e.term)).collect()
    }

    #[test]
    fn an_empty_dir_is_an_empty_uninitialized_log() {
        let d = TempDir::new("kvs-control", "storage");
        let (s, r) = DiskStorage::open(d.path()).unwrap();
        assert!(s.is_empty());
        assert!(!s.initial_state().unwrap().initialized());
        assert_eq!((s.first_index().unwrap(), s.last_index().unwrap()), (1, 0));
        assert_eq!(r.last_index, 0);
        assert!(matches!(
            s.snapshot(0, 2),
            Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable
            ))
        ));
    }

    #[test]
    fn entries_hard_state_and_snapshot_read_back_after_reopening() {
        let d = TempDir::new("kvs-control", "storage");
        let (mut s, _) = DiskStorage::open(d.path()).unwrap();
        s.install(&snap(1, 1, &[1])).unwrap();
        s.append(&[e(2, 1), e(3, 1), e(4, 2)]).unwrap();
        // A later append replaces the entries from its first index on.
        s.append(&[e(4, 3), e(5, 3)]).unwrap();
        s.set_hard_state(&hs(3, 1, 4));
        s.sync().unwrap();
        drop(s);
        let (s, r) = DiskStorage::open(d.path()).unwrap();
        assert_eq!(indexes(&s), [(2, 1), (3, 1), (4, 3), (5, 3)]);
        assert_eq!(*s.hard_state(), hs(3, 1, 4));
        assert_eq!(r.snapshot_index, 1);
        let st = s.initial_state().unwrap();
        assert_eq!(st.conf_state.voters, [1]);
        assert_eq!(s.term(1).unwrap(), 1);
        assert_eq!(s.term(4).unwrap(), 3);
        assert_eq!(
            s.entries(2, 6, None, GetEntriesContext::empty(false))
                .unwrap()
                .len(),
            4
        );
        let one = s
            .entries(2, 6, Some(1), GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(one.len(), 1, "a size limit still returns one entry");
        assert!(s
            .entries(1, 3, None, GetEntriesContext::empty(false))
            .is_err());
    }

    #[test]
    fn compaction_sheds_covered_entries_and_keeps_the_rest() {
        let d = TempDir::new("kvs-control", "storage");
        let (mut s, _) = DiskStorage::open(d.path()).unwrap();
        s.install(&snap(1, 1, &[1])).unwrap();
        s.append(&(2..=10).map(|i| e(i, 2)).collect::<Vec<_>>())
            .unwrap();
        s.set_hard_state(&hs(2, 1, 10));
        s.sync().unwrap();
        s.compact(&snap(7, 2, &[1, 2])).unwrap();
        assert_eq!(s.first_index().unwrap(), 8);
        assert!(matches!(
            s.term(6),
            Err(raft::Error::Store(raft::StorageError::Compacted))
        ));
        // A snapshot the log does not hold is refused.
        assert!(s.compact(&snap(9, 5, &[1])).is_err());
        drop(s);
        let (s, r) = DiskStorage::open(d.path()).unwrap();
        assert_eq!(indexes(&s), [(8, 2), (9, 2), (10, 2)]);
        assert_eq!(r.snapshot_index, 7);
        assert_eq!(s.initial_state().unwrap().conf_state.voters, [1, 2]);
    }

    /// A log grown past the rewrite size, compacted (so rewritten), then
    /// appended to: it reopens with the snapshot, the entries after it and
    /// the commit, both when entries past the snapshot are committed and
    /// when they are only acknowledged.
    #[test]
    fn a_member_restarts_after_its_log_was_rewritten() {
        let big = |index: u64| Entry {
            index,
            term: 2,
            data: vec![index as u8; 8 << 10].into(),
            ..Default::default()
        };
        // (committed before the compaction, committed after entry 601).
        for (commit, then) in [(600, 601), (500, 500)] {
            let d = TempDir::new("kvs-control", "storage");
            let (mut s, _) = DiskStorage::open(d.path()).unwrap();
            s.install(&snap(1, 1, &[1])).unwrap();
            s.append(&(2..=600).map(big).collect::<Vec<_>>()).unwrap();
            s.set_hard_state(&hs(2, 1, commit));
            s.sync().unwrap();
            let before = s.log_bytes();
            assert!(before > REWRITE_AT);
            s.compact(&snap(500, 2, &[1])).unwrap();
            assert!(s.log_bytes() < before, "the log was rewritten");
            s.append(&[big(601)]).unwrap();
            s.set_commit(then);
            s.sync().unwrap();
            drop(s);
            let (s, r) = DiskStorage::open(d.path())
                .unwrap_or_else(|e| panic!("commit {commit}: reopening: {e}"));
            assert_eq!(r.snapshot_index, 500);
            assert_eq!(r.replaced_entries, 0, "commit {commit}");
            assert_eq!(
                indexes(&s),
                (501..=601).map(|i| (i, 2)).collect::<Vec<_>>(),
                "commit {commit}"
            );
            assert_eq!(*s.hard_state(), hs(2, 1, then));
        }
    }

    /// The files a crash leaves: the log, the snapshot, and a rewrite of
    /// the log being written beside it.
    struct Disk {
        wal: Vec<u8>,
        snap: Option<Vec<u8>>,
        partial: Option<Vec<u8>>,
    }

    type Look = (Vec<(u64, u64)>, HardState, u64);

    fn look(s: &DiskStorage) -> Look {
        (
            indexes(s),
            s.hard_state().clone(),
            s.snap.get_metadata().index,
        )
    }

    fn disk_of(dir: &Path) -> Disk {
        Disk {
            wal: std::fs::read(dir.join("wal")).unwrap(),
            snap: std::fs::read(dir.join("snapshot")).ok(),
            partial: None,
        }
    }

    /// What a crash during a step can leave, from the files before and
    /// after it. The snapshot file is renamed into place before the step's
    /// log records are written: a crash sees the old snapshot with the old
    /// log, or the new snapshot with any cut of the new records. A log
    /// rewritten is written whole beside the old one (any cut of it may be
    /// there), flushed, then renamed over it.
    fn crashes_between(before: &Disk, after: &Disk) -> Vec<Disk> {
        let disk = |wal: &[u8], snap: &Option<Vec<u8>>, partial: Option<&[u8]>| Disk {
            wal: wal.to_vec(),
            snap: snap.clone(),
            partial: partial.map(<[u8]>::to_vec),
        };
        let mut disks = vec![disk(&before.wal, &before.snap, None)];
        if after.wal.starts_with(&before.wal) {
            for n in before.wal.len()..=after.wal.len() {
                disks.push(disk(&after.wal[..n], &after.snap, None));
            }
        } else {
            for n in 0..=after.wal.len() {
                disks.push(disk(&before.wal, &after.snap, Some(&after.wal[..n])));
            }
            disks.push(disk(&after.wal, &after.snap, None));
        }
        disks
    }

    /// Reopens what a crash left and checks it against the states before
    /// and after the step.
    fn check_recovery(disk: &Disk, name: &str, before: &Look, after: &Look) {
        let c = TempDir::new("kvs-control", "crash");
        std::fs::write(c.path().join("wal"), &disk.wal).unwrap();
        if let Some(b) = &disk.snap {
            std::fs::write(c.path().join("snapshot"), b).unwrap();
        }
        if let Some(b) = &disk.partial {
            std::fs::write(c.path().join("wal.partial"), b).unwrap();
        }
        let at = format!(
            "{name}, log cut at {} bytes, a rewrite of {:?} bytes beside it",
            disk.wal.len(),
            disk.partial.as_ref().map(Vec::len)
        );
        let (s, _) = DiskStorage::open(c.path()).unwrap_or_else(|e| panic!("{at}: {e}"));
        let (ents, hard, si) = look(&s);
        assert!(si == before.2 || si == after.2, "{at}: snapshot {si}");
        assert!(
            hard == before.1 || hard == after.1,
            "{at}: hard state {hard:?}"
        );
        for x in &ents {
            assert!(
                before.0.contains(x) || after.0.contains(x),
                "{at}: entry {x:?} was never written"
            );
        }
        let last = ents.last().map_or(si, |x| x.0);
        assert!(last >= hard.commit, "{at}: commit past the log");
        // Committed entries the snapshot does not cover are all there.
        for x in before
            .0
            .iter()
            .filter(|x| x.0 > si && x.0 <= before.1.commit)
        {
            assert!(ents.contains(x), "{at}: committed entry {x:?} lost");
        }
        assert!(
            !c.path().join("wal.partial").exists(),
            "{at}: the partial rewrite is left"
        );
    }

    /// Every step of every kind of write, cut short by a crash at every
    /// byte, with the log rewritten at compactions once it is larger than
    /// `rewrite_at`: the member reopens to a state made only of what it
    /// passed through, and no committed entry is lost.
    fn crash_at_every_point(rewrite_at: u64) {
        type Step = fn(&mut DiskStorage);
        let steps: [(&str, Step); 7] = [
            ("install", |s| s.install(&snap(1, 1, &[1])).unwrap()),
            ("entries", |s| {
                s.append(&(2..=6).map(|i| e(i, 1)).collect::<Vec<_>>())
                    .unwrap()
            }),
            ("hard state", |s| s.set_hard_state(&hs(1, 1, 4))),
            ("conflicting entries", |s| {
                s.append(&[e(5, 2), e(6, 2), e(7, 2)]).unwrap();
                s.set_hard_state(&hs(2, 3, 6));
            }),
            ("compaction", |s| s.compact(&snap(4, 1, &[1, 3])).unwrap()),
            ("entries after a compaction", |s| {
                s.append(&[e(8, 2)]).unwrap();
                s.set_hard_state(&hs(2, 3, 8));
            }),
            ("a leader's snapshot", |s| {
                s.install(&snap(20, 4, &[1, 3])).unwrap();
                s.append(&[e(21, 4)]).unwrap();
            }),
        ];
        let d = TempDir::new("kvs-control", "storage");
        let (mut s, _) = DiskStorage::open(d.path()).unwrap();
        s.set_rewrite_at(rewrite_at);
        let mut seen = vec![look(&s)];
        let mut disks = vec![disk_of(d.path())];
        for (_, step) in &steps {
            step(&mut s);
            s.sync().unwrap();
            seen.push(look(&s));
            disks.push(disk_of(d.path()));
        }
        drop(s);
        for (i, (name, _)) in steps.iter().enumerate() {
            for disk in crashes_between(&disks[i], &disks[i + 1]) {
                check_recovery(&disk, name, &seen[i], &seen[i + 1]);
            }
        }
    }

    #[test]
    fn a_crash_at_any_point_of_any_write_recovers_a_state_it_passed_through() {
        crash_at_every_point(REWRITE_AT);
    }

    /// The same with the log rewritten at the compaction: a crash at any
    /// point of the rewrite, or after it, recovers too.
    #[test]
    fn a_crash_at_any_point_of_a_log_rewrite_recovers_a_state_it_passed_through() {
        crash_at_every_point(0);
    }

    #[test]
    fn a_snapshot_from_the_leader_without_its_mark_drops_a_diverged_log() {
        let d = TempDir::new("kvs-control", "storage");
        let (mut s, _) = DiskStorage::open(d.path()).unwrap();
        s.install(&snap(1, 1, &[1])).unwrap();
        s.append(&[e(2, 1), e(3, 1)]).unwrap();
        s.sync().unwrap();
        drop(s);
        // The crash fell after the snapshot's rename, before its mark.
        write_snapshot(&d.path().join("snapshot"), &snap(3, 2, &[1])).unwrap();
        let (s, r) = DiskStorage::open(d.path()).unwrap();
        assert!(s.entries.is_empty());
        assert_eq!(
            r.replaced_entries, 0,
            "entries 2 and 3 are under the snapshot"
        );
        assert_eq!((s.hard_state().commit, s.hard_state().term), (3, 2));
        let (mut s, _) = DiskStorage::open(d.path()).unwrap();
        s.append(&[e(4, 2), e(5, 2)]).unwrap();
        s.sync().unwrap();
        drop(s);
        write_snapshot(&d.path().join("snapshot"), &snap(4, 3, &[1])).unwrap();
        let (s, r) = DiskStorage::open(d.path()).unwrap();
        assert_eq!(
            r.replaced_entries, 1,
            "entry 5 came after a log the leader replaced"
        );
        assert!(s.entries.is_empty());
    }

    #[test]
    fn a_damaged_snapshot_is_an_error_not_an_empty_member() {
        let d = TempDir::new("kvs-control", "storage");
        let (mut s, _) = DiskStorage::open(d.path()).unwrap();
        s.install(&snap(1, 1, &[1])).unwrap();
        s.sync().unwrap();
        drop(s);
        let p = d.path().join("snapshot");
        let mut b = std::fs::read(&p).unwrap();
        let n = b.len();
        b[n - 1] ^= 0x40;
        std::fs::write(&p, &b).unwrap();
        assert!(matches!(
            DiskStorage::open(d.path()),
            Err(StorageError::Corrupt { .. })
        ));
    }
}
