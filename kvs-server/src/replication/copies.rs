//! The copies of slots to new backups (not ready in the map), over the
//! migrations' bulk path. The slots copied to one backup in one turn (up
//! to [`COPY_BUDGET`] bytes under way per backup) are snapshotted together
//! under one ticket ([`SourceSlots::issue_copy`]); each slot's begin goes into
//! the stream at the slot's current number, followed by the primary's
//! request ids for the slot ([`Kind::CopyIds`]), and the backup pulls the
//! snapshot over mpib from this member's bulk port, taking a record only for
//! a key the stream did not write or delete since the begin. The copy's
//! end is sent every [`PROBE`] until the backup answers that every pulled
//! record is in; the copy is then reported ready to the control thread.
//! A copy that fails (a refusal, a stall, a broken link) starts over from a
//! new snapshot, unless it was reported ready.
//!
//! Call order: after a new map, [`want_copy`](Forwarder::want_copy) for
//! each backup of this worker's slots that is not ready; each turn with
//! copies under way, [`copy_turn`](Forwarder::copy_turn) (probes, stalls,
//! begins); each answer, [`copy_ack`](Forwarder::copy_ack); every few turns
//! [`report_ready`](Forwarder::report_ready).
//!
//! [`SourceSlots::issue_copy`]: crate::bulk::source_slots::SourceSlots::issue_copy

use std::sync::Arc;
use std::time::{Duration, Instant};

use copyrpc::transport::Transport;
use copyrpc::{CallFailed, Context};
use kvs_proto::replica::{push_ids_entry, write_replicate, CopyBegin, Header, Kind, IDS_FORGOT};
use kvs_proto::{MemberId, Owner, RequestId, ShardMap, Ticket};

use super::{user, Ack, Forwarder, Primary, TAG_COPY, TAG_PROBE};
use crate::bulk::source_slots::Held;
use crate::threads::to_control::ToControl;

/// How long a failed copy waits before it starts over.
const COPY_RETRY: Duration = Duration::from_millis(50);
/// How long a copy waits for an answer before it starts over.
const COPY_STALL: Duration = Duration::from_secs(2);
/// How often a copy asks whether the backup pulled its snapshot.
pub(super) const PROBE: Duration = Duration::from_millis(2);
/// Bytes of this worker's snapshots under way to one backup worker, at
/// most (a slot larger than this goes alone): what copies may cost in
/// memory here. 64 batches of the bulk path: enough to keep a pull busy.
pub(super) const COPY_BUDGET: usize = 64 << 20;
/// Slots snapshotted under one ticket, at most.
const COPY_GROUP: usize = 256;
/// A link's queue past which no copy begins.
const COPY_QUEUE: usize = 256;
/// Clients' windows per [`Kind::CopyIds`] message (640 bytes).
const IDS_BATCH: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CopyStep {
    /// To begin (at `retry_at`): asked where the backup's copy stands
    /// first (unless [`CopyJob::whole`]), then a catch-up, or a snapshot
    /// and the begin in the stream.
    Begin,
    /// The backup was asked where its copy stands ([`super::catch_up`]).
    Asking,
    /// The backup pulls the snapshot; asked every [`PROBE`] if done.
    Pulling,
    /// Complete, and reported ready.
    Done,
}

/// A copy of one slot to one new backup.
#[derive(Debug)]
pub(super) struct CopyJob {
    /// Names it in its messages' user data.
    pub(super) id: u32,
    pub(super) slot: u32,
    pub(super) to: Owner,
    /// The map version it began under.
    pub(super) since: u32,
    /// The slot's epoch then: a new one (the slot's replica set changed)
    /// starts the copy over.
    pub(super) epoch: u32,
    pub(super) step: CopyStep,
    /// The snapshot's ticket while it is pulled, and the slot's records
    /// and bytes in it.
    pub(super) ticket: Option<Ticket>,
    pub(super) records: usize,
    pub(super) bytes: usize,
    /// Answers awaited, and whether one is a probe's.
    pub(super) outstanding: u32,
    pub(super) probing: bool,
    pub(super) next_probe: Instant,
    /// Told apart from the answers of an earlier attempt.
    pub(super) gen: u16,
    pub(super) retry_at: Instant,
    pub(super) wanted: bool,
    /// When an answer last came (or the step last began).
    pub(super) progress: Instant,
    /// Where the backup said its copy stands in the slot's stream (0:
    /// nowhere), once asked.
    pub(super) from: Option<u64>,
    /// The copy is whole (no catch-up: the backup lacks too much, or
    /// refused it).
    pub(super) whole: bool,
    /// Asks refused so far.
    pub(super) asks: u8,
    /// The copy under way is a catch-up.
    pub(super) catch_up: bool,
}

