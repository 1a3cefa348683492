//! Names no other test uses.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A name no other test, in this process or another, uses:
/// `prefix-pid-n-tag`.
pub fn unique_name(prefix: &str, tag: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}-{tag}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_differ_and_say_whose_they_are() {
        let (a, b) = (unique_name("t", "x"), unique_name("t", "x"));
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("t-{}-", std::process::id())));
        assert!(a.ends_with("-x"));
    }
}
