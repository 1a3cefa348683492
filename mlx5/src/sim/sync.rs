//! A spinlock that lives in shared memory and survives the death of its
//! holder: the lock word holds the holder's pid, and a waiter that finds the
//! holder dead takes the lock over.

use std::sync::atomic::{AtomicU32, Ordering};

use super::shm::{my_pid, pid_alive};

/// A lock word in shared memory (0: free; otherwise the holder's pid).
#[repr(C)]
#[derive(Debug, Default)]
pub struct ShmLock {
    word: AtomicU32,
}

/// Holds a [`ShmLock`] until dropped.
#[derive(Debug)]
pub struct ShmGuard<'a> {
    lock: &'a ShmLock,
}

impl ShmLock {
    /// Takes the lock, spinning; steals it from a dead holder.
    #[inline(always)]
    pub fn lock(&self) -> ShmGuard<'_> {
        let me = my_pid();
        if self
            .word
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return ShmGuard { lock: self };
        }
        self.lock_contended(me)
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self, me: u32) -> ShmGuard<'_> {
        let mut spins = 0u32;
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            if cur == 0 {
                if self
                    .word
                    .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return ShmGuard { lock: self };
                }
            } else {
                spins += 1;
                if spins % 4096 == 0 {
                    if cur != me && !pid_alive(cur) {
                        // The holder died inside its critical section.
                        let _ = self.word.compare_exchange(
                            cur,
                            0,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

impl Drop for ShmGuard<'_> {
    fn drop(&mut self) {
        self.lock.word.store(0, Ordering::Release);
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout`: `FUTEX_WAIT`
/// without `FUTEX_PRIVATE_FLAG`, so a wake from any process that maps the
/// same shared memory reaches it. Returns at once if the word differs; may
/// return early (a signal, a spurious wake-up): callers check their condition
/// again.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit word; `ts` outlives the call;
    // the kernel only reads both.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every process and thread sleeping on `word` ([`futex_wait`]).
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 32-bit word; FUTEX_WAKE reads nothing
    // else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
