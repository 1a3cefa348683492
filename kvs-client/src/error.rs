//! Errors.

use copyrpc::CloseReason;

use kvs_proto::proto::WireError;

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
    /// The key's shard moved; the client installed the server's newer map.
    /// Send the request again.
    #[error("shard moved: retry with the new map")]
    Redirected,
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
    /// The connection failed; the request may or may not have been done.
    #[error("connection failed: {0}")]
    Failed(CloseReason),
    /// The server's answer did not parse.
    #[error("malformed answer: {0}")]
    Malformed(WireError),
    /// Part of a scan could not be sent (rings full).
    #[error("busy")]
    Busy,
    /// A blocking helper could not submit.
    #[error("not sent: {0}")]
    Submit(String),
}
