//! The control thread: the member's part in the control group, and its
//! control endpoint (connections whose hello names [`kvs_proto::CONTROL`]).
//!
//! Each turn of its loop (at least every Raft tick):
//! 1. control requests: the group's message batches from peers (`RAFT`),
//!    joins, status, maps, migrations, `forget`, pull tickets and priority
//!    pulls (`PULL`);
//! 2. the group ticks and polls: what Raft asks to keep is written and
//!    flushed before the messages that depend on it leave through the
//!    [`Peers`] links;
//! 3. what the committed log changed is acted on: a new map goes to every
//!    worker, slots given away are frozen for their new owners and freed
//!    once imported, imports of slots gained start;
//! 4. the lease is published to the workers, which serve only under it.
//!
//! Requests only the leader serves (joins, migrations, `forget`) are
//! answered elsewhere with where the leader is ([`ControlReply::Keeper`]),
//! or [`ControlReply::NoLeader`]. A join is answered once the entry that
//! adds the member is applied, a `forget` once the entry that removes it
//! is (its address is free for a new member then); either, held up by
//! another membership change, is answered [`ControlReply::NotYet`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use copyrpc::conn::{Connection, PendingConnection};
use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use copyrpc::{ContextBuilder, RecvHandle, Waker};
use kvs_control::{Applied, Command, Event, Group, MemberState, Refusal};
use kvs_proto::control::{
    ControlReply, ControlRequest, GroupMember, GroupView, MemberStatus, WorkerStatus,
};
use kvs_proto::group::Batch;
use kvs_proto::proto::{begin_response, finish_response, Op, Request, Status, RESPONSE_HEADER};
use kvs_proto::shard::slot_of;
use kvs_proto::{AuthToken, Owner, SetupAnswer, ShardMap};
use mlx5::device::Context as Device;

use super::peers::Peers;
use crate::cluster::replicas::Replication;
use crate::cluster_view::Shared;
use crate::config::Config;
use crate::lease::Lease;
use crate::migration::copy_in::Copies;
use crate::migration::import::{Importer, Progress};
use crate::migration::outgoing::{free_elsewhere, to_hex, Outgoing};
use crate::migration::session::Sessions;
use crate::start_error::StartError;
use crate::to_worker::ToWorker;
use crate::worker_stats::WorkerStats;

/// How long a request waits for the entry proposed for it to be applied.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a member whose address or bulk port the map has wrong asks
/// the group to change it.
const READDRESS_EVERY: Duration = Duration::from_secs(1);

/// The control thread, as started.
pub(crate) struct Control {
    pub cfg: Config,
    pub group: Group,
    /// The map the workers start with.
    pub map: ShardMap,
    /// Where others reach this member, and its bulk port.
    pub own: SocketAddr,
    pub bulk_port: u16,
    /// The workers' channels and wakers.
    pub workers: Vec<(Sender<ToWorker>, Waker)>,
    pub stats: Vec<Arc<WorkerStats>>,
    /// Control connections from the acceptor.
    pub incoming: Receiver<PendingConnection>,
    pub shared: Arc<Shared>,
    pub lease: Arc<Lease>,
    pub outgoing: Arc<Outgoing>,
    /// The copies arriving here (status).
    pub copies: Arc<Copies>,
    pub cluster_token: Option<AuthToken>,
    /// The bulk transfers' rails.
    pub rails: Vec<String>,
    pub stop: Arc<AtomicBool>,
    /// The control thread's waker once its context is built.
    pub ready: Sender<Result<Waker, StartError>>,
    /// The workers' replication reports, and whether this member resumed
    /// from its data dir without its records.
    pub replication: Replication,
}

impl Control {
    /// Opens the device and serves.
    pub fn start(self) {
        let wire = self.cfg.transport;
        let (c, e) = match self.cfg.device_spec().open() {
            Ok(dev) => match run_on_device_as(dev, wire, self) {
                Ok(()) => return,
                Err(refused) => refused,
            },
            Err(e) => (self, e),
        };
        let _ = c.ready.send(Err(StartError::Control(e.to_string())));
    }
}

/// What became of a request.
enum Answer {
    /// The answer is in `out`.
    Now,
    /// Answered once the entry proposed for it is applied.
    Later(Awaited),
}

/// What a parked request waits for.
#[derive(Debug, Clone, Copy)]
enum Awaited {
    /// Member `member` at `addr` (a join).
    Join { member: u16, addr: SocketAddr },
    /// The migration proposed at `at_ms` (migrate, rebalance).
    Started { at_ms: u64 },
    /// The running migration cancelled, or over.
    Cancelled,
    /// Member `member` forgotten (`force`: as asked).
    Left { member: u16, force: bool },
}

/// A request waiting for its entry.
struct Pending {
    handle: RecvHandle,
    max_response: usize,
    awaited: Awaited,
    deadline: Instant,
}

impl OnTransport for Control {
    type Output = ();

