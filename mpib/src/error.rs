//! Errors.

use mlx5::wr::WcStatus;

/// A malformed CTS entry (see [`crate::cts`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CtsError {
    /// The entry's sequence number is neither the old one nor the expected one
    /// (or head and tail disagree on a complete-looking entry).
    #[error("sequence {head}/{tail} where {expected} was expected")]
    Sequence {
        /// The FIFO position + 1 the sender waits for.
        expected: u64,
        /// The head copy.
        head: u64,
        /// The tail copy.
        tail: u64,
    },
    /// The entry names another slot than the one it was written to.
    #[error("entry for slot {got} in slot {expected}")]
    Slot {
        /// The slot the entry sits in.
        expected: u8,
        /// The slot the entry names.
        got: u8,
    },
    /// `nreqs` is 0 or more than 8.
    #[error("{0} buffers (1 to 8 allowed)")]
    Nreqs(u8),
    /// The receiver's tag is not the sender's.
    #[error("tag {got} where the send has tag {expected}")]
    Tag {
        /// The sender's tag.
        expected: u32,
        /// The entry's tag.
        got: u32,
    },
    /// The receive has another number of buffers than the send.
    #[error("the receive posted {posted} buffers, the send has {sent}")]
    Count {
        /// Buffers in the entry.
        posted: u8,
        /// Buffers in the send.
        sent: usize,
    },
    /// A send buffer is larger than the receive buffer it goes to.
    #[error("buffer {index}: {sent} bytes sent into a receive of {posted}")]
    TooSmall {
        /// Which buffer.
        index: usize,
        /// Bytes the send has.
        sent: u64,
        /// Bytes the receive posted.
        posted: u32,
    },
    /// A buffer's range wraps around the address space.
    #[error("buffer {index}: address range wraps")]
    Range {
        /// Which buffer.
        index: usize,
    },
}

/// A protocol violation by the peer: bytes it wrote that the protocol does not
/// allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// An immediate for a slot with no receive outstanding.
    #[error("immediate for slot {slot}, which has no receive posted")]
    UnknownSlot {
        /// The slot.
        slot: u8,
    },
    /// An immediate for a slot whose receive already completed.
    #[error("late immediate for slot {slot}, whose receive already completed")]
    LateImmediate {
        /// The slot.
        slot: u8,
    },
    /// A second immediate from the same rail for one slot.
    #[error("duplicate immediate for slot {slot} on rail {rail}")]
    DuplicateImmediate {
        /// The slot.
        slot: u8,
        /// The rail.
        rail: usize,
    },
    /// An active mask that is 0, names a rail this communicator does not
    /// have, or leaves out the rail it arrived on.
    #[error("active mask {mask:#b} on rail {rail} (rails: {rails:#b})")]
    BadMask {
        /// The mask.
        mask: u8,
        /// The rail the immediate arrived on.
        rail: usize,
        /// The communicator's rails.
        rails: u8,
    },
    /// The immediates of one slot disagree (mask or size).
    #[error("slot {slot}: immediate {got:#x} disagrees with the first one {first:#x}")]
    Inconsistent {
        /// The slot.
        slot: u8,
        /// The first immediate of the slot.
        first: u32,
        /// This one.
        got: u32,
    },
    /// A size in the immediate for a grouped receive (whose sizes must come
    /// in the completion record).
    #[error("slot {slot}: size in the immediate for a receive of {nreqs} buffers")]
    SizeInImmediate {
        /// The slot.
        slot: u8,
        /// Buffers posted.
        nreqs: u8,
    },
    /// A transfer larger than the buffer posted for it.
    #[error("slot {slot} buffer {index}: {size} bytes into a buffer of {posted}")]
    SizeBeyondBuffer {
        /// The slot.
        slot: u8,
        /// Which buffer.
        index: usize,
        /// The size the peer claims.
        size: u64,
        /// Bytes posted.
        posted: u64,
    },
    /// A completion that the protocol never produces (a SEND, a receive
    /// without immediate).
    #[error("unexpected completion on rail {rail}")]
    UnexpectedCompletion {
        /// The rail.
        rail: usize,
    },
    /// A malformed CTS entry.
    #[error("CTS entry: {0}")]
    Cts(#[from] CtsError),
    /// An eager message that fits no receive: a position not ahead of
    /// the receives, a tag other than the receive's, a receive of several
    /// buffers, more bytes than its buffer, or a header that is not eager.
    #[error("eager message for position {pos} on rail {rail}: {why}")]
    Eager {
        /// The rail.
        rail: usize,
        /// The FIFO position its header names.
        pos: u64,
        /// What does not fit.
        why: &'static str,
    },
}

/// Why a communicator closed. Once closed, every call returns
/// [`Error::Closed`] with the first reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    /// Closed by this side ([`crate::Comm::close`]).
    #[error("closed by this side")]
    Local,
    /// The liveness channel closed: the peer process is gone or closed its
    /// communicator.
    #[error("the peer is gone (liveness channel closed)")]
    PeerGone,
    /// A work request failed (peer gone, access error, RNR retries used up,
    /// flushed after an error).
    #[error("rail {rail}: work request failed: {} (vendor error {vendor_err:#x})", status.name())]
    Transport {
        /// The rail.
        rail: usize,
        /// The completion status.
        status: WcStatus,
        /// The device's own error detail.
        vendor_err: u32,
    },
    /// The device refused a work request.
    #[error("rail {rail}: work request refused: {why}")]
    Post {
        /// The rail.
        rail: usize,
        /// The device's reason.
        why: String,
    },
    /// The peer broke the protocol.
    #[error("protocol violation by the peer: {0}")]
    Protocol(#[from] ProtocolError),
}

/// Errors of the communicator's calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The communicator is closed.
    #[error("communicator closed: {0}")]
    Closed(CloseReason),
    /// An argument the caller gave is out of range; nothing was done.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// A request handle that is not outstanding (already completed, or of
    /// another communicator).
    #[error("no such request")]
    UnknownRequest,
    /// The device refused (memory registration).
    #[error(transparent)]
    Device(#[from] mlx5::device::DeviceError),
}

/// Errors of communicator setup.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The device refused.
    #[error(transparent)]
    Device(#[from] mlx5::device::DeviceError),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The peer's setup record does not fit this side.
    #[error("peer record: {0}")]
    Peer(String),
    /// TCP failed.
    #[error("tcp: {0}")]
    Io(#[from] std::io::Error),
}
