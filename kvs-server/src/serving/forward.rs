//! A primary worker's side of replication, the part with I/O: a copyrpc
//! connection to each worker that backs up one of its slots (dialed off
//! the worker's thread, [`copyrpc::conn::dial`]), the writes waiting for
//! their backups' answers, and the copies of slots to new backups.
//!
//! - **Forwarding.** A write the handler applied ([`Handled::Forward`]) is
//!   sent to every backup of its slot in the map; the client's answer
//!   waits in a [`Pending`] until all have answered. copyrpc batches what a
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
//!   [`COPY_BUDGET`] bytes under way per backup) are snapshotted together
//!   under one ticket ([`Outgoing::issue_copy`]); each slot's begin goes
//!   into the stream at the slot's current number, and the backup pulls
//!   the snapshot over mpib from this member's bulk port (the migrations'
//!   bulk path), taking a record only for a key the stream did not write
//!   or delete since the begin. Writes after the begin go to the backup
//!   as to any other (an UPDATE_RANGE as the whole value it left: the
//!   backup may not have the key's snapshot yet); one the backup does not
//!   apply starts its copy over rather than fail the client's write. The
//!   copy's end is sent every [`PROBE`] until the backup answers that
//!   every pulled record is in (and so every write before it); then the
//!   control thread reports the backup ready, and from then on a write it
//!   misses fails as for a ready one: a copy reported ready is never
//!   started over, unless the slot's epoch moves (which voids the report).
//!
//! [`Handled::Forward`]: crate::serving::handle::Handled::Forward

use std::cell::Cell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use std::sync::Arc;

use copyrpc::conn::{dial, Connection, Dial};
use copyrpc::transport::Transport;
use copyrpc::{CallFailed, Context, RecvHandle};
use kvs_proto::proto::{begin_response, finish_response, Request, Status, RESPONSE_HEADER};
use kvs_proto::replica::{push_ids_entry, write_replicate, CopyBegin, Header, Kind, IDS_FORGOT};
use kvs_proto::{hello, AuthToken, Owner, SetupAnswer, ShardMap};

use crate::migration::outgoing::{Held, Outgoing};
use crate::serving::handle::{Forward, Handler};
use crate::to_control::ToControl;

/// The allowance of a backup's answer: a header and a refusal's message.
const ANSWER: usize = RESPONSE_HEADER + 512;
/// How long a link's setup may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest wait before a failed link is dialed again.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long a failed copy waits before it starts over.
const COPY_RETRY: Duration = Duration::from_millis(50);
/// How long a copy waits for an answer before it starts over.
const COPY_STALL: Duration = Duration::from_secs(2);
/// How often a copy asks whether the backup pulled its snapshot.
const PROBE: Duration = Duration::from_millis(2);
/// Bytes of this worker's snapshots under way to one backup worker, at
/// most (a slot larger than this goes alone): what copies may cost in
/// memory here. 64 batches of the bulk path: enough to keep a pull busy.
const COPY_BUDGET: usize = 64 << 20;
/// Slots snapshotted under one ticket, at most.
const COPY_GROUP: usize = 256;
/// A link's queue past which no copy begins.
const COPY_QUEUE: usize = 256;
/// Clients' windows per [`Kind::CopyIds`] message (640 bytes).
const IDS_BATCH: usize = 16;

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
        let (refused, not_yet) = read_answer(r);
        let mut v = acks.0.take();
        v.push(Ack {
            user,
            refused,
            not_yet,
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
            Some(refusal(b)),
            b.len() >= RESPONSE_HEADER && b[0] == Status::TryAgain as u8,
        ),
        Err(CallFailed(why)) => (Some(format!("connection failed: {why}")), false),
    }
}

