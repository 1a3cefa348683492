//! A worker thread: one copyrpc context (one SRQ, one receive CQ), the slots
//! the shard map gives it, and their records. It answers requests, takes the
//! connections the acceptor hands it, installs the maps the control thread
//! sends, forwards its slots' writes to their backups and applies the
//! writes it backs up ([`crate::replication`]), and sleeps
//! when idle.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use copyrpc::clock::Clock;
use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use copyrpc::{ContextBuilder, Waker};
use kvs_proto::{AuthToken, ClusterId, Owner, SetupAnswer, ShardMap};
use mlx5::device::Context as Device;

use super::handle::{Handled, Handler, Served, Warmed};
use super::intake::{Intake, BUSY_TAKE, IDLE_TAKE};
use super::map_wait::AwaitingMap;
use super::read_wait::{ParkedRead, ReadsWaiting};
use super::retained::Retained;
use crate::bulk::source_slots::SourceSlots;
use crate::config::Config;
use crate::migration::waiting::{Parked, Waiting};
use crate::persist::WorkerLog;
use crate::replication::copy_in::Copies;
use crate::replication::{ack_handler, Acks, Forwarder};
use crate::role::Role;
use crate::start_error::{StartError, WorkerFailure};
use crate::store::Store;
use crate::threads::lease::Lease;
use crate::threads::to_control::ToControl;
use crate::threads::to_worker::ToWorker;
use crate::worker_stats::WorkerStats;

mod huge_pages;
mod messages;
mod parked;

use huge_pages::HugeReport;
use messages::start_pull;
use parked::{fenced, reads_due, try_again};

/// How often a worker publishes its counters and checks its clients'
/// connections while it has work.
const PUBLISH: Duration = Duration::from_millis(50);
/// The longest an idle worker sleeps once its counters are published: how
/// late it sees a stop flag that nobody woke it for (a signal handler's;
/// [`Server::shutdown`](crate::Server::shutdown) wakes the workers).
const IDLE_TICK: Duration = Duration::from_millis(250);

/// Entries of the ordered index a worker's sweep of stale keys looks at
/// between turns (about 50 µs of work).
const SWEEP: usize = 1024;
/// How long a draining worker keeps answering (`ShuttingDown`) before it
/// closes its endpoints.
const DRAIN: Duration = Duration::from_millis(200);

/// What a worker tells the server once its context is built and its
/// records are loaded.
pub(crate) struct Ready {
    /// Its number.
    pub worker: u16,
    /// How to wake it.
    pub waker: Waker,
    /// The runs of slots its files kept a copy of that knows its place in
    /// its primary's writes (what the member names when its restart is
    /// proposed).
    pub kept: Vec<Range<u32>>,
}

impl Ready {
    fn new(worker: u16, waker: Waker, kept: Vec<Range<u32>>) -> Ready {
        Ready {
            worker,
            waker,
            kept,
        }
    }
}

/// One worker thread: what it was given at start.
pub(crate) struct Worker {
    /// Who it is: its member and number.
    pub me: Owner,
    /// The id of its cluster, in every setup answer.
    pub cluster: ClusterId,
    pub cfg: Config,
    pub map: ShardMap,
    pub incoming: Receiver<ToWorker>,
    /// Its own channel's sending end (for the threads it starts).
    pub to_self: Sender<ToWorker>,
    /// The cluster token, presented to other members.
    pub cluster_token: Option<AuthToken>,
    /// Reports to the control thread (backups made ready, or stale).
    pub report: Sender<ToControl>,
    /// Slots given away, held for their new owners, and copies' snapshots.
    pub source_slots: Arc<SourceSlots>,
    /// The copies arriving here, and the bulk transfers' rails.
    pub copies: Arc<Copies>,
    pub rails: Vec<String>,
    /// The member's lease: the worker serves only while it holds.
    pub lease: Arc<Lease>,
    pub stop: Arc<AtomicBool>,
    pub stats: Arc<WorkerStats>,
    /// The worker's number and waker once its context is built.
    pub ready: Sender<Result<Ready, StartError>>,
    /// Times requests for the metrics (the server's one calibrated clock).
    pub clock: Clock,
}

