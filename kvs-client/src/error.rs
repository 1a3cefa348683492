//! Errors.

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::time::Duration;

use copyrpc::conn::ConnError;
use copyrpc::{CloseReason, WaitError};

use kvs_proto::proto::{Status, WireError};

/// Why a request was not sent. Every variant hands the tag back.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError<T> {
    /// The endpoint's ring or credit is used up: `poll()` and retry.
    #[error("busy: poll and retry")]
    Busy(T),
    /// The key or value can never be sent (bytes given).
    #[error("request of {1} bytes is too large")]
    TooLarge(T, usize),
    /// The endpoint to the owning worker is closed.
    #[error("connection closed: {1}")]
    Closed(T, CloseReason),
}

impl<T> SubmitError<T> {
    /// The tag, back.
    pub fn into_tag(self) -> T {
        match self {
            SubmitError::Busy(t) | SubmitError::TooLarge(t, _) | SubmitError::Closed(t, _) => t,
        }
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// The key or value exceeds the server's limits.
    #[error("too large: {0}")]
    TooLarge(String),
    /// The server refused the request as malformed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The request could not reach the owner of its key's slot: the client
    /// followed redirects and try-agains until its limits (64 redirects,
    /// 10 s). The message says what happened.
    #[error("no route to the key's owner: {0}")]
    NoRoute(String),
    /// The member that owns the key's slot (for a SCAN: one of the members
    /// that own slots) could not be connected. The client connects to a
    /// member when a request first needs it; after a failed attempt it
    /// tries that member again only after a backoff (100 ms, doubling to
    /// 5 s), and the member's requests fail at once with this meanwhile.
    /// The other members' requests are not affected.
    #[error("member {member} at {addr} cannot be reached: {why}")]
    Unreachable {
        /// The member's id in the shard map.
        member: MemberId,
        /// The address the client connects to it at.
        addr: SocketAddr,
        /// Why: the last attempt's error, and when the next is due.
        why: String,
    },
    /// The server is shutting down.
    #[error("server shutting down")]
    ShuttingDown,
    /// The value is larger than the response allowance (bytes needed).
    #[error("answer of {0} bytes exceeds the response allowance")]
    AllowanceTooSmall(usize),
    /// UPDATE_RANGE past the end of the value.
    #[error("range outside the value")]
    OutOfRange,
    /// The write would take the server past its memory cap (`max_memory`);
    /// the server's message says how much it holds. Reads, deletes and
    /// writes that do not grow a value still work.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// The server's disk for its records is full: the write was not
    /// applied. Reads still work; writes are taken again once there is
    /// room.
    #[error("disk full: {0}")]
    DiskFull(String),
    /// The connection failed; the request may or may not have been done.
    #[error("connection failed: {0}")]
    Failed(CloseReason),
    /// The server's answer did not parse.
    #[error("malformed answer: {0}")]
    Malformed(WireError),
    /// The request could not be sent: the endpoint's ring or credit stayed
    /// used up ([`Client::wait_for`](crate::Client::wait_for) gave up).
    #[error("busy")]
    Busy,
    /// The key's owner may not serve it now: it holds no lease from the
    /// cluster's control group (cut off from it, or the group marked it
    /// failed), and still did not when the client's retries (10 s) ran
    /// out. The server's message, naming the member.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// No answer within [`ClientOptions::timeout`](crate::ClientOptions::timeout)
    /// (a write may still have been applied).
    #[error("no answer within {0:?} (a write may still have been applied)")]
    Timeout(std::time::Duration),
    /// The server refused the request for this connection's role: a
    /// member's operation sent with the client token. The server's message.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A write sent again (an earlier send's answer was lost, or it was
    /// redirected) too late for the server to tell whether it was applied
    /// before: it was not applied again, and may or may not have been
    /// applied once. The server's message.
    #[error("outcome unknown: {0}")]
    TooOld(String),
    /// A blocking helper could not submit.
    #[error("not sent: {0}")]
    Submit(String),
}

impl KvError {
    /// The error of a non-OK status (`payload`: the answer's).
    pub(crate) fn of_status(st: Status, payload: &[u8]) -> KvError {
        let msg = || String::from_utf8_lossy(payload).into_owned();
        match st {
            Status::TooLarge => KvError::TooLarge(msg()),
            Status::BadRequest => KvError::BadRequest(msg()),
            Status::ShuttingDown => KvError::ShuttingDown,
            Status::OutOfRange => KvError::OutOfRange,
            Status::OutOfMemory => KvError::OutOfMemory(msg()),
            Status::Unavailable => KvError::Unavailable(msg()),
            Status::Forbidden => KvError::Forbidden(msg()),
            Status::TooOld => KvError::TooOld(msg()),
            Status::DiskFull => KvError::DiskFull(msg()),
            Status::AllowanceTooSmall => KvError::AllowanceTooSmall(match payload {
                [a, b, c, d] => u32::from_le_bytes([*a, *b, *c, *d]) as usize,
                _ => 0,
            }),
            // The client follows these itself; one here is out of place.
            Status::Redirect | Status::TryAgain => {
                KvError::NoRoute(format!("unexpected {st:?} answer"))
            }
            // A backup's answer to its primary; never a client's.
            Status::Ok | Status::NotFound | Status::Fenced => {
                KvError::BadRequest(format!("unexpected {st:?} answer"))
            }
        }
    }
}

/// Why a client could not connect.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Connection setup failed.
    #[error(transparent)]
    Conn(#[from] ConnError),
    /// The server refused the connection, saying why (a missing or wrong
    /// auth token, …).
    #[error("the server refused the connection: {0}")]
    Refused(String),
    /// The context could not be made.
    #[error(transparent)]
    Setup(#[from] copyrpc::SetupError),
    /// The server is not a kvs-server or answered nonsense.
    #[error("not a kvs-server: {0}")]
    Protocol(String),
    /// The server did not answer in time.
    #[error("the server did not answer within {0:?}")]
    Timeout(Duration),
    /// The device could not wait for the answer (arming its CQs, or its
    /// completion channel, failed).
    #[error(transparent)]
    Wait(#[from] WaitError),
    /// The shard map is larger than a response the rings admit.
    #[error(
        "the shard map of {size} bytes does not fit a response in rings of {ring_size} bytes \
         (at most {max}): raise the ring size"
    )]
    MapTooLarge {
        /// The encoded map's bytes.
        size: usize,
        /// The client's ring size.
        ring_size: u64,
        /// The largest map the rings admit.
        max: usize,
    },
}