impl Forwarder {
    /// Whether a copy of `slot` is under way (begun, not complete).
    pub(super) fn copying(&self, slot: u32) -> bool {
        !self.copies.is_empty()
            && self
                .copies
                .iter()
                .any(|j| j.slot == slot && j.step == CopyStep::Pulling)
    }

    /// The copy of `slot` to `to`, if there is one.
    pub(super) fn job(&self, slot: u32, to: Owner) -> Option<usize> {
        if self.copies.is_empty() {
            return None;
        }
        self.copies
            .iter()
            .position(|j| j.slot == slot && j.to == to)
    }

    /// Copy `i` failed: it starts over (a new snapshot) after
    /// [`COPY_RETRY`]; its snapshot goes unless another copy shares it.
    pub(super) fn fail_copy(&mut self, i: usize, now: Instant) {
        let j = &mut self.copies[i];
        j.step = CopyStep::Begin;
        j.gen = j.gen.wrapping_add(1);
        j.outstanding = 0;
        j.probing = false;
        j.retry_at = now + COPY_RETRY;
        if let Some(t) = j.ticket.take() {
            self.release_ticket(&t);
        }
    }

    /// Frees a snapshot no copy pulls any more (if not pulled yet).
    pub(super) fn release_ticket(&self, t: &Ticket) {
        if !self.copies.iter().any(|j| j.ticket.as_ref() == Some(t)) {
            self.source_slots.cancel_copy(t);
        }
    }

    /// An answer to one of copy `id`'s messages (attempt `gen`).
    pub(super) fn copy_ack(&mut self, tag: u64, id: u32, gen: u16, a: Ack) {
        let Some(i) = self.copies.iter().position(|j| j.id == id) else {
            return;
        };
        let now = Instant::now();
        let j = &mut self.copies[i];
        // A copy reported ready is never started over from here.
        if j.gen != gen || j.step == CopyStep::Done {
            return;
        }
        j.progress = now;
        j.outstanding = j.outstanding.saturating_sub(1);
        if tag == TAG_PROBE {
            j.probing = false;
            j.next_probe = now + PROBE;
            if a.not_yet {
                return;
            }
        }
        if let Some(why) = a.refused {
            if a.not_yet {
                // The backup's member waits for its restart to be applied:
                // asked again, as if never asked.
                return self.fail_copy(i, now);
            }
            // Expected while the backup installs the map: quiet.
            if !why.contains("Fenced") || why.contains("pull failed") {
                tracing::warn!("copy of slot {} to member {}: {why}", j.slot, j.to.member);
            }
            j.refused_catch_up(&why);
            return self.fail_copy(i, now);
        }
        if j.step == CopyStep::Asking {
            return j.answered(a.value, now);
        }
        if tag == TAG_PROBE && j.step == CopyStep::Pulling {
            j.step = CopyStep::Done;
            if let Some(t) = j.ticket.take() {
                self.release_ticket(&t);
            }
            let j = &self.copies[i];
            self.ready
                .push((j.to.member, j.slot, j.since, j.records, j.bytes));
        }
    }

