//! Shared-memory files: the backing of everything the software device's peers
//! may touch (queue memory, doorbell records, memory regions, the fabric
//! registry). A file under `/dev/shm` mapped `MAP_SHARED`, so another process
//! that maps the same file sees the same bytes. Files are created with mode
//! [`FILE_MODE`]: readable and writable by their owner only.
//!
//! Nothing here names a file after a pid: the processes of a fabric may live
//! in different PID namespaces (containers sharing one fabric directory), where
//! two of them can have the same pid. Private names are random
//! ([`private_name`]); who owns what, and who is alive, is the business of
//! `sim::member`.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

/// The mode of every shared-memory file of a fabric: its owner's only.
pub const FILE_MODE: u32 = 0o600;

/// A mapped shared-memory file.
#[derive(Debug)]
pub struct ShmMap {
    ptr: NonNull<u8>,
    len: usize,
    path: PathBuf,
}

// SAFETY: the mapping is plain shared memory; all concurrent access to it goes
// through atomics or through regions whose ownership protocol (queues, MRs)
// the device enforces.
unsafe impl Send for ShmMap {}
// SAFETY: as above.
unsafe impl Sync for ShmMap {}

impl ShmMap {
    /// Creates (exclusively) and maps a zero-filled file of `len` bytes, mode
    /// [`FILE_MODE`] whatever the umask.
    pub fn create(path: &Path, len: usize) -> io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(path)?;
        // The umask may have taken bits away (never added any).
        f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
        f.set_len(len as u64)?;
        Self::map(&f, path, len)
    }

    /// Creates a zero-filled file of `len` bytes at `path` that no other
    /// process can see before `init` has run on it: the file is built under a
    /// private name and hard-linked into place, so an opener finds either no
    /// file or a finished one (never an empty or half-written one). Fails with
    /// `AlreadyExists` if `path` exists, in which case nothing is published.
    pub fn create_published(
        path: &Path,
        len: usize,
        init: impl FnOnce(&ShmMap),
    ) -> io::Result<Self> {
        // A private name nobody else picks (random, not a pid: processes in
        // other PID namespaces may have ours); `create` refuses an existing one.
        let (tmp, mut m) = loop {
            let tmp = private_name(path);
            match Self::create(&tmp, len) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                r => break (tmp, r?),
            }
        };
        init(&m);
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        linked?;
        m.path = path.to_owned();
        Ok(m)
    }

    /// Maps an existing file, whole.
    pub fn open(path: &Path) -> io::Result<Self> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        let len = f.metadata()?.len() as usize;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "empty shared-memory file",
            ));
        }
        Self::map(&f, path, len)
    }

    fn map(f: &File, path: &Path, len: usize) -> io::Result<Self> {
        // SAFETY: a fresh shared mapping of a file we hold open; the kernel picks
        // the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            ptr: NonNull::new(p as *mut u8).expect("mmap returned null"),
            len,
            path: path.to_owned(),
        })
    }

    /// Base address.
    #[inline(always)]
    pub fn base(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The file's path.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ShmMap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

/// 64 random bits (`getrandom`; if that fails, the clock and a counter mixed).
fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, libc::GRND_NONBLOCK) };
    if n == 8 {
        return v;
    }
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    (t ^ c.rotate_left(32) ^ (&COUNTER as *const AtomicU64 as u64))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A private name beside `path` for a file to be built and then published
/// under `path`: `<name>.tmp-<64 random bits>`. Create it exclusively (and pick
/// another on `AlreadyExists`).
pub fn private_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(".tmp-{:016x}", random_u64()));
    path.with_file_name(name)
}

/// Removes a file, ignoring "not found".
pub fn unlink(path: &Path) {
    if let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) {
        // SAFETY: a valid C string.
        unsafe {
            libc::unlink(c.as_ptr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// While the creator is still initializing, an opener finds no file at
    /// all; once published, it finds the finished contents.
    #[test]
    fn a_published_file_is_never_seen_half_made() {
        let dir = std::env::temp_dir().join(format!("shm-publish-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("registry");
        let (in_init, go_on) = (mpsc::channel(), mpsc::channel::<()>());
        let p = path.clone();
        let creator = std::thread::spawn(move || {
            ShmMap::create_published(&p, 8192, |m| {
                in_init.0.send(()).unwrap();
                go_on.1.recv().unwrap();
                // SAFETY: the mapping is 8192 bytes long.
                unsafe { m.base().as_ptr().add(100).write(0x5a) };
            })
            .unwrap()
        });
        in_init.1.recv().unwrap();
        let early = ShmMap::open(&path).map(|_| ()).unwrap_err();
        assert_eq!(early.kind(), io::ErrorKind::NotFound);
        go_on.0.send(()).unwrap();
        let made = creator.join().unwrap();
        assert_eq!(made.path(), path.as_path());
        let seen = ShmMap::open(&path).unwrap();
        assert_eq!(seen.len(), 8192);
        // SAFETY: in bounds of the 8192-byte mapping.
        assert_eq!(unsafe { seen.base().as_ptr().add(100).read() }, 0x5a);
        // A second creator does not replace it.
        let again = ShmMap::create_published(&path, 4096, |_| {}).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(ShmMap::open(&path).unwrap().len(), 8192);
        // No private names are left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
