//! The control thread: the server's control endpoint. It holds the member's
//! copy of the cluster's shard map and serves what members and `kvs-admin`
//! ask on connections whose hello names [`kvs_proto::CONTROL`]:
//!
//! - `SET_MAP`: install a newer map. Every worker serves by it before the
//!   answer goes back, so a member that answered no longer accepts requests
//!   for the slots it lost. Installing starts the imports of slots gained
//!   ([`crate::migration::import`]) and frees the frozen copies of slots
//!   whose import is over.
//! - `join` (at the keeper, member 0): add the member, or take back one that
//!   restarts at the same address, under the next version; deliver the map
//!   to every member ([`crate::push`]). Other members answer with the
//!   keeper's address.
//! - `migrate`, `rebalance`, `cancel`, `import_done` (at the keeper): run
//!   migrations ([`crate::migration::plan`]).
//! - `open_pull` and `PULL` (at a migration's source): a ticket for the bulk
//!   port, and a priority pull of one key.
//! - `status`, `map`: this member's figures and map.
//!
//! It has a copyrpc context of its own, so control traffic never waits
//! behind data traffic, and it sleeps when idle as workers do.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use copyrpc::conn::{Connection, PendingConnection};
use copyrpc::transport::{run_on_device, OnTransport, Transport};
use copyrpc::{ContextBuilder, Waker};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus, WorkerStatus};
use kvs_proto::proto::{begin_response, finish_response, Op, Request, Status, RESPONSE_HEADER};
use kvs_proto::shard::slot_of;
use kvs_proto::{AuthToken, Member, Owner, SetupAnswer, ShardMap};
use mlx5::device::Context as Device;

use crate::config::Config;
use crate::migration::import::{Importer, Progress};
use crate::migration::outgoing::{to_hex, Outgoing};
use crate::migration::plan::Migration;
use crate::push::Delivery;
use crate::server::{StartError, WorkerStats};
use crate::worker::ToWorker;

/// How long a worker has to take a new map before the control thread gives
/// up waiting (a worker that stopped never acknowledges).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The control thread's idle sleep: how late it sees the stop flag.
const TICK: Duration = Duration::from_millis(250);

/// The member's view of the cluster, shared with [`crate::Server`] and the
/// metrics endpoint.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// This member's id.
    pub member: u16,
    /// The map version in force.
    pub version: AtomicU32,
    /// Records and bytes of keys and values this member pulled as a
    /// migration's target, and sent as a source.
    pub pulled_records: AtomicU64,
    pub pulled_bytes: AtomicU64,
    pub sent_bytes: AtomicU64,
}

/// The control thread, as started.
pub(crate) struct Control {
    pub me: u16,
    pub cfg: Config,
    pub map: ShardMap,
    /// The workers' channels and wakers.
    pub workers: Vec<(Sender<ToWorker>, Waker)>,
    pub stats: Vec<Arc<WorkerStats>>,
    /// Control connections from the acceptor.
    pub incoming: Receiver<PendingConnection>,
    /// The keeper's map pusher (member 0 only).
    pub pusher: Option<Sender<Delivery>>,
    pub shared: Arc<Shared>,
    pub outgoing: Arc<Outgoing>,
    pub auth: Option<AuthToken>,
    /// The bulk transfers' rails.
    pub rails: Vec<String>,
    pub stop: Arc<AtomicBool>,
    /// The control thread's waker once its context is built.
    pub ready: Sender<Result<Waker, StartError>>,
}

impl Control {
    /// Opens the device and serves.
    pub fn start(self) {
        match self.cfg.device_spec().open() {
            Ok(dev) => run_on_device(dev, self),
            Err(e) => {
                let _ = self.ready.send(Err(StartError::Control(e.to_string())));
            }
        }
    }
}