    /// The control thread's loop: each turn it waits a tick, answers the
    /// control requests that came (or parks them), takes new control
    /// connections, drives the group, answers what waited, and drops the
    /// connections that closed; until the stop flag.
    fn run<T: Transport>(self, dev: Device) {
        let built = ContextBuilder::new()
            .idle(self.cfg.idle_policy())
            .ring_size(1 << 20)
            .max_endpoints(256)
            .build_on::<T, _, _>(&dev, |_: u64, _| {});
        let mut ctx = match built {
            Ok(c) => c,
            Err(e) => {
                let _ = self.ready.send(Err(StartError::Control(e.to_string())));
                return;
            }
        };
        let _ = self.ready.send(Ok(ctx.waker()));
        crate::crash::debug_panic("control");
        let (mut state, incoming) = self.into_state();
        // A member that restarts while importing pulls again.
        state.start_imports();
        let answer = SetupAnswer {
            workers: state.cfg.workers,
            slots: state.map.slots(),
            member: state.me,
            cluster: state.group.cluster_id().bytes(),
        }
        .encode();
        let mut conns: Conns = Vec::new();
        let mut last_check = Instant::now();
        let mut out = Vec::new();
        let mut req_bytes = Vec::new();
        while !state.stop.load(Ordering::Acquire) {
            // Alone in the group, nothing needs ticking often: no heartbeats
            // to send, and the lease (renewed every turn) is longer. The
            // tick is the group's, which a change of its member_timeout
            // moves.
            let tick = state.group.config().tick;
            let wait = if state.alone() { tick * 5 } else { tick };
            let _ = ctx.wait(wait).or_else(|_| Ok::<_, ()>(ctx.poll()));
            let now = Instant::now();
            state.take_requests(&mut ctx, &conns, &mut req_bytes, &mut out, now);
            while let Ok(p) = incoming.try_recv() {
                let local = p.local_addr().ok();
                match p.establish(&mut ctx, &answer) {
                    Ok(c) => conns.push((c, local)),
                    Err(e) => tracing::warn!("a control connection failed: {e}"),
                }
            }
            if let Err(e) = state.drive(Instant::now()) {
                state.stop_for(e);
                break;
            }
            state.answer_pending(&mut ctx, &mut out, Instant::now());
            if last_check.elapsed() >= Duration::from_millis(100) {
                last_check = Instant::now();
                drop_closed(&mut ctx, &mut conns);
            }
        }
        // Serving stops with the control thread.
        state.lease.set(None);
        ctx.poll();
        for (c, _) in &mut conns {
            ctx.close(c.endpoint());
            c.check(&mut ctx);
        }
    }
}

/// Each control connection, and the address the peer reached us at.
type Conns = Vec<(Connection, Option<SocketAddr>)>;

impl Control {
    /// What the control thread keeps between requests, made from what it
    /// was started with; and the channel of the acceptor's connections.
    fn into_state(self) -> (State, Receiver<PendingConnection>) {
        let me = self.group.me();
        let peers = Peers::new(
            me,
            self.group.cluster_id().bytes(),
            self.cfg.clone(),
            self.cluster_token.clone(),
            self.stop.clone(),
        );
        let lost_exports = (0..self.map.slots())
            .filter(|&s| self.map.importing_from(s) == Some(me))
            .collect();
        let state = State {
            me,
            group: self.group,
            map: self.map,
            own: self.own,
            bulk_port: self.bulk_port,
            workers: self.workers,
            stats: self.stats,
            shared: self.shared,
            lease: self.lease,
            outgoing: self.outgoing,
            copies: self.copies,
            imports: HashMap::new(),
            sessions: Sessions::default(),
            cfg: self.cfg,
            cluster_token: self.cluster_token,
            rails: self.rails,
            stop: self.stop,
            peers,
            pending: Vec::new(),
            lost_exports,
            last_readdress: Instant::now(),
            step_errors: 0,
            replication: self.replication,
            drain_turns: None,
            served: false,
        };
        (state, self.incoming)
    }
}

/// Drops the control connections whose peers left (their endpoints
/// removed).
fn drop_closed<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
    ctx: &mut copyrpc::Context<u64, F, T>,
    conns: &mut Conns,
) {
    conns.retain_mut(|(c, _)| {
        let alive = c.check(ctx);
        if !alive {
            ctx.remove(c.endpoint());
        }
        alive
    });
}

/// What the control thread keeps between requests.
struct State {
    me: u16,
    group: Group,
    /// The map in force in the workers.
    map: ShardMap,
    own: SocketAddr,
    bulk_port: u16,
    workers: Vec<(Sender<ToWorker>, Waker)>,
    stats: Vec<Arc<WorkerStats>>,
    shared: Arc<Shared>,
    lease: Arc<Lease>,
    outgoing: Arc<Outgoing>,
    copies: Arc<Copies>,
    /// Imports this member runs, by (first, end, source).
    imports: HashMap<(u32, u32, u16), Arc<Progress>>,
    /// The import sessions, one per (worker, source) with imports.
    sessions: Sessions,
    cfg: Config,
    cluster_token: Option<AuthToken>,
    rails: Vec<String>,
    stop: Arc<AtomicBool>,
    peers: Peers,
    /// Requests waiting for their entries.
    pending: Vec<Pending>,
    /// Slots the map had this member exporting when the process started:
    /// their frozen copies died with the process before.
    lost_exports: std::collections::HashSet<u32>,
    last_readdress: Instant,
    /// Peers' messages the group refused, for the log.
    step_errors: u64,
    replication: Replication,
    /// While draining: the workers' turns when the lease was withdrawn
    /// ([`Lease::turns`]); the group is asked to move the slots only once
    /// those turns are over.
    drain_turns: Option<Vec<u64>>,
    /// Whether the member served at the last turn (see `drive`).
    served: bool,
}

