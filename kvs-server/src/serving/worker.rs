//! A worker thread: one copyrpc context (one SRQ, one receive CQ), the slots
//! the shard map gives it, and their records. It answers requests, takes the
//! connections the acceptor hands it, installs the maps the control thread
//! sends, forwards its slots' writes to their backups and applies the
//! writes it backs up ([`super::forward`], [`super::replicas`]), and sleeps
//! when idle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use copyrpc::clock::Clock;
use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use copyrpc::{ContextBuilder, Waker};
use kvs_proto::proto::{begin_response, finish_response, Status, RESPONSE_HEADER};
use kvs_proto::{AuthToken, Owner, SetupAnswer, ShardMap};
use mlx5::device::Context as Device;

use super::forward::{ack_handler, Acks, Forwarder};
use super::handle::{Frozen, Handled, Handler, Served, Warmed};
use super::intake::{Intake, Whose, BUSY_TAKE, IDLE_TAKE};
use super::map_wait::AwaitingMap;
use super::read_wait::{ParkedRead, ReadsWaiting};
use super::replicas::PullStart;
use crate::config::Config;
use crate::lease::Lease;
use crate::migration::copy_in::{Copies, CopyPull};
use crate::migration::outgoing::Outgoing;
use crate::migration::waiting::{Parked, Waiting};
use crate::start_error::StartError;
use crate::to_control::ToControl;
use crate::to_worker::ToWorker;
use crate::worker_stats::WorkerStats;

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

/// One worker thread: what it was given at start.
pub(crate) struct Worker {
    /// Who it is: its member and number.
    pub me: Owner,
    /// The id of its cluster, in every setup answer.
    pub cluster: [u8; 16],
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
    pub outgoing: Arc<Outgoing>,
    /// The copies arriving here, and the bulk transfers' rails.
    pub copies: Arc<Copies>,
    pub rails: Vec<String>,
    /// The member's lease: the worker serves only while it holds.
    pub lease: Arc<Lease>,
    pub stop: Arc<AtomicBool>,
    pub stats: Arc<WorkerStats>,
    /// The worker's number and waker once its context is built.
    pub ready: Sender<Result<(u16, Waker), StartError>>,
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
        let why = e.to_string();
        let _ = w.ready.send(Err(StartError::Worker {
            worker: w.me.worker,
            why,
        }));
    }
}

impl OnTransport for Worker {
    type Output = ();

