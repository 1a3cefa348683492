//! What a thread's panic does to a server process: it ends it.
//!
//! A server whose worker died keeps its lease and its other threads, so the
//! control group never fails its slots over, yet nothing serves them; a
//! server whose control thread died holds its lease until it lapses and
//! never rejoins. Neither is restarted by a supervisor (systemd restarts a
//! process that exits, not one with a dead thread). So a panic in any
//! thread must end the whole process, non-zero, saying why: the peers fail
//! its slots over to their backups and the supervisor starts it again.
//!
//! The library does not set the process's panic hook by itself: a program
//! that embeds a [`Server`](crate::Server) may have its own, and tests that
//! start servers in their own process need a panic to fail only the test.
//! Programs that run a server for others call [`abort_on_panic`] first: the
//! kvs-server binary does, and so does ycsb-driver when it embeds one.
//! Unwinding stays on in every profile (`#[should_panic]` tests need it).

use std::sync::Once;

/// Makes any thread's panic abort the process (SIGABRT: a non-zero end
/// that systemd's `Restart=on-failure` restarts), after the usual message
/// (thread, place, payload) and a line saying why the process stops.
/// Idempotent; the hook in place before is kept and called first.
pub fn abort_on_panic() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            before(info);
            let thread = std::thread::current();
            let name = thread.name().unwrap_or("unnamed");
            tracing::error!(
                "thread {name} panicked; stopping the process (a server with a dead \
                 thread would keep its lease and serve none of that thread's slots)"
            );
            std::process::abort();
        }));
    });
}

/// Debug builds only: the thread whose name `KVS_DEBUG_PANIC` gives
/// (`worker`, the first worker; `control`, the control thread) panics
/// here, for the test that checks a thread's panic ends the process.
/// Release builds have no such variable.
#[cfg(debug_assertions)]
pub(crate) fn debug_panic(thread: &str) {
    if std::env::var_os("KVS_DEBUG_PANIC").is_some_and(|v| v == thread) {
        panic!("KVS_DEBUG_PANIC={thread}: panicking as asked (debug builds only)");
    }
}

/// Release builds: nothing.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn debug_panic(_thread: &str) {}
