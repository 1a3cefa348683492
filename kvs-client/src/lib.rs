//! The copyrpc key-value store's client: a callback-driven client of a
//! cluster of kvs-servers over copyrpc. The protocol and the shard map are
//! `kvs-proto`'s.
//!
//! [`Client::connect`] contacts any member, fetches the shard map and
//! connects to every worker of that member; the other members are connected
//! when a request first needs them. Each request goes to the worker that
//! owns its key's slot; redirects (the slot moved) and try-agains (the
//! server has not seen the client's map yet) are followed inside the client,
//! so the caller sees only final answers ([`KvError::NoRoute`] when the
//! chase is given up). A member that cannot be connected fails only the
//! requests for its slots ([`KvError::Unreachable`]) and is tried again
//! after a backoff.
//!
//! A server that requires an auth token gets it from
//! [`ClientOptions::auth_token`] ([`auth_token`] reads it from a file or the
//! `KVS_AUTH_TOKEN` environment variable). When the server goes away, the
//! requests waiting for it and every later one fail with an error
//! ([`KvError::Failed`], [`SubmitError::Closed`]) once [`Client::poll`] sees
//! the connection closed (it looks every 100 ms).
//!
//! ```no_run
//! use kvs_client::{Client, ClientOptions, Reply};
//! let dev = mlx5::device::Context::open("sim0").unwrap();
//! let mut c: Client<u64> = Client::connect("127.0.0.1:7000", &dev, ClientOptions::default()).unwrap();
//! c.put(b"user1", b"hello", 1).unwrap();
//! c.get(b"user1", 2).unwrap();
//! let mut left = 2;
//! while left > 0 {
//!     left -= c.poll(|tag, r| match r {
//!         Ok(Reply::Value(v)) => println!("{tag}: {}", String::from_utf8_lossy(v)),
//!         other => println!("{tag}: {other:?}"),
//!     });
//! }
//! ```

mod auth;
mod client;
pub mod control;
mod error;
mod inbox;
mod map_fetch;
mod members;
mod options;
mod reach;
mod reply;
mod retry;
mod route;
mod scan;

pub use auth::{auth_token, cluster_token, AUTH_TOKEN_ENV, CLUSTER_TOKEN_ENV};
pub use client::Client;
pub use control::{ControlClient, ControlError, ControlOptions};
pub use error::{ConnectError, KvError, SubmitError};
pub use kvs_proto::{AuthToken, ShardMap, TokenError};
#[cfg(feature = "cli")]
pub use mlx5::log_to_stderr;
pub use options::ClientOptions;
pub use reply::{OwnedReply, Reply};
pub use scan::ScanReply;
