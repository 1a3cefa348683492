use std::path::Path;

use test_support::TempDir;

use crate::error::{Damage, WalError};
use crate::field;
use crate::testing::{as_read, read_log, sample, write_log, Read, F};
use crate::{Format, Log};

/// Chunk sizes around the header's and the records' sizes, and the
/// default.
const CHUNKS: [usize; 8] = [1, 3, 8, 9, 16, 50, 4096, 1 << 20];

fn temp() -> (TempDir, std::path::PathBuf) {
    let d = TempDir::new("kvs-wal", "replay");
    let p = d.path().join("log");
    (d, p)
}

/// Reads `path` and checks that `want` stands, `torn` bytes follow, and
/// after appending the file ends after the last record.
fn check_torn(path: &Path, chunk: usize, want: &[Read], end: u64, torn: u64, what: &str) {
    let (got, r) = read_log(path, chunk).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got, want, "{what}");
    assert_eq!((r.end(), r.torn_bytes()), (end, torn), "{what}");
    assert_eq!(r.records(), want.len() as u64, "{what}");
    let w = r.append().unwrap();
    assert_eq!(w.end(), end, "{what}");
    assert_eq!(std::fs::metadata(path).unwrap().len(), end, "{what}");
}

fn damage_at(path: &Path, chunk: usize) -> (u64, Damage) {
    match read_log(path, chunk) {
        Err(WalError::Corrupt { offset, why, .. }) => (offset, why),
        other => panic!("damage expected, got {:?}", other.map(|(g, _)| g)),
    }
}

#[test]
fn records_read_back_in_order_with_their_offsets_whatever_the_chunk() {
    let (_d, p) = temp();
    let recs = sample(40);
    let ends = write_log(&p, &recs);
    let size = std::fs::metadata(&p).unwrap().len();
    assert_eq!(*ends.last().unwrap(), size);
    for chunk in CHUNKS {
        let (got, r) = read_log(&p, chunk).unwrap();
        assert_eq!(got, as_read(&recs, &ends), "chunk {chunk}");
        assert_eq!((r.end(), r.torn_bytes(), r.records()), (size, 0, 40));
    }
}

#[test]
fn a_record_larger_than_the_chunk_is_read_whole() {
    let (_d, p) = temp();
    let recs = vec![
        (1, vec![9; 10]),
        (2, (0..5000).map(|i| i as u8).collect()),
        (3, vec![7; 3]),
        (4, vec![1; 60_000]),
    ];
    let ends = write_log(&p, &recs);
    for chunk in [1, 7, 64, 4999, 5009, 5010, 8192] {
        let (got, _) = read_log(&p, chunk).unwrap();
        assert_eq!(got, as_read(&recs, &ends), "chunk {chunk}");
    }
}

/// A crash tears the last write: cut at every byte of the last record,
/// and of the last two written together, the records before it stand
/// and the rest is cut off.
#[test]
fn a_log_cut_at_any_byte_of_its_last_records_keeps_the_whole_ones() {
    let (_d, p) = temp();
    let recs = sample(6);
    let ends = write_log(&p, &recs);
    let full = std::fs::read(&p).unwrap();
    let want = as_read(&recs, &ends);
    let from = ends[ends.len() - 3] as usize;
    for chunk in [1, 5, 8, 13, 1 << 20] {
        for cut in from..=full.len() {
            std::fs::write(&p, &full[..cut]).unwrap();
            let whole = ends.iter().filter(|&&e| e <= cut as u64).count();
            let end = ends[whole - 1];
            let what = format!("cut at {cut}, chunk {chunk}");
            check_torn(&p, chunk, &want[..whole], end, cut as u64 - end, &what);
        }
    }
}

/// A crash can leave the file longer than what reached the disk, the
/// rest zeros: zeros after the last record, or a last record cut short by
/// zeros (its header included), are a torn write and are cut off.
#[test]
fn a_tail_of_zeros_is_a_torn_write() {
    let (_d, p) = temp();
    let recs = sample(3);
    let ends = write_log(&p, &recs);
    let full = std::fs::read(&p).unwrap();
    let want = as_read(&recs, &ends);
    let last = ends[1] as usize;
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
    for chunk in [1, 8, 10, 1 << 20] {
        for (b, whole) in &cases {
            std::fs::write(&p, b).unwrap();
            let end = ends[whole - 1];
            let what = format!("{} bytes, {whole} whole, chunk {chunk}", b.len());
            check_torn(&p, chunk, &want[..*whole], end, b.len() as u64 - end, &what);
        }
    }
}

