//! The byte layout of a log file: where each field lies.
//!
//! ```text
//! file:   magic 8 | record*
//! record: length u32 | crc u32 | kind u8 | payload (length - 1 bytes)
//! ```
//!
//! Integers are little-endian. `length` counts the bytes after the header
//! (kind and payload); `crc` is the CRC-32 (IEEE 802.3, as `crc32fast` and
//! zlib compute it) of those same bytes.

use core::ops::{Range, RangeFrom};

/// A field's bytes, from the start of the file (the magic) or of its
/// record (the others).
pub type Field = Range<usize>;

/// The file's first bytes: a magic the log's user chooses
/// ([`Format`](crate::Format)), naming what the file holds and its version.
pub const MAGIC: Field = 0..8;

/// A record's length: the bytes of kind and payload, at least 1.
pub const LENGTH: Field = 0..4;

/// The CRC-32 of the kind and payload.
pub const CRC: Field = 4..8;

/// A record's header: length and CRC.
pub const HEADER_LEN: usize = CRC.end;

/// A record's kind, meaningful to the log's user only.
pub const KIND: usize = HEADER_LEN;

/// A record's payload, up to `HEADER_LEN + length`.
pub const PAYLOAD: RangeFrom<usize> = KIND + 1..;

/// The length and CRC of the record whose header is `h`.
pub(crate) fn header(h: &[u8; HEADER_LEN]) -> (u32, u32) {
    let word =
        |r: Field| u32::from_le_bytes([h[r.start], h[r.start + 1], h[r.start + 2], h[r.start + 3]]);
    (word(LENGTH), word(CRC))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_follow_one_another_without_gaps() {
        assert_eq!(LENGTH.end, CRC.start);
        assert_eq!(HEADER_LEN, 8);
        assert_eq!((KIND, PAYLOAD.start), (8, 9));
        assert_eq!(MAGIC.len(), 8);
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(&0x0102_0304u32.to_le_bytes());
        h[4..].copy_from_slice(&0xa0b0_c0d0u32.to_le_bytes());
        assert_eq!(header(&h), (0x0102_0304, 0xa0b0_c0d0));
    }
}
