//! A spinlock that lives in shared memory and survives the death of its
//! holder: the lock word holds the holder's fabric token (see `sim::member`),
//! and a waiter that finds the holder dead takes the lock over.
//!
//! Not the holder's pid: the processes of a fabric may be in different PID
//! namespaces (containers that share the fabric directory), where a pid says
//! neither who holds the lock (two holders can both be pid 1) nor whether the
//! holder lives (a live holder's pid may not exist here, and a dead holder's
//! pid may be some other process's). A token is unique in the fabric, and its
//! liveness is a file lock that the kernel drops when the process dies,
//! visible from every namespace. The word stays one atomic `u32`; the
//! liveness check runs only after thousands of spins on a held lock.

use std::sync::atomic::{AtomicU32, Ordering};

use super::member::Member;

/// Spins on a held lock before the waiter yields its core. A critical
/// section is one queue's step (a WQE, a CQE: well under a microsecond);
/// 128 pauses outlast it. A holder that has not let go by then has most
/// likely lost its core (more runnable threads than cores, as on a 2-core
/// VM), and spinning on only keeps it from getting the core back.
const YIELD_EVERY: u32 = 128;

/// Spins on a held lock between checks that its holder still lives (a
/// file-lock probe: a system call).
const CHECK_EVERY: u32 = 4096;

// `lock_contended` counts spins in a wrapping `u32`: the periods must divide
// 2^32 for the counts to stay in step across the wrap.
const _: () = assert!(YIELD_EVERY.is_power_of_two() && CHECK_EVERY.is_power_of_two());

/// A lock word in shared memory (0: free; otherwise the holder's token).
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
    /// Takes the lock for `me` (this process's membership of the fabric the
    /// lock lives in), spinning; steals it from a dead holder.
    #[inline(always)]
    pub fn lock(&self, me: &Member) -> ShmGuard<'_> {
        let token = me.token();
        if self
            .word
            .compare_exchange(0, token, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return ShmGuard { lock: self };
        }
        self.lock_contended(me)
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self, me: &Member) -> ShmGuard<'_> {
        let token = me.token();
        let mut spins = 0u32;
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            if cur == 0 {
                if self
                    .word
                    .compare_exchange_weak(0, token, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return ShmGuard { lock: self };
                }
            } else {
                // Wrapping: a holder that is alive but stopped (SIGSTOP, a
                // debugger) keeps its lock for as long as it likes, and 2^32
                // spins take only a couple of minutes. Both periods divide
                // 2^32, so the checks keep their rhythm across the wrap.
                spins = spins.wrapping_add(1);
                if spins % CHECK_EVERY == 0 && cur != token && !me.alive(cur) {
                    // The holder died inside its critical section.
                    let _ =
                        self.word
                            .compare_exchange(cur, 0, Ordering::Relaxed, Ordering::Relaxed);
                }
                if spins % YIELD_EVERY == 0 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::member::tests::scratch;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    /// A lock whose holder's token is dead (no liveness file) is taken over;
    /// one whose holder lives is waited for, however long.
    #[test]
    fn a_dead_holder_loses_the_lock_and_a_live_one_keeps_it() {
        let (dir, _) = scratch("shmlock");
        let next = AtomicU32::new(0);
        let me = Member::join(&dir, &next).unwrap();
        let other = Member::join(&dir, &next).unwrap();
        let lock = ShmLock::default();

        lock.word.store(other.token() + 100, Ordering::Relaxed);
        drop(lock.lock(&me));
        assert_eq!(lock.word.load(Ordering::Relaxed), 0, "taken over, released");

        lock.word.store(other.token(), Ordering::Relaxed);
        let got = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _g = lock.lock(&me);
                got.store(true, Ordering::Relaxed);
            });
            std::thread::sleep(Duration::from_millis(100));
            assert!(!got.load(Ordering::Relaxed), "stolen from a live holder");
            // The holder dies: its lock goes with it.
            drop(other);
        });
        assert!(got.load(Ordering::Relaxed));
        drop(me);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
