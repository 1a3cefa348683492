//! Software-device fabrics of a test's own.

use mlx5::sim::fabric::Fabric;

use crate::unique_name;

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
