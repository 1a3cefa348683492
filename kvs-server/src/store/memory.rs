//! The memory cap (`max_memory`): what a record costs on the heap, each
//! worker's share of the cap, and byte sizes as operators write them
//! (`64M`, `1G`).
//!
//! A record is charged what it really occupies, not its key and value bytes:
//! its record (key and value in one allocation, `record.rs`) rounded
//! up to a malloc chunk, its key again in the ordered index if the key is
//! too long to live in the index's node (a chunk of its own then), and a
//! fixed [`RECORD_OVERHEAD`] for its hash-table slot and its share of a
//! B-tree node. Each worker owns its store, so the cap is split evenly
//! between the workers (slots are hashed, so their loads are even) and
//! checked with no shared state: a PUT that would take a worker's store past
//! its share is refused.

/// Heap bytes a record costs besides its record's malloc chunk and a long
/// key's index chunk: its hash-table slot (a 16-byte box and a control
/// byte, at the table's load factor) and its share of a B-tree node, which
/// holds 48 bytes per key: the key itself up to 38 bytes, or a long key's
/// box and first 16 bytes (`index_key.rs`), and the slot and slot life
/// beside it. A leaf of 11 such entries is about 550 bytes, so a node at
/// least half full costs at most 100 bytes a key, and the table's slot at
/// most 18 at its lowest fill.
///
/// A bound, not a measurement of this layout: with 40-byte table slots
/// (a key box and a value vector) and a boxed key in every index entry the
/// same two containers measured 76 bytes a record when the table was 7/8
/// full and 123 right after it doubled (glibc malloc, x86-64,
/// `mallinfo2().uordblks`, 57 k to 460 k random 24- to 200-byte keys with
/// 10-byte to 4 KiB values). The layout now costs less, so the heap stays
/// under the cap whatever the table's fill; `tests/memory.rs` checks the
/// process's resident memory against the cap.
pub const RECORD_OVERHEAD: usize = 128;

/// The bytes a malloc chunk for `n` bytes takes: an 8-byte header, rounded
/// up to 16, at least 32 (glibc on 64-bit; other allocators are close).
#[inline]
pub const fn chunk(n: usize) -> usize {
    let c = (n + 8 + 15) & !15;
    if c < 32 {
        32
    } else {
        c
    }
}

/// The heap bytes one record with a `key_len`-byte key and a
/// `value_len`-byte value costs.
#[inline]
pub const fn record_cost(key_len: usize, value_len: usize) -> usize {
    let index = if key_len > crate::store::index_key::INLINE {
        chunk(key_len)
    } else {
        0
    };
    chunk(crate::store::record::record_size(key_len, value_len)) + index + RECORD_OVERHEAD
}

/// Each worker's share of `max_memory` (0: unlimited, `usize::MAX`).
pub fn worker_share(max_memory: u64, workers: u16) -> usize {
    if max_memory == 0 {
        return usize::MAX;
    }
    let share = max_memory / u64::from(workers.max(1));
    usize::try_from(share).unwrap_or(usize::MAX)
}

/// A PUT refused because it would take the store past its share of
/// `max_memory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the store holds {used} of its {limit} bytes and the record needs {needed} more")]
pub struct OutOfMemory {
    /// Bytes the store holds.
    pub used: usize,
    /// Its share of `max_memory`.
    pub limit: usize,
    /// Bytes the refused write would add.
    pub needed: usize,
}

/// A byte size that does not parse ([`parse_bytes`]); each variant holds
/// the text given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadByteSize {
    /// It does not start with a number.
    #[error("{0:?} is not a byte size (as 67108864, 64M or 1G)")]
    NotANumber(String),
    /// Its unit is none of `K`, `M`, `G`, `T` (and their spellings).
    #[error("{0:?}: unknown unit (K, M, G or T)")]
    UnknownUnit(String),
    /// It does not fit 64 bits.
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// Parses a byte size: a number, optionally followed by `K`, `M`, `G` or
/// `T` (powers of 1024, with or without `i`/`iB`/`B`: `64M`, `64MiB`,
/// `1g`).
pub fn parse_bytes(s: &str) -> Result<u64, BadByteSize> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| BadByteSize::NotANumber(s.to_string()))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "ki" | "kib" => 10,
        "m" | "mb" | "mi" | "mib" => 20,
        "g" | "gb" | "gi" | "gib" => 30,
        "t" | "tb" | "ti" | "tib" => 40,
        _ => return Err(BadByteSize::UnknownUnit(s.to_string())),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| BadByteSize::TooLarge(s.to_string()))
}

/// Deserializes a byte size given as an integer or as a string with a unit
/// (see [`parse_bytes`]).
pub(crate) fn deserialize_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::Deserialize as _;
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Size {
        Int(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Int(n) => Ok(n),
        Size::Text(s) => parse_bytes(&s).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_and_costs() {
        assert_eq!(chunk(0), 32);
        assert_eq!(chunk(24), 32);
        assert_eq!(chunk(25), 48);
        assert_eq!(chunk(100), 112);
        // A key the index keeps in its node, and one it boxes.
        assert_eq!(record_cost(24, 100), 32 + 112 + RECORD_OVERHEAD);
        assert_eq!(record_cost(39, 100), chunk(39) + 160 + RECORD_OVERHEAD);
    }

    #[test]
    fn shares_and_sizes() {
        assert_eq!(worker_share(0, 4), usize::MAX);
        assert_eq!(worker_share(64 << 20, 4), 16 << 20);
        assert_eq!(parse_bytes("67108864"), Ok(64 << 20));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes(" 1g "), Ok(1 << 30));
        assert_eq!(parse_bytes("2k"), Ok(2048));
        for bad in ["", "M", "-1", "1.5G", "12X", "99999999999T"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        let text = |s| parse_bytes(s).unwrap_err().to_string();
        assert_eq!(
            text("M"),
            r#""M" is not a byte size (as 67108864, 64M or 1G)"#
        );
        assert_eq!(text("12X"), r#""12X": unknown unit (K, M, G or T)"#);
        assert_eq!(text("99999999999T"), r#""99999999999T" is too large"#);
    }
}
