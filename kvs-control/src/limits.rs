//! The bounds the cluster's configuration keeps to.

/// The largest encoded map a migration may leave behind. A map travels
/// whole in the group's snapshots and in answers to map fetches, which
/// copyrpc's 1 MiB control rings carry up to 256 KiB at a time; a map
/// in the middle of a migration can have the runs of the map before and
/// after it, and a snapshot carries the migration's chunks beside it, so
/// the limit leaves room for both (about 1 700 runs of slots; 1 024 slots
/// cut one by one take 29 KiB).
pub const MAX_MAP_BYTES: usize = 48 << 10;

/// The copies of a slot a cluster may keep.
pub const REPLICAS: std::ops::RangeInclusive<u8> = 1..=3;

/// The group's `member_timeout` may be set to, in milliseconds: under 200
/// ms a tick would be shorter than 5 ms, and no lease would fit in the
/// timeout with two election timeouts to spare.
pub const MEMBER_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 200..=60_000;
