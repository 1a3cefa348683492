//! What a log's user chooses: its magic and its largest record.

use crate::field;

/// The choices that make one kind of log: the magic its files start with
/// (its kind and version), and the most a record may hold. A log is
/// opened, replayed and written with the same `Format` throughout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    magic: [u8; field::MAGIC.end],
    max_record: u32,
}

impl Format {
    /// A format with files starting with `magic` and records of at most
    /// `max_record` bytes of kind and payload (the `length` field). A
    /// record that claims more is damage when read, and refused when
    /// pushed.
    ///
    /// # Panics
    /// If `max_record` is 0 (a record holds at least its kind).
    pub const fn new(magic: [u8; field::MAGIC.end], max_record: u32) -> Format {
        assert!(max_record > 0, "a record holds at least its kind");
        Format { magic, max_record }
    }

    /// The magic the files start with.
    pub const fn magic(&self) -> &[u8; field::MAGIC.end] {
        &self.magic
    }

    /// The most bytes of kind and payload a record may hold.
    pub fn max_record(&self) -> u32 {
        self.max_record
    }
}