impl Worker {
    /// Opens the worker's device and serves on the transport it calls for.
    pub fn start(self) {
        let wire = self.cfg.transport;
        let (w, e) = match self.cfg.device_spec().open() {
            Ok(dev) => match run_on_device_as(dev, wire, self) {
                Ok(()) => return,
                Err(refused) => refused,
            },
            Err(e) => (self, e),
        };
        let _ = w.ready.send(Err(StartError::Worker {
            worker: w.me.worker,
            why: e.into(),
        }));
    }
}

impl OnTransport for Worker {
    type Output = ();

    /// The worker's service loop on transport `T`: each turn waits, serves
    /// the requests that came, and moves on what follows them; every 256th
    /// turn (every turn, idle) it takes its channel's messages and does its
    /// chores, until a drain that began with the stop flag has lasted
    /// [`DRAIN`].
    fn run<T: Transport>(self, dev: Device) {
        let Some(mut s) = self.open::<T>(&dev) else {
            return;
        };
        if s.w == 0 {
            crate::crash::debug_panic("worker");
        }
        let mut turn = TurnRequests::default();
        loop {
            let n = s.wait();
            s.serve_turn(&mut turn);
            s.after_requests(n);
            // Under load the chores below run every 256 turns; idle, after
            // every wait.
            s.turn = s.turn.wrapping_add(1);
            let idle = n == 0;
            if !idle && s.turn % 256 != 0 {
                continue;
            }
            s.take_messages();
            s.chores(idle);
            if s.drained() {
                break;
            }
        }
        s.close();
    }
}

impl Worker {
    /// Builds the worker's context on `dev` and what its loop works with,
    /// and tells the server it is ready (or why it cannot be: then `None`).
    fn open<T: Transport>(self, dev: &Device) -> Option<Serving<T, impl OnAck>> {
        let Worker {
            me,
            cluster,
            cfg,
            map,
            incoming,
            to_self,
            cluster_token,
            report,
            source_slots,
            copies,
            rails,
            lease,
            stop,
            stats,
            ready,
            clock,
        } = self;
        let copy_tx = to_self.clone();
        let w = me.worker;
        let fail = |why: WorkerFailure| StartError::Worker { worker: w, why };
        let acks = std::rc::Rc::new(Acks::default());
        let fwd = Forwarder::new(
            me,
            cluster,
            cluster_token.clone(),
            source_slots.clone(),
            acks.clone(),
            report,
        );
        // The context, the clients' liveness channels (watched together),
        // and the records the worker's log holds, before it is ready.
        let parts = build_context::<T>(&cfg, dev, &acks).and_then(|ctx| {
            let conns = copyrpc::conn::LiveSet::new().map_err(WorkerFailure::Watch)?;
            Ok((ctx, conns, open_store(&cfg, map.slots(), w, &stats)?))
        });
        let (mut ctx, conns, (store, log)) = match parts {
            Ok(p) => p,
            Err(why) => {
                let _ = ready.send(Err(fail(why)));
                return None;
            }
        };
        if let Some(l) = &log {
            // What the start recovered, readable as soon as the member is.
            *stats.disk.lock().unwrap_or_else(|e| e.into_inner()) = Some(l.status());
        }
        // Exports under way at the stop are held for their targets again
        // before the control thread looks for them.
        let kept = store.positioned();
        let h = handler(me, map, &cfg, store, log.is_some(), clock, &source_slots);
        let _ = ready.send(Ok(Ready::new(w, ctx.waker(), kept)));
        drop(ready);

        // The setup answer: how many workers (connections to make) and slots.
        let answer = SetupAnswer {
            workers: cfg.workers,
            slots: h.map.slots(),
            member: me.member,
            cluster,
        }
        .encode();
        let waker = ctx.waker();
        // With a log, replies wait for the turn's commit unless written to
        // leave early (`Context::reply_early`): see `Serving::wait`.
        ctx.set_hold_replies(log.is_some());
        Some(Serving {
            log,
            huge: HugeReport::new(w, dev.is_software()),
            due: Vec::new(),
            intake: Intake::default(),
            maps: AwaitingMap::default(),
            reads: ReadsWaiting::default(),
            waiting: Waiting::new(cfg.clone(), cluster_token, to_self),
            waker,
            published: 0,
            wait_failed: false,
            drain_until: None,
            last_check: Instant::now(),
            turn: 0,
            ops: 0,
            out: Vec::with_capacity(cfg.max_value + 64),
            answer,
            h,
            conns,
            ctx,
            fwd,
            copy_tx,
            w,
            cfg,
            incoming,
            source_slots,
            copies,
            rails,
            lease,
            stop,
            stats,
        })
    }
}

