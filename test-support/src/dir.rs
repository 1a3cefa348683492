//! Directories of a test's own.

use std::path::{Path, PathBuf};

use crate::unique_name;

/// A fresh directory under the system's temporary directory, removed with
/// everything in it when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new, empty directory named [`unique_name`]`(prefix, tag)`.
    pub fn new(prefix: &str, tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(unique_name(prefix, tag));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create a test directory");
        TempDir(p)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_empty_and_removed_with_its_files() {
        let d = TempDir::new("ts", "dir");
        let p = d.path().to_owned();
        assert!(p.is_dir() && std::fs::read_dir(&p).unwrap().next().is_none());
        std::fs::write(d.join("f"), "x").unwrap();
        assert!(AsRef::<Path>::as_ref(&d).join("f").is_file());
        drop(d);
        assert!(!p.exists());
    }
}
