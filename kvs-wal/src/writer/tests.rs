use std::path::{Path, PathBuf};

use test_support::TempDir;

use crate::error::{TooLarge, WalError};
use crate::field;
use crate::files::partial_of;
use crate::testing::{as_read, no_visit, read_log, sample, write_log, F};
use crate::{Log, Writer};

fn temp() -> (TempDir, PathBuf) {
    let d = TempDir::new("kvs-wal", "writer");
    let p = d.path().join("log");
    (d, p)
}

fn open(p: &Path) -> Writer {
    Log::open(p, F)
        .unwrap()
        .replay(&mut no_visit)
        .unwrap()
        .append()
        .unwrap()
}

#[test]
fn a_batch_is_written_whole_and_durable_after_sync() {
    let (_d, p) = temp();
    let mut w = open(&p);
    assert_eq!((w.end(), w.durable()), (8, 8));
    let e1 = w.push(1, b"one").unwrap();
    let e2 = w.push_with(2, |v| v.extend_from_slice(b"two!")).unwrap();
    assert_eq!((e1, e2), (8 + 12, 8 + 12 + 13));
    assert_eq!(w.pending(), 25);
    assert_eq!(
        std::fs::metadata(&p).unwrap().len(),
        8,
        "nothing written yet"
    );
    w.write().unwrap();
    assert_eq!((w.pending(), w.end(), w.durable()), (0, e2, 8));
    assert_eq!(std::fs::metadata(&p).unwrap().len(), e2);
    w.sync().unwrap();
    assert_eq!(w.durable(), e2);
    // Pushed and discarded: never written.
    w.push(3, b"gone").unwrap();
    w.discard();
    w.commit().unwrap();
    drop(w);
    let (got, r) = read_log(&p, 1 << 20).unwrap();
    assert_eq!(got, [(1, b"one".to_vec(), 8), (2, b"two!".to_vec(), e1)]);
    assert_eq!(r.end(), e2);
}

#[test]
fn a_record_too_large_is_refused_naming_the_log() {
    let (_d, p) = temp();
    let mut w = open(&p);
    w.push(1, b"kept").unwrap();
    let max = F.max_record() as usize;
    w.push(1, &vec![0; max - 1]).unwrap();
    match w.push(1, &vec![0; max]) {
        Err(WalError::TooLarge { path, source }) => {
            assert_eq!(path, p);
            assert_eq!(
                source,
                TooLarge {
                    len: max + 1,
                    max: max as u32
                }
            );
        }
        other => panic!("{other:?}"),
    }
    w.commit().unwrap();
    drop(w);
    let (got, _) = read_log(&p, 1 << 20).unwrap();
    assert_eq!(got.len(), 2);
}

#[test]
fn a_rewritten_log_holds_only_the_new_records_and_takes_appends() {
    let (_d, p) = temp();
    let recs = sample(20);
    write_log(&p, &recs);
    let mut w = open(&p);
    let before = w.end();
    w.push(9, b"pushed, not written: dropped").unwrap();
    w.rewrite(|b| {
        b.push(7, b"first")?;
        b.push_with(8, |v| v.extend_from_slice(b"second"))
    })
    .unwrap();
    assert!(w.end() < before);
    assert_eq!((w.pending(), w.durable()), (0, w.end()));
    w.push(1, b"after").unwrap();
    w.commit().unwrap();
    drop(w);
    let (got, _) = read_log(&p, 1 << 20).unwrap();
    let kinds: Vec<_> = got.iter().map(|g| (g.0, g.1.clone())).collect();
    assert_eq!(
        kinds,
        [
            (7, b"first".to_vec()),
            (8, b"second".to_vec()),
            (1, b"after".to_vec())
        ]
    );
    assert!(!partial_of(&p).exists());
}

#[test]
fn a_rewrite_with_a_record_too_large_leaves_the_log_as_it_was() {
    let (_d, p) = temp();
    let ends = write_log(&p, &sample(3));
    let mut w = open(&p);
    let big = vec![0; F.max_record() as usize];
    let e = w.rewrite(|b| b.push(1, &big)).unwrap_err();
    assert!(matches!(e, WalError::TooLarge { .. }), "{e}");
    assert_eq!(w.end(), ends[2]);
    w.push(1, b"more").unwrap();
    w.commit().unwrap();
    drop(w);
    assert_eq!(read_log(&p, 1 << 20).unwrap().0.len(), 4);
}

