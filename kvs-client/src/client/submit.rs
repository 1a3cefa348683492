//! A request's way out, the hot path: `get`, `put`, `delete` and
//! `update_range` describe it ([`Submission`]), `submit` routes its key to the
//! worker that owns the slot, takes an op slot, encodes the request into it
//! and writes the call into that worker's endpoint batch (posted by the next
//! `poll()`). An owner the client is not connected to yet is reached first
//! (`reach_owner`, in `peers`); a request that cannot be sent completes at
//! the next poll (`fail_soon`) or waits for a map (the chaser).

use std::time::Instant;

use copyrpc::transport::Transport;
use copyrpc::{CallError, CloseReason};

use crate::error::{KvError, SubmitError};
use crate::retry::Target;
use kvs_proto::proto::{self, Op, RequestId, RESPONSE_HEADER};

use super::{Client, Kind};

/// One request's fields, as [`proto::write_request`] encodes them.
#[derive(Clone, Copy)]
struct Submission<'a> {
    op: Op,
    key: &'a [u8],
    value: &'a [u8],
    /// PUT / UPDATE_RANGE: the value's length.
    val_len: u32,
    /// UPDATE_RANGE: where the bytes go.
    offset: u32,
}

impl<'a> Submission<'a> {
    /// A request with a key and nothing else.
    fn keyed(op: Op, key: &'a [u8]) -> Self {
        Submission {
            op,
            key,
            value: &[],
            val_len: 0,
            offset: 0,
        }
    }
}

