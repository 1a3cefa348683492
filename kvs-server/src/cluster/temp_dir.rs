//! The data dir of a member started without `data_dir`: a directory under
//! the system's temporary directory that goes with the process.
//!
//! A process killed with SIGKILL cannot remove it, so each one holds an
//! exclusive `flock` on its `owner` file for as long as the process lives
//! (the kernel drops it at death, whatever the PID namespace), and each new
//! one first removes those whose lock nobody holds.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of every temporary data dir.
const PREFIX: &str = "kvs-server-";
/// The file whose lock says the owner lives.
const OWNER: &str = "owner";

/// A data dir that goes with the process (removed when dropped).
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
    /// Holds the lock while the process lives.
    _owner: File,
}

impl TempDir {
    /// A new one under `parent` (the system's temporary directory), after
    /// removing those left by processes that died.
    pub fn new_in(parent: &Path) -> std::io::Result<TempDir> {
        remove_orphans(parent);
        static N: AtomicU32 = AtomicU32::new(0);
        let path = parent.join(format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        let owner = File::create(path.join(OWNER))?;
        if !try_lock(&owner)? {
            return Err(std::io::Error::other(
                "its owner lock is held by another process",
            ));
        }
        Ok(TempDir {
            path,
            _owner: owner,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Takes the exclusive lock on `f` without waiting: whether it got it.
fn try_lock(f: &File) -> std::io::Result<bool> {
    // SAFETY: flock(2) on a descriptor this File owns and keeps open; it
    // touches no memory.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Removes the temporary data dirs under `parent` whose owner is dead (its
/// lock is free). One whose owner file is missing is left alone: it may be
/// being made right now.
fn remove_orphans(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let dir = e.path();
        let Ok(owner) = File::open(dir.join(OWNER)) else {
            continue;
        };
        if let Ok(true) = try_lock(&owner) {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_owners_dir_is_removed_and_a_live_ones_is_kept() {
        let parent = std::env::temp_dir().join(format!("kvs-tempdir-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&parent);
        std::fs::create_dir_all(&parent).unwrap();
        // Left by a process killed with SIGKILL: nobody holds its lock.
        let dead = parent.join(format!("{PREFIX}999999-0"));
        std::fs::create_dir_all(&dead).unwrap();
        File::create(dead.join(OWNER)).unwrap();
        std::fs::write(dead.join("raft"), b"x").unwrap();
        // Another file that is not ours.
        std::fs::create_dir_all(parent.join("other")).unwrap();
        let live = TempDir::new_in(&parent).unwrap();
        assert!(!dead.exists(), "the dead owner's dir is gone");
        assert!(parent.join("other").exists());
        // A second one keeps the first: its lock is held.
        let second = TempDir::new_in(&parent).unwrap();
        assert!(live.path().exists() && second.path().exists());
        let p = live.path().to_path_buf();
        drop(live);
        assert!(!p.exists());
        drop(second);
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
