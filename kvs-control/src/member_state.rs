//! A member's standing in the control group.

use serde::{Deserialize, Serialize};

/// A member's standing in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberState {
    /// A member of the cluster, not known to have failed.
    Up,
    /// The leader heard nothing from it for `member_timeout`: its slots are
    /// unavailable until it returns or is forgotten.
    Failed,
    /// Forgotten (`kvs-admin forget`): it owns nothing and its id is never
    /// used again.
    Left,
}