/// Worker `me`'s handler over `store`, by `map` and `cfg`; `logged`: the
/// store came from (and goes to) the worker's log, and the exports under
/// way at the stop go to `source_slots` (without a log there are none:
/// the control thread says their records are lost).
fn handler(
    me: Owner,
    map: ShardMap,
    cfg: &Config,
    store: Store,
    logged: bool,
    clock: Clock,
    source_slots: &SourceSlots,
) -> Handler {
    // A history of writes only where a backup can come back with its
    // records (from its files).
    let history = if logged {
        cfg.catch_up_history as usize
    } else {
        0
    };
    // A start that recovered records keeps those of the slots its maps
    // take away until the member's restart is applied.
    let retained = Retained::new(logged && !store.is_empty());
    let mut h = Handler::with_store(me, map, cfg.max_key, cfg.max_value, store, retained)
        .with_memory_limit(cfg.max_memory, cfg.workers)
        .with_history(history)
        .with_clock(clock);
    let exports = h.take_exports();
    if logged {
        for (slot, records) in exports {
            source_slots.hold_recovered(slot, records);
        }
    }
    h
}

/// The worker's context on `dev`, as `cfg` sets it up; its response
/// callback files the backups' answers in `acks`.
fn build_context<T: Transport>(
    cfg: &Config,
    dev: &Device,
    acks: &std::rc::Rc<Acks>,
) -> Result<copyrpc::Context<u64, impl OnAck, T>, WorkerFailure> {
    ContextBuilder::new()
        .idle(cfg.idle_policy())
        .ring_size(cfg.ring_size)
        .max_endpoints(cfg.max_endpoints)
        .huge_pages(cfg.huge_pages)
        .srq_size(4096)
        .cq_size(16384)
        .build_on::<T, _, _>(dev, ack_handler(acks.clone()))
        .map_err(WorkerFailure::Context)
}

/// The worker context's response callback (as [`ack_handler`] makes it).
trait OnAck: FnMut(u64, Result<&[u8], copyrpc::CallFailed>) {}

impl<F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)> OnAck for F {}

/// A turn's requests, taken first, and what warming found for each of them
/// in the same order (kept from turn to turn: no allocation per turn).
struct TurnRequests {
    reqs: Vec<copyrpc::RecvHandle>,
    warm: Vec<Option<Warmed>>,
}

impl Default for TurnRequests {
    fn default() -> Self {
        TurnRequests {
            reqs: Vec::with_capacity(256),
            warm: Vec::with_capacity(256),
        }
    }
}

