//! Who a process is in a fabric, and whether it still lives — without pids.
//!
//! The processes that share a fabric need not share a PID namespace:
//! servers in containers (`systemd-nspawn`, `unshare --pid`) on one kernel
//! bind-mount one fabric directory and talk through it. Their pids are not
//! comparable: two of them may both be pid 1, a live peer's pid may not exist
//! in our namespace, and a dead peer's pid may belong to an unrelated process
//! of ours. So a process is known in a fabric by a *token*, and its liveness
//! is a lock the kernel holds for it, both of which mean the same in every
//! namespace that sees the fabric's files.
//!
//! **Identity.** A token is a nonzero `u32` taken from the registry header's
//! counter ([`Header::next_token`](super::registry::Header::next_token)) with
//! one `fetch_add`. Registry entries record it as their owner, and shared
//! locks ([`ShmLock`](super::sync::ShmLock)) as their holder. All threads of a
//! process share its token; a process that opens a fabric again after letting
//! go of it (see [`Fabric`](super::fabric::Fabric)) gets a new one.
//!
//! **Liveness.** A member holds an open-file-description lock
//! (`F_OFD_SETLK`, a write lock over the whole file) on a file of its own,
//! `proc-<token>` in the fabric's directory, for as long as it lives. The
//! kernel releases the lock when the last descriptor of that open file
//! description closes — when the process exits or is killed, however it
//! dies — and since the lock is on the inode, every process that sees the
//! file sees it, whatever its PID or mount namespace. [`alive`] asks with
//! `F_OFD_GETLK`, which only reports and never takes the lock, so a check
//! cannot disturb the member. A missing file is a dead member.
//!
//! A check is three system calls (`openat`, `fcntl`, `close`: a few µs where
//! `kill(pid, 0)` took half of one), which is why callers keep it off hot
//! paths: a requester checks its peer at most once per millisecond, a lock
//! waiter after thousands of spins. The descriptor is not kept between
//! checks: that would hold one descriptor per peer for as long as this
//! process lives, and a process short of descriptors (a server at its
//! open-file limit) needs every one it has. Two are held for good: the
//! directory's and the locked file's.
//!
//! **Races.**
//! - *Creation.* The file is made under a private random name, locked, and
//!   only then hard-linked as `proc-<token>`; so a published file is locked
//!   from its first moment, and the token is used (stored in an entry or a
//!   lock word) only after that. A token whose file is not there yet is
//!   carried by nothing, so no one asks about it. The link fails if
//!   `proc-<token>` exists (the counter wrapped onto a token still in use, or
//!   one whose file was not reaped yet); the member then takes the next token.
//! - *Death is final.* Nobody but its creator ever locks a proc file, and the
//!   creator locks it before publishing it; so a file found unlocked stays
//!   unlocked, and a token found dead stays dead (tokens are not reused while
//!   their file exists). Reaping ([`Fabric::reap_dead`]) frees a dead token's
//!   entries before it removes its file, and then either finding (an
//!   unlocked file, no file) says "dead".
//! - *Exit.* A member that lets go of the fabric removes its file and then
//!   closes it: a checker that opened the file just before sees the lock
//!   until the close, when nothing of the member is left.
//!
//! **Fork.** A child forked without `exec` shares the parent's open file
//! description, so it keeps the parent's token alive until it exits too (and
//! shares its identity); the software device does not support a forked child
//! that uses the parent's fabric anyway (it would share its queues). The file
//! is opened close-on-exec, so an `exec`ed program does not inherit it.
//!
//! [`Fabric::reap_dead`]: super::fabric::Fabric::reap_dead

use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::shm::{private_name, FILE_MODE};

/// Prefix of the liveness files' names (`proc-<token>`).
pub const PROC_PREFIX: &str = "proc-";

/// This process's membership of a fabric: its token, and the locked file
/// that says it lives. Dropping it removes the file and releases the lock.
#[derive(Debug)]
pub struct Member {
    token: u32,
    /// The fabric's directory (an `O_PATH` descriptor), for `openat`.
    dir: OwnedFd,
    /// The locked liveness file; closing it releases the lock.
    _file: File,
}

/// `proc-<token>` as a NUL-terminated name, built without allocating (the
/// responder's liveness check runs it).
struct ProcName {
    buf: [u8; 16],
}

impl ProcName {
    fn new(token: u32) -> Self {
        let mut buf = [0u8; 16];
        buf[..5].copy_from_slice(PROC_PREFIX.as_bytes());
        let mut digits = [0u8; 10];
        let mut n = token;
        let mut k = digits.len();
        loop {
            k -= 1;
            digits[k] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let d = &digits[k..];
        buf[5..5 + d.len()].copy_from_slice(d);
        // buf[5 + d.len()] is the NUL: at most 5 + 10 < 16.
        Self { buf }
    }

    fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.buf).expect("a NUL ends the name")
    }
}

