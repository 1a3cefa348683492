//! A sharded in-memory key-value server over copyrpc. Worker threads each own
//! one copyrpc context and the shards (hash slots) the shard map gives them;
//! a request for a shard another worker owns is answered with a redirect
//! carrying the map. GET, PUT, DELETE, SCAN (ordered) and UPDATE_RANGE.
//! Connection setup reads every client's setup record at once under a
//! deadline, and checks the auth token the server's configuration names.
//! `max_memory` caps the heap the records take ([`store::memory`]); `metrics_listen`
//! serves metrics in the Prometheus text format.
//!
//! ```no_run
//! let server = kvs_server::Server::start(kvs_server::Config::default()).unwrap();
//! println!("serving on {}", server.addr());
//! server.wait();
//! ```

// Tests pass lists of slot ranges that often hold one range.
#![cfg_attr(test, allow(clippy::single_range_in_vec_init))]

// The assembly, and what it is configured by.
pub mod config;
mod server;

// Serving clients: connection setup, the workers, and their records.
mod serving;
pub mod store;

// The control plane, and live migration of slots between members over
// bulk transfers (which copies to new backups use too).
mod bulk;
mod cluster;
mod migration;

// Replication: the write path, copies to new backups (both ends), links to
// them, the workers' replication state, and the control thread's side.
mod replication;

// The records on disk: a durable log per worker.
mod persist;

// The process's logs.
pub mod logging;

// The metrics endpoint.
mod metrics;
mod metrics_http;

// What the threads tell and share with each other.
mod threads;

// Leaves: what the modules above share, importing none of them (a module
// here imports only other leaves or `config`).
mod crash;
mod dedup;
mod random;
mod request_metrics;
mod role;
mod start_error;
mod worker_stats;

pub use config::{Config, Durability};
pub use crash::abort_on_panic;
pub use server::Server;

pub use serving::setup::SetupStats;
pub use start_error::{StartError, WorkerFailure};
pub use worker_stats::WorkerStats;