/// Zeros are a torn write only when nothing but zeros follows them.
#[test]
fn a_bad_record_with_anything_but_zeros_after_it_is_damage() {
    let (_d, p) = temp();
    // Payloads of 0, 1, 7 and 30 bytes.
    let recs = sample(4);
    let ends = write_log(&p, &recs);
    let full = std::fs::read(&p).unwrap();
    let starts: Vec<usize> = [field::MAGIC.end as u64]
        .iter()
        .chain(&ends)
        .map(|&e| e as usize)
        .collect();
    let mut cases = Vec::new();
    // A flipped bit in the third record's payload, the fourth after it.
    let mut b = full.clone();
    b[starts[2] + field::PAYLOAD.start + 3] ^= 1;
    cases.push((b, starts[2], "checksum"));
    // The first record zeroed, the others whole after it.
    let mut b = full.clone();
    b[starts[0]..starts[1]].fill(0);
    cases.push((b, starts[0], "empty"));
    // The last record cut short by zeros, and a stray byte after them.
    let mut b = full.clone();
    b[starts[3] + field::HEADER_LEN..].fill(0);
    b.resize(full.len() + 100, 0);
    b.push(1);
    cases.push((b, starts[3], "checksum"));
    // Zeros after the last record, then something.
    let mut b = full.clone();
    b.resize(full.len() + 4096, 0);
    b.push(0x80);
    cases.push((b, full.len(), "empty"));
    for chunk in [1, 8, 1 << 20] {
        for (b, bad, why) in &cases {
            std::fs::write(&p, b).unwrap();
            let (offset, d) = damage_at(&p, chunk);
            assert_eq!(offset, *bad as u64, "chunk {chunk}");
            match (why, &d) {
                (&"checksum", Damage::Checksum) | (&"empty", Damage::Empty) => {}
                _ => panic!("{why} expected at {bad}, got {d:?}"),
            }
            // Nothing is cut off a damaged log.
            assert_eq!(std::fs::read(&p).unwrap(), *b);
        }
    }
}

#[test]
fn a_length_over_the_limit_is_damage_even_at_the_end() {
    let (_d, p) = temp();
    let ends = write_log(&p, &sample(2));
    let mut b = std::fs::read(&p).unwrap();
    let at = ends[0] as usize;
    b[at..at + 4].copy_from_slice(&(F.max_record() + 1).to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let (offset, d) = damage_at(&p, 1 << 20);
    assert_eq!(offset, ends[0]);
    assert!(matches!(d, Damage::TooLarge { len, max } if len == max + 1));
}

#[test]
fn a_record_the_visitor_rejects_is_damage_at_its_offset() {
    let (_d, p) = temp();
    let ends = write_log(&p, &[(1, vec![1]), (2, vec![2]), (1, vec![3])]);
    let log = Log::open(&p, F).unwrap();
    let mut seen = 0;
    let e = log
        .replay(&mut |kind: u8, _: &[u8], _: u64| {
            seen += 1;
            if kind == 2 {
                Err("no kind 2 here".into())
            } else {
                Ok(())
            }
        })
        .unwrap_err();
    assert_eq!(seen, 2);
    match &e {
        WalError::Corrupt {
            offset,
            why: Damage::Rejected { kind: 2, .. },
            ..
        } => assert_eq!(*offset, ends[0]),
        other => panic!("{other:?}"),
    }
    let text = e.to_string();
    assert!(text.contains(&format!("{} is damaged at byte {}", p.display(), ends[0])));
    assert!(text.contains("no kind 2 here"), "{text}");
}

#[test]
fn a_file_without_the_magic_is_not_a_log() {
    let (_d, p) = temp();
    for bytes in [&b"not a log at all"[..], b"TESTLOG", b"", b"TESTLOG\x02"] {
        std::fs::write(&p, bytes).unwrap();
        let e = Log::open(&p, F).unwrap_err();
        assert!(
            matches!(
                e,
                WalError::Corrupt {
                    offset: 0,
                    why: Damage::BadMagic,
                    ..
                }
            ),
            "{bytes:?}: {e}"
        );
    }
    std::fs::remove_file(&p).unwrap();
    write_log(&p, &sample(1));
    let other = Format::new(*b"OTHERLOG", 100);
    assert!(Log::open(&p, other).is_err());
}

#[test]
fn opening_creates_a_fresh_log_and_removes_a_partial_one() {
    let (d, p) = temp();
    std::fs::write(d.path().join("log.partial"), b"half a rewrite").unwrap();
    let log = Log::open(&p, F).unwrap();
    assert_eq!(log.size(), 8);
    assert_eq!(std::fs::read(&p).unwrap(), F.magic());
    assert!(!d.path().join("log.partial").exists());
    let r = log.replay(&mut crate::testing::no_visit).unwrap();
    assert_eq!((r.end(), r.torn_bytes(), r.records()), (8, 0, 0));
}

#[test]
fn progress_is_reported_per_chunk_up_to_the_size() {
    struct Count(Vec<(u64, u64)>, usize);
    impl crate::Visit for Count {
        fn record(&mut self, _: u8, _: &[u8], _: u64) -> Result<(), crate::Reason> {
            self.1 += 1;
            Ok(())
        }
        fn progress(&mut self, read: u64, size: u64) {
            self.0.push((read, size));
        }
    }
    let (_d, p) = temp();
    let ends = write_log(&p, &sample(30));
    let full = std::fs::read(&p).unwrap();
    for (chunk, torn) in [(64, 0), (64, 5), (1 << 20, 0), (1 << 20, 3)] {
        let size = full.len() - torn;
        std::fs::write(&p, &full[..size]).unwrap();
        let mut log = Log::open(&p, F).unwrap();
        log.set_chunk(chunk);
        let mut c = Count(Vec::new(), 0);
        let r = log.replay(&mut c).unwrap();
        let size = size as u64;
        assert_eq!(c.1, if torn > 0 { 29 } else { 30 });
        assert_eq!(r.end(), ends[c.1 - 1]);
        assert_eq!(c.0.last(), Some(&(size, size)), "chunk {chunk}");
        assert!(c.0.windows(2).all(|w| w[0].0 < w[1].0), "{:?}", c.0);
        if chunk > full.len() {
            assert_eq!(c.0, [(size, size)], "one read of the whole file");
        } else {
            assert!(c.0.len() as u64 >= size / 256, "{:?}", c.0);
        }
    }
}
