//! Fixtures the workspace's tests share, a dev-dependency of each crate:
//!
//! - [`Rng`]: a seeded generator, so a failing case can be run again;
//! - [`unique_name`]: a name no other test uses, and with the `sim`
//!   feature `FabricGuard`: a software-device fabric of the test's own,
//!   removed when the test ends;
//! - [`TempDir`]: a directory of the test's own, removed likewise;
//! - [`wait_until`]: polls a condition with a deadline that fails the test;
//! - [`kill9`]: `kill -9` of a child process, as the fault tests do, and
//!   [`KillOnDrop`]: a child a failing test does not leave behind;
//! - [`RedisServer`]: a throwaway redis-server, for the tests that drive one.

mod dir;
#[cfg(feature = "sim")]
mod fabric;
mod name;
mod process;
mod redis;
mod rng;
mod wait;

pub use dir::TempDir;
#[cfg(feature = "sim")]
pub use fabric::FabricGuard;
pub use name::unique_name;
pub use process::{kill9, KillOnDrop};
pub use redis::RedisServer;
pub use rng::Rng;
pub use wait::wait_until;
