//! Waiting for a condition, with a deadline that fails the test.

use std::time::{Duration, Instant};

/// Polls `done` every `every` until it holds, and returns how long that
/// took; panics naming `what` when `most` passes first.
pub fn wait_until(
    what: &str,
    most: Duration,
    every: Duration,
    mut done: impl FnMut() -> bool,
) -> Duration {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < most, "{what}: not within {most:?}");
        std::thread::sleep(every);
    }
    t.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_once_it_holds_and_fails_past_the_deadline() {
        let mut n = 0;
        let ms = Duration::from_millis(1);
        wait_until("three polls", Duration::from_secs(5), ms, || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
        let r = std::panic::catch_unwind(|| wait_until("never", ms * 20, ms, || false));
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.starts_with("never: not within"), "{msg}");
    }
}