    /// The copies' turn: probes due, stalls, and the begins each backup's
    /// link has room for.
    pub(super) fn copy_turn<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &mut Primary<'_>,
        now: Instant,
    ) where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        for i in 0..self.copies.len() {
            let j = &self.copies[i];
            if j.step == CopyStep::Asking && now.duration_since(j.progress) > COPY_STALL {
                self.fail_copy(i, now);
                continue;
            }
            if j.step != CopyStep::Pulling {
                continue;
            }
            // No answer for that long: whatever happened to them, the copy
            // starts over rather than wait forever.
            if j.outstanding > 0 && now.duration_since(j.progress) > COPY_STALL {
                tracing::warn!(
                    "copy of slot {} to member {}: no answer for {:?}; starting over",
                    j.slot,
                    j.to.member,
                    COPY_STALL
                );
                self.fail_copy(i, now);
                continue;
            }
            if j.probing || now < j.next_probe {
                continue;
            }
            let Some(li) = self.link_of(j.to) else {
                continue;
            };
            let hdr = Header {
                kind: Kind::CopyEnd,
                slot: j.slot,
                epoch: h.map.epoch(j.slot),
                primary: self.me,
                seq: 0,
                offset: 0,
                id: RequestId::default(),
            };
            let u = user(TAG_PROBE, u64::from(j.gen), j.id);
            write_replicate(&mut self.msg, &hdr, &[], &[]);
            if self.send(ctx, li, u) {
                let j = &mut self.copies[i];
                j.probing = true;
                j.outstanding += 1;
            } else {
                self.fail_copy(i, now);
            }
        }
        for li in 0..self.links.len() {
            if self.link_of(self.links[li].owner) != Some(li)
                || self.links[li].queue.len() >= COPY_QUEUE
            {
                continue;
            }
            self.ask_or_catch_up(ctx, h, li, now);
            let group = self.copy_group(h, self.links[li].owner, now);
            if !group.is_empty() {
                self.begin_copies(ctx, h, li, &group, now);
            }
        }
    }

    /// The copies to `to` that may begin now, in slot order, within
    /// [`COPY_BUDGET`] (counting the ones under way; one at least when
    /// none is) and [`COPY_GROUP`].
    pub(super) fn copy_group(&self, h: &mut Primary<'_>, to: Owner, now: Instant) -> Vec<usize> {
        let under_way: usize = self
            .copies
            .iter()
            .filter(|j| j.to == to && j.step == CopyStep::Pulling)
            .map(|j| j.bytes)
            .sum();
        let mut room = COPY_BUDGET.saturating_sub(under_way);
        let mut alone = under_way == 0;
        let mut group = Vec::new();
        for (i, j) in self.copies.iter().enumerate() {
            if j.to != to || j.step != CopyStep::Begin || now < j.retry_at || !j.whole {
                continue;
            }
            if !copyable(h, j.slot, to) {
                continue;
            }
            let size = h.store.slot_size(j.slot).bytes;
            if size > room && !alone {
                continue;
            }
            room = room.saturating_sub(size);
            alone = false;
            group.push(i);
            if group.len() >= COPY_GROUP {
                break;
            }
        }
        group.sort_by_key(|&i| self.copies[i].slot);
        group
    }

    /// Snapshots the slots of copies `group` (to link `li`'s backup) under
    /// one ticket, and sends each slot's begin.
    pub(super) fn begin_copies<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &mut Primary<'_>,
        li: usize,
        group: &[usize],
        now: Instant,
    ) where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let held: Held = group
            .iter()
            .map(|&i| {
                let slot = self.copies[i].slot;
                (slot, Arc::new(h.store.snapshot_slot(slot)))
            })
            .collect();
        let (records, bytes) = held.iter().fold((0u64, 0u64), |(n, b), (_, r)| {
            (n + r.len() as u64, b + r.bytes() as u64)
        });
        let sizes: Vec<(usize, usize)> = held.iter().map(|(_, r)| (r.len(), r.bytes())).collect();
        let (ticket, first, end) = match self.source_slots.issue_copy(held) {
            Ok(t) => t,
            Err(why) => {
                tracing::warn!("worker {}: cannot copy slots: {why}", self.me.worker);
                for &i in group {
                    self.fail_copy(i, now);
                }
                return;
            }
        };
        let begin = CopyBegin {
            ticket,
            first,
            end,
            records,
            bytes,
            stream: 0,
        };
        for (&i, (count, size)) in group.iter().zip(sizes) {
            let slot = self.copies[i].slot;
            let hdr = Header {
                kind: Kind::CopyBegin,
                slot,
                epoch: h.map.epoch(slot),
                primary: self.me,
                seq: h.slot_state.last_seq(slot),
                offset: 0,
                id: RequestId::default(),
            };
            let begin = CopyBegin {
                stream: h.slot_state.stream(slot),
                ..begin
            };
            write_replicate(&mut self.msg, &hdr, &ticket.bytes(), &begin.value());
            let j = &mut self.copies[i];
            j.catch_up = false;
            j.gen = j.gen.wrapping_add(1);
            let u = user(TAG_COPY, u64::from(j.gen), j.id);
            j.ticket = Some(ticket);
            if !self.send(ctx, li, u) {
                self.fail_copy(i, now);
                continue;
            }
            // The request ids of the writes before the begin, so that a
            // write sent again after the backup's promotion is applied once.
            let sent = self.send_ids(ctx, h, li, hdr, u);
            if sent.is_none() {
                self.fail_copy(i, now);
                continue;
            }
            self.copied.whole(size);
            let j = &mut self.copies[i];
            j.outstanding = sent.unwrap_or(0);
            j.step = CopyStep::Pulling;
            j.bytes = size;
            j.records = count;
            j.since = h.map.version();
            j.epoch = h.map.epoch(slot);
            j.outstanding += 1;
            j.probing = false;
            j.next_probe = now + PROBE;
            j.progress = now;
        }
    }

    /// Sends the request ids `h` remembers for `begin`'s slot to link
    /// `li`, after the copy's begin, in messages of at most [`IDS_BATCH`]
    /// clients (user data `u`); how many messages went, `None` if the link
    /// could not take one.
    pub(super) fn send_ids<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &mut Primary<'_>,
        li: usize,
        begin: Header,
        u: u64,
    ) -> Option<u32>
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        // Whether the primary forgot clients goes with every message (and
        // alone, in one, if it remembers none): the promoted backup must
        // refuse what the primary would have.
        let forgot = h.dedup.forgot(begin.slot);
        let hdr = Header {
            kind: Kind::CopyIds,
            seq: 0,
            offset: if forgot { IDS_FORGOT } else { 0 },
            ..begin
        };
        let mut value = Vec::new();
        let mut sent = 0;
        let mut clients = h.dedup.clients(begin.slot).peekable();
        while clients.peek().is_some() || (forgot && sent == 0) {
            value.clear();
            for e in clients.by_ref().take(IDS_BATCH) {
                push_ids_entry(&mut value, &e);
            }
            write_replicate(&mut self.msg, &hdr, &[], &value);
            if !self.send(ctx, li, u) {
                return None;
            }
            sent += 1;
        }
        Some(sent)
    }

    /// `owner` backs `slot` up but is not ready: its copy is wanted (a new
    /// one, from its beginning, if there was none). Returns the copy's id if
    /// the slot's epoch changed under it (it starts over).
    pub(super) fn want_copy(
        &mut self,
        slot: u32,
        owner: Owner,
        map: &ShardMap,
        now: Instant,
    ) -> Option<u32> {
        if let Some(j) = self
            .copies
            .iter_mut()
            .find(|j| j.slot == slot && j.to == owner)
        {
            j.wanted = true;
            if j.epoch != map.epoch(slot) {
                j.epoch = map.epoch(slot);
                return Some(j.id);
            }
            return None;
        }
        self.copies.push(CopyJob {
            id: {
                self.next_job = self.next_job.wrapping_add(1);
                self.next_job
            },
            slot,
            to: owner,
            since: map.version(),
            epoch: map.epoch(slot),
            step: CopyStep::Begin,
            ticket: None,
            records: 0,
            bytes: 0,
            outstanding: 0,
            probing: false,
            next_probe: now,
            gen: 0,
            retry_at: now,
            wanted: true,
            progress: now,
            from: None,
            whole: false,
            asks: 0,
            catch_up: false,
        });
        None
    }

    /// Reports the backups made ready to the control thread, by member and
    /// map version.
    pub(super) fn report_ready(&mut self) {
        if !self.ready.is_empty() {
            let mut by: Vec<(MemberId, u32, Vec<u32>, u64, u64)> = Vec::new();
            for (m, s, since, n, b) in self.ready.drain(..) {
                let (n, b) = (n as u64, b as u64);
                match by.iter_mut().find(|(x, v, ..)| *x == m && *v == since) {
                    Some((_, _, v, records, bytes)) => {
                        v.push(s);
                        *records += n;
                        *bytes += b;
                    }
                    None => by.push((m, since, vec![s], n, b)),
                }
            }
            for (member, since, slots, records, bytes) in by {
                let _ = self.report.send(ToControl::BackupReady {
                    member,
                    slots,
                    since,
                    records,
                    bytes,
                });
            }
        }
    }
}

/// Whether `slot` may be copied to its backup `to` now: not while the map
/// has it ready, or the slot is held for it (it is copied once the map
/// counts it not ready).
pub(super) fn copyable(h: &Primary<'_>, slot: u32, to: Owner) -> bool {
    h.slot_state.held(slot) != Some(to.member)
        && !h.map.backups(slot).iter().any(|b| b.owner == to && b.ready)
}
