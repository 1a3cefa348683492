//! A backup restarted from its files catches up instead of taking a whole
//! copy, when its copy of a slot is recent: the primary asks where the
//! copy stands in the slot's stream ([`Kind::CopyAsk`]); if its history
//! still holds every write after that ([`History`]), it sends a catch-up's
//! begin at the slot's current number ([`Kind::CatchUp`]), then each key
//! written since, as it is now ([`Kind::Fill`]: its value, or deleted),
//! then the request ids, all in the stream before any later write; the
//! copy's end follows as for a whole copy. Otherwise (no position, a
//! position the history no longer covers, a catch-up that would send more
//! than the whole slot, or a refused one) the copy is whole.
//!
//! Call order: in the copies' turn, per backup link,
//! [`ask_or_catch_up`](Forwarder::ask_or_catch_up) before the whole copies
//! begin; the ask's answer comes back through
//! [`copy_ack`](Forwarder::copy_ack) ([`CopyJob::answered`]).
//!
//! [`History`]: super::history::History

use std::time::Instant;

use copyrpc::transport::Transport;
use copyrpc::{CallFailed, Context};
use kvs_proto::replica::{write_replicate, CatchUp, Header, Kind, FILL_ABSENT};
use kvs_proto::RequestId;

use super::copies::{copyable, CopyJob, CopyStep, PROBE};
use super::{user, Forwarder, Primary, TAG_COPY};
use crate::store::Position;

/// Refused asks after which the copy is whole.
const ASKS: u8 = 3;

impl CopyJob {
    /// The backup answered the ask: its copy holds the stream up to write
    /// `at - 1` (`at` 0: it stands nowhere in it).
    pub(super) fn answered(&mut self, at: u64, now: Instant) {
        self.step = CopyStep::Begin;
        self.retry_at = now;
        self.from = at.checked_sub(1);
        self.whole = self.from.is_none();
        if self.whole {
            tracing::debug!(
                "slot {}: member {}'s copy stands nowhere in this term's writes; \
                 copying it whole",
                self.slot,
                self.to.member
            );
        }
    }

    /// A refusal of this copy's message `why`: an ask refused too often,
    /// or a catch-up refused, makes the copy whole.
    pub(super) fn refused_catch_up(&mut self, why: &str) {
        if self.step == CopyStep::Asking {
            self.asks = self.asks.saturating_add(1);
            self.whole |= self.asks >= ASKS;
        } else if self.catch_up {
            tracing::info!(
                "slot {}: member {} cannot catch up ({why}); copying it whole",
                self.slot,
                self.to.member
            );
            self.whole = true;
        }
        self.from = None;
    }
}

impl Forwarder {
    /// For link `li`'s backup: asks where its copies stand, and begins the
    /// catch-ups it can take; a copy that cannot catch up is made whole.
    pub(super) fn ask_or_catch_up<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &mut Primary<'_>,
        li: usize,
        now: Instant,
    ) where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let to = self.links[li].owner;
        for i in 0..self.copies.len() {
            let j = &mut self.copies[i];
            if j.to != to || j.step != CopyStep::Begin || now < j.retry_at || j.whole {
                continue;
            }
            if !h.slot_state.keeps_history() {
                j.whole = true;
                continue;
            }
            if !copyable(h, j.slot, to) {
                continue;
            }
            match j.from {
                None => self.ask(ctx, h, li, i, now),
                Some(from) => {
                    if !self.catch_up(ctx, h, li, i, from, now) {
                        self.copies[i].whole = true;
                    }
                }
            }
        }
    }

    /// Asks link `li`'s backup where its copy of job `i`'s slot stands.
    fn ask<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &mut Primary<'_>,
        li: usize,
        i: usize,
        now: Instant,
    ) where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let slot = self.copies[i].slot;
        let hdr = Header {
            kind: Kind::CopyAsk,
            slot,
            epoch: h.map.epoch(slot),
            primary: self.me,
            seq: h.slot_state.stream(slot),
            offset: 0,
            id: RequestId::default(),
        };
        write_replicate(&mut self.msg, &hdr, &[], &[]);
        let j = &mut self.copies[i];
        j.gen = j.gen.wrapping_add(1);
        let u = user(TAG_COPY, u64::from(j.gen), j.id);
        if !self.send(ctx, li, u) {
            return self.fail_copy(i, now);
        }
        let j = &mut self.copies[i];
        j.step = CopyStep::Asking;
        j.outstanding = 1;
        j.progress = now;
    }

    /// Catches link `li`'s backup up on job `i`'s slot from write `from`
    /// of its stream; false if the history cannot, or it would send more
    /// than the whole slot, and over a megabyte (the copy is whole then).
    fn catch_up<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &mut Primary<'_>,
        li: usize,
        i: usize,
        from: u64,
        now: Instant,
    ) -> bool
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let slot = self.copies[i].slot;
        let stream = h.slot_state.stream(slot);
        let at = Position {
            stream,
            applied: from,
        };
        let Some(keys) = h.slot_state.lacks(slot, at) else {
            return false;
        };
        let bytes: usize = keys
            .iter()
            .map(|k| k.len() + h.store.get(slot, k).map_or(0, <[u8]>::len))
            .sum();
        if bytes > h.store.slot_size(slot).bytes.max(1 << 20) {
            // The whole slot, over the bulk path, is less.
            return false;
        }
        let begin = Header {
            kind: Kind::CatchUp,
            slot,
            epoch: h.map.epoch(slot),
            primary: self.me,
            seq: h.slot_state.last_seq(slot),
            offset: 0,
            id: RequestId::default(),
        };
        write_replicate(
            &mut self.msg,
            &begin,
            &[],
            &CatchUp { stream, from }.value(),
        );
        let j = &mut self.copies[i];
        j.gen = j.gen.wrapping_add(1);
        j.catch_up = true;
        let u = user(TAG_COPY, u64::from(j.gen), j.id);
        let mut sent = u32::from(self.send(ctx, li, u));
        for k in &keys {
            let value = h.store.get(slot, k);
            let fill = Header {
                kind: Kind::Fill,
                offset: if value.is_some() { 0 } else { FILL_ABSENT },
                ..begin
            };
            write_replicate(&mut self.msg, &fill, k, value.unwrap_or_default());
            sent += u32::from(self.send(ctx, li, u));
        }
        let ids = self.send_ids(ctx, h, li, begin, u);
        if sent as usize != keys.len() + 1 || ids.is_none() {
            self.fail_copy(i, now);
            return true;
        }
        self.copied.catch_up(bytes);
        let j = &mut self.copies[i];
        j.outstanding = sent + ids.unwrap_or(0);
        j.step = CopyStep::Pulling;
        j.bytes = bytes;
        j.records = keys.len();
        j.since = h.map.version();
        j.epoch = h.map.epoch(slot);
        j.probing = false;
        j.next_probe = now + PROBE;
        j.progress = now;
        tracing::debug!(
            "slot {slot}: member {} catches up from write {from}: {} keys, {bytes} bytes",
            j.to.member,
            keys.len()
        );
        true
    }
}
