//! The write path: a write the handler applied ([`Handled::Forward`]) is
//! sent to every backup of its slot in the map; the client's answer waits
//! in a [`PendingWrites`](super::pending::PendingWrites) until all have answered. copyrpc batches what a turn
//! sends to one backup into one WRITE_IMM. A backup that refuses a write,
//! or whose connection fails, has missed it, and the client is answered
//! UNAVAILABLE (it sends the write again). A ready backup that missed a
//! write must not be promoted: the slot is held (nothing served) and the
//! control thread asks the group to count the copy as stale; once the map
//! says so, the slot is served again and the backup copied anew. A backup
//! still being copied just starts its copy over.
//!
//! Call order: [`prepare`](Forwarder::prepare) (the replication message)
//! then [`forward`](Forwarder::forward) for each write applied;
//! [`on_acks`](Forwarder::on_acks) after each poll of the worker's
//! context; every few turns [`report_quiet`](Forwarder::report_quiet) (for
//! a freeze) and [`report_stale`](Forwarder::report_stale).
//!
//! [`Handled::Forward`]: crate::serving::handle::Handled::Forward

use std::time::Instant;

use copyrpc::transport::Transport;
use copyrpc::{CallFailed, Context, RecvHandle};
use kvs_proto::proto::{begin_response, finish_response, Request, Status, RESPONSE_HEADER};
use kvs_proto::replica::{write_replicate, Header, Kind};
use kvs_proto::{MemberId, Owner, RequestId};

use super::copies::CopyStep;
use super::{split, user, Forwarder, Primary, TAG_COPY, TAG_PROBE, TAG_WRITE};
use crate::threads::to_control::ToControl;

/// A write to forward to the backups of its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    /// The slot.
    pub slot: u32,
    /// Its number in the slot's stream.
    pub seq: u64,
    /// What it did.
    pub kind: Kind,
    /// Its key's fingerprint, for the in-flight table.
    pub fp: u64,
    /// The client's request id (`(0, 0)`: none).
    pub id: RequestId,
}

/// What the forwarder keeps with a client's write while it waits for its
/// backups ([`PendingWrites`](super::pending::PendingWrites) decides when
/// it is answered, and how).
#[derive(Debug)]
pub(super) struct Waiter {
    handle: RecvHandle,
    /// The client's answer once all have answered OK (a response header).
    answer: [u8; RESPONSE_HEADER],
    fp: u64,
    slot: u32,
}

impl Forwarder {
    /// Writes the replication message of the write `req` (the client's
    /// request, which the handler applied as `f`), for [`forward`](Self::forward).
    pub fn prepare(&mut self, h: &mut Primary<'_>, req: &[u8], f: Forward) {
        // The handler parsed it already.
        let Ok(r) = Request::new_checked(req) else {
            self.msg.clear();
            return;
        };
        let mut hdr = Header {
            kind: f.kind,
            slot: f.slot,
            epoch: h.map.epoch(f.slot),
            primary: self.me,
            seq: f.seq,
            offset: r.offset(),
            id: f.id,
        };
        let value = match f.kind {
            Kind::Delete => &[][..],
            // A backup being copied may not have the key yet: it gets the
            // whole value the patch left.
            Kind::Patch if self.copying(f.slot) => {
                hdr.kind = Kind::Put;
                hdr.offset = 0;
                h.store.get(f.slot, r.key()).unwrap_or_default()
            }
            _ => r.value(),
        };
        write_replicate(&mut self.msg, &hdr, r.key(), value);
    }

