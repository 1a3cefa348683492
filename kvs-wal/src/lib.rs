//! The workspace's one log format: an append-only file of CRC-checked
//! records, written a batch at a time, read back after a crash with a
//! torn last write cut off, and replaced whole when it is to shed what a
//! snapshot covers. The control plane's write-ahead log (kvs-control) is
//! one; the servers' data logs are to be others, each with its own magic.
//!
//! # The format
//!
//! ```text
//! file:   magic 8 | record*
//! record: length u32 | crc u32 | kind u8 | payload (length - 1 bytes)
//! ```
//!
//! | bytes (of the record) | field | |
//! |---|---|---|
//! | 0..8 of the file | magic | chosen by the log's user ([`Format`]): its kind and version, e.g. kvs-control's `KVSWAL\0\x01` |
//! | 0..4 | length | u32 little-endian: the bytes of kind and payload, 1 to [`Format::max_record`] |
//! | 4..8 | crc | u32 little-endian: CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320, as zlib and `crc32fast`) of kind and payload |
//! | 8 | kind | what the payload is, the user's to define |
//! | 9..8+length | payload | the user's bytes |
//!
//! [`field`] names these ranges. Records follow one another with no
//! padding; the file ends after the last one.
//!
//! # Crash rules
//!
//! A log only grows, a batch at a time, and a batch is flushed before
//! anything that depends on it leaves the process; so a crash can tear only
//! the last batch written. Replay ([`Log::replay`]), from the first record
//! on:
//!
//! - the file ending inside a record's header, or before the end its
//!   length gives, is a torn tail;
//! - a record whose CRC does not match (or whose length is 0) is a torn
//!   tail if nothing but zero bytes follow it to the end of the file: a
//!   crash can leave the file extended with zeros where the batch's data
//!   never reached the disk (ext4 and xfs update the size first). A run of
//!   zeros where a header should be is the same case (length 0);
//! - such a record with anything else after it is damage, and so is a
//!   length larger than [`Format::max_record`], or a record the reader
//!   rejects: an error naming the file and the record's offset
//!   ([`WalError::Corrupt`]), never silently skipped;
//! - a file that does not start with the magic is damage at offset 0.
//!
//! A torn tail is reported ([`Replayed::torn_bytes`]) and cut off the file
//! before anything is appended ([`Replayed::append`]).
//!
//! A failed write (a full disk, `EFBIG`) leaves the log ending where it
//! did: whatever part of the batch reached the file is cut off, so a later
//! write never follows it ([`WalError::Write`]). A failed fsync stops the
//! log taking writes ([`WalError::SyncFailed`]): after one, the kernel may
//! have dropped written pages, and no later fsync would say so.
//!
//! A rewrite ([`Writer::rewrite`]) writes the new log beside the old one
//! as `NAME.partial`, flushes it, renames it over the old one, and flushes
//! the directory: a crash leaves the old log whole, perhaps with a
//! `.partial` beside it that the next [`Log::open`] removes, or the new one
//! whole. [`write_atomic`] replaces any other file the same way.
//!
//! # Call order
//!
//! ```no_run
//! # use std::path::Path;
//! use kvs_wal::{Format, Log};
//!
//! const FORMAT: Format = Format::new(*b"EXAMPLE\x01", 1 << 20);
//!
//! # fn main() -> Result<(), kvs_wal::WalError> {
//! // 1. Open: removes a `.partial` left by a crashed rewrite, creates a
//! //    fresh log durably if there is none, checks the magic.
//! let log = Log::open(Path::new("data/log"), FORMAT)?;
//! // 2. Replay every record, a chunk at a time.
//! let replayed = log.replay(&mut |kind: u8, payload: &[u8], offset: u64| {
//!     // apply the record; an Err stops the replay as damage at `offset`
//!     Ok(())
//! })?;
//! // 3. Append: cuts a torn tail off, flushes.
//! let mut w = replayed.append()?;
//! // 4. Each turn: push records, write them with one write(2), flush
//! //    (per the durability policy: here, or from a thread holding a
//! //    `w.sync_handle()`, or never).
//! w.push(1, b"a record")?;
//! w.write()?;
//! w.sync()?;
//! // 5. Now and then, shed what a snapshot covers.
//! w.rewrite(|b| b.push(2, b"what the snapshot does not cover"))?;
//! # Ok(())
//! # }
//! ```

#![deny(unsafe_code)]

mod batch;
mod error;
pub mod field;
mod files;
mod flush_times;
mod format;
mod open;
mod replacement;
mod replay;
mod sync;
#[cfg(test)]
mod testing;
mod window;
mod writer;

pub use batch::Batch;
pub use error::{Damage, Reason, TooLarge, WalError};
pub use files::{remove_partial, write_atomic};
pub use flush_times::{FlushTimes, FLUSH_BOUNDS};
pub use format::Format;
pub use open::Log;
pub use replacement::Replacement;
pub use replay::{Replayed, Visit};
pub use sync::SyncHandle;
pub use writer::Writer;
