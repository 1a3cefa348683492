//! Why a backup refuses a replication message ([`Refusal`]), and why a write
//! it follows does not apply to its store ([`ApplyError`]). The text goes
//! back to the primary in the answer (`FENCED`, or `TRY_AGAIN` while a
//! copy's pull goes on), and from there into the client's UNAVAILABLE.

use kvs_proto::Owner;

use crate::store::Patch;

/// Why a backup refused a replication message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The slot is out of the map's range.
    #[error("slot {slot} out of range")]
    OutOfRange { slot: u32 },
    /// The sender's map is newer than this backup's (it names another
    /// primary, or this worker as a backup, since): the message waits for
    /// the map rather than fail.
    #[error(
        "slot {slot}: the primary's map (epoch {epoch}) is newer than this backup's ({version})"
    )]
    NewerMap { slot: u32, epoch: u32, version: u32 },
    /// The sender is not the slot's primary in this backup's map.
    #[error(
        "member {} worker {} is not slot {slot}'s primary in map {version} (epoch {here} here, \
         {there} there)",
        sender.member,
        sender.worker
    )]
    NotPrimary {
        slot: u32,
        sender: Owner,
        version: u32,
        here: u32,
        there: u32,
    },
    /// This worker does not back the slot up in its map.
    #[error("this worker does not back slot {slot} up in map {version}")]
    NotBackup { slot: u32, version: u32 },
    /// No copy from this primary began here.
    #[error(
        "slot {slot}'s copy from member {} worker {} has not begun here",
        primary.member,
        primary.worker
    )]
    NotBegun { slot: u32, primary: Owner },
    /// A write out of the primary's order: one was missed.
    #[error("slot {slot}: write {seq} does not follow {last}, the last applied")]
    OutOfOrder { slot: u32, seq: u64, last: u64 },
    /// The write did not apply to the store: the backup diverged.
    #[error("slot {slot}: {why}")]
    NotApplied { slot: u32, why: ApplyError },
    /// A copy's begin that does not parse or does not name the slot.
    #[error("slot {slot}: a malformed copy begin")]
    MalformedBegin { slot: u32 },
    /// A copy's begin after its snapshot's pull started.
    #[error("slot {slot}: its copy's begin came after the snapshot's pull started")]
    LateBegin { slot: u32 },
    /// Not a refusal yet: the copy's snapshot is being pulled (ask again).
    #[error("slot {slot}: pulling the copy's snapshot")]
    Pulling { slot: u32 },
    /// Not a refusal yet: this member restarted with records, and takes
    /// no copy until the group has applied its restart, whose map places
    /// its copies on the workers that kept them (ask again). A copy begun
    /// before would be dropped by that map, and a catch-up cut short
    /// leaves no position to catch up from the next time.
    #[error("slot {slot}: this member's restart is not applied yet; its copies wait for it")]
    Rejoining { slot: u32 },
    /// The copy's pull failed (the primary starts a new copy).
    #[error("slot {slot}: the copy's pull failed: {why}")]
    PullFailed { slot: u32, why: String },
    /// A copy's end with no copy under way.
    #[error("slot {slot}: no copy under way here")]
    NoCopy { slot: u32 },
    /// A catch-up's begin that does not parse.
    #[error("slot {slot}: a malformed catch-up begin")]
    MalformedCatchUp { slot: u32 },
    /// A catch-up from where this backup's copy does not stand (it moved,
    /// or the copy is not complete): the primary copies the slot whole.
    #[error(
        "slot {slot}: cannot catch up from write {from} of stream {stream:#x}: the copy here          stands at {here}"
    )]
    CatchUpFrom {
        slot: u32,
        stream: u64,
        from: u64,
        here: String,
    },
    /// The backup's log cannot take the write: its disk is full.
    #[error("slot {slot}: the backup cannot log it: {why}")]
    DiskFull { slot: u32, why: String },
}

impl Refusal {
    /// Not a refusal yet: the copy's pull goes on, or this member's
    /// restart is not applied yet (the sender asks again).
    pub fn not_yet(&self) -> bool {
        matches!(self, Refusal::Pulling { .. } | Refusal::Rejoining { .. })
    }

    /// Not a refusal yet: the message waits for this backup's map to catch
    /// up with the sender's.
    pub fn await_map(&self) -> bool {
        matches!(self, Refusal::NewerMap { .. })
    }
}

/// Why a write a backup follows did not apply to its store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApplyError {
    /// The worker's share of `max_memory` is used up.
    #[error("out of memory: the worker holds {used} of its {limit}-byte share")]
    OutOfMemory { used: usize, limit: usize },
    /// A partial update that does not apply to the value held here.
    #[error("the patch does not apply here ({0:?})")]
    Patch(Patch),
    /// A copy's request ids that do not decode.
    #[error("malformed request ids")]
    MalformedIds,
}