/// What a worker's service loop works with once its context is built: the
/// context `ctx` (its response callback `F`), the handler, the forwarder,
/// its clients, what waits, its counters, and what it shares. (Fields drop
/// in this order: what holds a request's handle before the context.)
struct Serving<T: Transport, F> {
    /// The records' durable log (`durability`), written at each turn's end.
    log: Option<WorkerLog>,
    /// What it says about its clients' rings in huge pages.
    huge: HugeReport,
    /// The parked reads due again (kept between turns).
    due: Vec<ParkedRead<copyrpc::RecvHandle>>,
    /// Pulled records not taken yet.
    intake: Intake,
    /// Replication messages waiting for a newer map.
    maps: AwaitingMap<copyrpc::RecvHandle>,
    /// Reads waiting for a write of their key.
    reads: ReadsWaiting<copyrpc::RecvHandle>,
    /// Requests waiting for a priority pull.
    waiting: Waiting,
    waker: Waker,
    /// `ops` when the counters were last published.
    published: u64,
    /// Sleeping failed once (said once; the worker spins).
    wait_failed: bool,
    /// When a drain ends (it begins with the stop flag).
    drain_until: Option<Instant>,
    /// When the counters were last published.
    last_check: Instant,
    turn: u32,
    /// Requests answered.
    ops: u64,
    /// The answer being written.
    out: Vec<u8>,
    /// The setup answer: how many workers (connections to make) and slots.
    answer: [u8; SetupAnswer::LEN],
    h: Handler,
    /// The clients' liveness channels, watched together.
    conns: copyrpc::conn::LiveSet,
    ctx: copyrpc::Context<u64, F, T>,
    fwd: Forwarder,
    /// The worker's own channel, for the copies' pulls it starts.
    copy_tx: Sender<ToWorker>,
    /// Its number.
    w: u16,
    cfg: Config,
    incoming: Receiver<ToWorker>,
    source_slots: Arc<SourceSlots>,
    copies: Arc<Copies>,
    rails: Vec<String>,
    lease: Arc<Lease>,
    stop: Arc<AtomicBool>,
    stats: Arc<WorkerStats>,
}

impl<T: Transport, F: OnAck> Serving<T, F> {
    /// Idle, the worker sleeps (after a spin) until a request, a new client
    /// (the acceptor wakes it), or the tick: a short one while counters
    /// wait to be published. Then it enters the turn under its lease;
    /// returns how many completions the wait found.
    #[inline]
    fn wait(&mut self) -> usize {
        // The turn's changes go to the log before its replies leave (the
        // wait's poll sends them); then a snapshot under way takes a step.
        let mut snapshot_tick = None;
        if let Some(l) = self.log.as_mut() {
            self.h.end_turn();
            // What needs nothing of this commit leaves before it: the
            // turn's writes to their backups (each backup applies and logs
            // them while this worker logs them: an update waits for two
            // log commits in a row, not three), the reads of what earlier
            // commits hold, and the answers to writes of earlier turns
            // that their backups acked. Every other reply (`Context::
            // set_hold_replies`) waits for the commit: a write answered in
            // this turn, a read after it, a backup's ack.
            //
            // So a client's write is answered only once this worker's log
            // and every backup's hold it, and a backup acks only after its
            // own commit. A crash of the primary and its backups can leave
            // a backup holding a write the primary's log lost; that write
            // was never answered, so it is indeterminate: whether it took
            // effect depends on which copy is promoted, and either is a
            // linearizable outcome. A restarted backup catches up only in
            // the stream of a primary that did not restart (a restarted
            // primary draws new streams), so such a write never outlives
            // its next copy.
            self.ctx.flush_unheld();
            l.commit(&mut self.h.store);
            self.h.answered_uncommitted = false;
            l.tend(&mut self.h.store);
            snapshot_tick = l.tick();
            if let Some(full) = l.disk_full_changed() {
                // Writes are refused (or taken again) from the next turn,
                // and the status says so at once.
                self.h.disk_full = full;
                *self.stats.disk.lock().unwrap_or_else(|e| e.into_inner()) = Some(l.status());
            }
        }
        // Pulled batches taken whole are in the log now: their senders may
        // let the source's copy go.
        self.intake.acknowledge();
        let tick = if !self.intake.is_empty() && self.h.disk_full.is_none() {
            // Records wait to be taken: look for requests, never sleep.
            Duration::ZERO
        } else if let Some(t) = snapshot_tick {
            // A snapshot copies slots between turns: come back soon.
            t
        } else if self.fwd.settling() {
            // Links being set up and copies under way move on soon.
            Duration::from_millis(1)
        } else if self.ops != self.published {
            PUBLISH
        } else {
            IDLE_TICK
        };
        // Between turns: nothing is served by the lease read last.
        self.lease.leave(usize::from(self.w));
        let n = match self.ctx.wait(tick) {
            Ok(n) => n,
            Err(e) => {
                if !self.wait_failed {
                    let w = self.w;
                    tracing::warn!("worker {w}: cannot sleep, spinning instead: {e}");
                }
                self.wait_failed = true;
                self.ctx.poll()
            }
        };
        // One read of the clock for the turn's requests.
        self.h.leased = self
            .lease
            .enter(usize::from(self.w), Instant::now(), self.h.map.version());
        n
    }