    /// Forwards the write [`prepare`](Self::prepare)d (answered `answer`
    /// here) to every backup of its slot; the client's answer waits for
    /// theirs. True if it was answered at once (no backup counted for
    /// it): then in this turn, before the worker's log commit.
    pub fn forward<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &mut Primary<'_>,
        handle: RecvHandle,
        f: Forward,
        answer: &[u8],
    ) -> bool
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let mut a = [0u8; RESPONSE_HEADER];
        let n = answer.len().min(RESPONSE_HEADER);
        a[..n].copy_from_slice(&answer[..n]);
        let idx = self.pending.add(Waiter {
            handle,
            answer: a,
            fp: f.fp,
            slot: f.slot,
        });
        if self.msg.is_empty() {
            self.pending
                .fail(idx, || "the write could not be encoded".into());
        }
        let backups = if self.msg.is_empty() {
            kvs_proto::shard::Backups::default()
        } else {
            h.map.backup_set(f.slot)
        };
        for b in backups.iter() {
            // A backup whose copy has not begun takes nothing before its
            // begin (the snapshot will hold this write).
            if !b.ready
                && self
                    .job(f.slot, b.owner)
                    .is_none_or(|i| self.copies[i].step == CopyStep::Begin)
            {
                continue;
            }
            // A link still being set up (this worker just became the
            // slot's primary) takes the write into its queue.
            let sent = match self.links.iter().position(|l| l.owner == b.owner) {
                Some(li) => {
                    let u = user(TAG_WRITE, u64::from(self.links[li].id), idx);
                    self.send(ctx, li, u)
                }
                None => false,
            };
            if sent {
                let counts = b.ready
                    || self
                        .job(f.slot, b.owner)
                        .is_some_and(|i| self.copies[i].step == CopyStep::Done);
                // Sent: a link to it exists.
                if let Some(l) = self.links.iter().find(|l| l.owner == b.owner) {
                    self.pending.sent(idx, l.id, counts);
                }
            } else {
                let why = format!(
                    "no connection to the backup on member {} yet",
                    b.owner.member
                );
                self.write_missed(h, idx, b.owner, why);
            }
        }
        self.settle(ctx, h, idx, false)
    }

    /// The backup on `to` did not apply pending write `idx`. If it counts
    /// (ready in the map, or its copy reported ready), the client is told
    /// the write failed and the backup is dealt with ([`missed`]); a backup
    /// still being copied starts its copy over (the new snapshot holds the
    /// write), and the client's answer does not depend on it.
    ///
    /// [`missed`]: Self::missed
    pub(super) fn write_missed(&mut self, h: &mut Primary<'_>, idx: u32, to: Owner, why: String) {
        let Some(slot) = self.pending.get(idx).map(|w| w.slot) else {
            return;
        };
        let job = self.job(slot, to);
        let counts = h.map.backups(slot).iter().any(|b| b.owner == to && b.ready)
            || job.is_some_and(|i| self.copies[i].step == CopyStep::Done);
        if counts {
            self.pending.fail(idx, || why);
            self.missed(h, slot, to);
        } else if let Some(i) = job.filter(|&i| self.copies[i].step == CopyStep::Pulling) {
            self.fail_copy(i, Instant::now());
        }
    }

    /// Answers pending write `idx` if every backup has; whether it did.
    /// `committed`: the write is in the worker's log (it was made in an
    /// earlier turn, whose commit is over), so its success may leave ahead
    /// of this turn's commit ([`Context::reply_early`]).
    pub(super) fn settle<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &mut Primary<'_>,
        idx: u32,
        committed: bool,
    ) -> bool
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let Some((p, outcome)) = self.pending.settle(idx) else {
            return false;
        };
        h.slot_state.end_write(p.fp);
        match outcome {
            Ok(()) if committed => {
                let _ = ctx.reply_early(p.handle, &p.answer);
            }
            Ok(()) => {
                let _ = ctx.reply(p.handle, &p.answer);
            }
            Err(why) => {
                let mut out = Vec::new();
                begin_response(&mut out, Status::Unavailable, 0);
                let m = format!(
                    "slot {}: a backup did not apply the write ({why}); the slot's copies are \
                     being repaired: send it again",
                    p.slot
                );
                let room = p.handle.max_response().saturating_sub(RESPONSE_HEADER);
                out.extend_from_slice(&m.as_bytes()[..m.len().min(room)]);
                finish_response(&mut out, 0);
                let _ = ctx.reply(p.handle, &out);
            }
        }
        true
    }

    /// The backup on `to` missed a write of `slot` it was waited for: a
    /// ready one holds the slot and is reported stale; one whose copy was
    /// reported ready holds it until the map says whether it is (see
    /// [`SlotState::hold_until_ready`]). Either is copied anew only once the
    /// map counts it not ready: a copy drops what the backup holds, and it
    /// may still be promoted meanwhile.
    ///
    /// [`SlotState::hold_until_ready`]: crate::replication::slot_state::SlotState::hold_until_ready
    pub(super) fn missed(&mut self, h: &mut Primary<'_>, slot: u32, to: Owner) {
        if h.map.owner_of_slot(slot) != self.me || h.slot_state.held(slot).is_some() {
            return;
        }
        let ready = h.map.backups(slot).iter().any(|b| b.owner == to && b.ready);
        if ready {
            h.slot_state.hold(slot, Some(to.member));
            self.stale.push((to.member, slot));
        } else if self
            .job(slot, to)
            .is_some_and(|i| self.copies[i].step == CopyStep::Done)
        {
            h.slot_state
                .hold_until_ready(slot, to.member, h.map.epoch(slot));
        }
    }

    /// Handles the backups' answers since the last call; returns how many
    /// clients were answered.
    pub fn on_acks<F, T>(&mut self, ctx: &mut Context<u64, F, T>, h: &mut Primary<'_>) -> u64
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let mut acks = self.acks.0.take();
        if acks.is_empty() {
            self.acks.0.set(acks);
            return 0;
        }
        std::mem::swap(&mut acks, &mut self.scratch);
        self.acks.0.set(acks);
        let mut answered = 0;
        let mut batch = std::mem::take(&mut self.scratch);
        for a in batch.drain(..) {
            let (tag, hi, idx) = split(a.user);
            match tag {
                TAG_WRITE => {
                    // A backup that counted when the write was sent fails
                    // it, whatever the map says now: it may be the slot's
                    // primary since, without the write (the table's rule).
                    let link = hi as u16;
                    if !self.pending.answer(idx, link, a.refused.as_deref()) {
                        continue;
                    }
                    if let Some(why) = a.refused {
                        // Its repair is judged by the map as it is now; a
                        // link gone since (its backup dropped from the map)
                        // needs none.
                        let l = self.links.iter().find(|l| l.id == link);
                        if let Some(owner) = l.map(|l| l.owner) {
                            self.write_missed(h, idx, owner, why);
                        }
                    }
                    // Acks come with a poll, and the commit of the turn
                    // that made the write came before it.
                    if self.settle(ctx, h, idx, true) {
                        answered += 1;
                    }
                }
                TAG_COPY | TAG_PROBE => self.copy_ack(tag, idx, hi as u16, a),
                _ => {}
            }
        }
        self.scratch = batch;
        answered
    }

    /// Tells the control thread, once no write of the slots frozen for a
    /// hand-over or a drain waits for its backups (and none of them is held
    /// for a backup that missed one), that they may be handed over.
    pub fn report_quiet(&mut self, h: &mut Primary<'_>) {
        let Some(f) = h.frozen.as_mut() else {
            return;
        };
        let slots = f.first..f.end;
        let busy = self.pending.iter().any(|w| slots.contains(&w.slot))
            || slots.clone().any(|s| h.slot_state.held(s).is_some());
        if busy {
            return;
        }
        let quiet = ToControl::Quiet {
            round: f.round,
            worker: self.me.worker,
        };
        f.reported = self.report.send(quiet).is_ok();
    }

    /// Reports the held slots found stale to the control thread, by member.
    pub(super) fn report_stale(&mut self) {
        if !self.stale.is_empty() {
            let mut by: Vec<(MemberId, Vec<u32>)> = Vec::new();
            for (m, s) in self.stale.drain(..) {
                match by.iter_mut().find(|(x, _)| *x == m) {
                    Some((_, v)) => v.push(s),
                    None => by.push((m, vec![s])),
                }
            }
            for (member, slots) in by {
                let _ = self.report.send(ToControl::BackupStale { member, slots });
            }
        }
    }
}