/// The token a liveness file's name carries (`proc-<token>`).
pub fn token_of_name(name: &str) -> Option<u32> {
    let t: u32 = name.strip_prefix(PROC_PREFIX)?.parse().ok()?;
    (t != 0 && name == ProcName::new(t).as_cstr().to_str().ok()?).then_some(t)
}

/// An `F_OFD_*` lock description covering the whole file.
fn whole_file(l_type: libc::c_int) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value (l_pid must be
    // 0 for OFD requests).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = l_type as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl
}

/// Whether the member with `token` lives: its file in the directory `dir`
/// exists and is locked. Token 0 (no owner) is dead. An error other than a
/// missing file (say, out of descriptors) counts as alive: a live member is
/// never declared dead on a doubt, and the next check asks again.
pub fn alive(dir: &OwnedFd, token: u32) -> bool {
    if token == 0 {
        return false;
    }
    let name = ProcName::new(token);
    // SAFETY: `dir` is an open directory descriptor and the name a valid C
    // string; the result is checked.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_cstr().as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        return io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT);
    }
    // SAFETY: `fd` was just opened and is ours; OwnedFd closes it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut fl = whole_file(libc::F_WRLCK);
    // SAFETY: F_OFD_GETLK reads and writes the flock we pass, nothing else.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    // Any lock conflicts with a write lock: F_UNLCK means nobody holds one.
    r < 0 || fl.l_type != libc::F_UNLCK as libc::c_short
}

/// Takes an OFD write lock on all of `f`, failing at once if someone holds a
/// lock on it.
fn lock_file(f: &File) -> io::Result<()> {
    let fl = whole_file(libc::F_WRLCK);
    // SAFETY: F_OFD_SETLK only reads the flock we pass.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens `dir` for `openat` (an `O_PATH` descriptor).
fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)?;
    Ok(f.into())
}

impl Member {
    /// Joins the fabric whose directory is `dir`: takes a token from `next`
    /// (the registry's counter) and publishes its locked liveness file.
    pub fn join(dir: &Path, next: &AtomicU32) -> io::Result<Member> {
        let dirfd = open_dir(dir)?;
        let (tmp, file) = Self::locked_private_file(dir)?;
        let joined = Self::publish(dir, &tmp, next);
        std::fs::remove_file(&tmp).ok();
        let token = joined?;
        Ok(Member {
            token,
            dir: dirfd,
            _file: file,
        })
    }

    /// A new file under a private name in `dir`, mode [`FILE_MODE`], with
    /// this process's lock on it.
    fn locked_private_file(dir: &Path) -> io::Result<(PathBuf, File)> {
        for _ in 0..16 {
            let tmp = private_name(&dir.join(PROC_PREFIX));
            let f = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(&tmp)
            {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            };
            let locked = f
                .set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
                .and_then(|()| lock_file(&f));
            if let Err(e) = locked {
                std::fs::remove_file(&tmp).ok();
                return Err(e);
            }
            return Ok((tmp, f));
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no free private name for a liveness file",
        ))
    }

    /// Links the locked file `tmp` as `proc-<token>` for the first token from
    /// `next` whose name is free; returns the token.
    fn publish(dir: &Path, tmp: &Path, next: &AtomicU32) -> io::Result<u32> {
        for _ in 0..1024 {
            let token = next.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            if token == 0 {
                continue;
            }
            let name = ProcName::new(token);
            let path = dir.join(name.as_cstr().to_str().expect("ASCII"));
            match std::fs::hard_link(tmp, &path) {
                Ok(()) => return Ok(token),
                // A token still in use (the counter wrapped), or a dead one
                // not reaped yet: take the next.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no free token: 1024 liveness files in a row exist",
        ))
    }

    /// This process's token in the fabric (nonzero).
    #[inline(always)]
    pub fn token(&self) -> u32 {
        self.token
    }

    /// Whether the member with `token` lives (see [`alive`]): three system
    /// calls, one when its file is missing.
    pub fn alive(&self, token: u32) -> bool {
        alive(&self.dir, token)
    }

    /// Removes the liveness file of `token` if its member is dead; returns
    /// whether it did.
    pub fn remove_if_dead(&self, token: u32) -> bool {
        if token == self.token || self.alive(token) {
            return false;
        }
        let name = ProcName::new(token);
        // SAFETY: a directory descriptor and a valid C string.
        unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_cstr().as_ptr(), 0) == 0 }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // Remove the file while the lock still holds, then (as the fields
        // drop) close it: a checker sees "alive" or "missing", never a stale
        // unlocked file of ours.
        let name = ProcName::new(self.token);
        // SAFETY: a directory descriptor and a valid C string.
        unsafe {
            libc::unlinkat(self.dir.as_raw_fd(), name.as_cstr().as_ptr(), 0);
        }
    }
}

