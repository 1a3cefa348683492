//! A worker's start from its log: the changes replayed into an empty
//! store, in order, with the progress logged.

use std::path::Path;
use std::time::{Duration, Instant};

use kvs_wal::{Log, Reason, Visit, WalError, Writer};

use super::FORMAT;
use crate::store::change::Change;
use crate::store::Store;

/// How often a long replay says how far it got.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What a replay found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// Changes replayed.
    pub changes: u64,
    /// Bytes of the log read.
    pub bytes: u64,
    /// Bytes of a torn last write cut off.
    pub torn_bytes: u64,
    /// How long the replay took.
    pub took: Duration,
}

/// Replays worker `worker`'s log at `path` (made empty if there is none)
/// into a store of `slots` slots with no memory limit (what was taken once
/// is taken again); returns the store, the log open for appending, and
/// what was found. Damage stops the replay with an error naming the file
/// and the byte.
pub(crate) fn recover(
    path: &Path,
    slots: u32,
    worker: u16,
) -> Result<(Store, Writer, Recovered), WalError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| WalError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let t = Instant::now();
    let log = Log::open(path, FORMAT)?;
    let mut v = Replay {
        store: Store::new(slots, usize::MAX),
        worker,
        changes: 0,
        started: t,
        reported: t,
    };
    let replayed = log.replay(&mut v)?;
    let found = Recovered {
        changes: v.changes,
        bytes: replayed.end(),
        torn_bytes: replayed.torn_bytes(),
        took: t.elapsed(),
    };
    if found.torn_bytes > 0 {
        tracing::warn!(
            "worker {worker}: {}: a torn last write of {} bytes cut off (a crash during the write; \
             nothing it held was acknowledged under durability = \"always\")",
            path.display(),
            found.torn_bytes
        );
    }
    let writer = replayed.append()?;
    Ok((v.store, writer, found))
}

/// The replay's visitor: each change applied to the store.
struct Replay {
    store: Store,
    worker: u16,
    changes: u64,
    started: Instant,
    reported: Instant,
}

impl Visit for Replay {
    fn record(&mut self, kind: u8, payload: &[u8], _offset: u64) -> Result<(), Reason> {
        Change::decode(kind, payload)?.apply(&mut self.store)?;
        self.changes += 1;
        Ok(())
    }

    fn progress(&mut self, read: u64, size: u64) {
        if self.reported.elapsed() >= REPORT_EVERY {
            self.reported = Instant::now();
            tracing::info!(
                "worker {}: recovering, {read} of {size} bytes of the log read ({} s)",
                self.worker,
                self.started.elapsed().as_secs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::TempDir;

    fn write_some(path: &Path) -> u64 {
        let (mut s, w, found) = recover(path, 8, 0).unwrap();
        assert_eq!(found.changes, 0);
        s.keep_journal(FORMAT);
        let mut log = super::super::WorkerLog::new(w, crate::config::Durability::Always, 0);
        s.put(1, b"a", b"1").unwrap();
        s.put(2, b"b", b"2").unwrap();
        log.commit(&mut s, 0);
        s.delete(1, b"a");
        s.put(3, b"c", b"3").unwrap();
        log.commit(&mut s, 0);
        std::fs::metadata(path).unwrap().len()
    }

    #[test]
    fn a_store_comes_back_from_its_log() {
        let d = TempDir::new("kvs-server", "recover");
        let p = d.path().join("data").join("worker-0.log");
        write_some(&p);
        let (s, _, found) = recover(&p, 8, 0).unwrap();
        assert_eq!(found.changes, 4);
        assert_eq!(found.torn_bytes, 0);
        assert_eq!(s.get(1, b"a"), None);
        assert_eq!(s.get(2, b"b"), Some(&b"2"[..]));
        assert_eq!(s.get(3, b"c"), Some(&b"3"[..]));
    }

    #[test]
    fn a_log_cut_anywhere_gives_the_changes_before_the_cut() {
        let d = TempDir::new("kvs-server", "recover-cut");
        let p = d.path().join("w.log");
        let full = write_some(&p);
        let bytes = std::fs::read(&p).unwrap();
        let mut last = 0;
        for cut in 8..=full {
            std::fs::write(&p, &bytes[..cut as usize]).unwrap();
            let (s, _, found) = recover(&p, 8, 0).unwrap();
            assert!(found.changes >= last, "cut at {cut}");
            last = found.changes;
            assert_eq!(found.bytes + found.torn_bytes, cut);
            // The changes come back in order: b's put before c's.
            if s.get(3, b"c").is_some() {
                assert!(s.get(2, b"b").is_some() && s.get(1, b"a").is_none());
            }
        }
        assert_eq!(last, 4);
    }

    #[test]
    fn damage_in_the_middle_names_the_file_and_byte() {
        let d = TempDir::new("kvs-server", "recover-damage");
        let p = d.path().join("w.log");
        write_some(&p);
        let mut bytes = std::fs::read(&p).unwrap();
        // The first record's payload (after the magic and its header).
        bytes[8 + 8 + 2] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        let e = recover(&p, 8, 0).unwrap_err().to_string();
        assert!(e.contains("w.log") && e.contains("byte 8"), "{e}");
    }

    #[test]
    fn a_change_to_a_slot_the_store_lacks_is_damage() {
        let d = TempDir::new("kvs-server", "recover-slots");
        let p = d.path().join("w.log");
        write_some(&p);
        // Slot 3 does not exist in a store of 2 slots.
        let e = recover(&p, 2, 0).unwrap_err().to_string();
        assert!(e.contains("slot"), "{e}");
    }
}
