//! Live migration of slots between members, target-driven as RAMCloud's
//! Rocksteady does it.
//!
//! The control group ([`kvs_control::Migration`], part of the replicated
//! state) moves slots in *chunks*: consecutive slots with one source, at most
//! an eighth of the map's slots and no fewer than 64
//! ([`kvs_control::chunk_slots`]). For each chunk:
//!
//! 1. **Handover.** A committed map gives the chunk to the target, marked as
//!    imported from the source. Installing it, the source's workers take the
//!    chunk's records out of their stores ([`source_slots`](crate::bulk::source_slots): frozen, read-only)
//!    and redirect its keys to the target. The target's workers answer
//!    `TRY_AGAIN` for the chunk until the source holds it frozen (its first
//!    pull ticket says so): no write can land at the source after the
//!    records it ships were frozen, and the chunk never has two owners that
//!    take writes.
//! 2. **Pull.** Each of the target's workers that gained slots runs an
//!    importer ([`import`]) that pulls their records from the source over
//!    mpib, both rails, in 1 MiB batches ([`wire`](crate::bulk::wire)), in parallel with the
//!    others; the source streams them from its frozen copy ([`export`](crate::bulk::export)).
//!    A worker's imports from one source run in one session ([`session`]),
//!    which keeps its bulk connection from chunk to chunk. A
//!    read, delete or partial update of a key that has not arrived waits
//!    while the worker fetches that key from the source at once
//!    ([`puller`], the priority pull). A key written or deleted at the
//!    target is never overwritten by a pulled copy.
//! 3. **Finish.** Each importer tells the group's leader when its slots are
//!    all in, until the committed map ends the import; the entry that
//!    completes the chunk ends it, and the source frees the frozen copy.
//!
//! **The rule when a migration cannot finish: once handed over, a chunk only
//! rolls forward.** The target owns it from the handover on and every write
//! it acknowledged is in its store; the source keeps the frozen copy until
//! the target has all of it. So:
//! - a failed bulk connection (a rail that went down, a QP in error, a
//!   peer's TCP liveness channel closed) is set up again, on the rails that
//!   still work, and the pull resumes from the first slot not complete;
//!   records sent twice are dropped as stale;
//! - `kvs-admin` is only a client: killing it changes nothing;
//! - `cancel` stops the migration after the chunk being pulled: that chunk
//!   finishes, the chunks not yet handed over stay with their owners;
//! - the leader's death changes nothing: the migration is in the log;
//! - a target that restarts mid-chunk has lost what it held (memory only,
//!   as any server that crashes), but the map still says it imports the
//!   chunk, so it pulls the whole chunk again from the source's frozen copy;
//! - a source that cannot be reached is tried again for as long as it
//!   takes: no record is given up on a timeout. Records are given up only
//!   when the source restarted after the handover (they died with it, and
//!   it says so) or is forgotten (`kvs-admin forget --force`).

pub(crate) mod import;
pub(crate) mod puller;
pub(crate) mod session;
pub(crate) mod waiting;