impl OnTransport for Control {
    type Output = ();

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
        let mut state = State {
            me: self.me,
            workers_n: self.cfg.workers,
            latest: self.map.clone(),
            map: self.map,
            workers: self.workers,
            stats: self.stats,
            pusher: self.pusher,
            shared: self.shared,
            outgoing: self.outgoing,
            migration: None,
            imports: HashMap::new(),
            cfg: self.cfg.clone(),
            auth: self.auth,
            rails: self.rails,
            stop: self.stop.clone(),
        };
        // A member that restarts while importing pulls again.
        state.start_imports();
        let answer = SetupAnswer {
            workers: self.cfg.workers,
            slots: state.map.slots(),
            member: self.me,
        }
        .encode();
        // Each control connection, and the address the peer reached us at.
        let mut conns: Vec<(Connection, Option<SocketAddr>)> = Vec::new();
        let mut last_check = Instant::now();
        let mut out = Vec::new();
        let mut req_bytes = Vec::new();
        while !self.stop.load(Ordering::Acquire) {
            let _ = ctx.wait(TICK).or_else(|_| Ok::<_, ()>(ctx.poll()));
            while let Some(req) = ctx.recv() {
                req_bytes.clear();
                if let Some(b) = ctx.request(&req) {
                    req_bytes.extend_from_slice(b);
                }
                let local = conns
                    .iter()
                    .find(|(c, _)| c.endpoint() == req.endpoint())
                    .and_then(|(_, a)| *a);
                state.handle(&req_bytes, local, req.max_response(), &mut out);
                let _ = ctx.reply(req, &out);
            }
            while let Ok(p) = self.incoming.try_recv() {
                let local = p.local_addr().ok();
                match p.establish(&mut ctx, &answer) {
                    Ok(c) => conns.push((c, local)),
                    Err(e) => eprintln!("kvs-server: a control connection failed: {e}"),
                }
            }
            if last_check.elapsed() >= Duration::from_millis(100) {
                last_check = Instant::now();
                conns.retain_mut(|(c, _)| {
                    let alive = c.check(&mut ctx);
                    if !alive {
                        ctx.remove(c.endpoint());
                    }
                    alive
                });
            }
        }
        ctx.poll();
        for (c, _) in &mut conns {
            ctx.close(c.endpoint());
            c.check(&mut ctx);
        }
    }
}

/// What the control thread keeps between requests.
struct State {
    me: u16,
    workers_n: u16,
    /// The map in force here.
    map: ShardMap,
    /// At the keeper: the newest map, which deliveries bring to everyone
    /// (this member included).
    latest: ShardMap,
    workers: Vec<(Sender<ToWorker>, Waker)>,
    stats: Vec<Arc<WorkerStats>>,
    pusher: Option<Sender<Delivery>>,
    shared: Arc<Shared>,
    outgoing: Arc<Outgoing>,
    /// At the keeper: the migration running, or the last one.
    migration: Option<Migration>,
    /// Imports this member runs, by (first, end, source).
    imports: HashMap<(u32, u32, u16), Arc<Progress>>,
    cfg: Config,
    auth: Option<AuthToken>,
    rails: Vec<String>,
    stop: Arc<AtomicBool>,
}

