//! Serving clients: connection setup, which admits them and hands each to
//! a worker ([`setup`]); the worker threads, which own the slots the shard
//! map gives them and answer ([`worker`]); how one request is answered
//! against a worker's store ([`handle`]); and what answers for the member
//! while its workers recover their records, before it serves
//! ([`recovering`]).

pub mod handle;
pub(crate) mod intake;
pub(crate) mod map_wait;
pub(crate) mod read_wait;
pub(crate) mod recovering;
pub(crate) mod retained;
pub(crate) mod setup;
pub(crate) mod worker;
