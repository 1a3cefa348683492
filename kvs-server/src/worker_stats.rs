//! The counters each worker publishes ([`WorkerStats`]), read by
//! [`Server::stats`](crate::Server::stats) and the metrics endpoint.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use crate::persist::{LogStatus, RecoveryCounters};
use crate::replication::Copied;

use crate::request_metrics::Published;

/// Counters a worker publishes for stats lines (updated every few thousand
/// loop turns, not per request).
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Requests answered.
    pub ops: AtomicU64,
    /// Connected clients.
    pub clients: AtomicU64,
    /// Keys held, backup copies included.
    pub keys: AtomicU64,
    /// Keys held as a backup of another member's slots.
    pub backup_keys: AtomicU64,
    /// Heap bytes the worker's records take (what `max_memory` caps; see
    /// [`crate::store::memory`]).
    pub memory_used: AtomicU64,
    /// Copyrpc rings (two per client) in 2 MiB huge pages (`huge_pages`;
    /// zero without it).
    pub(crate) huge_rings: AtomicU64,
    /// Replication messages refused on connections set up with the client
    /// token ([`crate::SetupStats::refused_member_ops`]).
    pub(crate) refused_member_ops: AtomicU64,
    /// Requests by op and result, and service times (for the metrics
    /// endpoint).
    pub(crate) requests: Published,
    /// Its records on disk (`None`: `durability = "none"`); published with
    /// the rest, so a lock taken as seldom.
    pub(crate) disk: Mutex<Option<LogStatus>>,
    /// The copies to backups it began, whole and caught up.
    pub(crate) copied: Mutex<Copied>,
    /// How far its recovery from the data dir got (zero of zero without
    /// durability): what the member's status says while it recovers.
    pub(crate) recovery: RecoveryCounters,
}

impl WorkerStats {
    /// Its records on disk, as last published.
    pub(crate) fn disk(&self) -> Option<LogStatus> {
        *self.disk.lock().unwrap_or_else(|e| e.into_inner())
    }
}