impl<T, X: Transport> Client<T, X> {
    /// Reads `key`. Busy (retryable after `poll()`) when the endpoint's ring or
    /// credit is used up.
    pub fn get(&mut self, key: &[u8], tag: T) -> Result<(), SubmitError<T>> {
        let a = RESPONSE_HEADER + self.opts.value_allowance;
        self.submit(Submission::keyed(Op::Get, key), a, tag)
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8], tag: T) -> Result<(), SubmitError<T>> {
        let r = Submission {
            value,
            val_len: value.len() as u32,
            ..Submission::keyed(Op::Put, key)
        };
        self.submit(r, RESPONSE_HEADER + 64, tag)
    }

    /// Removes `key`.
    pub fn delete(&mut self, key: &[u8], tag: T) -> Result<(), SubmitError<T>> {
        self.submit(
            Submission::keyed(Op::Delete, key),
            RESPONSE_HEADER + 64,
            tag,
        )
    }

    /// Overwrites `bytes` of `key`'s value at `offset` (the value never grows:
    /// a range past its end is [`KvError::OutOfRange`]).
    pub fn update_range(
        &mut self,
        key: &[u8],
        offset: u32,
        bytes: &[u8],
        tag: T,
    ) -> Result<(), SubmitError<T>> {
        let r = Submission {
            value: bytes,
            val_len: bytes.len() as u32,
            offset,
            ..Submission::keyed(Op::UpdateRange, key)
        };
        self.submit(r, RESPONSE_HEADER + 64, tag)
    }

    /// Sends one request to the owner of its key (queued until `poll()`),
    /// reserving `allowance` bytes for the response.
    #[inline]
    fn submit(
        &mut self,
        r: Submission<'_>,
        allowance: usize,
        tag: T,
    ) -> Result<(), SubmitError<T>> {
        let Submission {
            op,
            key,
            value,
            val_len,
            offset,
        } = r;
        if key.len() > u16::MAX as usize {
            return Err(SubmitError::TooLarge(tag, key.len()));
        }
        if value.len() > u32::MAX as usize {
            return Err(SubmitError::TooLarge(tag, value.len()));
        }
        let ep = match self.routes.of_key(key) {
            Some(ep) => ep,
            // Not connected to the owner yet.
            None => match self.reach_owner(self.map.owner(key)) {
                Ok(ep) => ep,
                // Its connection died, and the slot has a ready backup the
                // group can move it to (the map is fetched again while a
                // member is unreachable): the request waits, sent again by
                // the map in use, until its deadline. Without a backup it
                // fails now.
                Err(e @ KvError::Unreachable { .. }) if self.may_fail_over(key) => {
                    let Some(&any) = self.routes.all().first() else {
                        self.fail_soon(tag, e);
                        return Ok(());
                    };
                    let id = self.next_id(op);
                    let i = self.slot(Some(tag), Kind::Key(op), any, allowance);
                    let s = &mut self.ops[i as usize];
                    let version = self.routes.version();
                    proto::write_request(&mut s.req, op, version, key, value, val_len, offset);
                    if let Some(id) = id {
                        proto::add_request_id(&mut s.req, id);
                    }
                    self.chaser
                        .later(i, &mut s.chase, Target::Route, Instant::now());
                    self.in_flight += 1;
                    return Ok(());
                }
                Err(e) => {
                    self.fail_soon(tag, e);
                    return Ok(());
                }
            },
        };
        let id = self.next_id(op);
        let i = self.slot(Some(tag), Kind::Key(op), ep, allowance);
        let s = &mut self.ops[i as usize];
        let version = self.routes.version();
        proto::write_request(&mut s.req, op, version, key, value, val_len, offset);
        if let Some(id) = id {
            proto::add_request_id(&mut s.req, id);
        }
        match self.ctx.call(ep, &s.req, allowance, i) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            // The owner's connection died: the request waits for a map
            // and a connection, as one for a member not yet reached does.
            Err(CallError::Closed(..) | CallError::NoEndpoint(_)) => {
                if let Some(m) = self.routes.member_of(ep) {
                    self.lost_member(m);
                }
                let s = &mut self.ops[i as usize];
                let now = Instant::now();
                self.chaser.later(i, &mut s.chase, Target::Route, now);
                self.in_flight += 1;
                Ok(())
            }
            Err(e) => {
                let size = s.req.len();
                Err(self.refused(i, e, size))
            }
        }
    }

    /// A write's request id (this client's id and its next request number;
    /// kept on every re-send, so a server applies it once); none for reads.
    #[inline]
    fn next_id(&mut self, op: Op) -> Option<RequestId> {
        if !matches!(op, Op::Put | Op::Delete | Op::UpdateRange) {
            return None;
        }
        self.requests += 1;
        Some(RequestId::new(self.client_id, self.requests))
    }

    /// A call copyrpc refused: frees its op slot and hands the tag back with
    /// the reason (`size`: the bytes that could never fit).
    pub(super) fn refused(&mut self, i: u32, e: CallError<u32>, size: usize) -> SubmitError<T> {
        let tag = self.release(i).expect("a fresh slot has its tag");
        match e {
            CallError::RingFull(_) | CallError::InsufficientCredit(_) => SubmitError::Busy(tag),
            CallError::TooLarge(..) => SubmitError::TooLarge(tag, size),
            CallError::Closed(_, why) => SubmitError::Closed(tag, why),
            CallError::NoEndpoint(_) => SubmitError::Closed(tag, CloseReason::Local),
        }
    }

    /// A request that fails with `e` before it is sent: it completes at the
    /// next poll or wait, as any other does.
    #[cold]
    pub(super) fn fail_soon(&mut self, tag: T, e: KvError) {
        self.doomed.push((tag, e));
        self.in_flight += 1;
    }
}

/// The error of a call refused for good.
pub(super) fn call_failed(e: CallError<u32>) -> KvError {
    match e {
        CallError::Closed(_, why) => KvError::Failed(why),
        CallError::NoEndpoint(_) => KvError::Failed(CloseReason::Local),
        CallError::TooLarge(_, n) => {
            KvError::TooLarge(format!("a request of {n} bytes can never fit the rings"))
        }
        CallError::RingFull(_) | CallError::InsufficientCredit(_) => KvError::Busy,
    }
}