    /// Serves the turn's requests: all are taken first, and the records
    /// their reads will find are looked up together.
    #[inline]
    fn serve_turn(&mut self, turn: &mut TurnRequests) {
        turn.reqs.clear();
        while let Some(req) = self.ctx.recv() {
            turn.reqs.push(req);
        }
        warm_turn(&self.ctx, &self.h, &turn.reqs, &mut turn.warm);
        for (req, warmed) in turn.reqs.drain(..).zip(turn.warm.drain(..)) {
            self.serve(req, warmed);
        }
    }

    /// Serves one request: a GET's value is answered from the store at
    /// once; anything else goes on to [`Self::dispatch`].
    #[inline]
    fn serve(&mut self, req: copyrpc::RecvHandle, warmed: Option<Warmed>) {
        let max = req.max_response();
        // Read before the value borrows the handler (a GET changes it not).
        let early = !self.h.answered_uncommitted;
        let handled = match self.ctx.request(&req) {
            Some(b) => match self
                .h
                .serve(b, max, &mut self.out, warmed, Role::of_tag(req.tag()))
            {
                Served::Handled(handled) => handled,
                // A GET's value goes from the store into the send ring,
                // after the header.
                Served::Value(v) => {
                    let out = &self.out;
                    let fill = |ring: &mut [u8]| {
                        let (head, value) = ring.split_at_mut(out.len());
                        head.copy_from_slice(out);
                        value.copy_from_slice(v);
                    };
                    let len = out.len() + v.len();
                    // A value no write of this turn answered before it
                    // (one awaiting its backups holds its key's reads) is
                    // in the log already: it need not wait for the commit.
                    let _ = if early {
                        self.ctx.reply_early_with(req, len, fill)
                    } else {
                        self.ctx.reply_with(req, len, fill)
                    };
                    self.ops += 1;
                    return;
                }
            },
            None => {
                self.out.clear();
                Handled::Answered
            }
        };
        let handled = match handled {
            // The key may be in pulled records not taken yet: all are taken
            // (a stall, shorter than a priority pull's round trip to the
            // source), and the request looked at again.
            Handled::Pull { .. } if !self.intake.is_empty() => {
                self.intake.take(&mut self.h, usize::MAX);
                match self.ctx.request(&req) {
                    Some(b) => self.h.handle(b, max, &mut self.out),
                    None => handled,
                }
            }
            other => other,
        };
        self.dispatch(req, handled);
    }

    /// Does what a request's handling calls for: forwards it to the slot's
    /// backups, parks it (for a write, a map or a pull), or sends the
    /// answer in `out`.
    #[inline]
    fn dispatch(&mut self, req: copyrpc::RecvHandle, handled: Handled) {
        match handled {
            Handled::Forward(f) => {
                // Answered once every backup of the slot applied it.
                if let Some(b) = self.ctx.request(&req) {
                    self.fwd.prepare(&mut self.h.primary(), b, f);
                }
                if self
                    .fwd
                    .forward(&mut self.ctx, &mut self.h.primary(), req, f, &self.out)
                {
                    self.h.answered_uncommitted = true;
                }
            }
            Handled::AwaitWrite { fp } => {
                // Its key's write awaits its backups: handled again once
                // answered.
                let parked = match self.ctx.request(&req) {
                    Some(b) => self.reads.park(fp, req, b),
                    None => Err(req),
                };
                if let Err(req) = parked {
                    try_again(&mut self.ctx, req, &mut self.out);
                }
            }
            Handled::AwaitMap => {
                // A backup's message from a primary on a newer map: handled
                // again, in order, once this worker has it.
                let parked = match self.ctx.request(&req) {
                    Some(b) => self.maps.park(req, b, Instant::now()),
                    None => Err(req),
                };
                if let Err(req) = parked {
                    fenced(&mut self.ctx, req, &mut self.out);
                }
            }
            Handled::Pull { slot } => self.park_for_pull(req, slot),
            Handled::Answered => {
                // Only a closed endpoint or an allowance below the header
                // refuses a reply; nothing more can be said to that caller.
                let _ = self.ctx.reply(req, &self.out);
                self.ops += 1;
            }
        }
    }