    /// The worker's service loop on transport `T`.
    fn run<T: Transport>(self, dev: Device) {
        let Worker {
            me,
            cluster,
            cfg,
            map,
            incoming,
            to_self,
            cluster_token,
            report,
            outgoing,
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
        let fail = |why: String| StartError::Worker { worker: w, why };
        let acks = std::rc::Rc::new(Acks::default());
        let mut fwd = Forwarder::new(
            me,
            cluster,
            cluster_token.clone(),
            outgoing.clone(),
            acks.clone(),
            report,
        );
        let built = ContextBuilder::new()
            .idle(cfg.idle_policy())
            .ring_size(cfg.ring_size)
            .max_endpoints(cfg.max_endpoints)
            .huge_pages(cfg.huge_pages)
            .srq_size(4096)
            .cq_size(16384)
            .build_on::<T, _, _>(&dev, ack_handler(acks.clone()));
        let mut ctx = match built {
            Ok(c) => c,
            Err(e) => {
                let _ = ready.send(Err(fail(e.to_string())));
                return;
            }
        };
        // The clients' liveness channels, watched together.
        let mut conns = match copyrpc::conn::LiveSet::new() {
            Ok(s) => s,
            Err(e) => {
                let _ = ready.send(Err(fail(format!("cannot watch connections: {e}"))));
                return;
            }
        };
        let _ = ready.send(Ok((w, ctx.waker())));
        drop(ready);
        let mut h = Handler::new(me, map, cfg.max_key, cfg.max_value)
            .with_memory_limit(cfg.max_memory, cfg.workers)
            .with_clock(clock);

        // The setup answer: how many workers (connections to make) and slots.
        let answer = SetupAnswer {
            workers: cfg.workers,
            slots: h.map.slots(),
            member: me.member,
            cluster,
        }
        .encode();
        let mut out = Vec::with_capacity(cfg.max_value + 64);
        let mut ops = 0u64;
        let mut turn = 0u32;
        let mut last_check = Instant::now();
        let mut drain_until: Option<Instant> = None;
        let mut wait_failed = false;
        let mut published = 0u64;
        let waker = ctx.waker();
        let mut waiting = Waiting::new(cfg.clone(), cluster_token, to_self);
        let mut reads = ReadsWaiting::default();
        let mut maps = AwaitingMap::default();
        let mut intake = Intake::default();
        let mut turn_reqs: Vec<copyrpc::RecvHandle> = Vec::with_capacity(256);
        // What warming found for each of them, in the same order.
        let mut turn_warm: Vec<Option<Warmed>> = Vec::with_capacity(256);
        let mut due = Vec::new();
        let mut huge = HugeReport {
            worker: w,
            software: dev.is_software(),
            ..HugeReport::default()
        };
        loop {
            // Idle, the worker sleeps (after a spin) until a request, a new
            // client (the acceptor wakes it), or the tick: a short one while
            // counters wait to be published.
            let tick = if !intake.is_empty() {
                // Records wait to be taken: look for requests, never sleep.
                Duration::ZERO
            } else if fwd.settling() {
                // Links being set up and copies under way move on soon.
                Duration::from_millis(1)
            } else if ops != published {
                PUBLISH
            } else {
                IDLE_TICK
            };
            // Between turns: nothing is served by the lease read last.
            lease.leave(usize::from(w));
            let n = match ctx.wait(tick) {
                Ok(n) => n,
                Err(e) => {
                    if !wait_failed {
                        eprintln!("kvs-server: worker {w}: cannot sleep, spinning instead: {e}");
                    }
                    wait_failed = true;
                    ctx.poll()
                }
            };
            // One read of the clock for the turn's requests.
            h.leased = lease.enter(usize::from(w), Instant::now(), h.map.version());
            // The turn's requests are taken first, and the records their
            // reads will find are looked up together.
            turn_reqs.clear();
            while let Some(req) = ctx.recv() {
                turn_reqs.push(req);
            }
            warm_turn(&ctx, &h, &turn_reqs, &mut turn_warm);
            for (req, warmed) in turn_reqs.drain(..).zip(turn_warm.drain(..)) {
                let max = req.max_response();
                let handled = match ctx.request(&req) {
                    Some(b) => match h.serve(b, max, &mut out, warmed) {
                        Served::Handled(handled) => handled,
                        // A GET's value goes from the store into the send
                        // ring, after the header.
                        Served::Value(v) => {
                            let _ = ctx.reply_with(req, out.len() + v.len(), |ring| {
                                let (head, value) = ring.split_at_mut(out.len());
                                head.copy_from_slice(&out);
                                value.copy_from_slice(v);
                            });
                            ops += 1;
                            continue;
                        }
                    },
                    None => {
                        out.clear();
                        Handled::Answered
                    }
                };
                let handled = match handled {
                    // The key may be in pulled records not taken yet: all
                    // are taken (a stall, shorter than a priority pull's
                    // round trip to the source), and the request looked at
                    // again.
                    Handled::Pull { .. } if !intake.is_empty() => {
                        intake.take(&mut h, usize::MAX);
                        match ctx.request(&req) {
                            Some(b) => h.handle(b, max, &mut out),
                            None => handled,
                        }
                    }
                    other => other,
                };
                if let Handled::Forward(f) = handled {
                    // Answered once every backup of the slot applied it.
                    if let Some(b) = ctx.request(&req) {
                        fwd.prepare(&h, b, f);
                    }
                    fwd.forward(&mut ctx, &mut h, req, f, &out);
                    continue;
                }
                if let Handled::AwaitWrite { fp } = handled {
                    // Its key's write awaits its backups: handled again
                    // once answered.
                    let parked = match ctx.request(&req) {
                        Some(b) => reads.park(fp, req, b),
                        None => Err(req),
                    };
                    if let Err(req) = parked {
                        try_again(&mut ctx, req, &mut out);
                    }
                    continue;
                }
                if handled == Handled::AwaitMap {
                    // A backup's message from a primary on a newer map:
                    // handled again, in order, once this worker has it.
                    let parked = match ctx.request(&req) {
                        Some(b) => maps.park(req, b, Instant::now()),
                        None => Err(req),
                    };
                    if let Err(req) = parked {
                        fenced(&mut ctx, req, &mut out);
                    }
                    continue;
                }
                if let Handled::Pull { slot } = handled {
                    // Rare: a key of a slot being imported that has not
                    // arrived. The request waits for a priority pull.
                    let req_bytes = ctx.request(&req).map(<[u8]>::to_vec).unwrap_or_default();
                    let p = Parked {
                        handle: req,
                        req: req_bytes,
                        slot,
                    };
                    if let Err(p) = waiting.park(p, &h.map, &waker) {
                        try_again(&mut ctx, p.handle, &mut out);
                    }
                    continue;
                }
                // Only a closed endpoint or an allowance below the header refuses
                // a reply; nothing more can be said to that caller.
                let _ = ctx.reply(req, &out);
                ops += 1;
            }
            // Copies' begins that arrived: their pulls start.
            if let Some(starts) = h.replicas.take_starts() {
                for p in starts {
                    start_pull(p, &h.map, &cfg, &rails, (&copy_tx, &waker), &copies, &stop);
                }
            }
            // Backups' answers, and what waits to go to them; then the
            // reads that waited for the writes answered.
            ops += fwd.on_acks(&mut ctx, &mut h);
            if !reads.is_empty() {
                ops += reads_due(&mut ctx, &mut h, &mut reads, &mut due, &mut out);
            }
            if fwd.busy() {
                fwd.pump(&mut ctx, &h);
            }
            // Requests first; pulled records fill the gaps.
            if !intake.is_empty() {
                intake.take(&mut h, if n == 0 { IDLE_TAKE } else { BUSY_TAKE });
            }
            // Under load the chores below run every 256 turns; idle, after
            // every wait.
            turn = turn.wrapping_add(1);
            let idle = n == 0;
            if !idle && turn % 256 != 0 {
                continue;
            }
            // New clients and maps.
            loop {
                match incoming.try_recv() {
                    Ok(ToWorker::Connection(p)) if drain_until.is_none() => {
                        let before = if cfg.huge_pages {
                            ctx.huge_page_rings()
                        } else {
                            0
                        };
                        match p.establish(&mut ctx, &answer) {
                            Ok(c) => {
                                let rings = ctx.huge_page_rings().saturating_sub(before);
                                match cfg.huge_pages.then(|| huge.connected(rings)).flatten() {
                                    Some((Said::Info, l)) => println!("{l}"),
                                    Some((Said::Warning, l)) => eprintln!("{l}"),
                                    None => {}
                                }
                                if let Err((mut c, e)) = conns.insert(c) {
                                    eprintln!("kvs-server: worker {w}: a client's connection: {e}");
                                    ctx.close(c.endpoint());
                                    c.check(&mut ctx);
                                    ctx.remove(c.endpoint());
                                }
                            }
                            Err(e) => {
                                eprintln!("kvs-server: worker {w}: a client's setup failed: {e}")
                            }
                        }
                    }
                    Ok(ToWorker::Connection(p)) => p.refuse("the server is shutting down"),
                    Ok(ToWorker::Map(m)) => {
                        let done = h.install(m);
                        fwd.on_install(&mut ctx, &h.map);
                        for (slot, recs) in done.given_away {
                            outgoing.hold(slot, recs);
                        }
                        // Requests waiting for pulls of slots whose import
                        // ended, or that moved on, are answered now.
                        let parked = waiting.take(|p| {
                            !h.store.importing(p.slot) || done.imports_ended.contains(&p.slot)
                        });
                        ops += settle(&mut ctx, &mut h, &mut fwd, parked, &mut out);
                        if !maps.is_empty() {
                            maps_due(&mut ctx, &mut h, &mut maps, &mut out);
                        }
                    }
                    Ok(ToWorker::Freeze { first, end }) => {
                        h.frozen = Some(Frozen {
                            first,
                            end,
                            reported: false,
                        })
                    }
                    Ok(ToWorker::Thaw) => h.frozen = None,
                    Ok(ToWorker::SourceFrozen { first, end }) => h.source_frozen(first..end),
                    // Pulled records go in between turns, a few at a time.
                    Ok(ToWorker::Records { batch, taken }) => {
                        intake.push(batch, Whose::Import, taken)
                    }
                    Ok(ToWorker::CopyRecords {
                        ticket,
                        batch,
                        taken,
                    }) => intake.push(batch, Whose::Copy(ticket), taken),
                    Ok(ToWorker::CopyPulled { ticket, result }) => {
                        h.replicas.pulled(&ticket, result, &mut h.store);
                    }
                    Ok(ToWorker::Pulled { slot, key, value }) => {
                        waiting.pulled(&key);
                        let parked = waiting.take(|p| p.key() == key);
                        match value {
                            Ok(v) => {
                                h.store.apply_pulled(slot, &key, v.as_deref());
                                ops += settle(&mut ctx, &mut h, &mut fwd, parked, &mut out);
                            }
                            Err(why) => {
                                eprintln!("kvs-server: worker {w}: a priority pull failed: {why}");
                                for p in parked {
                                    try_again(&mut ctx, p.handle, &mut out);
                                }
                            }
                        }
                    }
                    Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => break,
                }
            }
            fwd.chores(&mut ctx, &mut h);
            // Keys of slots given away, out of the ordered index a few at a
            // time.
            if h.store.sweep(SWEEP) {
                waker.wake();
            }
            if h.frozen.is_some_and(|f| !f.reported) {
                fwd.report_quiet(&mut h);
            }
            if !maps.is_empty() {
                for handle in maps.expired(Instant::now()) {
                    fenced(&mut ctx, handle, &mut out);
                }
            }
            if (idle || turn % 4096 == 0) && last_check.elapsed() >= PUBLISH {
                last_check = Instant::now();
                published = ops;
                // Clients that left: their endpoints are removed.
                conns.retain_live(&mut ctx);
                stats.ops.store(ops, Ordering::Relaxed);
                stats.clients.store(conns.len() as u64, Ordering::Relaxed);
                stats.keys.store(h.store.len() as u64, Ordering::Relaxed);
                stats.backup_keys.store(h.backup_keys(), Ordering::Relaxed);
                stats
                    .memory_used
                    .store(h.store.memory_used() as u64, Ordering::Relaxed);
                if cfg.huge_pages {
                    stats
                        .huge_rings
                        .store(ctx.huge_page_rings() as u64, Ordering::Relaxed);
                }
                stats.requests.publish(&h.metrics);
            }
            match drain_until {
                None if stop.load(Ordering::Acquire) => {
                    h.draining = true;
                    drain_until = Some(Instant::now() + DRAIN);
                }
                Some(t) if Instant::now() >= t => break,
                _ => {}
            }
        }
        // Out of its last turn (a drain waits for no worker that ended).
        lease.leave(usize::from(w));
        // Answers already written go out; then every endpoint closes.
        ctx.poll();
        conns.close_all(&mut ctx);
        stats.ops.store(ops, Ordering::Relaxed);
        stats.clients.store(0, Ordering::Relaxed);
    }
}

/// Starts the pull of the copy `p` names, from its primary's bulk port in
/// `map`; a primary the map does not have fails it at once.
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
        h.locate(w);
    }
    for (r, w) in reqs.iter().zip(warm.iter()) {
        if let (Some(b), Some(w)) = (ctx.request(r), w) {
            h.fetch(b, w);
        }
    }
}

