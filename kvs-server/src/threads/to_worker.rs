//! The message a worker thread's channel carries ([`ToWorker`]): sent by the
//! acceptor, the control thread, and a migration's importer and puller.

use std::sync::mpsc::Sender;

use copyrpc::conn::PendingConnection;
use kvs_proto::{ShardMap, Ticket};

use crate::role::Role;

/// What a worker is sent: by the acceptor, a client's connection; by the
/// control thread, a new map to serve by; by a migration's importer, that the
/// source froze the slots, and (with the puller) records of slots it imports.
#[derive(Debug)]
pub(crate) enum ToWorker {
    /// A client to serve, in the role its token gave it.
    Connection(PendingConnection, Role),
    /// The map to serve by from now on.
    Map(ShardMap),
    /// This member hands slots `first..end` over (a migration's source,
    /// with replicas, or a drain, every slot): their writes wait
    /// (TRY_AGAIN), and the worker says when none of its own is in flight
    /// ([`crate::threads::to_control::ToControl::Quiet`], with `round`). A freeze
    /// replaces the one before.
    Freeze {
        /// The first slot.
        first: u32,
        /// One past the last.
        end: u32,
        /// The freeze's number (the control thread's, never reused): whom
        /// the worker's answer is for.
        round: u64,
    },
    /// The hand-over or drain is over (or off): writes are taken again.
    Thaw,
    /// This member drains to stop (SIGTERM): the records of
    /// the slots its maps take away from now on stay, not served, so that
    /// a restart from its data dir catches up on them rather than copying
    /// them whole ([`crate::serving::retained`]).
    Retain,
    /// This member's restart is applied: the records a restarted worker
    /// kept of slots it did not get back go
    /// ([`crate::serving::retained`]).
    EndRetention,
    /// `kvs-admin snapshot`, the member's request number `ask`: snapshot
    /// the worker's records at the end of its turn (with a log; nothing
    /// without one), unless one is under way (it answers the request).
    Snapshot {
        /// The request's number.
        ask: u64,
    },
    /// The source of an import holds slots `first..end` frozen (it serves
    /// them no more): the worker may serve them.
    SourceFrozen {
        /// The first slot.
        first: u32,
        /// One past the last.
        end: u32,
    },
    /// A checked batch of pulled records ([`crate::bulk::wire`]); the
    /// worker says when it has taken them.
    Records {
        /// The batch's records, made ready for the store
        /// ([`crate::bulk::wire::Batch::take_checked`]).
        batch: Vec<crate::store::Ready>,
        /// Told once the records are in the store.
        taken: Sender<()>,
    },
    /// A checked batch of a copy's snapshot pulled under `ticket`
    /// ([`crate::replication::copy_in`]); the worker says when it has taken
    /// it.
    CopyRecords {
        /// The copy begin's ticket.
        ticket: Ticket,
        /// The batch's records, made ready for the store
        /// ([`crate::bulk::wire::Batch::take_checked`]).
        batch: Vec<crate::store::Ready>,
        /// Told once the records are in the store.
        taken: Sender<()>,
    },
    /// The pull of the copy under `ticket` ended: every record was handed
    /// over, or why not.
    CopyPulled {
        /// The copy begin's ticket.
        ticket: Ticket,
        /// How it ended.
        result: Result<(), crate::bulk::TransferError>,
    },
    /// The answer to a priority pull of `key`: its value at the source, or
    /// none, or why the pull failed.
    Pulled {
        /// The key's slot.
        slot: u32,
        /// The key.
        key: Vec<u8>,
        /// Its value at the source (`None`: the source has no such key).
        value: Result<Option<Vec<u8>>, std::sync::Arc<crate::bulk::PullError>>,
    },
}

/// Slots whose writes wait while the member hands them over (a
/// migration's source, with replicas): writes are answered TRY_AGAIN,
/// reads are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frozen {
    /// The first slot.
    pub first: u32,
    /// One past the last.
    pub end: u32,
    /// Whether the worker told the control thread that no write of them
    /// is in flight.
    pub reported: bool,
    /// The freeze's number, for the worker's report.
    pub round: u64,
}