/// A backup's refusal, as its answer says it.
#[cold]
fn refusal(b: &[u8]) -> String {
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

fn user(tag: u64, hi: u64, idx: u32) -> u64 {
    (tag << 48) | ((hi & 0xffff) << 32) | u64::from(idx)
}

fn split(user: u64) -> (u64, u64, u32) {
    (user >> 48, (user >> 32) & 0xffff, user as u32)
}

/// A client's write waiting for its backups.
#[derive(Debug)]
struct Pending {
    handle: RecvHandle,
    /// Backups that have not answered.
    waiting: u16,
    /// The client's answer once all have (a response header).
    answer: [u8; RESPONSE_HEADER],
    fp: u64,
    slot: u32,
    /// Why a backup did not apply it.
    failed: Option<String>,
    /// The links of the backups it was sent to that counted for the
    /// answer then (ready in the map it was accepted under, or their copy
    /// reported ready): a refusal from one fails the write even if the
    /// map has changed since (the backup may be the slot's primary now).
    counted: Counted,
}

/// The links a pending write counts on (see [`Pending::counted`]).
#[derive(Debug, Clone, Copy, Default)]
struct Counted {
    ids: [u16; 4],
    n: u8,
}

impl Counted {
    fn add(&mut self, id: u16) {
        if let Some(slot) = self.ids.get_mut(usize::from(self.n)) {
            *slot = id;
        }
        self.n = self.n.saturating_add(1);
    }

    /// Whether the link numbered `id` counted; past four links (never
    /// more than three backups and a migration's target), every one does.
    fn has(&self, id: u64) -> bool {
        usize::from(self.n) > self.ids.len()
            || self.ids[..usize::from(self.n)]
                .iter()
                .any(|&i| u64::from(i) == id)
    }
}

#[derive(Debug)]
enum LinkState {
    Down,
    Dialing(Dial),
    Up(Connection),
}

/// The connection to one backup worker.
#[derive(Debug)]
struct Link {
    /// Names it in its writes' user data: links come and go (the vector
    /// is reordered), so an answer finds its link by id, not by place.
    id: u16,
    owner: Owner,
    addr: SocketAddr,
    state: LinkState,
    retry_at: Instant,
    backoff: Duration,
    /// Messages that did not fit the ring yet: user data and bytes.
    queue: VecDeque<(u64, Vec<u8>)>,
    /// Still a backup of one of this worker's slots.
    wanted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// To begin (at `retry_at`): a snapshot, and the begin in the stream.
    Begin,
    /// The backup pulls the snapshot; asked every [`PROBE`] if done.
    Pulling,
    /// Complete, and reported ready.
    Done,
}

/// A copy of one slot to one new backup.
#[derive(Debug)]
struct CopyJob {
    /// Names it in its messages' user data.
    id: u32,
    slot: u32,
    to: Owner,
    /// The map version it began under.
    since: u32,
    /// The slot's epoch then: a new one (the slot's replica set changed)
    /// starts the copy over.
    epoch: u32,
    step: Step,
    /// The snapshot's ticket while it is pulled, and the slot's records
    /// and bytes in it.
    ticket: Option<[u8; 16]>,
    records: usize,
    bytes: usize,
    /// Answers awaited, and whether one is a probe's.
    outstanding: u32,
    probing: bool,
    next_probe: Instant,
    /// Told apart from the answers of an earlier attempt.
    gen: u16,
    retry_at: Instant,
    wanted: bool,
    /// When an answer last came (or the step last began).
    progress: Instant,
}

/// A primary worker's forwarding, links and copies (see the [module
/// docs](self)).
pub(crate) struct Forwarder {
    me: Owner,
    cluster: [u8; 16],
    token: Option<AuthToken>,
    outgoing: Arc<Outgoing>,
    links: Vec<Link>,
    next_link: u16,
    pending: Vec<Option<Pending>>,
    free: Vec<u32>,
    copies: Vec<CopyJob>,
    next_job: u32,
    acks: Rc<Acks>,
    scratch: Vec<Ack>,
    spare: Vec<Vec<u8>>,
    msg: Vec<u8>,
    report: Sender<ToControl>,
    /// Copies complete: the backup's member, the slot, the version the
    /// copy began under, its records and bytes.
    ready: Vec<(u16, u32, u32, usize, usize)>,
    stale: Vec<(u16, u32)>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("links", &self.links.len())
            .field("pending", &(self.pending.len() - self.free.len()))
            .field("copies", &self.copies.len())
            .finish()
    }
}