fn start_pull(
    p: PullStart,
    map: &ShardMap,
    cfg: &Config,
    rails: &[String],
    worker: (&Sender<ToWorker>, &Waker),
    copies: &Arc<Copies>,
    stop: &Arc<AtomicBool>,
) {
    let Some(m) = map.members().get(usize::from(p.from)) else {
        let _ = worker.0.send(ToWorker::CopyPulled {
            ticket: p.begin.ticket,
            result: Err(format!("member {} is not in the map", p.from)),
        });
        return;
    };
    CopyPull {
        begin: p.begin,
        from: p.from,
        bulk: std::net::SocketAddr::new(m.addr.ip(), m.bulk_port),
        slots: map.slots(),
        worker: (worker.0.clone(), worker.1.clone()),
        cfg: cfg.clone(),
        rails: rails.to_vec(),
        copies: copies.clone(),
        stop: stop.clone(),
    }
    .spawn();
}

/// What a worker serving with `huge_pages` says about its clients' rings:
/// once where the first client's rings are, and once more if the pool runs
/// short after it gave some.
#[derive(Debug, Default)]
struct HugeReport {
    worker: u16,
    /// The software device: no huge pages there.
    software: bool,
    /// Connections whose rings were all in huge pages.
    huge: u64,
    /// The first connection was reported.
    told: bool,
    /// A shortage after huge rings was reported.
    told_short: bool,
}

