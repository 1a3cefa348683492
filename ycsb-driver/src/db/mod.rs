//! The database interface, Java YCSB's `DB`: `init` (opening a [`Target`]),
//! `read`, `scan`, `update`, `insert`, `delete` and `cleanup`, made
//! asynchronous so one driver thread keeps the driver's depth of operations
//! in flight: each call submits an operation under a tag, and
//! [`Db::wait`] hands back the answers by tag.
//!
//! The driver's loop ([`crate::runner`]) serves every store through this
//! trait. A store is one file here: a target (where the store is) whose
//! `open` hands a connected [`Db`] to the loop, and that `Db`. Two ship:
//! [`kvs`] (the copyrpc store) and [`redis`] (Java YCSB's Redis data model).
//!
//! A record is the workload's fields, each of the same length, one after the
//! other; an update carries a run of them ([`Fields`]).

use std::time::Duration;

use crate::measure::Status;
use crate::phase::RunOptions;
use crate::workload::CoreWorkload;

pub mod kvs;
pub mod redis;

/// One store's client for one driver thread, with operations in flight.
///
/// Submitting never blocks: an operation the store has no room for yet is
/// [`Refused::Busy`], to be submitted again after a [`Db::wait`]. Every
/// accepted operation is answered exactly once by a later `wait`.
pub trait Db {
    /// Reads the record of `key` (Java's `read`, all fields).
    fn read(&mut self, key: &[u8], tag: u32) -> Result<(), Refused>;
    /// Reads up to `count` records from `start` on, in the store's key order
    /// (Java's `scan`).
    fn scan(&mut self, start: &[u8], count: usize, tag: u32) -> Result<(), Refused>;
    /// Overwrites a run of the record's fields (Java's `update`).
    fn update(&mut self, key: &[u8], fields: Fields<'_>, tag: u32) -> Result<(), Refused>;
    /// Writes a new record, every field (Java's `insert`).
    fn insert(&mut self, key: &[u8], record: &[u8], tag: u32) -> Result<(), Refused>;
    /// Removes the record of `key` (Java's `delete`).
    fn delete(&mut self, key: &[u8], tag: u32) -> Result<(), Refused>;
    /// Operations submitted and not yet answered.
    fn in_flight(&self) -> usize;
    /// Waits up to `timeout` for answers (none in flight: sleeps it out)
    /// and hands each to `done` with its tag. An error here means the
    /// store can no longer be waited on at all.
    fn wait(&mut self, timeout: Duration, done: impl FnMut(u32, Answer<'_>)) -> Result<(), Lost>;
    /// Ends the thread's session (Java's `cleanup`).
    fn cleanup(self) -> Cleanup;
}

/// A run of a record's fields, as an update writes them.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    /// The first field's index.
    pub first: usize,
    /// The fields' bytes, one after the other, each of the record layout's
    /// field length.
    pub data: &'a [u8],
}

/// An operation's outcome.
#[derive(Debug)]
pub enum Answer<'a> {
    /// Done, with this status (a read: not found, or an error).
    Done(Status),
    /// A read found the record: its fields, one after the other (the driver
    /// checks them when values are checked). Borrowed for the call only.
    Record(&'a [u8]),
    /// The connection was lost: the operation counts as an error, and the
    /// phase stops.
    Lost(Lost),
}

/// Why an operation was not submitted.
#[derive(Debug, Clone)]
pub enum Refused {
    /// No room now: wait for answers and submit it again.
    Busy,
    /// It can never be sent (too large, …): an error of its kind.
    Unsendable,
    /// The connection is gone: an error, and the phase stops.
    Lost(Lost),
}

/// The connection to the store was lost (the server died, or closed or broke
/// the connection); says what was seen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Lost(pub String);

/// What a store says when a thread's session ends.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cleanup {
    /// The newest shard-map version the client knew (kvs-server).
    pub map_version: Option<u32>,
}

/// Where the driver threads' store is: one variant per store.
#[derive(Debug, Clone)]
pub enum Target {
    /// A kvs-server.
    Kvs(kvs::KvsTarget),
    /// A Redis server.
    Redis(redis::RedisTarget),
}

impl Target {
    /// Java's `init`, for one driver thread: connects, and runs `user`
    /// with the connected store.
    pub(crate) fn open<U: UseDb>(&self, init: &Init<'_>, user: U) -> Result<U::Output, String> {
        match self {
            Target::Kvs(t) => t.open(init, user),
            Target::Redis(t) => t.open(init, user),
        }
    }

    /// Where the store is, for messages.
    pub fn address(&self) -> &str {
        match self {
            Target::Kvs(t) => &t.server,
            Target::Redis(t) => &t.url,
        }
    }
}

/// What a driver thread runs once its store is connected: generic over the
/// store, so each store's calls are direct.
pub(crate) trait UseDb {
    /// What it returns.
    type Output;
    /// Runs with `db`.
    fn run<D: Db>(self, db: D) -> Self::Output;
}

/// What a store's client is opened with.
#[derive(Clone, Copy)]
pub(crate) struct Init<'a> {
    /// The workload: the record layout and the longest scan.
    pub wl: &'a CoreWorkload,
    /// The phase's settings: depth, whether values are checked (a store
    /// that does not keep records as one value then gives each read's
    /// fields back as one, [`Answer::Record`]), idling.
    pub opts: &'a RunOptions,
}

impl Init<'_> {
    /// Fields per record and bytes per field.
    pub fn layout(&self) -> (usize, usize) {
        (self.wl.field_count(), self.wl.field_length())
    }
}

#[cfg(test)]
mod tests;
