//! Replication, all of it: a primary worker's side (the write path, the
//! copies to new backups, the links to its backups), a worker's
//! I/O-free replication state (as a slot's primary and as its backup), and
//! the control thread's side (what it proposes for the workers, drains,
//! a replicated migration's hand-over).
//!
//! The files, by part:
//! - [`write_path`]: a client's write forwarded to its slot's backups, and
//!   its answer once they all answered;
//! - [`pending`]: which backups a waiting write counts on, and when and
//!   how it is settled (no I/O);
//! - [`copies`]: a slot copied to a new backup (snapshot, begin, pull, end);
//! - [`copy_in`]: the backup's side of a copy: the pull of the snapshot;
//! - [`links`]: the connections to the backups, and their queues;
//! - [`slot_state`]: per slot, the primary's numbers and keys in flight, the
//!   backup's stream followed and copy arriving, and the slots held for a
//!   backup that missed a write (no I/O; the worker's handler owns it);
//! - [`proposals`]: the control thread proposes what the workers report
//!   (copies ready, backups stale), a restart, and drains;
//! - [`hand_over`]: a replicated migration's hand-over from this member;
//! - [`refusal`]: why a backup refuses a message.
//!
//! This file holds the [`Forwarder`] (the state the first three share;
//! each of them adds an `impl` block), the backups' answers as the worker
//! context's callback leaves them ([`Acks`]), and the worker's state the
//! forwarder reads ([`Primary`]).
//!
//! A worker's turn calls, in order: [`Forwarder::prepare`] then
//! [`Forwarder::forward`] for each write its handler applied,
//! [`Forwarder::on_acks`] after polling its context, [`Forwarder::pump`]
//! when [`Forwarder::busy`]; after a new map [`Forwarder::on_install`]; every
//! few turns [`Forwarder::chores`] and [`Forwarder::report_quiet`].
//!
//! In short, a primary worker's side (the part with I/O): a copyrpc
//! connection to each worker that backs up one of its slots (dialed off
//! the worker's thread, [`copyrpc::conn::dial`]), the writes waiting for
//! their backups' answers, and the copies of slots to new backups.
//!
//! - **Forwarding.** A write the handler applied ([`Handled::Forward`]) is
//!   sent to every backup of its slot in the map; the client's answer
//!   waits in a [`PendingWrites`] until all have answered. copyrpc batches what a
//!   turn sends to one backup into one WRITE_IMM. When a backup's ring has
//!   no room, messages wait in that link's queue, in order, and go out on
//!   a later turn (their buffers are reused: no allocation once warm).
//! - **Failure.** A backup that refuses a write, or whose connection
//!   fails, has missed it, and the client is answered UNAVAILABLE (it sends
//!   the write again). A ready backup that missed a write must not be
//!   promoted: the slot is held (nothing served) and the control thread
//!   asks the group to count the copy as stale; once the map says so, the
//!   slot is served again and the backup copied anew. A backup whose copy
//!   was reported ready but is not ready in the map yet holds the slot
//!   until the map says it, then the same. A backup still being copied
//!   just starts its copy over.
//! - **Copies.** Each backup of this worker's slots that is not ready gets
//!   a copy. The slots copied to one backup in one turn (up to
//!   [`COPY_BUDGET`](copies::COPY_BUDGET) bytes under way per backup) are snapshotted together
//!   under one ticket ([`SourceSlots::issue_copy`]); each slot's begin goes
//!   into the stream at the slot's current number, and the backup pulls
//!   the snapshot over mpib from this member's bulk port (the migrations'
//!   bulk path), taking a record only for a key the stream did not write
//!   or delete since the begin. Writes after the begin go to the backup
//!   as to any other (an UPDATE_RANGE as the whole value it left: the
//!   backup may not have the key's snapshot yet); one the backup does not
//!   apply starts its copy over rather than fail the client's write. The
//!   copy's end is sent every [`PROBE`](copies::PROBE) until the backup answers that
//!   every pulled record is in (and so every write before it); then the
//!   control thread reports the backup ready, and from then on a write it
//!   misses fails as for a ready one: a copy reported ready is never
//!   started over, unless the slot's epoch moves (which voids the report).
//!
//! [`Handled::Forward`]: crate::serving::handle::Handled::Forward