impl HugeReport {
    /// A client connected and `rings` of its two rings are in huge pages:
    /// what to say, if anything (warnings go to stderr).
    fn connected(&mut self, rings: usize) -> Option<(Said, String)> {
        let w = self.worker;
        let all = rings == 2;
        let first = !self.told;
        self.told = true;
        if all {
            self.huge += 1;
        }
        let line = |s: &str| format!("kvs-server: worker {w}: {s}");
        if first && all {
            Some((
                Said::Info,
                line("huge_pages: copyrpc rings in 2 MiB huge pages"),
            ))
        } else if first && self.software {
            Some((
                Said::Info,
                line(
                    "huge_pages: the software device has no huge pages; copyrpc rings in \
                     normal memory",
                ),
            ))
        } else if first {
            Some((
                Said::Warning,
                line(
                    "WARNING: huge_pages: copyrpc rings in normal pages, not huge ones: the \
                     2 MiB pool has too few free pages (reserve more: vm.nr_hugepages)",
                ),
            ))
        } else if !all && self.huge > 0 && !self.told_short {
            self.told_short = true;
            Some((
                Said::Warning,
                line(&format!(
                    "WARNING: huge_pages: the 2 MiB pool ran short (after huge rings for {} \
                     clients); new clients' copyrpc rings are in normal pages (reserve more: \
                     vm.nr_hugepages)",
                    self.huge
                )),
            ))
        } else {
            None
        }
    }
}

