//! A log opened and its magic checked, before it is replayed.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{Damage, WalError};
use crate::field;
use crate::files;
use crate::format::Format;

/// The bytes a replay reads at a time unless told otherwise.
const CHUNK: usize = 1 << 20;

/// A log file, open and checked to start with its format's magic; the
/// next step is [`Log::replay`].
#[derive(Debug)]
pub struct Log {
    pub(crate) path: PathBuf,
    pub(crate) file: File,
    pub(crate) format: Format,
    /// The file's size when opened.
    pub(crate) size: u64,
    pub(crate) chunk: usize,
}

impl Log {
    /// Opens the log at `path`, first removing a `.partial` replacement a
    /// crash left beside it. If there is no log, a fresh one (just the
    /// magic) is created durably: written beside, flushed, renamed into
    /// place, and the directory flushed, so that a crash never leaves a
    /// log without its magic.
    pub fn open(path: &Path, format: Format) -> Result<Log, WalError> {
        let io = |source| WalError::Io {
            path: path.to_path_buf(),
            source,
        };
        files::remove_partial(path)?;
        let open = || OpenOptions::new().read(true).write(true).open(path);
        let mut file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                files::write_atomic(path, format.magic())?;
                open().map_err(io)?
            }
            other => other.map_err(io)?,
        };
        let size = file.metadata().map_err(io)?.len();
        let mut magic = [0u8; field::MAGIC.end];
        if size < magic.len() as u64 {
            return Err(bad_magic(path));
        }
        file.read_exact(&mut magic).map_err(io)?;
        if &magic != format.magic() {
            return Err(bad_magic(path));
        }
        Ok(Log {
            path: path.to_path_buf(),
            file,
            format,
            size,
            chunk: CHUNK,
        })
    }

    /// Sets the bytes a replay reads at a time (1 MiB unless set; at least
    /// 1). A record larger than this is still read whole.
    pub fn set_chunk(&mut self, bytes: usize) {
        self.chunk = bytes.max(1);
    }

    /// The file's size in bytes: what a replay reads.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn bad_magic(path: &Path) -> WalError {
    WalError::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        why: Damage::BadMagic,
    }
}