impl State {
    /// Answers one control request into `out`. `local`: the address the
    /// requester reached this server at.
    fn handle(
        &mut self,
        req: &[u8],
        local: Option<SocketAddr>,
        max_response: usize,
        out: &mut Vec<u8>,
    ) {
        let r = match Request::new_checked(req) {
            Ok(r) => r,
            Err(e) => {
                return reply(
                    out,
                    Status::BadRequest,
                    e.to_string().as_bytes(),
                    max_response,
                )
            }
        };
        let answer = match r.op() {
            Op::Pull => return self.pull(r.key(), max_response, out),
            Op::SetMap => self.set_map(r.value()),
            Op::Control => match ControlRequest::decode(r.value()) {
                Ok(ControlRequest::Join {
                    addr,
                    workers,
                    slots: _,
                    bulk_port,
                }) => self.join(addr, workers, bulk_port, local),
                Ok(ControlRequest::Status) => ControlReply::Status(self.status()),
                Ok(ControlRequest::Map) => {
                    let mut map = Vec::new();
                    self.map.encode(&mut map);
                    ControlReply::Map { map }
                }
                Ok(ControlRequest::OpenPull {
                    version,
                    first,
                    end,
                }) => match self.outgoing.issue(version, first, end) {
                    Ok(t) => ControlReply::Ticket { ticket: to_hex(&t) },
                    Err(e) => ControlReply::error(e),
                },
                Ok(_) if self.me != 0 => ControlReply::Keeper {
                    addr: self.map.members()[0].addr,
                },
                Ok(ControlRequest::Migrate { first, end, to }) => self.migrate(first, end, to),
                Ok(ControlRequest::Rebalance) => {
                    let moves = self.latest.rebalance_moves();
                    if moves.is_empty() {
                        ControlReply::Ok
                    } else {
                        self.start_migration(&moves)
                    }
                }
                Ok(ControlRequest::Cancel) => match self.migration.as_mut() {
                    Some(g) if g.running() => {
                        g.cancel();
                        self.advance();
                        ControlReply::Ok
                    }
                    _ => ControlReply::error("no migration is running"),
                },
                Ok(ControlRequest::ImportDone {
                    version,
                    slots,
                    records,
                    bytes,
                    lost,
                }) => {
                    if let Some(g) = self.migration.as_mut() {
                        if g.imported(version, &slots, records, bytes, lost) {
                            self.advance();
                        }
                    }
                    ControlReply::Ok
                }
                Err(e) => ControlReply::error(e.to_string()),
            },
            op => ControlReply::error(format!(
                "{op:?} is a worker's request, not a control request"
            )),
        };
        reply(out, Status::Ok, &answer.encode(), max_response);
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
            None if self.map.owner_of_slot(slot).member != self.me => {
                reply(out, Status::NotFound, &[], max_response)
            }
            None => {
                let m = format!("slot {slot} is this member's own, not a migration's");
                reply(out, Status::BadRequest, m.as_bytes(), max_response)
            }
        }
    }

    /// Starts a migration of `first..end` to member `to` (the keeper).
    fn migrate(&mut self, first: u32, end: u32, to: u16) -> ControlReply {
        let slots = self.latest.slots();
        if first >= end || end > slots {
            return ControlReply::error(format!(
                "slot range {first}..{end} out of bounds: the cluster has {slots} slots (0-{})",
                slots - 1
            ));
        }
        let members = self.latest.members().len();
        if usize::from(to) >= members {
            return ControlReply::error(format!(
                "no member {to}: the cluster has members 0-{}",
                members - 1
            ));
        }
        self.start_migration(&[(first..end, to)])
    }

    fn start_migration(&mut self, moves: &[(std::ops::Range<u32>, u16)]) -> ControlReply {
        if let Some(g) = self.migration.as_ref().filter(|g| g.running()) {
            let s = g.status();
            return ControlReply::error(format!(
                "a migration is already running ({} of {} slots moved); wait for it or cancel it",
                s.slots_done, s.slots_total
            ));
        }
        match Migration::new(&self.latest, moves) {
            Ok(g) => {
                self.migration = Some(g);
                self.advance();
                let s = self.migration.as_ref().map(Migration::status);
                s.map_or(ControlReply::Ok, ControlReply::Started)
            }
            Err(e) => ControlReply::error(e),
        }
    }

    /// The migration's next step, if it can take one: a new map version
    /// that finishes the chunk pulled and hands over the next, delivered to
    /// the next chunk's source, then its target, then everyone.
    fn advance(&mut self) {
        let Some(g) = self.migration.as_mut() else {
            return;
        };
        let mut m = self.latest.clone();
        let version = m.version() + 1;
        let handed = g.step(&mut m, version);
        if m == self.latest {
            return;
        }
        m.set_version(version);
        let stages = match &handed {
            Some(c) => vec![vec![c.from], vec![c.to]],
            None => Vec::new(),
        };
        match &handed {
            Some(c) => eprintln!(
                "kvs-server: map version {version}: slots {}..{} move from member {} to {}",
                c.first, c.end, c.from, c.to
            ),
            None => eprintln!("kvs-server: map version {version}: the migration is over"),
        }
        self.latest = m.clone();
        self.deliver(m, stages);
    }

    /// Installs a pushed map if it is newer.
    fn set_map(&mut self, b: &[u8]) -> ControlReply {
        let m = match ShardMap::decode(b) {
            Ok(m) => m,
            Err(e) => return ControlReply::error(e.to_string()),
        };
        if m.slots() != self.map.slots() {
            return ControlReply::error(format!(
                "a map of {} slots; this cluster has {}",
                m.slots(),
                self.map.slots()
            ));
        }
        if m.version() <= self.map.version() {
            // An old or repeated push: nothing to do.
            return ControlReply::Ok;
        }
        match m.members().get(usize::from(self.me)) {
            Some(mine) if mine.workers == self.workers_n => {}
            _ => {
                return ControlReply::error(format!(
                    "map version {} does not have this server as member {} with {} workers",
                    m.version(),
                    self.me,
                    self.workers_n
                ))
            }
        }
        self.install(m);
        ControlReply::Ok
    }

    /// A server asks to join (the keeper adds it).
    fn join(
        &mut self,
        addr: SocketAddr,
        workers: u16,
        bulk_port: u16,
        local: Option<SocketAddr>,
    ) -> ControlReply {
        if self.me != 0 {
            return ControlReply::Keeper {
                addr: self.map.members()[0].addr,
            };
        }
        if addr.ip().is_unspecified() || addr.port() == 0 {
            return ControlReply::error(format!(
                "{addr} is not an address others can reach (set advertise)"
            ));
        }
        let mut m = self.latest.clone();
        // The keeper learns its own address from the first member that
        // reaches it, when it listens on an unspecified one.
        let own = m.members()[0].addr;
        if let (true, Some(l)) = (own.ip().is_unspecified(), local) {
            let _ = m.set_member_addr(0, SocketAddr::new(l.ip(), own.port()));
        }
        if m.members()[0].addr == addr {
            return ControlReply::error(format!("{addr} is the keeper's own address"));
        }
        let id = match m.members().iter().position(|x| x.addr == addr) {
            // A member that restarts at its address is the same member; it
            // lost its records (memory only) but keeps its slots.
            Some(i) => {
                let i = i as u16;
                if m.members()[usize::from(i)].workers != workers {
                    return ControlReply::error(format!(
                        "{addr} is member {i} with {} workers; it cannot come back with {workers}",
                        m.members()[usize::from(i)].workers
                    ));
                }
                // Its bulk port may be a new one.
                let _ = m.set_bulk_port(i, bulk_port);
                i
            }
            None => match m.add_member(Member {
                addr,
                workers,
                bulk_port,
            }) {
                Ok(i) => i,
                Err(e) => return ControlReply::error(e.to_string()),
            },
        };
        if m != self.latest {
            m.set_version(self.latest.version() + 1);
            self.latest = m.clone();
            self.deliver(m, Vec::new());
        }
        let mut b = Vec::new();
        self.latest.encode(&mut b);
        eprintln!(
            "kvs-server: member {id} ({addr}, {workers} workers) joined; map version {}",
            self.latest.version()
        );
        ControlReply::Joined { member: id, map: b }
    }

    /// This member's figures.
    fn status(&self) -> MemberStatus {
        let mut workers: Vec<WorkerStatus> = self
            .stats
            .iter()
            .map(|s| WorkerStatus {
                slots: 0,
                keys: s.keys.load(Ordering::Relaxed),
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
        MemberStatus {
            member: self.me,
            map_version: self.map.version(),
            workers,
            imports: self.imports.values().map(|p| p.status()).collect(),
            migration: self.migration.as_ref().map(Migration::status),
            held: {
                let (slots, _, bytes) = self.outgoing.held();
                (slots as u32, bytes as u64)
            },
        }
    }

    /// Makes `m` the map in force: every worker serves by it before this
    /// returns (or has stopped).
    fn install(&mut self, m: ShardMap) {
        let (ack_tx, ack_rx) = mpsc::channel();
        let mut sent = 0;
        for (tx, waker) in &self.workers {
            if tx.send(ToWorker::Map(m.clone(), ack_tx.clone())).is_ok() {
                waker.wake();
                sent += 1;
            }
        }
        let until = Instant::now() + INSTALL_TIMEOUT;
        for _ in 0..sent {
            let left = until.saturating_duration_since(Instant::now());
            if ack_rx.recv_timeout(left).is_err() {
                eprintln!(
                    "kvs-server: a worker did not take map version {} within {INSTALL_TIMEOUT:?}",
                    m.version()
                );
                break;
            }
        }
        self.shared.version.store(m.version(), Ordering::Release);
        self.map = m;
        // Frozen copies whose import is over go.
        let (me, map) = (self.me, &self.map);
        let (n, bytes) = self
            .outgoing
            .release(|s| map.importing_from(s) == Some(me) && map.owner_of_slot(s).member != me);
        if n > 0 {
            eprintln!("kvs-server: freed {n} migrated slots ({bytes} bytes of keys and values)");
        }
        self.start_imports();
    }

    /// Starts an importer for each run of slots a worker of this member
    /// imports from one source and that has none yet; forgets those the
    /// map no longer lists.
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
        self.imports
            .retain(|k, _| runs.iter().any(|&(a, b, f, _)| (a, b, f) == *k));
        for (first, end, from, worker) in runs {
            if self.imports.contains_key(&(first, end, from)) {
                continue;
            }
            let (Some(source), Some(link)) = (
                map.members().get(usize::from(from)),
                self.workers.get(usize::from(worker)),
            ) else {
                continue;
            };
            let progress = Arc::new(Progress {
                from,
                slots: end - first,
                records: Default::default(),
                bytes: Default::default(),
                retries: Default::default(),
                started: Instant::now(),
                done: Default::default(),
                last_error: Default::default(),
            });
            let imp = Importer {
                version: map.version(),
                first,
                end,
                source: *source,
                keeper: map.members()[0].addr,
                slots: map.slots(),
                worker: link.clone(),
                cfg: self.cfg.clone(),
                rails: self.rails.clone(),
                auth: self.auth.clone(),
                progress: progress.clone(),
                shared: self.shared.clone(),
                stop: self.stop.clone(),
            };
            let started = std::thread::Builder::new()
                .name(format!("kvs-import-{worker}"))
                .spawn(move || imp.start());
            match started {
                Ok(_) => {
                    self.imports.insert((first, end, from), progress);
                }
                Err(e) => eprintln!("kvs-server: cannot start an import: {e}"),
            }
        }
    }

    /// Hands `m` to the pusher (the keeper's), which delivers it stage by
    /// stage, then to everyone.
    fn deliver(&self, m: ShardMap, stages: Vec<Vec<u16>>) {
        if let Some(p) = &self.pusher {
            let _ = p.send(Delivery { map: m, stages });
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
