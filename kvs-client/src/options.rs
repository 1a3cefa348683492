//! Client settings.

use std::time::Duration;

use copyrpc::IdlePolicy;
use kvs_proto::AuthToken;

/// How long [`ClientOptions::setup_timeout`] is by default.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// copyrpc ring size per endpoint (a power of two).
    pub ring_size: u64,
    /// Largest value a GET expects (the response allowance it reserves).
    /// Larger values come back as [`KvError::AllowanceTooSmall`](crate::KvError::AllowanceTooSmall).
    pub value_allowance: usize,
    /// Response allowance of each worker's part of a SCAN; a part that does
    /// not fit stops early and the scan reports itself incomplete.
    pub scan_allowance: usize,
    /// The token to present, for a server that requires one (see
    /// [`auth_token`](crate::auth_token)).
    pub auth_token: Option<AuthToken>,
    /// What [`Client::wait`](crate::Client::wait) does while no answer is
    /// back: spin, then sleep (the default), or spin only.
    pub idle: IdlePolicy,
    /// How long [`Client::connect`](crate::Client::connect) gives the whole
    /// bootstrap (the connections to every worker of the member contacted,
    /// and the shard map's answer), and how long the connections to
    /// another member's workers may take when a request first needs them.
    pub setup_timeout: Duration,
    /// How long a GET, PUT, DELETE or UPDATE_RANGE may take, redirects and
    /// re-sends included, before it fails with
    /// [`KvError::Timeout`](crate::KvError::Timeout): a stuck (not dead)
    /// member holds no request longer. A write that times out may still
    /// have been applied.
    pub timeout: Duration,
}

/// How long [`ClientOptions::timeout`] is by default.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            ring_size: 1 << 20,
            value_allowance: 4096,
            scan_allowance: 128 << 10,
            auth_token: None,
            idle: IdlePolicy::default(),
            setup_timeout: SETUP_TIMEOUT,
            timeout: REQUEST_TIMEOUT,
        }
    }
}
