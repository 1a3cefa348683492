//! Durable file operations: a file replaced whole or not at all, and the
//! directory entries that make a new or renamed file survive a crash.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::WalError;

/// The suffix of a file being written in place of another; one left behind
/// by a crash is removed at the next open ([`remove_partial`]).
const PARTIAL: &str = ".partial";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WalError + '_ {
    move |source| WalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Replaces `path` with `bytes`: written to a sibling (`path` with
/// `.partial` appended to its name), flushed to disk, renamed over `path`,
/// and the directory flushed, so that after a crash `path` holds either
/// its old content or all of `bytes`. A sibling a crash left behind is
/// removed by [`remove_partial`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), WalError> {
    let (f, tmp) = write_partial(path, &[bytes])?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(path)
}

/// The first half of [`write_atomic`]: `parts` written one after the other
/// to the sibling that is to replace `path`, and flushed. Returns the
/// sibling, open for reading and writing, and its path, for the caller to
/// rename over `path` and then flush the directory ([`sync_dir`]).
pub(crate) fn write_partial(path: &Path, parts: &[&[u8]]) -> Result<(File, PathBuf), WalError> {
    let (mut f, tmp) = open_partial(path)?;
    for p in parts {
        f.write_all(p).map_err(io(&tmp))?;
    }
    f.sync_all().map_err(io(&tmp))?;
    Ok((f, tmp))
}

/// The sibling that is to replace `path`, created empty (or emptied), open
/// for reading and writing, and its path.
pub(crate) fn open_partial(path: &Path) -> Result<(File, PathBuf), WalError> {
    let tmp = partial_of(path);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io(&tmp))?;
    Ok((f, tmp))
}

/// Flushes the directory holding `path`, so that its creation or a rename
/// onto it is durable.
pub(crate) fn sync_dir(path: &Path) -> Result<(), WalError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Removes what a crash in [`write_atomic`] (or a log's rewrite) may have
/// left beside `path`: a replacement never renamed into place.
pub fn remove_partial(path: &Path) -> Result<(), WalError> {
    let tmp = partial_of(path);
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&tmp)(e)),
        _ => Ok(()),
    }
}

pub(crate) fn partial_of(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(PARTIAL);
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_holds_the_new_bytes_and_nothing_is_left_beside_it() {
        let d = test_support::TempDir::new("kvs-wal", "files");
        let p = d.path().join("f");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two!").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two!");
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_partial_file_left_by_a_crash_is_removed_and_the_old_one_stays() {
        let d = test_support::TempDir::new("kvs-wal", "files");
        let p = d.path().join("f");
        write_atomic(&p, b"old").unwrap();
        std::fs::write(partial_of(&p), b"half of the ne").unwrap();
        remove_partial(&p).unwrap();
        remove_partial(&p).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(!partial_of(&p).exists());
    }

    #[test]
    fn errors_name_the_file() {
        let d = test_support::TempDir::new("kvs-wal", "files");
        let p = d.path().join("no such dir").join("f");
        let e = write_atomic(&p, b"x").unwrap_err();
        assert!(e.to_string().contains("no such dir/f.partial"), "{e}");
    }
}
