//! The history the nemesis's clients record: one entry per operation, with
//! the logical process that ran it, when it was invoked and, if an answer
//! came, when and what.
//!
//! As in Jepsen, a process runs one operation at a time, and an operation
//! whose outcome is unknown (a write that timed out or whose connection
//! broke) stays open for good: its process never runs another, and the
//! client goes on as a new process. Operations that certainly did nothing
//! (a read that failed, a write refused before it was sent or by a final
//! answer) are not recorded at all.
// Shared with the tests that borrow the nemesis's parts.
#![allow(dead_code)]

use std::time::Instant;

/// A key of the history: the register's name.
pub type Key = u32;

/// A logical process: one client's run of operations, up to its first
/// operation of unknown outcome.
pub type Process = u32;

/// What an operation asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A GET.
    Read,
    /// A PUT of a value no other write uses.
    Write(u64),
}

/// What an operation that completed returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ret {
    /// A GET's value (`None`: not found).
    Read(Option<u64>),
    /// A PUT acknowledged.
    Written,
}

/// One operation.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// The key.
    pub key: Key,
    /// Who ran it.
    pub process: Process,
    /// What it asked.
    pub op: Op,
    /// When it was invoked, in ns since the history began.
    pub invoked: u64,
    /// When it completed and what it returned; `None`: unknown.
    pub done: Option<(u64, Ret)>,
}

/// The clock every client of one run reads.
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    /// A clock starting now.
    pub fn start() -> Clock {
        Clock(Instant::now())
    }

    /// Nanoseconds since the start.
    pub fn now(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// The bytes a write of `v` stores.
pub fn encode(v: u64) -> Vec<u8> {
    format!("v{v}").into_bytes()
}

/// The value in bytes a read returned; `None` for bytes no write of the
/// nemesis stored (which the checker then sees as a value never written).
pub fn decode(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.strip_prefix('v')?.parse().ok()
}