mod catch_up;
pub(crate) mod copies;
pub(crate) mod copy_in;
pub(crate) mod hand_over;
pub(crate) mod history;
pub(crate) mod links;
pub(crate) mod pending;
pub(crate) mod proposals;
pub(crate) mod refusal;
pub(crate) mod slot_state;
pub(crate) mod write_path;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use copyrpc::transport::Transport;
use copyrpc::{CallFailed, Context};
use kvs_proto::proto::{Status, RESPONSE_HEADER};
use kvs_proto::{AuthToken, ClusterId, MemberId, Owner, ShardMap, Ticket};

use crate::bulk::source_slots::SourceSlots;
use crate::dedup::Dedup;
use crate::store::Store;
use crate::threads::to_control::ToControl;
use crate::threads::to_worker::Frozen;
use copies::{CopyJob, CopyStep};
use links::{Link, LinkState};
use pending::PendingWrites;
use slot_state::SlotState;
use write_path::Waiter;

/// What of a worker's state the forwarder reads and changes, as its slots'
/// primary: borrowed from the worker's handler for one call
/// (`Handler::primary`).
#[derive(Debug)]
pub(crate) struct Primary<'a> {
    /// The shard map in force.
    pub map: &'a ShardMap,
    /// The worker's data.
    pub store: &'a Store,
    /// The request ids of the writes applied, per slot.
    pub dedup: &'a Dedup,
    /// The worker's replication state.
    pub slot_state: &'a mut SlotState,
    /// Slots being handed over (or drained): their writes wait.
    pub frozen: &'a mut Option<Frozen>,
}

/// The allowance of a backup's answer: a header and a refusal's message.
const ANSWER: usize = RESPONSE_HEADER + 512;

/// A client's write forwarded to a backup (user data: the link, the
/// pending write).
const TAG_WRITE: u64 = 1;
/// A copy's begin (user data: the job's attempt and id).
const TAG_COPY: u64 = 2;
/// A copy's end, asking whether the pull is done.
const TAG_PROBE: u64 = 3;

/// One answer from a backup: the call's user data, and why it failed.
#[derive(Debug)]
pub(crate) struct Ack {
    user: u64,
    refused: Option<String>,
    /// The refusal is TRY_AGAIN (a copy's pull goes on).
    not_yet: bool,
    /// What an OK answer carries after its header, as a `u64` (0: none):
    /// where a backup's copy stands, to a [`Kind::CopyAsk`].
    ///
    /// [`Kind::CopyAsk`]: kvs_proto::replica::Kind::CopyAsk
    value: u64,
}

/// Where the worker context's response callback leaves backups' answers:
/// a cell moved out and back (no borrow flag, no allocation once warm).
#[derive(Default)]
pub(crate) struct Acks(Cell<Vec<Ack>>);

impl std::fmt::Debug for Acks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acks")
    }
}

/// The worker context's response callback.
pub(crate) fn ack_handler(acks: Rc<Acks>) -> impl FnMut(u64, Result<&[u8], CallFailed>) {
    move |user, r| {
        let value = r
            .as_ref()
            .ok()
            .and_then(|b| b.get(RESPONSE_HEADER..RESPONSE_HEADER + 8))
            .map_or(0, |v| u64::from_le_bytes(v.try_into().expect("8 bytes")));
        let (refused, not_yet) = read_answer(r);
        let mut v = acks.0.take();
        v.push(Ack {
            user,
            refused,
            not_yet,
            value,
        });
        acks.0.set(v);
    }
}

/// What a backup's answer says: why it did not apply the message (`None`:
/// it did), and whether that is TRY_AGAIN (a copy's pull goes on). The
/// answer is a peer's bytes: one shorter than a response header, or with
/// a status no server sends, is a refusal, never a panic nor an OK.
#[inline]
fn read_answer(r: Result<&[u8], CallFailed>) -> (Option<String>, bool) {
    match r {
        Ok(b) if b.len() >= RESPONSE_HEADER && b[0] == Status::Ok as u8 => (None, false),
        Ok(b) => (
            Some(refusal_text(b)),
            b.len() >= RESPONSE_HEADER && b[0] == Status::TryAgain as u8,
        ),
        Err(CallFailed(why)) => (Some(format!("connection failed: {why}")), false),
    }
}