    /// Rare: a key of a slot being imported that has not arrived. The
    /// request waits for a priority pull (or, none possible, is told to
    /// try again).
    fn park_for_pull(&mut self, req: copyrpc::RecvHandle, slot: u32) {
        let req_bytes = self
            .ctx
            .request(&req)
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        let p = Parked {
            handle: req,
            req: req_bytes,
            slot,
        };
        if let Err(p) = self.waiting.park(p, &self.h.map, &self.waker) {
            try_again(&mut self.ctx, p.handle, &mut self.out);
        }
    }

    /// What follows a turn's requests: the copies' pulls that begin, the
    /// backups' answers and what waits to go to them, the reads that waited
    /// for the writes answered, and (requests first) pulled records in the
    /// gaps; `n` is what the turn's wait found (0: idle).
    #[inline]
    fn after_requests(&mut self, n: usize) {
        // Copies' begins that arrived: their pulls start.
        if let Some(starts) = self.h.slot_state.take_starts() {
            for p in starts {
                start_pull(
                    p,
                    &self.h.map,
                    &self.cfg,
                    &self.rails,
                    (&self.copy_tx, &self.waker),
                    &self.copies,
                    &self.stop,
                );
            }
        }
        // Backups' answers, and what waits to go to them; then the reads
        // that waited for the writes answered.
        self.ops += self.fwd.on_acks(&mut self.ctx, &mut self.h.primary());
        if !self.reads.is_empty() {
            self.ops += reads_due(
                &mut self.ctx,
                &mut self.h,
                &mut self.reads,
                &mut self.due,
                &mut self.out,
            );
        }
        if self.fwd.busy() {
            self.fwd.pump(&mut self.ctx, &mut self.h.primary());
        }
        // Requests first; pulled records fill the gaps (none while the
        // log's disk is full: they wait for room).
        if !self.intake.is_empty() && self.h.disk_full.is_none() {
            self.intake
                .take(&mut self.h, if n == 0 { IDLE_TAKE } else { BUSY_TAKE });
        }
    }

    /// The chores between turns (every 256th under load): the forwarder's,
    /// a sweep of stale keys, a freeze's report, replication messages that
    /// waited too long for a map, and (idle, or every 4096th turn, at most
    /// every [`PUBLISH`]) the counters.
    fn chores(&mut self, idle: bool) {
        self.fwd.chores(&mut self.ctx, &mut self.h.primary());
        // Keys of slots given away, out of the ordered index a few at a
        // time.
        if self.h.store.sweep(SWEEP) {
            self.waker.wake();
        }
        if self.h.frozen.is_some_and(|f| !f.reported) {
            self.fwd.report_quiet(&mut self.h.primary());
        }
        if self.log.is_some() {
            self.h.position_quiet();
        }
        if !self.maps.is_empty() {
            for handle in self.maps.expired(Instant::now()) {
                fenced(&mut self.ctx, handle, &mut self.out);
            }
        }
        if (idle || self.turn % 4096 == 0) && self.last_check.elapsed() >= PUBLISH {
            self.publish();
        }
    }

