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
//! answered elsewhere with where the leader is ([`ControlReply::Keeper`](kvs_proto::control::ControlReply::Keeper)),
//! or [`ControlReply::NoLeader`](kvs_proto::control::ControlReply::NoLeader). A join is answered once the entry that
//! adds the member is applied, a `forget` once the entry that removes it
//! is (its address is free for a new member then); either, held up by
//! another membership change, is answered [`ControlReply::NotYet`](kvs_proto::control::ControlReply::NotYet).
//!
//! Its parts: the requests it answers ([`requests`]), what it does with
//! each turn of the group and what the log applied ([`applied`]), and the
//! member's status ([`status`]).

mod applied;
mod requests;
mod status;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use copyrpc::conn::{Connection, PendingConnection};
use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use copyrpc::{ContextBuilder, Waker};
use kvs_control::Group;
use kvs_proto::{AuthToken, MemberId, SetupAnswer, ShardMap};
use mlx5::device::Context as Device;

use super::peers::Peers;
use crate::bulk::source_slots::SourceSlots;
use crate::config::Config;
use crate::migration::import::Progress;
use crate::migration::session::Sessions;
use crate::replication::copy_in::Copies;
use crate::replication::proposals::Replication;
use crate::start_error::StartError;
use crate::threads::cluster_view::Shared;
use crate::threads::lease::Lease;
use crate::threads::to_worker::ToWorker;
use crate::worker_stats::WorkerStats;
use requests::ParkedRequest;

/// The target of the control thread's log events, whichever of its files
/// makes them: operators filter and read them by it.
const LOG: &str = module_path!();

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
    pub source_slots: Arc<SourceSlots>,
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
        state.publish_figures();
        let answer = SetupAnswer {
            workers: state.cfg.workers,
            slots: state.map.slots(),
            member: state.me,
            cluster: state.group.cluster_id(),
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
            self.group.cluster_id(),
            self.cfg.clone(),
            self.cluster_token.clone(),
            self.stop.clone(),
        );
        // Slots given away whose records the workers did not recover (no
        // durability): their import cannot finish.
        let lost_exports = (0..self.map.slots())
            .filter(|&s| {
                self.map.importing_from(s) == Some(me) && self.source_slots.get(s).is_none()
            })
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
            source_slots: self.source_slots,
            copies: self.copies,
            imports: HashMap::new(),
            sessions: Sessions::default(),
            cfg: self.cfg,
            cluster_token: self.cluster_token,
            rails: self.rails,
            stop: self.stop,
            peers,
            parked: Vec::new(),
            lost_exports,
            snapshot_asks: 0,
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
    me: MemberId,
    group: Group,
    /// The map in force in the workers.
    map: ShardMap,
    own: SocketAddr,
    bulk_port: u16,
    workers: Vec<(Sender<ToWorker>, Waker)>,
    stats: Vec<Arc<WorkerStats>>,
    shared: Arc<Shared>,
    lease: Arc<Lease>,
    source_slots: Arc<SourceSlots>,
    copies: Arc<Copies>,
    /// Imports this member runs, by (first, end, source).
    imports: HashMap<(u32, u32, MemberId), Arc<Progress>>,
    /// The import sessions, one per (worker, source) with imports.
    sessions: Sessions,
    cfg: Config,
    cluster_token: Option<AuthToken>,
    rails: Vec<String>,
    stop: Arc<AtomicBool>,
    peers: Peers,
    /// Requests waiting for their entries.
    parked: Vec<ParkedRequest>,
    /// Slots the map had this member exporting when the process started:
    /// their frozen copies died with the process before.
    lost_exports: std::collections::HashSet<u32>,
    /// `kvs-admin snapshot` requests taken since the start.
    snapshot_asks: u64,
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

/// Wall-clock milliseconds since the Unix epoch (migration times).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl State {
    /// The group's log failed (`e`): a member that cannot keep its log must
    /// not take part, so the member stops (its workers woken to see it).
    fn stop_for(&self, e: kvs_control::GroupError) {
        tracing::error!("the control group's log: {e}; stopping");
        self.stop.store(true, Ordering::Release);
        for (_, w) in &self.workers {
            w.wake();
        }
    }

    /// Whether this member is the group's only live member.
    fn alone(&self) -> bool {
        self.group
            .state()
            .is_some_and(|s| s.live_members().count() <= 1)
    }
}