/// A crash during a rewrite leaves the old log and part (or all) of the
/// new one beside it, or, once renamed, the new one: opening reads the
/// old log whole and removes the partial one, or reads the new one.
#[test]
fn a_crash_at_any_point_of_a_rewrite_reads_the_old_log_or_the_new() {
    let (d, p) = temp();
    let recs = sample(5);
    let ends = write_log(&p, &recs);
    let old = std::fs::read(&p).unwrap();
    let mut w = open(&p);
    w.rewrite(|b| b.push(4, b"the new log's only record"))
        .unwrap();
    drop(w);
    let new = std::fs::read(&p).unwrap();
    for cut in 0..=new.len() {
        std::fs::write(&p, &old).unwrap();
        std::fs::write(partial_of(&p), &new[..cut]).unwrap();
        let (got, r) = read_log(&p, 7).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert_eq!(got, as_read(&recs, &ends), "cut {cut}");
        assert_eq!(r.torn_bytes(), 0);
        assert!(!partial_of(&p).exists(), "cut {cut}");
    }
    std::fs::write(&p, &new).unwrap();
    let (got, _) = read_log(&p, 7).unwrap();
    assert_eq!(got, [(4, b"the new log's only record".to_vec(), 8)]);
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}

/// An `everysec` policy flushes from another thread while the writer
/// writes: what it reports durable was written, and grows to the log's
/// length; after a rewrite it follows the new file.
#[test]
fn a_sync_handle_flushes_from_another_thread() {
    let (_d, p) = temp();
    let mut w = open(&p);
    let h = w.sync_handle();
    assert_eq!(h.path(), p);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = {
        let (h, stop) = (h.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                seen.push(h.sync().unwrap());
            }
            seen.push(h.sync().unwrap());
            seen
        })
    };
    let mut lens = vec![w.end()];
    for i in 0..200u32 {
        w.push(1, &i.to_le_bytes()).unwrap();
        w.write().unwrap();
        lens.push(w.end());
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let seen = syncer.join().unwrap();
    assert!(seen.windows(2).all(|s| s[0] <= s[1]), "durable only grows");
    assert!(
        seen.iter().all(|s| lens.contains(s)),
        "durable at a record end"
    );
    assert_eq!(*seen.last().unwrap(), w.end());
    assert_eq!(w.durable(), w.end(), "the writer sees the handle's syncs");
    // The writer's own sync has nothing left to flush: it does not.
    let flushes = w.flush_times().count();
    w.sync().unwrap();
    assert_eq!(w.flush_times().count(), flushes, "a flush of nothing new");
    w.push(1, b"one more").unwrap();
    w.write().unwrap();
    w.sync().unwrap();
    assert_eq!(w.flush_times().count(), flushes + 1);
    assert_eq!(w.durable(), w.end());
    w.rewrite(|b| b.push(2, b"new")).unwrap();
    w.push(3, b"after").unwrap();
    w.write().unwrap();
    assert_eq!(w.durable(), 8 + 12, "the rewrite's file was flushed");
    assert_eq!(
        h.sync().unwrap(),
        w.end(),
        "the handle follows the new file"
    );
    assert_eq!(h.durable(), w.end());
}

/// A failed fdatasync (what it leaves is set by hand: no file system here
/// fails one on demand) stops writes and syncs, from the handle too, until
/// a rewrite replaces the file.
#[test]
fn after_a_failed_fsync_the_log_takes_no_writes_until_rewritten() {
    let (_d, p) = temp();
    let mut w = open(&p);
    w.push(1, b"a").unwrap();
    w.commit().unwrap();
    let durable = w.durable();
    w.shared
        .failed
        .store(true, std::sync::atomic::Ordering::Release);
    w.push(1, b"b").unwrap();
    for e in [w.write(), w.sync(), w.sync_handle().sync().map(|_| ())] {
        match e {
            Err(WalError::SyncFailed { durable: d, .. }) => assert_eq!(d, durable),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(std::fs::metadata(&p).unwrap().len(), durable);
    w.rewrite(|b| b.push(1, b"a")).unwrap();
    w.push(1, b"b").unwrap();
    w.commit().unwrap();
    drop(w);
    let (got, _) = read_log(&p, 1 << 20).unwrap();
    assert_eq!(got.len(), 2);
}

/// A failed write whose bytes could not be cut off (set by hand: the cut
/// does not fail on demand) is cut off before the next write, which
/// follows the last record.
#[test]
fn bytes_a_failed_write_left_are_cut_before_the_next_write() {
    let (_d, p) = temp();
    let mut w = open(&p);
    w.push(1, b"a").unwrap();
    w.commit().unwrap();
    let mut b = std::fs::read(&p).unwrap();
    b.extend_from_slice(&[0xee; 300]);
    std::fs::write(&p, &b).unwrap();
    w.cut = true;
    w.push(2, b"b").unwrap();
    w.commit().unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), w.end());
    drop(w);
    let (got, r) = read_log(&p, 1 << 20).unwrap();
    assert_eq!(got, [(1, b"a".to_vec(), 8), (2, b"b".to_vec(), 18)]);
    assert_eq!(r.torn_bytes(), 0);
}

/// The environment variable that makes the full-disk test's body run, in
/// a child process of its own.
const FSIZE_CHILD: &str = "KVS_WAL_FSIZE_CHILD";

