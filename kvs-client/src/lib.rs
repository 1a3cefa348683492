//! The copyrpc key-value store's client: shard routing and a callback-driven
//! client over copyrpc. The protocol and the shard map are `kvs-proto`'s.
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

mod client;
mod error;

pub use client::{Client, ClientOptions, ConnectError, OwnedReply, Reply, ScanReply};
pub use error::{KvError, SubmitError};
pub use kvs_proto::ShardMap;