impl Forwarder {
    /// Worker `me`'s forwarder, presenting `token` to members of cluster
    /// `cluster`, holding copies' snapshots in `outgoing`, reporting to the
    /// control thread on `report`; `acks` is what the context's callback
    /// ([`ack_handler`]) fills.
    pub fn new(
        me: Owner,
        cluster: [u8; 16],
        token: Option<AuthToken>,
        outgoing: Arc<Outgoing>,
        acks: Rc<Acks>,
        report: Sender<ToControl>,
    ) -> Forwarder {
        Forwarder {
            me,
            cluster,
            token,
            outgoing,
            links: Vec::new(),
            next_link: 0,
            pending: Vec::new(),
            free: Vec::new(),
            copies: Vec::new(),
            next_job: 0,
            acks,
            scratch: Vec::new(),
            spare: Vec::new(),
            msg: Vec::with_capacity(4096),
            report,
            ready: Vec::new(),
            stale: Vec::new(),
        }
    }

    /// Whether a turn has work for [`pump`](Self::pump): queued messages
    /// or copies under way.
    #[inline]
    pub fn busy(&self) -> bool {
        !self.copies.is_empty() || self.links.iter().any(|l| !l.queue.is_empty())
    }

    /// Writes the replication message of the write `req` (the client's
    /// request, which the handler applied as `f`), for [`forward`](Self::forward).
    pub fn prepare(&mut self, h: &Handler, req: &[u8], f: Forward) {
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

    /// Whether links are being set up or copies are under way: the worker
    /// should not sleep long.
    pub fn settling(&self) -> bool {
        self.busy()
            || self
                .links
                .iter()
                .any(|l| !matches!(l.state, LinkState::Up(_)))
            || self.copies.iter().any(|j| j.step != Step::Done)
    }

    /// Whether a copy of `slot` is under way (begun, not complete).
    fn copying(&self, slot: u32) -> bool {
        !self.copies.is_empty()
            && self
                .copies
                .iter()
                .any(|j| j.slot == slot && j.step == Step::Pulling)
    }

    /// The copy of `slot` to `to`, if there is one.
    fn job(&self, slot: u32, to: Owner) -> Option<usize> {
        if self.copies.is_empty() {
            return None;
        }
        self.copies
            .iter()
            .position(|j| j.slot == slot && j.to == to)
    }

    /// Forwards the write [`prepare`](Self::prepare)d (answered `answer`
    /// here) to every backup of its slot; the client's answer waits for
    /// theirs.
    pub fn forward<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &mut Handler,
        handle: RecvHandle,
        f: Forward,
        answer: &[u8],
    ) where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let mut a = [0u8; RESPONSE_HEADER];
        let n = answer.len().min(RESPONSE_HEADER);
        a[..n].copy_from_slice(&answer[..n]);
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.pending.push(None);
                (self.pending.len() - 1) as u32
            }
        };
        self.pending[idx as usize] = Some(Pending {
            handle,
            waiting: 0,
            answer: a,
            fp: f.fp,
            slot: f.slot,
            failed: None,
            counted: Counted::default(),
        });
        if self.msg.is_empty() {
            let p = self.pending[idx as usize].as_mut().expect("just set");
            p.failed = Some("the write could not be encoded".into());
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
                    .is_none_or(|i| self.copies[i].step == Step::Begin)
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
                        .is_some_and(|i| self.copies[i].step == Step::Done);
                let li = self.links.iter().position(|l| l.owner == b.owner);
                let id = li.map(|li| self.links[li].id);
                let p = self.pending[idx as usize].as_mut().expect("just set");
                p.waiting += 1;
                if let (true, Some(id)) = (counts, id) {
                    p.counted.add(id);
                }
            } else {
                let why = format!(
                    "no connection to the backup on member {} yet",
                    b.owner.member
                );
                self.write_missed(h, idx, b.owner, why);
            }
        }
        self.settle(ctx, h, idx);
    }

    /// The backup on `to` did not apply pending write `idx`. If it counts
    /// (ready in the map, or its copy reported ready), the client is told
    /// the write failed and the backup is dealt with ([`missed`]); a backup
    /// still being copied starts its copy over (the new snapshot holds the
    /// write), and the client's answer does not depend on it.
    ///
    /// [`missed`]: Self::missed
    fn write_missed(&mut self, h: &mut Handler, idx: u32, to: Owner, why: String) {
        let Some(slot) = self
            .pending
            .get(idx as usize)
            .and_then(|p| p.as_ref().map(|p| p.slot))
        else {
            return;
        };
        let job = self.job(slot, to);
        let counts = h.map.backups(slot).iter().any(|b| b.owner == to && b.ready)
            || job.is_some_and(|i| self.copies[i].step == Step::Done);
        if counts {
            if let Some(p) = self.pending[idx as usize].as_mut() {
                p.failed.get_or_insert(why);
            }
            self.missed(h, slot, to);
        } else if let Some(i) = job.filter(|&i| self.copies[i].step == Step::Pulling) {
            self.fail_copy(i, Instant::now());
        }
    }

    /// The index of the link to `owner`, if it is up.
    fn link_of(&self, owner: Owner) -> Option<usize> {
        self.links
            .iter()
            .position(|l| l.owner == owner && matches!(l.state, LinkState::Up(_)))
    }

    /// Sends `self.msg` on link `li`, or queues it behind what waits there
    /// (the ring is full, or the link is not up yet: the queue goes out
    /// once it is, and fails if its setup does); false if the link cannot
    /// take it.
    fn send<F, T>(&mut self, ctx: &mut Context<u64, F, T>, li: usize, u: u64) -> bool
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let l = &mut self.links[li];
        if let LinkState::Up(c) = &l.state {
            if l.queue.is_empty() {
                match ctx.call(c.endpoint(), &self.msg, ANSWER, u) {
                    Ok(()) => return true,
                    Err(e) if e.is_retryable() => {}
                    Err(_) => return false,
                }
            }
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(&self.msg);
        l.queue.push_back((u, b));
        true
    }

    /// A message that will never be sent (its link closed): answered as a
    /// failure, so whatever waits for it does not wait forever.
    fn lost(acks: &Acks, u: u64, why: &str) {
        let mut v = acks.0.take();
        v.push(Ack {
            user: u,
            refused: Some(why.to_string()),
            not_yet: false,
        });
        acks.0.set(v);
    }

    /// The messages queued on link `l`, whose setup failed, are answered
    /// as failures (`why`).
    fn fail_queue(acks: &Acks, spare: &mut Vec<Vec<u8>>, l: &mut Link, why: &str) {
        for (u, b) in l.queue.drain(..) {
            Self::lost(acks, u, &format!("the backup's connection: {why}"));
            spare.push(b);
        }
    }

    /// Tells the control thread, once no write of the slots frozen for a
    /// hand-over or a drain waits for its backups (and none of them is held
    /// for a backup that missed one), that they may be handed over.
    pub fn report_quiet(&mut self, h: &mut Handler) {
        let Some(f) = h.frozen.as_mut() else {
            return;
        };
        let slots = f.first..f.end;
        let busy = self
            .pending
            .iter()
            .flatten()
            .any(|p| slots.contains(&p.slot))
            || slots.clone().any(|s| h.replicas.held(s).is_some());
        if busy {
            return;
        }
        let quiet = ToControl::Quiet {
            round: f.round,
            worker: self.me.worker,
        };
        f.reported = self.report.send(quiet).is_ok();
    }

    /// Answers pending write `idx` if every backup has.
    fn settle<F, T>(&mut self, ctx: &mut Context<u64, F, T>, h: &mut Handler, idx: u32)
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let i = idx as usize;
        if self.pending[i].as_ref().is_none_or(|p| p.waiting > 0) {
            return;
        }
        let p = self.pending[i].take().expect("checked");
        self.free.push(idx);
        h.replicas.end_write(p.fp);
        match p.failed {
            None => {
                let _ = ctx.reply(p.handle, &p.answer);
            }
            Some(why) => {
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
    }

    /// The backup on `to` missed a write of `slot` it was waited for: a
    /// ready one holds the slot and is reported stale; one whose copy was
    /// reported ready holds it until the map says whether it is (see
    /// [`Replicas::hold_until_ready`]). Either is copied anew only once the
    /// map counts it not ready: a copy drops what the backup holds, and it
    /// may still be promoted meanwhile.
    ///
    /// [`Replicas::hold_until_ready`]: crate::serving::replicas::Replicas::hold_until_ready
    fn missed(&mut self, h: &mut Handler, slot: u32, to: Owner) {
        if h.map.owner_of_slot(slot) != self.me || h.replicas.held(slot).is_some() {
            return;
        }
        let ready = h.map.backups(slot).iter().any(|b| b.owner == to && b.ready);
        if ready {
            h.replicas.hold(slot, Some(to.member));
            self.stale.push((to.member, slot));
        } else if self
            .job(slot, to)
            .is_some_and(|i| self.copies[i].step == Step::Done)
        {
            h.replicas
                .hold_until_ready(slot, to.member, h.map.epoch(slot));
        }
    }

    /// Copy `i` failed: it starts over (a new snapshot) after
    /// [`COPY_RETRY`]; its snapshot goes unless another copy shares it.
    fn fail_copy(&mut self, i: usize, now: Instant) {
        let j = &mut self.copies[i];
        j.step = Step::Begin;
        j.gen = j.gen.wrapping_add(1);
        j.outstanding = 0;
        j.probing = false;
        j.retry_at = now + COPY_RETRY;
        if let Some(t) = j.ticket.take() {
            self.release_ticket(&t);
        }
    }

    /// Frees a snapshot no copy pulls any more (if not pulled yet).
    fn release_ticket(&self, t: &[u8; 16]) {
        if !self.copies.iter().any(|j| j.ticket.as_ref() == Some(t)) {
            self.outgoing.cancel_copy(t);
        }
    }

    /// Handles the backups' answers since the last call; returns how many
    /// clients were answered.
    pub fn on_acks<F, T>(&mut self, ctx: &mut Context<u64, F, T>, h: &mut Handler) -> u64
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
                    let Some(p) = self.pending.get_mut(idx as usize).and_then(Option::as_mut)
                    else {
                        continue;
                    };
                    p.waiting = p.waiting.saturating_sub(1);
                    if let Some(why) = a.refused {
                        // A backup that counted when the write was sent
                        // fails it, whatever the map says now: it may be
                        // the slot's primary since, without the write.
                        if p.counted.has(hi) {
                            p.failed.get_or_insert_with(|| why.clone());
                        }
                        // Its repair is judged by the map as it is now; a
                        // link gone since (its backup dropped from the map)
                        // needs none.
                        let link = self.links.iter().find(|l| u64::from(l.id) == hi);
                        if let Some(owner) = link.map(|l| l.owner) {
                            self.write_missed(h, idx, owner, why);
                        }
                    }
                    let was = self.pending[idx as usize].is_some();
                    self.settle(ctx, h, idx);
                    if was && self.pending[idx as usize].is_none() {
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

    /// An answer to one of copy `id`'s messages (attempt `gen`).
    fn copy_ack(&mut self, tag: u64, id: u32, gen: u16, a: Ack) {
        let Some(i) = self.copies.iter().position(|j| j.id == id) else {
            return;
        };
        let now = Instant::now();
        let j = &mut self.copies[i];
        // A copy reported ready is never started over from here.
        if j.gen != gen || j.step == Step::Done {
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
            // Expected while the backup installs the map: quiet.
            if !why.contains("Fenced") || why.contains("pull failed") {
                tracing::warn!("copy of slot {} to member {}: {why}", j.slot, j.to.member);
            }
            return self.fail_copy(i, now);
        }
        if tag == TAG_PROBE && j.step == Step::Pulling {
            j.step = Step::Done;
            if let Some(t) = j.ticket.take() {
                self.release_ticket(&t);
            }
            let j = &self.copies[i];
            self.ready
                .push((j.to.member, j.slot, j.since, j.records, j.bytes));
        }
    }

    /// Sends what waits: queued messages, then the copies' next steps.
    pub fn pump<F, T>(&mut self, ctx: &mut Context<u64, F, T>, h: &Handler)
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        for l in &mut self.links {
            let LinkState::Up(c) = &l.state else {
                continue;
            };
            while let Some((u, b)) = l.queue.pop_front() {
                match ctx.call(c.endpoint(), &b, ANSWER, u) {
                    Ok(()) => self.spare.push(b),
                    Err(e) if e.is_retryable() => {
                        l.queue.push_front((u, b));
                        break;
                    }
                    Err(_) => {
                        Self::lost(&self.acks, u, "the backup's connection closed");
                        self.spare.push(b);
                    }
                }
            }
        }
        if !self.copies.is_empty() {
            self.copy_turn(ctx, h, Instant::now());
        }
    }

    /// The copies' turn: probes due, stalls, and the begins each backup's
    /// link has room for.
    fn copy_turn<F, T>(&mut self, ctx: &mut Context<u64, F, T>, h: &Handler, now: Instant)
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        for i in 0..self.copies.len() {
            let j = &self.copies[i];
            if j.step != Step::Pulling {
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
                id: (0, 0),
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
            let group = self.copy_group(h, self.links[li].owner, now);
            if !group.is_empty() {
                self.begin_copies(ctx, h, li, &group, now);
            }
        }
    }

    /// The copies to `to` that may begin now, in slot order, within
    /// [`COPY_BUDGET`] (counting the ones under way; one at least when
    /// none is) and [`COPY_GROUP`].
    fn copy_group(&self, h: &Handler, to: Owner, now: Instant) -> Vec<usize> {
        let under_way: usize = self
            .copies
            .iter()
            .filter(|j| j.to == to && j.step == Step::Pulling)
            .map(|j| j.bytes)
            .sum();
        let mut room = COPY_BUDGET.saturating_sub(under_way);
        let mut alone = under_way == 0;
        let mut group = Vec::new();
        for (i, j) in self.copies.iter().enumerate() {
            if j.to != to || j.step != Step::Begin || now < j.retry_at {
                continue;
            }
            // Ready in the map, or held for it: copied once the map counts
            // it not ready.
            if h.replicas.held(j.slot) == Some(to.member)
                || h.map
                    .backups(j.slot)
                    .iter()
                    .any(|b| b.owner == to && b.ready)
            {
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
    fn begin_copies<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &Handler,
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
        let (ticket, first, end) = match self.outgoing.issue_copy(held) {
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
        };
        for (&i, (count, size)) in group.iter().zip(sizes) {
            let slot = self.copies[i].slot;
            let hdr = Header {
                kind: Kind::CopyBegin,
                slot,
                epoch: h.map.epoch(slot),
                primary: self.me,
                seq: h.replicas.last_seq(slot),
                offset: 0,
                id: (0, 0),
            };
            write_replicate(&mut self.msg, &hdr, &ticket, &begin.value());
            let j = &mut self.copies[i];
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
            let j = &mut self.copies[i];
            j.outstanding = sent.unwrap_or(0);
            j.step = Step::Pulling;
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
    fn send_ids<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        h: &Handler,
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
        let gone: Vec<[u8; 16]> = self
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

    /// The map has `owner` back a slot of this worker's up: its link is
    /// wanted (a new one, down, if it had none).
    fn want_link(&mut self, owner: Owner, map: &ShardMap, now: Instant) {
        match self.links.iter_mut().find(|l| l.owner == owner) {
            Some(l) => l.wanted = true,
            None => {
                let addr = map.members()[usize::from(owner.member)].addr;
                self.next_link = self.next_link.wrapping_add(1);
                self.links.push(Link {
                    id: self.next_link,
                    owner,
                    addr,
                    state: LinkState::Down,
                    retry_at: now,
                    backoff: Duration::ZERO,
                    queue: VecDeque::new(),
                    wanted: true,
                });
            }
        }
    }

    /// `owner` backs `slot` up but is not ready: its copy is wanted (a new
    /// one, from its beginning, if there was none). Returns the copy's id if
    /// the slot's epoch changed under it (it starts over).
    fn want_copy(&mut self, slot: u32, owner: Owner, map: &ShardMap, now: Instant) -> Option<u32> {
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
            step: Step::Begin,
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
        });
        None
    }

    /// Links no longer wanted go: the writes queued on them fail, their
    /// connections close.
    fn drop_unwanted_links<F, T>(&mut self, ctx: &mut Context<u64, F, T>)
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let mut i = 0;
        while i < self.links.len() {
            if self.links[i].wanted {
                i += 1;
                continue;
            }
            let mut l = self.links.swap_remove(i);
            for (u, b) in l.queue.drain(..) {
                Self::lost(&self.acks, u, "the backup was dropped from the map");
                self.spare.push(b);
            }
            match l.state {
                LinkState::Up(c) => {
                    ctx.close(c.endpoint());
                    ctx.remove(c.endpoint());
                }
                LinkState::Dialing(d) => d.abandon(ctx),
                LinkState::Down => {}
            }
        }
    }

    /// The links' upkeep (dials under way, dead connections, new ones due)
    /// and the reports to the control thread.
    pub fn chores<F, T>(&mut self, ctx: &mut Context<u64, F, T>, h: &mut Handler)
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
                if j.to == o && j.step == Step::Pulling {
                    self.fail_copy(i, now);
                }
            }
        }
        // Held slots whose backup the map now shows ready.
        if let Some(due) = h.replicas.take_stale_due() {
            self.stale.extend(due);
        }
        // A held slot whose stale report is not in yet is reported again
        // by the control thread's retries; send what is new.
        self.report_stale();
        self.report_ready();
    }

    /// Moves each link on: a dead connection goes down (its queued writes
    /// fail), a dial under way comes up or fails (backing off), a link down
    /// whose retry is due dials. Returns the backups whose connection died.
    fn tend_links<F, T>(&mut self, ctx: &mut Context<u64, F, T>, now: Instant) -> Vec<Owner>
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let mut broken: Vec<Owner> = Vec::new();
        for l in &mut self.links {
            match &mut l.state {
                LinkState::Up(c) => {
                    if !c.check(ctx) {
                        ctx.remove(c.endpoint());
                        l.state = LinkState::Down;
                        l.retry_at = now;
                        for (u, b) in l.queue.drain(..) {
                            Self::lost(&self.acks, u, "the backup's connection closed");
                            self.spare.push(b);
                        }
                        broken.push(l.owner);
                    }
                }
                LinkState::Dialing(d) => match d.poll(ctx) {
                    None => {}
                    Some(Ok(c)) => match check_answer(&c, l.owner, self.cluster) {
                        Ok(()) => {
                            l.backoff = Duration::ZERO;
                            l.state = LinkState::Up(c);
                        }
                        Err(why) => {
                            tracing::warn!(
                                "worker {}: backup link to member {} at {}: {why}",
                                self.me.worker,
                                l.owner.member,
                                l.addr
                            );
                            ctx.remove(c.endpoint());
                            l.state = LinkState::Down;
                            l.backoff =
                                (l.backoff * 2).clamp(Duration::from_millis(20), MAX_BACKOFF);
                            l.retry_at = now + l.backoff;
                            Self::fail_queue(&self.acks, &mut self.spare, l, "setup refused");
                        }
                    },
                    Some(Err(_)) => {
                        l.state = LinkState::Down;
                        l.backoff = (l.backoff * 2).clamp(Duration::from_millis(20), MAX_BACKOFF);
                        l.retry_at = now + l.backoff;
                        Self::fail_queue(&self.acks, &mut self.spare, l, "setup failed");
                    }
                },
                LinkState::Down if now >= l.retry_at => {
                    let hello = hello(l.owner.worker, self.token.as_ref());
                    match dial(l.addr, ctx, &hello, DIAL_TIMEOUT) {
                        Ok(d) => l.state = LinkState::Dialing(d),
                        Err(_) => {
                            l.backoff =
                                (l.backoff * 2).clamp(Duration::from_millis(20), MAX_BACKOFF);
                            l.retry_at = now + l.backoff;
                            Self::fail_queue(&self.acks, &mut self.spare, l, "cannot dial");
                        }
                    }
                }
                LinkState::Down => {}
            }
        }
        broken
    }

    /// Reports the held slots found stale to the control thread, by member.
    fn report_stale(&mut self) {
        if !self.stale.is_empty() {
            let mut by: Vec<(u16, Vec<u32>)> = Vec::new();
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

    /// Reports the backups made ready to the control thread, by member and
    /// map version.
    fn report_ready(&mut self) {
        if !self.ready.is_empty() {
            let mut by: Vec<(u16, u32, Vec<u32>, u64, u64)> = Vec::new();
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

/// Whether a link's setup answer is the backup's: its member, of this
/// cluster.
fn check_answer(c: &Connection, owner: Owner, cluster: [u8; 16]) -> Result<(), String> {
    match SetupAnswer::parse(c.peer_private_data()) {
        None => Err("not a kvs-server worker (bad setup answer)".into()),
        Some(a) if a.cluster != cluster => Err(format!(
            "the server belongs to cluster {}, not this one",
            kvs_proto::cluster_hex(&a.cluster)
        )),
        Some(a) if a.member != owner.member => Err(format!(
            "the server says it is member {}, the map says member {}",
            a.member, owner.member
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(refusal(&b), "Fenced: not the primary");
        assert_eq!(refusal(&[]), "a malformed answer of 0 bytes: ");
    }
}