/// The answer to a proposal the group refused: ask again shortly when
/// another membership change holds it up (a joiner waits its turn), else
/// the reason.
fn refusal(e: kvs_control::GroupError) -> ControlReply {
    match e {
        kvs_control::GroupError::Busy => ControlReply::NotYet {
            message: e.to_string(),
        },
        e => ControlReply::error(e.to_string()),
    }
}

/// Wall-clock milliseconds since the Unix epoch (migration times).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl State {
    /// Takes the turn's control requests: each is answered now, or parked
    /// until its entry is applied (or [`COMMIT_TIMEOUT`] passes). `conns`
    /// tell the address each requester reached this server at.
    fn take_requests<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
        &mut self,
        ctx: &mut copyrpc::Context<u64, F, T>,
        conns: &Conns,
        req_bytes: &mut Vec<u8>,
        out: &mut Vec<u8>,
        now: Instant,
    ) {
        while let Some(req) = ctx.recv() {
            req_bytes.clear();
            if let Some(b) = ctx.request(&req) {
                req_bytes.extend_from_slice(b);
            }
            let local = conns
                .iter()
                .find(|(c, _)| c.endpoint() == req.endpoint())
                .and_then(|(_, a)| *a);
            let max = req.max_response();
            match self.handle(req_bytes, local, max, out, now) {
                Answer::Now => {
                    let _ = ctx.reply(req, out);
                }
                Answer::Later(awaited) => self.pending.push(Pending {
                    handle: req,
                    max_response: max,
                    awaited,
                    deadline: now + COMMIT_TIMEOUT,
                }),
            }
        }
    }

    /// The group's log failed (`e`): a member that cannot keep its log must
    /// not take part, so the member stops (its workers woken to see it).
    fn stop_for(&self, e: kvs_control::GroupError) {
        tracing::error!("the control group's log: {e}; stopping");
        self.stop.store(true, Ordering::Release);
        for (_, w) in &self.workers {
            w.wake();
        }
    }

    /// Answers one control request into `out`, or parks it. `local`: the
    /// address the requester reached this server at.
    fn handle(
        &mut self,
        req: &[u8],
        local: Option<SocketAddr>,
        max_response: usize,
        out: &mut Vec<u8>,
        now: Instant,
    ) -> Answer {
        let r = match Request::new_checked(req) {
            Ok(r) => r,
            Err(e) => {
                reply(
                    out,
                    Status::BadRequest,
                    e.to_string().as_bytes(),
                    max_response,
                );
                return Answer::Now;
            }
        };
        let answer = match r.op() {
            Op::Raft => {
                match self.on_batch(r.value(), now) {
                    Ok(()) => reply(out, Status::Ok, &[], max_response),
                    Err(m) => reply(out, Status::BadRequest, m.as_bytes(), max_response),
                }
                return Answer::Now;
            }
            Op::Pull => {
                self.pull(r.key(), max_response, out);
                return Answer::Now;
            }
            Op::Control => match ControlRequest::decode(r.value()) {
                Ok(c) => return self.on_control(c, local, max_response, out),
                Err(e) => ControlReply::error(e.to_string()),
            },
            op => ControlReply::error(format!(
                "{op:?} is a worker's request, not a control request"
            )),
        };
        reply(out, Status::Ok, &answer.encode(), max_response);
        Answer::Now
    }

    /// Answers a control request `c` into `out`, or parks it until the entry
    /// proposed for it is applied. Any member answers status, map, pulls'
    /// opening and drains; the rest only the leader (others say where it
    /// is). `local`: the address the requester reached this server at.
    fn on_control(
        &mut self,
        c: ControlRequest,
        local: Option<SocketAddr>,
        max_response: usize,
        out: &mut Vec<u8>,
    ) -> Answer {
        let answer = match c {
            ControlRequest::Status => ControlReply::Status(self.status()),
            ControlRequest::Map => {
                let mut map = Vec::new();
                self.map.encode(&mut map);
                ControlReply::Map { map }
            }
            ControlRequest::OpenPull {
                version,
                first,
                end,
            } => self.open_pull(version, first, end),
            ControlRequest::Drain => {
                self.shared.drain.store(true, Ordering::Release);
                ControlReply::Ok
            }
            // Asked of a survivor, which cannot lead before it.
            ControlRequest::UnsafeRecover { lost } => self.unsafe_recover(&lost),
            _ if !self.group.is_leader() => self.leader_is(),
            ControlRequest::Join {
                addr,
                workers,
                slots,
                bulk_port,
                zone,
            } => match self.join(addr, workers, slots, bulk_port, zone, local) {
                Ok(member) => return Answer::Later(Awaited::Join { member, addr }),
                Err(r) => *r,
            },
            ControlRequest::Migrate { first, end, to } => {
                let at_ms = now_ms();
                let cmd = Command::Migrate {
                    moves: vec![(first, end, to)],
                    at_ms,
                };
                match self.migrate(&cmd) {
                    Ok(()) => return Answer::Later(Awaited::Started { at_ms }),
                    Err(r) => *r,
                }
            }
            ControlRequest::Rebalance => {
                let at_ms = now_ms();
                match self.migrate(&Command::Rebalance { at_ms }) {
                    Ok(()) => return Answer::Later(Awaited::Started { at_ms }),
                    Err(r) => *r,
                }
            }
            ControlRequest::Cancel => match self.migrate(&Command::Cancel { at_ms: now_ms() }) {
                Ok(()) => return Answer::Later(Awaited::Cancelled),
                Err(r) => *r,
            },
            ControlRequest::SetReplicas { replicas } => self.set_replicas(replicas),
            ControlRequest::SetMemberTimeout { ms } => {
                let t = Duration::from_millis(ms);
                match self.group.propose_member_timeout(t) {
                    Ok(()) => ControlReply::Ok,
                    Err(e) => ControlReply::error(e.to_string()),
                }
            }
            // Answered once applied: the member's address is free for a new
            // member then, and not before.
            ControlRequest::Forget { member, force } => {
                match self.group.propose_forget(member, force, now_ms()) {
                    Ok(()) => return Answer::Later(Awaited::Left { member, force }),
                    Err(e) => refusal(e),
                }
            }
            ControlRequest::ImportDone {
                version,
                slots,
                records,
                bytes,
                lost,
            } => {
                let cmd = Command::ImportDone {
                    version,
                    slots,
                    records,
                    bytes,
                    lost,
                    at_ms: now_ms(),
                };
                match self.group.propose(&cmd) {
                    Ok(()) => ControlReply::Ok,
                    Err(e) => ControlReply::error(e.to_string()),
                }
            }
        };
        reply(out, Status::Ok, &answer.encode(), max_response);
        Answer::Now
    }

    /// A ticket to pull slots `first..end` given away in map `version`, or
    /// why not.
    fn open_pull(&mut self, version: u32, first: u32, end: u32) -> ControlReply {
        if first >= end {
            return ControlReply::error(format!("empty slot range {first}..{end}"));
        }
        // Slots this process never held: it gave them away before a
        // restart, and their records went with the old process.
        if (first..end).any(|s| self.lost_exports.contains(&s)) {
            return ControlReply::error(format!(
                "member {} restarted after it handed slots {first}..{end} over: the \
                 records it held for them are lost",
                self.me
            ));
        }
        // Slots not held (yet): this member has not applied the map that
        // gives them away.
        match self.outgoing.issue(version, first, end) {
            Ok(t) => ControlReply::Ticket { ticket: to_hex(&t) },
            Err(message) => ControlReply::NotYet { message },
        }
    }

    /// Proposes that the cluster keep `replicas` copies of each slot.
    fn set_replicas(&mut self, replicas: u8) -> ControlReply {
        if !kvs_control::REPLICAS.contains(&replicas) {
            return ControlReply::error(Refusal::Replicas(replicas).to_string());
        }
        match self.group.propose(&Command::SetReplicas { replicas }) {
            Ok(()) => ControlReply::Ok,
            Err(e) => ControlReply::error(e.to_string()),
        }
    }

    /// An unsafe recovery without the `lost` members, this member the
    /// group's only voter and leader.
    fn unsafe_recover(&mut self, lost: &[u16]) -> ControlReply {
        match self.group.unsafe_recover(lost, now_ms()) {
            Ok(()) => {
                tracing::warn!(
                    "UNSAFE RECOVERY: this member forces a control group of its \
                     own without members {lost:?}: writes acknowledged only by them are lost, \
                     and they must never be started again with their old data dirs"
                );
                ControlReply::Ok
            }
            Err(e) => ControlReply::error(e.to_string()),
        }
    }

    /// Whether this member is the group's only live member.
    fn alone(&self) -> bool {
        self.group
            .state()
            .is_some_and(|s| s.live_members().count() <= 1)
    }

    /// Where to take a request only the leader serves.
    fn leader_is(&self) -> ControlReply {
        match self.group.leader().filter(|&l| l != self.me) {
            Some(l) => match self.map.members().get(usize::from(l)) {
                Some(m) => ControlReply::Keeper { addr: m.addr },
                None => ControlReply::NoLeader,
            },
            None => ControlReply::NoLeader,
        }
    }

    /// A batch of the group's messages from a peer.
    fn on_batch(&mut self, b: &[u8], now: Instant) -> Result<(), String> {
        if self.shared.cut_off.load(Ordering::Relaxed) {
            return Err("cut off from the control group (fault injection)".into());
        }
        let batch = Batch::new_checked(b).map_err(|e| e.to_string())?;
        if batch.cluster_id() != self.group.cluster_id().bytes() {
            let theirs = kvs_control::ClusterId::from_bytes(batch.cluster_id());
            return Err(format!(
                "a member of cluster {theirs} reached member {} of cluster {}",
                self.me,
                self.group.cluster_id()
            ));
        }
        let from = batch.from();
        for m in batch.messages() {
            if let Err(e) = self.group.step(from, m, now) {
                self.step_errors += 1;
                if self.step_errors <= 10 || self.step_errors % 1000 == 0 {
                    tracing::warn!(
                        "control group: a message from member {from} refused \
                         ({} so far): {e}",
                        self.step_errors
                    );
                }
            }
        }
        Ok(())
    }

    /// A migration command (leader only): checked against the committed
    /// state, then proposed. `Err`: the answer now (a refusal, or `Ok` for a
    /// rebalance with nothing to move).
    fn migrate(&mut self, cmd: &Command) -> Result<(), Box<ControlReply>> {
        let Some(s) = self.group.state() else {
            return Err(Box::new(self.leader_is()));
        };
        if let Err(why) = s.check_migration(cmd) {
            let nothing = matches!(why, Refusal::Balanced | Refusal::NothingToMove);
            if matches!(cmd, Command::Rebalance { .. }) && nothing {
                return Err(Box::new(ControlReply::Ok));
            }
            return Err(Box::new(ControlReply::error(why.to_string())));
        }
        self.group
            .propose(cmd)
            .map_err(|e| Box::new(ControlReply::error(e.to_string())))
    }

    /// A server asks to join (the leader proposes it): the id it will have.
    fn join(
        &mut self,
        addr: SocketAddr,
        workers: u16,
        slots: u32,
        bulk_port: u16,
        zone: Option<String>,
        local: Option<SocketAddr>,
    ) -> Result<u16, Box<ControlReply>> {
        if addr.ip().is_unspecified() || addr.port() == 0 {
            return Err(Box::new(ControlReply::error(format!(
                "{addr} is not an address others can reach (set advertise)"
            ))));
        }
        let s = self.group.state().ok_or_else(|| {
            Box::new(ControlReply::error(
                "this member has no state yet".to_string(),
            ))
        })?;
        if slots != s.map().slots() {
            return Err(Box::new(ControlReply::error(format!(
                "the joining server has slots = {slots}; the cluster has {}",
                s.map().slots()
            ))));
        }
        if let Some(m) = s.member_at(addr) {
            return Err(Box::new(ControlReply::error(format!(
                "{addr} is member {m} already: start it with its data dir to resume it, \
                 or forget member {m} (kvs-admin forget {m}) to join anew"
            ))));
        }
        // The leader learns its own address from the first member that
        // reaches it, when it listens on an unspecified one.
        let own = s.map().members()[usize::from(self.me)].addr;
        if let (true, Some(l)) = (own.ip().is_unspecified(), local) {
            let cmd = Command::Readdress {
                member: self.me,
                addr: SocketAddr::new(l.ip(), own.port()),
                bulk_port: self.bulk_port,
            };
            self.group.propose(&cmd).map_err(|e| Box::new(refusal(e)))?;
        }
        let id = self
            .group
            .propose_join(addr, workers, bulk_port, zone)
            .map_err(|e| Box::new(refusal(e)))?;
        tracing::info!("proposing {addr} ({workers} workers) as member {id}");
        Ok(id)
    }

    /// Answers the parked requests whose entries are applied, or that
    /// waited too long (their entries may still be applied later).
    fn answer_pending<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
        &mut self,
        ctx: &mut copyrpc::Context<u64, F, T>,
        out: &mut Vec<u8>,
        now: Instant,
    ) {
        let mut i = 0;
        while i < self.pending.len() {
            let p = &self.pending[i];
            let answer = match (self.settled(p.awaited), now >= p.deadline) {
                (Some(a), _) => a,
                (None, true) => ControlReply::error(format!(
                    "the control group did not commit the change within {COMMIT_TIMEOUT:?} \
                     (it may still; see kvs-admin status)"
                )),
                (None, false) => {
                    i += 1;
                    continue;
                }
            };
            let p = self.pending.swap_remove(i);
            reply(out, Status::Ok, &answer.encode(), p.max_response);
            let _ = ctx.reply(p.handle, out);
        }
    }

    /// The answer to a parked request, once its entry is applied.
    fn settled(&self, awaited: Awaited) -> Option<ControlReply> {
        let s = self.group.state()?;
        match awaited {
            Awaited::Join { member, addr } => {
                let m = s.map().members().get(usize::from(member))?;
                if m.addr != addr {
                    return Some(ControlReply::error(format!(
                        "member id {member} went to another server; try again"
                    )));
                }
                let mut b = Vec::new();
                s.map().encode(&mut b);
                tracing::info!(
                    "member {member} ({addr}) joined; map version {}",
                    s.map().version()
                );
                Some(ControlReply::Joined {
                    cluster_id: s.cluster_id().to_string(),
                    member,
                    map: b,
                })
            }
            Awaited::Started { at_ms } => {
                let st = s.migration_status(now_ms())?;
                (st.started_ms == at_ms).then_some(ControlReply::Started(st))
            }
            Awaited::Cancelled => {
                let st = s.migration_status(now_ms())?;
                (st.cancelled || st.finished).then_some(ControlReply::Ok)
            }
            Awaited::Left { member, force } => {
                if s.member_state(member) == Some(MemberState::Left) {
                    return Some(ControlReply::Ok);
                }
                // Refused when applied: what was checked before proposing
                // no longer holds (else it is still being committed).
                let change = kvs_control::Membership::Forget {
                    member,
                    force,
                    at_ms: 0,
                };
                s.check_membership(&change)
                    .err()
                    .map(|why| ControlReply::error(why.to_string()))
            }
        }
    }

    /// One turn of the group: time, persistence, messages, what was
    /// applied, the lease.
    fn drive(&mut self, now: Instant) -> Result<(), kvs_control::GroupError> {
        for m in self.peers.take_unreachable() {
            self.group.unreachable(m);
        }
        self.group.tick(now);
        self.group.poll(now)?;
        let cut_off = self.shared.cut_off.load(Ordering::Relaxed);
        for o in self.group.take_outgoing() {
            if cut_off {
                continue;
            }
            match self.map.members().get(usize::from(o.to)) {
                Some(m) => {
                    let addr = m.addr;
                    self.peers.send(o.to, addr, o.bytes)
                }
                None => {
                    // A member this one has no address for yet (its map is
                    // older than the group's): the message waits for Raft
                    // to send it again.
                }
            }
        }
        let mut changed = false;
        for e in self.group.take_events() {
            changed |= self.on_event(e);
        }
        if changed {
            if let Some(m) = self.group.state().map(|s| s.map().clone()) {
                if m != self.map {
                    self.install(m);
                }
            }
            let s = self.group.state();
            self.peers
                .retain(|m| s.is_none_or(|s| s.member_state(m) != Some(MemberState::Left)));
        }
        if self.shared.drain.swap(false, Ordering::AcqRel) {
            tracing::info!("draining: this member stops serving and hands its slots over");
            self.replication.start_drain(now);
        }
        let quiet = self
            .drain_turns
            .as_ref()
            .is_some_and(|t| self.lease.passed(t));
        self.replication
            .drive(&mut self.group, &self.workers, (now, now_ms()), quiet);
        // A restarted member serves nothing until the group has moved its
        // slots to their backups; given back (then, or after a drain), the
        // lease holds only with the map that moved them.
        let serve = self.replication.may_serve();
        if serve && !self.served {
            self.lease.require_map(self.map.version());
        }
        self.served = serve;
        self.lease.set(self.group.lease_expiry().filter(|_| serve));
        // A drain: the turns that may still serve by the withdrawn lease.
        if !self.replication.draining() {
            self.drain_turns = None;
        } else if self.drain_turns.is_none() {
            self.drain_turns = Some(self.lease.turns());
        }
        self.shared
            .leased
            .store(serve && self.group.lease_valid(now), Ordering::Relaxed);
        self.shared
            .term
            .store(self.group.status().term, Ordering::Relaxed);
        self.readdress(now);
        Ok(())
    }

    /// Logs an event; whether the state changed.
    fn on_event(&mut self, e: Event) -> bool {
        match e {
            Event::Leader(l) => self.on_leader(l),
            Event::Restored { index } => {
                tracing::info!("control group: state restored from a snapshot at {index}");
                true
            }
            Event::Applied(_, a) => self.on_applied(a),
            Event::Timing { group, configured } => {
                tracing::warn!(
                    "control group: this member uses the cluster's \
                     member_timeout_ms = {}, not its own {}: every member times leases \
                     and failures alike (kvs-admin set member-timeout changes it)",
                    group.as_millis(),
                    configured.as_millis()
                );
                false
            }
        }
    }

    /// Publishes and logs who leads now (`l`; none known); the state did
    /// not change.
    fn on_leader(&self, l: Option<u16>) -> bool {
        let t = self.group.status().term;
        self.shared
            .leader
            .store(l.map_or(0, |l| u32::from(l) + 1), Ordering::Relaxed);
        if self.alone() {
            // A one-member cluster leads itself: nothing to say.
            return false;
        }
        match l {
            Some(l) if l == self.me => {
                tracing::info!("control group: this member leads (term {t})")
            }
            Some(l) => tracing::info!("control group: member {l} leads (term {t})"),
            None => tracing::info!("control group: no leader (term {t})"),
        }
        false
    }

    /// Logs a member forgotten (`moved` of its slots failed over to their
    /// ready backups, `lost_slots` went out empty), and stops if it is
    /// this one; the state changed.
    fn on_left(&mut self, member: u16, moved: u32, lost_slots: u32) -> bool {
        tracing::info!(
            "control group: member {member} was forgotten{}{}",
            if moved > 0 {
                format!("; {moved} of its slots failed over to their ready backups")
            } else {
                String::new()
            },
            if lost_slots > 0 {
                format!(
                    "; {lost_slots} slots had no ready backup and go out empty: \
                     their records are lost"
                )
            } else {
                String::new()
            }
        );
        if member == self.me {
            tracing::warn!("this member was forgotten: stopping");
            self.stop.store(true, Ordering::Release);
        }
        true
    }

    /// Logs what an applied entry did (`a`); whether the state changed.
    fn on_applied(&mut self, a: Applied) -> bool {
        match a {
            Applied::Nothing => false,
            Applied::Refused(why) => {
                if self.group.is_leader() {
                    tracing::debug!("control group: an entry changed nothing: {why}");
                }
                false
            }
            Applied::Failed(m) => {
                tracing::warn!(
                    "control group: member {m} is marked failed (no word from it \
                     within member_timeout_ms = {}); its slots with a ready backup moved \
                     to it, the others are unavailable until it returns or is forgotten",
                    self.group.config().member_timeout.as_millis()
                );
                true
            }
            Applied::Drained { member, moved } => {
                if self.replication.drained(member, self.me) {
                    tracing::info!(
                        "drained: {moved} slots moved to their backups; this \
                         member serves what had no ready backup"
                    );
                    self.shared.drained.store(true, Ordering::Release);
                } else if member != self.me {
                    tracing::info!(
                        "control group: member {member} was drained ({moved} \
                         slots moved to their backups)"
                    );
                }
                true
            }
            Applied::Restarted { member, nonce } => {
                if self.replication.restarted(member, nonce, self.me) {
                    tracing::info!(
                        "control group: this member is back in service; its \
                         slots with a ready backup moved to it"
                    );
                } else if member != self.me {
                    tracing::info!(
                        "control group: member {member} restarted without its \
                         records; its slots with a ready backup moved to it"
                    );
                }
                true
            }
            Applied::Up(m) => {
                tracing::info!("control group: member {m} is up again");
                true
            }
            Applied::Left {
                member,
                moved,
                lost_slots,
            } => self.on_left(member, moved, lost_slots),
            Applied::Voter { member, voter } => {
                tracing::info!(
                    "control group: member {member} {}",
                    if voter {
                        "votes now"
                    } else {
                        "no longer votes"
                    }
                );
                false
            }
            Applied::Recovered {
                survivor,
                lost,
                lost_slots,
                ..
            } => {
                tracing::warn!(
                    "control group: unsafe recovery by member {survivor}: members \
                     {lost:?} are forgotten, {lost_slots} of their slots had no ready backup \
                     and lost their records"
                );
                if lost.contains(&self.me) {
                    tracing::warn!("this member was forgotten: stopping");
                    self.stop.store(true, Ordering::Release);
                }
                true
            }
            Applied::MemberTimeout(ms) => {
                tracing::info!("control group: member_timeout_ms is {ms} now");
                false
            }
            Applied::Joined(_) | Applied::Map(_) => true,
        }
    }

    /// Asks the group to correct this member's address or bulk port when
    /// the map has them wrong (a restart on a new bulk port, or a member
    /// that listens on an unspecified address).
    fn readdress(&mut self, now: Instant) {
        if now.duration_since(self.last_readdress) < READDRESS_EVERY {
            return;
        }
        self.last_readdress = now;
        let Some(s) = self.group.state() else { return };
        let Some(mine) = s.map().members().get(usize::from(self.me)) else {
            return;
        };
        let addr = if self.own.ip().is_unspecified() {
            mine.addr
        } else {
            self.own
        };
        if mine.bulk_port == self.bulk_port && mine.addr == addr {
            return;
        }
        let cmd = Command::Readdress {
            member: self.me,
            addr,
            bulk_port: self.bulk_port,
        };
        let _ = self.group.propose_anywhere(&cmd);
    }

    /// A priority pull: a key's value from the frozen copy of its slot.
    fn pull(&self, key: &[u8], max_response: usize, out: &mut Vec<u8>) {
        let slot = slot_of(key, self.map.slots());
        match self.outgoing.get(slot) {
            Some(recs) => match recs.get(key) {
                Some(v) => reply(out, Status::Ok, v, max_response),
                None => reply(out, Status::NotFound, &[], max_response),
            },
            // Its import is over (the map that says so reached this member
            // before the target): every record of the frozen copy is at
            // the target already, so a key it lacks was not in it.
            None if self.map.owner_of_slot(slot).member != self.me
                && self.map.importing_from(slot) != Some(self.me) =>
            {
                reply(out, Status::NotFound, &[], max_response)
            }
            None => {
                // Not frozen here yet: this member has not applied the map
                // that gives the slot away. The target asks again.
                let m = format!("slot {slot} is not held here for a migration (yet)");
                reply(out, Status::TryAgain, m.as_bytes(), max_response)
            }
        }
    }

    /// This member's figures, and the group as it sees it.
    fn status(&self) -> MemberStatus {
        let mut workers: Vec<WorkerStatus> = self
            .stats
            .iter()
            .map(|s| WorkerStatus {
                slots: 0,
                keys: s.keys.load(Ordering::Relaxed),
                backup_keys: s.backup_keys.load(Ordering::Relaxed),
                bytes: s.memory_used.load(Ordering::Relaxed),
            })
            .collect();
        for s in 0..self.map.slots() {
            let Owner { member, worker } = self.map.owner_of_slot(s);
            if member == self.me {
                if let Some(w) = workers.get_mut(usize::from(worker)) {
                    w.slots += 1;
                }
            }
        }
        let g = self.group.status();
        let group = self.group.state().map(|s| GroupView {
            cluster_id: s.cluster_id().to_string(),
            leader: g.leader,
            term: g.term,
            commit: g.commit,
            applied: g.applied,
            lease: self.shared.leased.load(Ordering::Relaxed),
            replicas: s.replicas(),
            under_replicated_slots: s.under_replicated(),
            members: (0..s.member_count())
                .map(|m| GroupMember {
                    id: m,
                    addr: s.map().members()[usize::from(m)].addr,
                    state: match s.member_state(m) {
                        Some(MemberState::Up) | None => "up",
                        Some(MemberState::Failed) => "failed",
                        Some(MemberState::Left) => "left",
                    }
                    .into(),
                    voter: s.is_voter(m),
                    zone: s.zone(m).map(str::to_string),
                    drained: s.drained(m),
                })
                .collect(),
        });
        MemberStatus {
            member: self.me,
            map_version: self.map.version(),
            workers,
            imports: self.imports.values().map(|p| p.status()).collect(),
            migration: self
                .group
                .state()
                .and_then(|s| s.migration_status(now_ms())),
            held: {
                let (slots, _, bytes) = self.outgoing.held();
                (slots as u32, bytes as u64)
            },
            drained: self.group.state().is_some_and(|s| s.drained(self.me)),
            copies: self.copies.status(),
            group,
            bulk_served: (
                self.shared.bulk_connections.load(Ordering::Relaxed),
                self.shared.bulk_pulls.load(Ordering::Relaxed),
            ),
        }
    }

    /// Makes `m` the map in force: sent to every worker (each serves by it
    /// from its next turn on), frozen copies whose import is over freed,
    /// and imports of slots gained started.
    fn install(&mut self, m: ShardMap) {
        for (tx, waker) in &self.workers {
            if tx.send(ToWorker::Map(m.clone())).is_ok() {
                waker.wake();
            }
        }
        self.shared.version.store(m.version(), Ordering::Release);
        self.map = m;
        let (me, map) = (self.me, &self.map);
        // Kept: slots another member still imports from this one.
        let gone = self
            .outgoing
            .release(|s| map.importing_from(s) == Some(me) && map.owner_of_slot(s).member != me);
        let (n, bytes) = (gone.slots.len(), gone.bytes);
        free_elsewhere(gone);
        if n > 0 {
            tracing::info!("freeing {n} migrated slots ({bytes} bytes of keys and values)");
        }
        self.start_imports();
    }

    /// Starts an importer for each run of slots a worker of this member
    /// imports from one source and that has none yet; ends those the map
    /// no longer lists.
    fn start_imports(&mut self) {
        let map = &self.map;
        let mut runs: Vec<(u32, u32, u16, u16)> = Vec::new();
        for s in 0..map.slots() {
            let o = map.owner_of_slot(s);
            let Some(from) = map.importing_from(s).filter(|_| o.member == self.me) else {
                continue;
            };
            match runs.last_mut() {
                Some((_, end, f, w)) if *end == s && *f == from && *w == o.worker => *end += 1,
                _ => runs.push((s, s + 1, from, o.worker)),
            }
        }
        self.imports.retain(|k, p| {
            let listed = runs.iter().any(|&(a, b, f, _)| (a, b, f) == *k);
            if !listed {
                p.ended.store(true, Ordering::Release);
            }
            listed
        });
        self.sessions
            .retain(|w, from| runs.iter().any(|&(_, _, f, rw)| (rw, f) == (w, from)));
        let own = if self.own.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], self.own.port()))
        } else {
            self.own
        };
        for &(first, end, from, worker) in &runs {
            if self.imports.contains_key(&(first, end, from)) {
                continue;
            }
            let (Some(source), Some(link)) = (
                map.members().get(usize::from(from)).copied(),
                self.workers.get(usize::from(worker)),
            ) else {
                continue;
            };
            let progress = Arc::new(Progress::new(from, end - first));
            let imp = Importer {
                version: map.version(),
                first,
                end,
                source,
                own,
                slots: map.slots(),
                worker: link.clone(),
                cfg: self.cfg.clone(),
                rails: self.rails.clone(),
                cluster_token: self.cluster_token.clone(),
                progress: progress.clone(),
                frozen_told: AtomicBool::new(false),
                shared: self.shared.clone(),
                stop: self.stop.clone(),
            };
            // One session per worker and source, unless the map gives the
            // worker more than one run of slots from that source at once.
            let runs_alike = runs.iter().filter(|r| (r.2, r.3) == (from, worker)).count();
            match self.sessions.start(worker, imp, runs_alike == 1) {
                Ok(_) => {
                    self.imports.insert((first, end, from), progress);
                }
                Err(e) => tracing::error!("cannot start an import: {e}"),
            }
        }
    }
}

/// An answer with `payload`, or `AllowanceTooSmall` with the size needed.
fn reply(out: &mut Vec<u8>, st: Status, payload: &[u8], max_response: usize) {
    if RESPONSE_HEADER + payload.len() > max_response {
        begin_response(out, Status::AllowanceTooSmall, 0);
        if max_response >= RESPONSE_HEADER + 4 {
            out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        }
    } else {
        begin_response(out, st, 0);
        out.extend_from_slice(payload);
    }
    finish_response(out, 0);
}
