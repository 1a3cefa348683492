//! Shared-memory files: the backing of everything the software device's peers
//! may touch (queue memory, doorbell records, memory regions, the fabric
//! registry). A file under `/dev/shm` mapped `MAP_SHARED`, so another process
//! that maps the same file sees the same bytes.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

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
    /// Creates (exclusively) and maps a zero-filled file of `len` bytes.
    pub fn create(path: &Path, len: usize) -> io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        f.set_len(len as u64)?;
        Self::map(&f, path, len)
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

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Pointer to `len` bytes at `off`, if they lie inside the mapping.
    #[inline(always)]
    pub fn at(&self, off: u64, len: u64) -> Option<NonNull<u8>> {
        let end = off.checked_add(len)?;
        if end > self.len as u64 {
            return None;
        }
        // SAFETY: in bounds, checked above.
        Some(unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(off as usize)) })
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

/// Whether process `pid` is alive (it exists, whoever owns it).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// This process's id (cached: `getpid` is a system call, and the device asks
/// for it on every lock).
pub fn my_pid() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static PID: AtomicU32 = AtomicU32::new(0);
    match PID.load(Ordering::Relaxed) {
        0 => {
            let p = std::process::id();
            PID.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
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
