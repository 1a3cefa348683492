//! A file of records built beside the file it is to replace, a batch at a
//! time, and put in its place whole: how a snapshot too large to hold in
//! memory is written.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::batch::Batch;
use crate::error::WalError;
use crate::files;
use crate::format::Format;

/// A file in a log's format being written beside `path` (as
/// `NAME.partial`), to replace it once [`finish`](Self::finish)ed: flushed,
/// renamed over `path`, and the directory flushed, as
/// [`write_atomic`](crate::write_atomic) does for bytes held in memory. A
/// crash, or dropping it unfinished, leaves `path` as it was; a partial
/// file a crash left is removed by [`remove_partial`](crate::remove_partial)
/// or the next [`Log::open`](crate::Log::open) of `path`.
///
/// Such a file is complete when it is in place, so its reader should treat
/// a torn tail ([`Replayed::torn_bytes`](crate::Replayed::torn_bytes)) as
/// damage ([`Damage::Cut`](crate::Damage::Cut)), not as a crash's.
#[derive(Debug)]
pub struct Replacement {
    /// `None` once finished.
    file: Option<File>,
    tmp: PathBuf,
    path: PathBuf,
    len: u64,
}

impl Replacement {
    /// Starts the file that is to replace `path`: its magic is written to
    /// the partial file beside it (one an earlier attempt left is
    /// overwritten).
    pub fn create(path: &Path, format: Format) -> Result<Replacement, WalError> {
        let (file, tmp) = files::open_partial(path)?;
        let mut r = Replacement {
            file: Some(file),
            tmp,
            path: path.to_path_buf(),
            len: 0,
        };
        r.write_bytes(format.magic())?;
        Ok(r)
    }

    /// Appends `batch`'s records (in the format given at
    /// [`create`](Self::create)), leaving it empty to be filled again.
    pub fn write(&mut self, batch: &mut Batch) -> Result<(), WalError> {
        self.write_bytes(batch.bytes())?;
        batch.clear();
        Ok(())
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<(), WalError> {
        let file = self.file.as_mut().expect("an unfinished replacement");
        file.write_all(bytes).map_err(|source| WalError::Io {
            path: self.tmp.clone(),
            source,
        })?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// The bytes written so far, magic included.
    pub fn written(&self) -> u64 {
        self.len
    }

    /// Puts the file in place of `path`: flushed, renamed over it, and the
    /// directory flushed. Returns its length. On an error the old file (if
    /// any) is still in place unless the rename happened, which the error
    /// then says (the directory's flush failed).
    pub fn finish(mut self) -> Result<u64, WalError> {
        let file = self.file.take().expect("an unfinished replacement");
        file.sync_all().map_err(|source| WalError::Io {
            path: self.tmp.clone(),
            source,
        })?;
        drop(file);
        std::fs::rename(&self.tmp, &self.path).map_err(|source| WalError::Io {
            path: self.path.clone(),
            source,
        })?;
        files::sync_dir(&self.path)?;
        Ok(self.len)
    }
}

impl Drop for Replacement {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // Unfinished: the partial file goes; `path` stays as it was.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_log, F};
    use crate::Damage;

    /// A replacement of the file `snap` (holding `old`) in a new temporary
    /// directory, with one record written.
    fn begun() -> (
        test_support::TempDir,
        std::path::PathBuf,
        Replacement,
        Batch,
    ) {
        let d = test_support::TempDir::new("kvs-wal", "replacement");
        let p = d.path().join("snap");
        crate::write_atomic(&p, b"old").unwrap();
        let mut r = Replacement::create(&p, F).unwrap();
        let mut b = Batch::new(F);
        b.push(1, b"one").unwrap();
        r.write(&mut b).unwrap();
        (d, p, r, b)
    }

    #[test]
    fn a_finished_replacement_takes_the_place_whole() {
        let (_d, p, mut r, mut b) = begun();
        assert!(b.is_empty());
        b.push(2, b"two").unwrap();
        r.write(&mut b).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"old", "not in place yet");
        let len = r.finish().unwrap();
        assert_eq!(len, std::fs::metadata(&p).unwrap().len());
        let (got, replayed) = read_log(&p, 1 << 20).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(replayed.torn_bytes(), 0);
        assert!(!files::partial_of(&p).exists());
    }

    #[test]
    fn an_unfinished_replacement_leaves_the_old_file_and_nothing_beside() {
        let (_d, p, r, _) = begun();
        drop(r);
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(!files::partial_of(&p).exists());
        // The damage a reader reports for a complete file cut short.
        assert!(Damage::Cut.to_string().contains("cut short"));
    }
}
