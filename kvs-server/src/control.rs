//! The control thread: the server's control endpoint. It holds the member's
//! copy of the cluster's shard map and serves what members and `kvs-admin`
//! ask on connections whose hello names [`kvs_proto::CONTROL`]:
//!
//! - `SET_MAP`: install a newer map. Every worker serves by it before the
//!   answer goes back, so a member that answered no longer accepts requests
//!   for the slots it lost.
//! - `join` (at the keeper, member 0): add the member, or take back one that
//!   restarts at the same address, under the next version; push the map to
//!   every other member ([`crate::push`]). Other members answer with the
//!   keeper's address.
//! - `status`: this member's keys, bytes and slots per worker.
//!
//! It has a copyrpc context of its own, so control traffic never waits
//! behind data traffic, and it sleeps when idle as workers do.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use copyrpc::conn::{Connection, PendingConnection};
use copyrpc::transport::{run_on_device, DeviceSpec, OnTransport, Transport};
use copyrpc::{ContextBuilder, Waker};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus, WorkerStatus};
use kvs_proto::proto::{begin_response, finish_response, Op, Request, Status, RESPONSE_HEADER};
use kvs_proto::{Member, Owner, SetupAnswer, ShardMap};
use mlx5::device::Context as Device;

use crate::config::Config;
use crate::server::{StartError, WorkerStats};
use crate::worker::ToWorker;

/// How long a worker has to take a new map before the control thread gives
/// up waiting (a worker that stopped never acknowledges).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The control thread's idle sleep: how late it sees the stop flag.
const TICK: Duration = Duration::from_millis(250);

/// The member's view of the cluster, shared with [`crate::Server`].
#[derive(Debug)]
pub(crate) struct Shared {
    /// The map version in force.
    pub version: AtomicU32,
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
    pub pusher: Option<Sender<ShardMap>>,
    pub shared: Arc<Shared>,
    pub stop: Arc<AtomicBool>,
    /// The control thread's waker once its context is built.
    pub ready: Sender<Result<Waker, StartError>>,
}

impl Control {
    /// Opens the device and serves.
    pub fn start(self) {
        let spec = DeviceSpec {
            name: &self.cfg.device,
            fabric: self.cfg.fabric.as_deref(),
            software: "sim1",
        };
        match spec.open() {
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
            map: self.map,
            workers: self.workers,
            stats: self.stats,
            pusher: self.pusher,
            shared: self.shared,
        };
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
    map: ShardMap,
    workers: Vec<(Sender<ToWorker>, Waker)>,
    stats: Vec<Arc<WorkerStats>>,
    pusher: Option<Sender<ShardMap>>,
    shared: Arc<Shared>,
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
                Ok(
                    ControlRequest::Migrate { .. }
                    | ControlRequest::Rebalance
                    | ControlRequest::Cancel
                    | ControlRequest::ImportDone { .. },
                ) => ControlReply::error("migrations are being built"),
                Err(e) => ControlReply::error(e.to_string()),
            },
            op => ControlReply::error(format!(
                "{op:?} is a worker's request, not a control request"
            )),
        };
        reply(out, Status::Ok, &answer.encode(), max_response);
    }

    /// Installs a pushed map if it is newer.
    fn set_map(&mut self, b: &[u8]) -> ControlReply {
        let m = match ShardMap::decode(b) {
            Ok(m) => m,
            Err(e) => return ControlReply::error(e.to_string()),
        };
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
        let mut m = self.map.clone();
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
        if m != self.map {
            m.set_version(self.map.version() + 1);
            self.install(m.clone());
            self.push(m);
        }
        let mut b = Vec::new();
        self.map.encode(&mut b);
        eprintln!(
            "kvs-server: member {id} ({addr}, {workers} workers) joined; map version {}",
            self.map.version()
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
            imports: Vec::new(),
            migration: None,
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
    }

    /// Hands `m` to the pusher (the keeper's), which sends it to every other
    /// member.
    fn push(&self, m: ShardMap) {
        if let Some(p) = &self.pusher {
            let _ = p.send(m);
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