#[cfg(test)]
pub(in crate::sim) mod tests {
    use super::*;
    use std::process::Command;

    /// A fresh directory for liveness files, and a descriptor of it.
    pub(in crate::sim) fn scratch(tag: &str) -> (PathBuf, OwnedFd) {
        let dir = std::env::temp_dir().join(format!("member-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fd = open_dir(&dir).unwrap();
        (dir, fd)
    }

    fn proc_files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn names_round_trip() {
        for t in [1, 9, 10, 12345, u32::MAX] {
            let n = ProcName::new(t);
            let s = n.as_cstr().to_str().unwrap();
            assert_eq!(s, format!("proc-{t}"));
            assert_eq!(token_of_name(s), Some(t));
        }
        for bad in [
            "proc-0",
            "proc-",
            "proc-01",
            "proc-x",
            "seg-1-2",
            "proc-1.tmp-ab",
        ] {
            assert_eq!(token_of_name(bad), None, "{bad}");
        }
    }

    /// A member is alive while it holds its file, also to another handle in
    /// the same process; it is dead once it lets go, and its file is gone;
    /// a token that never had a file (or 0) is dead.
    #[test]
    fn alive_while_held_dead_after_close_missing_is_dead() {
        let (dir, fd) = scratch("held");
        let next = AtomicU32::new(0);
        let a = Member::join(&dir, &next).unwrap();
        let b = Member::join(&dir, &next).unwrap();
        assert_eq!((a.token(), b.token()), (1, 2));
        assert_eq!(
            proc_files(&dir),
            ["proc-1", "proc-2"],
            "no private names left"
        );
        let mode = std::fs::metadata(dir.join("proc-1")).unwrap().permissions();
        assert_eq!(mode.mode() & 0o777, FILE_MODE);
        assert!(alive(&fd, 1) && alive(&fd, 2));
        assert!(b.alive(a.token()) && a.alive(b.token()) && a.alive(a.token()));
        assert!(!alive(&fd, 3), "missing file: dead");
        assert!(!alive(&fd, 0));
        assert!(!a.remove_if_dead(2), "a live member's file stays");
        drop(b);
        assert!(!alive(&fd, 2));
        assert_eq!(proc_files(&dir), ["proc-1"]);
        drop(a);
        assert!(!alive(&fd, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file left by a member that died without cleaning up (its lock
    /// released by the kernel) reads dead, and is removed as such; the
    /// checker's own look never takes the lock.
    #[test]
    fn an_unlocked_file_is_dead_and_removable() {
        let (dir, fd) = scratch("stale");
        let next = AtomicU32::new(6);
        let m = Member::join(&dir, &next).unwrap();
        assert_eq!(m.token(), 7);
        // A dead member: the file exists but nobody locks it.
        std::fs::write(dir.join("proc-5"), b"").unwrap();
        assert!(!alive(&fd, 5));
        assert!(!alive(&fd, 5), "asking does not lock it");
        assert!(m.remove_if_dead(5));
        assert!(!dir.join("proc-5").exists());
        // A published token is not taken again while its file exists.
        std::fs::write(dir.join("proc-8"), b"").unwrap();
        let n = Member::join(&dir, &next).unwrap();
        assert_eq!(n.token(), 9);
        drop((m, n));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The lock is the kernel's: a holder process that is killed (it cleans
    /// nothing up, its file stays) is dead at once.
    #[test]
    fn dead_after_the_holder_process_is_killed() {
        // The holder is this test binary run again, joining as token 42.
        if let Ok(d) = std::env::var("MLX5_MEMBER_HOLD") {
            let next = AtomicU32::new(41);
            let m = Member::join(Path::new(&d), &next).unwrap();
            println!("HOLDING {}", m.token());
            std::thread::sleep(std::time::Duration::from_secs(600));
            return;
        }
        let (dir, fd) = scratch("killed");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sim::member::tests::dead_after_the_holder_process_is_killed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("MLX5_MEMBER_HOLD", &dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("HOLDING") {
            line.clear();
            assert!(
                std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
                "the holder exited"
            );
        }
        assert!(line.trim_end().ends_with("HOLDING 42"), "{line}");
        let watcher = Member::join(&dir, &AtomicU32::new(0)).unwrap();
        assert!(alive(&fd, 42), "alive while the other process holds it");
        assert!(watcher.alive(42) && !watcher.remove_if_dead(42));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            dir.join("proc-42").exists(),
            "a killed holder leaves its file"
        );
        assert!(!alive(&fd, 42), "dead once the holder is killed");
        assert!(!watcher.alive(42));
        assert!(watcher.remove_if_dead(42), "and its file is reaped");
        assert!(!dir.join("proc-42").exists());
        drop(watcher);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