/// A backup's refusal, as its answer says it.
#[cold]
fn refusal_text(b: &[u8]) -> String {
    let status = b
        .first()
        .filter(|_| b.len() >= RESPONSE_HEADER)
        .and_then(|&c| Status::from_u8(c))
        .map_or_else(
            || format!("a malformed answer of {} bytes", b.len()),
            |s| format!("{s:?}"),
        );
    let msg = b.get(RESPONSE_HEADER..).unwrap_or_default();
    format!("{status}: {}", String::from_utf8_lossy(msg))
}

/// A call's user data: its tag (`TAG_*`), 16 bits of what the tag says
/// (a link's id, a copy's attempt), and an index (a pending write, a copy).
fn user(tag: u64, hi: u64, idx: u32) -> u64 {
    (tag << 48) | ((hi & 0xffff) << 32) | u64::from(idx)
}

/// The parts of a call's user data ([`user`]).
fn split(user: u64) -> (u64, u64, u32) {
    (user >> 48, (user >> 32) & 0xffff, user as u32)
}

/// A primary worker's forwarding, links and copies (see the [module
/// docs](self)).
pub(crate) struct Forwarder {
    me: Owner,
    cluster: ClusterId,
    token: Option<AuthToken>,
    source_slots: Arc<SourceSlots>,
    links: Vec<Link>,
    next_link: u16,
    pending: PendingWrites<Waiter>,
    copies: Vec<CopyJob>,
    next_job: u32,
    acks: Rc<Acks>,
    scratch: Vec<Ack>,
    spare: Vec<Vec<u8>>,
    msg: Vec<u8>,
    report: Sender<ToControl>,
    /// Copies complete: the backup's member, the slot, the version the
    /// copy began under, its records and bytes.
    ready: Vec<(MemberId, u32, u32, usize, usize)>,
    stale: Vec<(MemberId, u32)>,
    /// The copies begun so far, by kind.
    pub copied: Copied,
}

/// Copies of slots a primary worker began, whole and caught up: how many,
/// and the records' bytes each sent (keys and values).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Copied {
    pub whole: u64,
    pub whole_bytes: u64,
    pub catch_ups: u64,
    pub catch_up_bytes: u64,
}

impl Copied {
    fn whole(&mut self, bytes: usize) {
        self.whole += 1;
        self.whole_bytes += bytes as u64;
    }

    fn catch_up(&mut self, bytes: usize) {
        self.catch_ups += 1;
        self.catch_up_bytes += bytes as u64;
    }
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("links", &self.links.len())
            .field("pending", &self.pending.len())
            .field("copies", &self.copies.len())
            .finish()
    }
}

impl Forwarder {
    /// Worker `me`'s forwarder, presenting `token` to members of cluster
    /// `cluster`, holding copies' snapshots in `source_slots`, reporting to the
    /// control thread on `report`; `acks` is what the context's callback
    /// ([`ack_handler`]) fills.
    pub fn new(
        me: Owner,
        cluster: ClusterId,
        token: Option<AuthToken>,
        source_slots: Arc<SourceSlots>,
        acks: Rc<Acks>,
        report: Sender<ToControl>,
    ) -> Forwarder {
        Forwarder {
            me,
            cluster,
            token,
            source_slots,
            links: Vec::new(),
            next_link: 0,
            pending: PendingWrites::default(),
            copies: Vec::new(),
            next_job: 0,
            acks,
            scratch: Vec::new(),
            spare: Vec::new(),
            msg: Vec::with_capacity(4096),
            report,
            ready: Vec::new(),
            copied: Copied::default(),
            stale: Vec::new(),
        }
    }

    /// Whether a turn has work for [`pump`](Self::pump): queued messages
    /// or copies under way.
    #[inline]
    pub fn busy(&self) -> bool {
        !self.copies.is_empty() || self.links.iter().any(|l| !l.queue.is_empty())
    }

    /// Whether links are being set up or copies are under way: the worker
    /// should not sleep long.
    pub fn settling(&self) -> bool {
        self.busy()
            || self
                .links
                .iter()
                .any(|l| !matches!(l.state, LinkState::Up(_)))
            || self.copies.iter().any(|j| j.step != CopyStep::Done)
    }

    /// Sends what waits: queued messages, then the copies' next steps.
    pub fn pump<F, T>(&mut self, ctx: &mut Context<u64, F, T>, h: &mut Primary<'_>)
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        self.flush_queues(ctx);
        if !self.copies.is_empty() {
            self.copy_turn(ctx, h, Instant::now());
        }
    }

