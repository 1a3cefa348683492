//! What the tests share: a format, sample records, a log written and read
//! back whole.

use std::path::Path;

use crate::{Format, Log, Replayed, WalError};

/// The tests' format: small records, so that a too-large one is cheap.
pub const F: Format = Format::new(*b"TESTLOG\x01", 1 << 16);

/// A record read back: kind, payload, offset.
pub type Read = (u8, Vec<u8>, u64);

/// `n` records of several kinds and sizes, the empty payload included.
pub fn sample(n: usize) -> Vec<(u8, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let len = [0, 1, 7, 30, 200, 3][i % 6];
            (i as u8 % 5, (0..len).map(|j| (i * 31 + j) as u8).collect())
        })
        .collect()
}

/// Writes `recs` to a fresh log at `path`, one commit each; returns where
/// each record ends.
pub fn write_log(path: &Path, recs: &[(u8, Vec<u8>)]) -> Vec<u64> {
    let mut w = Log::open(path, F)
        .unwrap()
        .replay(&mut no_visit)
        .unwrap()
        .append()
        .unwrap();
    let mut ends = Vec::new();
    for (kind, payload) in recs {
        ends.push(w.push(*kind, payload).unwrap());
        w.commit().unwrap();
    }
    ends
}

/// Reads the log at `path` `chunk` bytes at a time.
pub fn read_log(path: &Path, chunk: usize) -> Result<(Vec<Read>, Replayed), WalError> {
    let mut log = Log::open(path, F)?;
    log.set_chunk(chunk);
    let mut got = Vec::new();
    let r = log.replay(&mut |kind: u8, payload: &[u8], at: u64| {
        got.push((kind, payload.to_vec(), at));
        Ok(())
    })?;
    Ok((got, r))
}

/// A visitor that takes every record.
pub fn no_visit(_: u8, _: &[u8], _: u64) -> Result<(), crate::Reason> {
    Ok(())
}

/// `recs` as read back from the offsets they start at.
pub fn as_read(recs: &[(u8, Vec<u8>)], ends: &[u64]) -> Vec<Read> {
    let mut at = crate::field::MAGIC.end as u64;
    recs.iter()
        .zip(ends)
        .map(|((k, p), &end)| {
            let r = (*k, p.clone(), at);
            at = end;
            r
        })
        .collect()
}
