//! Software-device fabrics of a test's own.

use std::sync::atomic::{AtomicUsize, Ordering};

use mlx5::sim::fabric::Fabric;

/// Removes its fabric when dropped, if nothing uses it any more. Declare it
/// before the devices opened in it, so it drops after them.
#[derive(Debug)]
pub struct FabricGuard(pub String);

impl FabricGuard {
    /// A guard for a fabric named [`unique_name`]`(prefix, tag)`.
    pub fn unique(prefix: &str, tag: &str) -> FabricGuard {
        FabricGuard(unique_name(prefix, tag))
    }

    /// The fabric's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl Drop for FabricGuard {
    fn drop(&mut self) {
        Fabric::remove_if_unused(&self.0);
    }
}

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