    /// After a new map: which backups need links, which need copies; links
    /// and copies no longer needed go (closing a link fails the writes
    /// waiting on it).
    pub fn on_install<F, T>(&mut self, ctx: &mut Context<u64, F, T>, map: &ShardMap)
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        for l in &mut self.links {
            l.wanted = false;
        }
        for j in &mut self.copies {
            j.wanted = false;
        }
        let now = Instant::now();
        let mut restart = Vec::new();
        for s in 0..map.slots() {
            if map.owner_of_slot(s) != self.me {
                continue;
            }
            for b in map.backups(s) {
                self.want_link(b.owner, map, now);
                if b.ready {
                    continue;
                }
                if let Some(id) = self.want_copy(s, b.owner, map, now) {
                    restart.push(id);
                }
            }
        }
        // A new epoch (the slot's replica set changed) starts a copy over.
        for id in restart {
            if let Some(i) = self.copies.iter().position(|j| j.id == id) {
                self.fail_copy(i, now);
                self.copies[i].retry_at = now;
            }
        }
        // Copies no longer wanted go (their answers, if any still come,
        // find no job), and their snapshots if not pulled yet.
        let gone: Vec<Ticket> = self
            .copies
            .iter()
            .filter(|j| !j.wanted)
            .filter_map(|j| j.ticket)
            .collect();
        self.copies.retain(|j| j.wanted);
        for t in &gone {
            self.release_ticket(t);
        }
        self.drop_unwanted_links(ctx);
    }

    /// The links' upkeep (dials under way, dead connections, new ones due)
    /// and the reports to the control thread.
    pub fn chores<F, T>(&mut self, ctx: &mut Context<u64, F, T>, h: &mut Primary<'_>)
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let now = Instant::now();
        let broken = self.tend_links(ctx, now);
        // A backup whose connection died missed what was in flight: its
        // copies start over (the ready ones are reported stale, through
        // the writes that fail).
        for o in broken {
            for i in 0..self.copies.len() {
                let j = &self.copies[i];
                if j.to == o && j.step == CopyStep::Pulling {
                    self.fail_copy(i, now);
                }
            }
        }
        // Held slots whose backup the map now shows ready.
        if let Some(due) = h.slot_state.take_stale_due() {
            self.stale.extend(due);
        }
        // A held slot whose stale report is not in yet is reported again
        // by the control thread's retries; send what is new.
        self.report_stale();
        self.report_ready();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::proto::{begin_response, finish_response};

    #[test]
    fn user_data_carries_tag_link_and_index() {
        let u = user(TAG_COPY, 0x1234, 0xdead_beef);
        assert_eq!(split(u), (TAG_COPY, 0x1234, 0xdead_beef));
        assert_eq!(split(user(TAG_WRITE, 0, 7)), (TAG_WRITE, 0, 7));
    }

    #[test]
    fn an_empty_or_malformed_answer_from_a_backup_is_a_refusal() {
        let acks = Rc::new(Acks::default());
        let mut on_answer = ack_handler(acks.clone());
        let mut ok = Vec::new();
        kvs_proto::proto::begin_response(&mut ok, Status::Ok, 0);
        kvs_proto::proto::finish_response(&mut ok, 0);
        let mut again = Vec::new();
        kvs_proto::proto::begin_response(&mut again, Status::TryAgain, 0);
        kvs_proto::proto::finish_response(&mut again, 0);
        on_answer(1, Ok(&[]));
        on_answer(2, Ok(&[0]));
        on_answer(3, Ok(&[200, 1, 2]));
        on_answer(4, Ok(&ok));
        on_answer(5, Ok(&again));
        let got = acks.0.take();
        let seen: Vec<_> = got
            .iter()
            .map(|a| (a.user, a.refused.is_some(), a.not_yet))
            .collect();
        assert_eq!(
            seen,
            [
                (1, true, false),
                (2, true, false),
                (3, true, false),
                (4, false, false),
                (5, true, true)
            ]
        );
        for a in &got[..3] {
            let why = a.refused.as_deref().unwrap();
            assert!(why.contains("malformed"), "{why}");
        }
    }

    #[test]
    fn a_refusal_names_its_status_and_message() {
        let mut b = Vec::new();
        begin_response(&mut b, Status::Fenced, 0);
        b.extend_from_slice(b"not the primary");
        finish_response(&mut b, 0);
        assert_eq!(refusal_text(&b), "Fenced: not the primary");
        assert_eq!(refusal_text(&[]), "a malformed answer of 0 bytes: ");
    }
}
