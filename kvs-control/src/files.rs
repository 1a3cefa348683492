//! Durable file operations: a file replaced whole or not at all, and the
//! directory entries that make a new or renamed file survive a crash.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The suffix of a file being written in place of another; one left behind
/// by a crash is removed at the next open ([`remove_partial`]).
const PARTIAL: &str = ".partial";

/// Replaces `path` with `bytes`: written to a sibling, flushed to disk,
/// renamed over `path`, and the directory flushed, so that after a crash
/// `path` holds either its old content or all of `bytes`.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (f, tmp) = write_partial(path, bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    sync_dir(path)
}

/// The first half of [`write_atomic`]: `bytes` written to the sibling that
/// is to replace `path`, and flushed. Returns the sibling, open for writing
/// after its end, and its path, for the caller to rename over `path` and
/// then flush the directory ([`sync_dir`]).
pub(crate) fn write_partial(path: &Path, bytes: &[u8]) -> std::io::Result<(File, PathBuf)> {
    let tmp = partial_of(path);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok((f, tmp))
}

/// Flushes the directory holding `path`, so that its creation or a rename
/// onto it is durable.
pub(crate) fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// Removes what a crash in [`write_atomic`] may have left beside `path`.
pub(crate) fn remove_partial(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(partial_of(path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn partial_of(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(PARTIAL);
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_holds_the_new_bytes_and_nothing_is_left_beside_it() {
        let d = test_support::TempDir::new("kvs-control", "files");
        let p = d.path().join("f");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two!").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two!");
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_partial_file_left_by_a_crash_is_removed_and_the_old_one_stays() {
        let d = test_support::TempDir::new("kvs-control", "files");
        let p = d.path().join("f");
        write_atomic(&p, b"old").unwrap();
        std::fs::write(partial_of(&p), b"half of the ne").unwrap();
        remove_partial(&p).unwrap();
        remove_partial(&p).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(!partial_of(&p).exists());
    }
}
