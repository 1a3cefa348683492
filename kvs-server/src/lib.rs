//! A sharded in-memory key-value server over copyrpc. Worker threads each own
//! one copyrpc context and the shards (hash slots) the shard map gives them;
//! a request for a shard another worker owns is answered with a redirect
//! carrying the map. GET, PUT, DELETE, SCAN (ordered) and UPDATE_RANGE.
//! Connection setup reads every client's setup record at once under a
//! deadline, and checks the auth token the server's configuration names.
//! `max_memory` caps the heap the records take ([`memory`]); `metrics_listen`
//! serves metrics in the Prometheus text format.
//!
//! ```no_run
//! let server = kvs_server::Server::start(kvs_server::Config::default()).unwrap();
//! println!("serving on {}", server.addr());
//! server.wait();
//! ```

mod cluster;
pub mod config;
pub mod handle;
pub mod memory;
mod metrics;
mod metrics_http;
mod migration;
mod server;
mod setup;
pub mod store;
mod worker;

pub use config::Config;
pub use server::{Server, StartError, WorkerStats};
pub use setup::SetupStats;