/// A write that finds no room (here: past RLIMIT_FSIZE, `EFBIG`, as a full
/// disk gives `ENOSPC`) fails, the log still ends at its last record with
/// nothing of the batch after it, and once there is room the batch (or
/// another) is written after the last record. The limit is set in a child
/// process: it would fail the other tests' writes.
#[test]
fn a_write_that_finds_no_room_leaves_the_log_at_its_last_record() {
    if let Some(dir) = std::env::var_os(FSIZE_CHILD) {
        fsize_child(Path::new(&dir));
        return;
    }
    let d = TempDir::new("kvs-wal", "fsize");
    let name = module_path!().split_once("::").unwrap().1;
    let name = format!("{name}::a_write_that_finds_no_room_leaves_the_log_at_its_last_record");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(FSIZE_CHILD, d.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran the test: {text}");
    let (got, r) = read_log(&d.path().join("log"), 1 << 20).unwrap();
    let want: Vec<_> = (0..7u8).map(|i| (i, vec![i; 100])).collect();
    let got: Vec<_> = got.into_iter().map(|g| (g.0, g.1)).collect();
    assert_eq!(got, want);
    assert_eq!(r.torn_bytes(), 0);
}

/// Sets the soft limit on the size of files this process writes.
#[allow(unsafe_code)]
fn limit_file_size(bytes: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limits into `l`, which lives on this
    // stack frame for the call.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut l) }, 0);
    l.rlim_cur = bytes.min(l.rlim_max);
    // SAFETY: setrlimit reads `l`, valid for the call; this process is the
    // test's child, alone in writing files under the limit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &l) }, 0);
}

#[allow(unsafe_code)]
fn fsize_child(dir: &Path) {
    // SAFETY: ignoring SIGXFSZ installs no handler (no code runs on the
    // signal); a write past the limit then fails with EFBIG instead of
    // killing the process.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let p = dir.join("log");
    let mut w = open(&p);
    let rec = |i: u8| (i, vec![i; 100]);
    for i in 0..3 {
        let (k, v) = rec(i);
        w.push(k, &v).unwrap();
    }
    w.commit().unwrap();
    let good = w.end();
    // Room for part of the next batch only: its first record and a half.
    limit_file_size(good + 150);
    for i in 3..6 {
        let (k, v) = rec(i);
        w.push(k, &v).unwrap();
    }
    for _ in 0..2 {
        match w.write() {
            Err(WalError::Write { at, source, .. }) => {
                assert_eq!(at, good);
                assert_eq!(source.raw_os_error(), Some(libc::EFBIG), "{source}");
            }
            other => panic!("EFBIG expected, got {other:?}"),
        }
        assert_eq!(w.end(), good);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), good, "cut back");
        assert_eq!(w.pending(), 3 * 109, "the batch is kept");
    }
    limit_file_size(u64::MAX);
    w.commit().unwrap();
    // Fails again, is discarded, and another batch follows the last
    // record.
    limit_file_size(w.end() + 50);
    w.push(9, &[9; 100]).unwrap();
    assert!(matches!(w.write(), Err(WalError::Write { .. })));
    w.discard();
    limit_file_size(u64::MAX);
    let (k, v) = rec(6);
    w.push(k, &v).unwrap();
    w.commit().unwrap();
    assert_eq!(w.end(), field::MAGIC.end as u64 + 7 * 109);
}

#[test]
fn a_reservation_holds_blocks_without_growing_the_log() {
    use std::os::unix::fs::MetadataExt;
    let (_d, p) = temp();
    let mut w = open(&p);
    w.push(1, b"before").unwrap();
    w.commit().unwrap();
    let (len, blocks) = {
        let m = std::fs::metadata(&p).unwrap();
        (m.len(), m.blocks())
    };
    if !w.reserve(len + (1 << 20)).unwrap() {
        // The filesystem cannot set space aside: nothing to check.
        return;
    }
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(m.len(), len, "the length is the log's");
    assert!(m.blocks() >= blocks + 2048 - 8, "{} {}", blocks, m.blocks());
    // Writes go on into the space set aside, and a replay reads them.
    w.push(2, b"after").unwrap();
    w.commit().unwrap();
    drop(w);
    let (got, r) = read_log(&p, 1 << 20).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(r.torn_bytes(), 0);
    // Below the end: nothing to do.
    let mut w = open(&p);
    assert!(w.reserve(8).unwrap());
}

#[test]
fn a_full_disk_is_told_apart() {
    let full = WalError::Io {
        path: "x".into(),
        source: std::io::Error::from_raw_os_error(libc::ENOSPC),
    };
    assert!(full.is_disk_full());
    let other = WalError::Io {
        path: "x".into(),
        source: std::io::Error::from_raw_os_error(libc::EIO),
    };
    assert!(!other.is_disk_full());
}
