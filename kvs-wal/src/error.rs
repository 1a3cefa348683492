//! What can go wrong with a log, each naming the file (and the byte, where
//! there is one).

use std::path::PathBuf;

/// Why a visitor refused a record it was given (it does not decode, or is
/// of a kind it does not know): the replay stops with
/// [`Damage::Rejected`].
pub type Reason = Box<dyn std::error::Error + Send + Sync>;

/// A log (or a file replaced beside it) could not be read or written, or
/// holds something it should not.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Appending a batch failed (the disk is full, the file too large, an
    /// I/O error). The log still ends at byte `at`: whatever part of the
    /// batch reached the file was cut off, or is cut off before the next
    /// write, so a later write never follows it. The batch is kept, to be
    /// written again or discarded.
    #[error(
        "{path}: appending at byte {at} failed: {source}; \
         the log still ends at byte {at} and the batch is kept"
    )]
    Write {
        /// The log.
        path: PathBuf,
        /// Where the log ends, and the batch was to start.
        at: u64,
        /// Why.
        source: std::io::Error,
    },
    /// The file is damaged (not just cut short by a crash).
    #[error("{path} is damaged at byte {offset}: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the damaged record (or the magic) starts.
        offset: u64,
        /// What is wrong there.
        why: Damage,
    },
    /// A record larger than the log's format allows was pushed.
    #[error("{path}: {source}")]
    TooLarge {
        /// The log.
        path: PathBuf,
        /// The record's size and the limit.
        source: TooLarge,
    },
    /// An fsync of the log failed earlier: the kernel may have dropped
    /// written bytes it could not store, and no later fsync can tell. The
    /// log takes no more writes until it is rewritten
    /// ([`Writer::rewrite`](crate::Writer::rewrite)) or opened and
    /// replayed again.
    #[error(
        "{path}: an earlier fsync failed, so what was written after byte {durable} \
         may not be on disk; the log takes no more writes until it is rewritten or opened again"
    )]
    SyncFailed {
        /// The log.
        path: PathBuf,
        /// The bytes known to be on disk before the failure.
        durable: u64,
    },
}

impl WalError {
    /// Whether the disk (or the user's quota) is full: `ENOSPC` or
    /// `EDQUOT` from a write, a flush or a reservation.
    pub fn is_disk_full(&self) -> bool {
        let source = match self {
            WalError::Io { source, .. } | WalError::Write { source, .. } => source,
            _ => return false,
        };
        matches!(
            source.raw_os_error(),
            Some(libc::ENOSPC) | Some(libc::EDQUOT)
        )
    }
}

/// What is wrong at the offset of a [`WalError::Corrupt`].
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    /// The file does not start with the format's magic: it is another
    /// kind of file, or another version of this log.
    #[error("it does not start with the magic of this kind and version of log")]
    BadMagic,
    /// A record claims more bytes than the format allows.
    #[error("a record claims {len} bytes, more than the {max} a record may hold")]
    TooLarge {
        /// What its length field says.
        len: u32,
        /// The format's largest record.
        max: u32,
    },
    /// A record of length 0 (it has no kind), with more than zeros after
    /// it.
    #[error("a record of no bytes, not even its kind")]
    Empty,
    /// A record whose CRC does not match its bytes, with more than zeros
    /// after it.
    #[error("a record whose checksum does not match")]
    Checksum,
    /// A file that is complete once in place (a
    /// [`Replacement`](crate::Replacement), such as a snapshot) ends inside
    /// a record or before the record that ends it: it was cut short after
    /// it was written.
    #[error("the file was cut short: it ends before its last record does")]
    Cut,
    /// The visitor refused a whole, well-checksummed record.
    #[error("a record of kind {kind} that the reader rejects: {reason}")]
    Rejected {
        /// The record's kind.
        kind: u8,
        /// The visitor's reason.
        reason: Reason,
    },
}

/// A record too large for its log's format, refused when pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a record of {len} bytes (kind and payload) is larger than the {max} this log allows")]
pub struct TooLarge {
    /// The record's bytes of kind and payload.
    pub len: usize,
    /// The format's largest record.
    pub max: u32,
}
