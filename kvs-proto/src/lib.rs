//! The copyrpc key-value store's wire protocol, shared by kvs-server and
//! kvs-client: the request and response formats ([`proto`]), the shard map
//! that says which worker owns each hash slot ([`shard`]), the setup private
//! data that names the worker a connection is for ([`hello`](mod@hello)), and the auth
//! token it may carry ([`auth`]).

pub mod auth;
pub mod hello;
pub mod proto;
pub mod shard;

pub use auth::{AuthToken, TokenError};
pub use hello::{hello, parse_hello};
pub use shard::ShardMap;