/// Whether a line goes to stdout or, as a warning, to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    Info,
    Warning,
}

/// Handles parked requests again now that their keys are settled (or their
/// slots moved on); returns how many were answered.
fn settle<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    h: &mut Handler,
    fwd: &mut Forwarder,
    parked: Vec<Parked>,
    out: &mut Vec<u8>,
) -> u64 {
    let mut n = 0;
    for p in parked {
        match h.handle(&p.req, p.handle.max_response(), out) {
            Handled::Answered => {
                let _ = ctx.reply(p.handle, out);
                n += 1;
            }
            Handled::Forward(f) => {
                fwd.prepare(h, &p.req, f);
                fwd.forward(ctx, h, p.handle, f, out);
            }
            // Still not here (its pull failed), or a write of it in
            // flight: the client asks again.
            Handled::Pull { .. } | Handled::AwaitWrite { .. } | Handled::AwaitMap => {
                try_again(ctx, p.handle, out)
            }
        }
    }
    n
}

/// Handles again the parked reads whose key no write awaits any more;
/// returns how many were answered.
fn reads_due<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    h: &mut Handler,
    reads: &mut ReadsWaiting<copyrpc::RecvHandle>,
    due: &mut Vec<ParkedRead<copyrpc::RecvHandle>>,
    out: &mut Vec<u8>,
) -> u64 {
    reads.take_due(|fp| h.in_flight(fp), due);
    let mut n = 0;
    for r in due.drain(..) {
        match h.handle(&r.req, r.handle.max_response(), out) {
            Handled::Answered => {
                let _ = ctx.reply(r.handle, out);
                reads.recycle(r.req);
                n += 1;
            }
            // A newer write of the key: waits again, within limits.
            Handled::AwaitWrite { .. } => {
                if let Err(handle) = reads.again(r) {
                    try_again(ctx, handle, out);
                }
            }
            // A read is neither forwarded nor (its slot served here) pulled
            // but by a map change since: the client asks again.
            Handled::Forward(_) | Handled::Pull { .. } | Handled::AwaitMap => {
                try_again(ctx, r.handle, out);
                reads.recycle(r.req);
            }
        }
    }
    n
}

