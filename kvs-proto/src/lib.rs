//! The copyrpc key-value store's wire protocol, shared by kvs-server and
//! kvs-client: the request and response formats ([`proto`]), the cluster's
//! shard map that says which member and worker owns each hash slot
//! ([`shard`]), the control messages of membership and administration
//! ([`control`]) and the control group's batches of Raft messages
//! ([`group`]), the replication messages a slot's primary sends its backups
//! ([`replica`]), the setup private data that names the worker a connection
//! is for ([`hello`](mod@hello)), and the auth token it may carry ([`auth`]);
//! and the ids all of them name members, clusters and tickets by ([`ids`]).

pub mod auth;
pub mod control;
pub mod group;
pub mod hello;
pub mod ids;
pub mod proto;
pub mod replica;
pub mod shard;

pub use auth::{AuthToken, TokenError};
pub use hello::{hello, parse_hello, SetupAnswer, CONTROL};
pub use ids::{BadClusterId, BadTicket, ClusterId, MemberId, Ticket};
pub use proto::RequestId;
pub use shard::{Member, Owner, ShardMap};