    /// Removes the clients that left and publishes the worker's counters.
    fn publish(&mut self) {
        self.last_check = Instant::now();
        self.published = self.ops;
        // Clients that left: their endpoints are removed.
        self.conns.retain_live(&mut self.ctx);
        let (stats, h) = (&self.stats, &self.h);
        stats.ops.store(self.ops, Ordering::Relaxed);
        stats
            .clients
            .store(self.conns.len() as u64, Ordering::Relaxed);
        stats.keys.store(h.store.len() as u64, Ordering::Relaxed);
        stats.backup_keys.store(h.backup_keys(), Ordering::Relaxed);
        stats
            .memory_used
            .store(h.store.memory_used() as u64, Ordering::Relaxed);
        if self.cfg.huge_pages {
            stats
                .huge_rings
                .store(self.ctx.huge_page_rings() as u64, Ordering::Relaxed);
        }
        stats
            .refused_member_ops
            .store(h.refused_member_ops, Ordering::Relaxed);
        stats.requests.publish(&h.metrics);
        *stats.copied.lock().unwrap_or_else(|e| e.into_inner()) = self.fwd.copied;
        if let Some(l) = &self.log {
            *stats.disk.lock().unwrap_or_else(|e| e.into_inner()) = Some(l.status());
        }
    }

    /// Begins the drain once the stop flag is up; true once it has lasted
    /// [`DRAIN`].
    fn drained(&mut self) -> bool {
        match self.drain_until {
            None if self.stop.load(Ordering::Acquire) => {
                self.h.draining = true;
                self.drain_until = Some(Instant::now() + DRAIN);
                false
            }
            Some(t) if Instant::now() >= t => true,
            _ => false,
        }
    }

    /// Ends the worker: out of its last turn, its answers sent, every
    /// endpoint closed, its last counters published.
    fn close(mut self) {
        // Out of its last turn (a drain waits for no worker that ended).
        self.lease.leave(usize::from(self.w));
        // Answers already written go out, once their changes are in the
        // log; then every endpoint closes.
        if let Some(l) = self.log.as_mut() {
            self.h.end_turn();
            l.commit(&mut self.h.store);
        }
        self.intake.acknowledge();
        self.ctx.poll();
        self.conns.close_all(&mut self.ctx);
        self.stats.ops.store(self.ops, Ordering::Relaxed);
        self.stats.clients.store(0, Ordering::Relaxed);
    }
}

/// The store worker `w` starts with, and its log: what the log holds
/// with `durability` (its recovery's progress counted in `stats`), else
/// an empty store.
fn open_store(
    cfg: &Config,
    slots: u32,
    w: u16,
    stats: &WorkerStats,
) -> Result<(Store, Option<WorkerLog>), WorkerFailure> {
    Ok(
        match crate::persist::open(cfg, slots, w, &stats.recovery)? {
            Some((store, log)) => (store, Some(log)),
            None => (Store::new(slots, usize::MAX), None),
        },
    )
}

/// Warms a turn's requests `reqs` for serving, into `warm` (one entry per
/// request, in order). A GET's record costs up to three cache misses (the
/// table's control bytes, its bucket, the record), each waiting for the one
/// before. Looked up one request at a time, a turn's misses would follow one
/// another; here each pass does one step for every request, so the misses
/// of a pass overlap: where each key lives (slot and hash), then where its
/// record is (its first line prefetched), then the record itself (its value
/// prefetched for the copy into the send ring). A lone request is not
/// warmed: it has nothing to overlap with.
fn warm_turn<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &copyrpc::Context<u64, F, T>,
    h: &Handler,
    reqs: &[copyrpc::RecvHandle],
    warm: &mut Vec<Option<Warmed>>,
) {
    warm.clear();
    if reqs.len() < 2 {
        warm.extend(reqs.iter().map(|_| None));
        return;
    }
    for r in reqs {
        warm.push(ctx.request(r).and_then(|b| h.warm(b)));
    }
    for w in warm.iter().flatten() {
        h.prefetch_bucket(w);
    }
    for (r, w) in reqs.iter().zip(warm.iter()) {
        if let (Some(b), Some(w)) = (ctx.request(r), w) {
            h.prefetch_value(b, w);
        }
    }
}
