//! Why a bulk transfer failed ([`TransferError`], at either end of a
//! migration's pull or a backup's copy), and why a source refused to issue
//! a pull ticket ([`TicketError`]), a priority pull of a key failed
//! ([`PullError`]), or a batch on the bulk wire is malformed
//! ([`BatchError`]). Their text is what operators read in
//! the logs, in `kvs-admin status` (an import's last error) and in the
//! control endpoint's answers.

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::time::Duration;

use kvs_proto::control::ControlReply;
use mlx5::device::DeviceError;

/// Why a bulk transfer ended early, at the source (the export) or at the
/// target (an import's pull, a backup's copy).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TransferError {
    /// A rail's device could not be opened.
    #[error("rail {index} ({name}): {source}")]
    Rail {
        /// The rail's index (0 or 1).
        index: usize,
        /// Its device's name.
        name: String,
        /// Why the device did not open.
        #[source]
        source: DeviceError,
    },
    /// The rail mask selects no rail.
    #[error("no rail selected")]
    NoRail,
    /// The mpib connection to the source's bulk port could not be set up.
    #[error("bulk connection to {to}: {source}")]
    Connect {
        /// The source's bulk port.
        to: SocketAddr,
        /// Why the setup failed.
        #[source]
        source: mpib::SetupError,
    },
    /// A call on the mpib communicator failed (its connection closed, a
    /// work request failed, a buffer could not be registered).
    #[error(transparent)]
    Mpib(#[from] mpib::Error),
    /// The server is stopping.
    #[error("the server is stopping")]
    Stopping,
    /// The transfer made no progress for this long.
    #[error("no progress in {0:?}")]
    Stalled(Duration),
    /// A kept connection's source did not take the next pull's setup (it
    /// waited for it in vain, and closed the connection).
    #[error("the source did not take a setup")]
    SetupNotTaken,
    /// A record is larger than a batch can carry (its key and value bytes).
    #[error("a record of {0} bytes exceeds a batch")]
    RecordTooLarge(usize),
    /// A receive completed with more bytes than its buffer holds.
    #[error("more bytes than its buffer")]
    Overrun,
    /// A migration's source sent a malformed batch.
    #[error("the source sent {0}")]
    SourceSent(#[source] BatchError),
    /// A copy's primary sent a malformed batch.
    #[error("the primary sent {0}")]
    PrimarySent(#[source] BatchError),
    /// The worker the batches go to stopped.
    #[error("the worker stopped")]
    WorkerStopped,
    /// The source's control endpoint could not be asked for a ticket.
    #[error(transparent)]
    Control(#[from] kvs_client::ControlError),
    /// The source answered a ticket request with something else than a
    /// ticket, a not-yet or an error.
    #[error("unexpected answer {0:?}")]
    UnexpectedAnswer(Box<ControlReply>),
    /// The member a copy is to be pulled from is not in the map.
    #[error("member {0} is not in the map")]
    NotInMap(MemberId),
    /// The thread that pulls could not be started.
    #[error("cannot start the pull: {0}")]
    Spawn(#[source] std::io::Error),
    /// The source has not frozen the slots yet (it has not applied the map
    /// that hands them over): not a failure, ask again. Its message.
    #[error("{0}")]
    NotYet(String),
    /// The source no longer has the records (it restarted after the
    /// handover): nothing more can come. Its message.
    #[error("{0}")]
    Lost(String),
}

/// Why a source issues no ticket for a pull.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TicketError {
    /// The slot range asked for is empty.
    #[error("empty slot range {first}..{end}")]
    EmptyRange {
        /// The range's first slot.
        first: u32,
        /// One past its last.
        end: u32,
    },
    /// A slot asked for is not held frozen here.
    #[error(
        "slot {0} is not held here for a migration (this member has not \
         given it away, or its import is over)"
    )]
    NotHeld(u32),
    /// A copy of no slot was asked for.
    #[error("a copy of no slot")]
    NoSlots,
    /// The kernel's random source failed.
    #[error("no randomness for a ticket: {0}")]
    NoRandomness(#[source] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_cross_threads() {
        fn send<T: Send + Sync + 'static>() {}
        send::<TransferError>();
        send::<TicketError>();
    }

    #[test]
    fn texts_stay() {
        let e = TransferError::Stalled(Duration::from_secs(30));
        assert_eq!(e.to_string(), "no progress in 30s");
        let e = TransferError::SourceSent(BatchError::ForeignSlot(7));
        assert_eq!(
            e.to_string(),
            "the source sent a record of slot 7, outside the slots pulled"
        );
        let e = TicketError::NotHeld(3);
        assert_eq!(
            e.to_string(),
            "slot 3 is not held here for a migration (this member has not given it \
             away, or its import is over)"
        );
        let e = TicketError::EmptyRange { first: 4, end: 4 };
        assert_eq!(e.to_string(), "empty slot range 4..4");
    }
}

/// Why a priority pull of one key from its source failed (the worker
/// answers the requests waiting on it TRY_AGAIN). Shared: a puller that
/// cannot start fails every key asked of it with the same error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PullError {
    /// The puller's device did not open.
    #[error("cannot open the device: {0}")]
    Device(#[source] DeviceError),
    /// The control client could not be made, or the pull failed.
    #[error(transparent)]
    Control(#[from] kvs_client::ControlError),
}

/// A malformed batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BatchError {
    /// Not a batch, or cut short.
    #[error("not a batch ({0})")]
    Malformed(&'static str),
    /// Out of order.
    #[error("batch {got} where {want} was due")]
    Sequence {
        /// Its number.
        got: u32,
        /// The one due.
        want: u32,
    },
    /// A record of a slot that was not asked for.
    #[error("a record of slot {0}, outside the slots pulled")]
    ForeignSlot(u32),
    /// `next_slot` went backwards or past the range.
    #[error("progress mark {0} out of order")]
    Progress(u32),
}
