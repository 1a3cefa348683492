//! Errors.

/// Why a call was not sent. Retryable ones hand the user data back.
#[derive(Debug, thiserror::Error)]
pub enum CallError<U> {
    /// The peer's receive ring has no room now: poll and retry.
    #[error("ring full")]
    RingFull(U),
    /// Not enough credit for the response allowance: poll and retry.
    #[error("insufficient credit")]
    InsufficientCredit(U),
    /// The endpoint is closed.
    #[error("endpoint closed: {1}")]
    Closed(U, CloseReason),
    /// The request or its response allowance can never fit.
    #[error("message of {1} bytes (with its response allowance) can never fit the rings")]
    TooLarge(U, usize),
    /// No such endpoint.
    #[error("no such endpoint")]
    NoEndpoint(U),
}

impl<U> CallError<U> {
    /// The user data, back.
    pub fn into_inner(self) -> U {
        match self {
            CallError::RingFull(u)
            | CallError::InsufficientCredit(u)
            | CallError::Closed(u, _)
            | CallError::TooLarge(u, _)
            | CallError::NoEndpoint(u) => u,
        }
    }
    /// True for the errors that go away after `poll()`.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CallError::RingFull(_) | CallError::InsufficientCredit(_)
        )
    }
}

/// Why a reply was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The response exceeds what the caller allowed.
    #[error("response of {len} bytes exceeds the caller's allowance of {max}")]
    TooLarge {
        /// Payload bytes.
        len: usize,
        /// The largest payload the allowance admits.
        max: usize,
    },
    /// The endpoint is closed.
    #[error("endpoint closed: {0}")]
    Closed(CloseReason),
}

/// Why an endpoint closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    /// Closed locally.
    #[error("closed by this side")]
    Local,
    /// The peer is gone: its liveness channel (the setup's TCP connection)
    /// closed, because its process died or it closed the endpoint.
    #[error("the peer is gone (its connection closed)")]
    PeerGone,
    /// The peer sent something the protocol does not allow.
    #[error("protocol violation by the peer: {0}")]
    Violation(&'static str),
    /// A work request failed (peer gone, access error, …): the transport's
    /// error code (the mlx5 CQE syndrome; `ibv_wc_status` on verbs).
    #[error("transport error: completion syndrome {0:#x}")]
    Transport(u8),
    /// The device refused to post a work request (the provider's errno on
    /// verbs: the QP cannot take it, now or later).
    #[error("work request refused by the device: {}", std::io::Error::from_raw_os_error(*.0 as i32))]
    Refused(u32),
}

/// A failed call, as the response callback sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call failed: endpoint closed ({0})")]
pub struct CallFailed(pub CloseReason);

/// Errors of context and endpoint setup.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The device refused.
    #[error(transparent)]
    Device(#[from] mlx5::device::DeviceError),
    /// A parameter is out of range.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The endpoint table is full.
    #[error("endpoint table full ({0} endpoints)")]
    TooManyEndpoints(usize),
}

/// Why [`Context::wait`](crate::Context::wait) could not sleep.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// A CQ of the mlx5 direct path could not be armed.
    #[error("arming a completion queue: {0}")]
    Arm(#[from] mlx5::cq::CqError),
    /// A CQ of the verbs path could not be armed (`ibv_req_notify_cq`).
    #[error("arming a completion queue: {0}")]
    Notify(#[from] mlx5::hw::HwError),
    /// The completion channel failed.
    #[error("waiting on the completion channel: {0}")]
    Channel(#[from] mlx5::device::DeviceError),
}