/// Handles again, in the order they came, the replication messages that
/// waited for a newer map (one was just installed).
fn maps_due<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    h: &mut Handler,
    maps: &mut AwaitingMap<copyrpc::RecvHandle>,
    out: &mut Vec<u8>,
) {
    let now = Instant::now();
    for m in maps.take_all() {
        match h.handle(&m.req, m.handle.max_response(), out) {
            Handled::AwaitMap => {
                if let Err(handle) = maps.again(m, now) {
                    fenced(ctx, handle, out);
                }
            }
            // A replication message is answered or waits: nothing else.
            _ => {
                let _ = ctx.reply(m.handle, out);
                maps.recycle(m.req);
            }
        }
    }
}

/// Refuses a replication message that waited too long for a newer map.
fn fenced<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    handle: copyrpc::RecvHandle,
    out: &mut Vec<u8>,
) {
    begin_response(out, Status::Fenced, 0);
    let why = b"the primary's map is newer than this backup's, which did not arrive in time";
    let room = handle.max_response().saturating_sub(RESPONSE_HEADER);
    out.extend_from_slice(&why[..why.len().min(room)]);
    finish_response(out, 0);
    let _ = ctx.reply(handle, out);
}

/// Answers TryAgain: the client sends the request again shortly.
fn try_again<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    handle: copyrpc::RecvHandle,
    out: &mut Vec<u8>,
) {
    begin_response(out, Status::TryAgain, 0);
    finish_response(out, 0);
    let _ = ctx.reply(handle, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(software: bool) -> HugeReport {
        HugeReport {
            worker: 3,
            software,
            ..HugeReport::default()
        }
    }

    #[test]
    fn the_first_client_says_where_its_rings_are_and_a_later_shortage_warns_once() {
        let mut r = report(false);
        let (how, l) = r.connected(2).unwrap();
        assert_eq!(how, Said::Info);
        assert_eq!(
            l,
            "kvs-server: worker 3: huge_pages: copyrpc rings in 2 MiB huge pages"
        );
        assert_eq!(r.connected(2), None);
        let (how, l) = r.connected(1).unwrap();
        assert_eq!(how, Said::Warning);
        assert!(
            l.contains("ran short (after huge rings for 2 clients)"),
            "{l}"
        );
        assert_eq!(r.connected(0), None, "said once");
        assert_eq!(r.connected(2), None);
    }

    #[test]
    fn no_pages_from_the_start_warns_and_the_software_device_says_it_has_none() {
        let mut r = report(false);
        let (how, l) = r.connected(0).unwrap();
        assert_eq!(how, Said::Warning);
        assert!(l.contains("too few free pages"), "{l}");
        assert_eq!(r.connected(0), None);
        let mut r = report(true);
        let (how, l) = r.connected(0).unwrap();
        assert_eq!(how, Said::Info);
        assert!(l.contains("the software device has no huge pages"), "{l}");
        assert_eq!(r.connected(0), None);
    }
}
