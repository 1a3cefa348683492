//! The server: an acceptor thread for connection setup, N worker threads
//! ([`crate::serving::worker`]), and a control thread for the cluster's control
//! group ([`crate::cluster`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use copyrpc::clock::Clock;
use copyrpc::conn::{Acceptor, AcceptorOptions, Listener, PendingConnection};
use copyrpc::Waker;
use kvs_proto::{ClusterId, MemberId, Owner, ShardMap};

use crate::bulk::export::BulkServer;
use crate::bulk::source_slots::SourceSlots;
use crate::cluster::control::Control;
use crate::cluster::start::How;
use crate::cluster::temp_dir::TempDir;
use crate::config::Config;
use crate::metrics::Exposition;
use crate::replication::copy_in::Copies;
use crate::replication::proposals::Replication;
use crate::serving::recovering::{Recovering, WhileRecovering};
use crate::serving::setup::{accept, SetupStats, Tokens};
use crate::serving::worker::{Ready, Worker};
use crate::start_error::StartError;
use crate::threads::cluster_view::Shared;
use crate::threads::lease::Lease;
use crate::threads::to_control::ToControl;
use crate::threads::to_worker::ToWorker;
use crate::worker_stats::WorkerStats;

/// A running server.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Vec<Arc<WorkerStats>>,
    setup: Arc<Mutex<SetupStats>>,
    workers: Vec<JoinHandle<()>>,
    /// Wake the workers and the control thread (stop requests).
    wakers: Vec<Waker>,
    acceptor: Option<JoinHandle<()>>,
    /// The control thread and the bulk listener.
    control: Vec<JoinHandle<()>>,
    member: MemberId,
    cluster_id: String,
    cluster: Arc<Shared>,
    lease: Arc<Lease>,
    /// A data dir made for the process (no `data_dir`), removed at the end.
    _temporary: Option<TempDir>,
    metrics_addr: Option<SocketAddr>,
    metrics: Option<JoinHandle<()>>,
}

impl Server {
    /// Starts the workers and the acceptor; returns once every worker has its
    /// context and its records (with `durability`, loaded from the data
    /// dir: meanwhile the member answers status, saying how far each
    /// worker got, and refuses everything else) and the socket listens.
    ///
    /// A panic in one of its threads ends only that thread unless the
    /// program called [`crate::abort_on_panic`] first, which a program that
    /// serves others should (the library sets no process-wide hook itself).
    pub fn start(cfg: Config) -> Result<Server, StartError> {
        let started = SystemTime::now();
        cfg.validate()?;
        let tokens = Tokens::read(&cfg)?;
        let sockets = Sockets::bind(&cfg)?;
        let addr = sockets.addr;
        // The member's part in the control group: resumed from the data
        // dir, or a new cluster, or a place in the one it joins.
        let joined =
            crate::cluster::start::start(&cfg, addr, sockets.bulk_port, tokens.cluster.clone())?;
        let member = joined.group.me();
        let cluster_id = joined.group.cluster_id().to_string();
        let map = joined.map.clone();
        say_how(&cfg, joined.how, member, &cluster_id);
        let own = crate::cluster::start::advertised(&cfg, addr, None)?;
        let common = Common {
            lease: Arc::new(Lease::new(usize::from(cfg.workers))),
            source_slots: Arc::new(SourceSlots::default()),
            copies: Arc::new(Copies::default()),
            rails: crate::bulk::rail_names(&cfg),
            stop: Arc::new(AtomicBool::new(false)),
            cluster_token: tokens.cluster.clone(),
            setup: Arc::new(Mutex::new(SetupStats::default())),
        };
        let (report_tx, report_rx) = mpsc::channel::<ToControl>();
        let me = (member, joined.group.cluster_id());
        let (workers, acceptor) = start_workers(
            &cfg,
            me,
            &map,
            &common,
            &report_tx,
            (sockets.acceptor, &tokens),
        )?;
        let cluster = Arc::new(Shared {
            member,
            version: AtomicU32::new(map.version()),
            ..Shared::default()
        });
        let rejoining = (joined.how == How::Resumed).then_some(workers.kept);
        let (ctl_tx, ctl_rx) = mpsc::channel::<PendingConnection>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let c = Control {
            cfg: cfg.clone(),
            group: joined.group,
            map,
            own,
            bulk_port: sockets.bulk_port,
            workers: workers.links.clone(),
            stats: workers.stats.clone(),
            incoming: ctl_rx,
            shared: cluster.clone(),
            lease: common.lease.clone(),
            source_slots: common.source_slots.clone(),
            copies: common.copies.clone(),
            cluster_token: tokens.cluster.clone(),
            rails: common.rails.clone(),
            stop: common.stop.clone(),
            ready: ready_tx,
            replication: Replication::new(report_rx, rejoining),
        };
        let (control_thread, control_waker) = spawn_control(c, ready_rx, &common.stop)?;
        let mut wakers: Vec<Waker> = workers.links.iter().map(|(_, w)| w.clone()).collect();
        wakers.push(control_waker.clone());
        let control = vec![
            control_thread,
            spawn_bulk(sockets.bulk, &cfg, &common, &cluster),
        ];
        let ctl = (ctl_tx, control_waker);
        let acceptor = spawn_acceptor(acceptor, workers.links, ctl, tokens, &common);
        let exposition = Exposition {
            cluster: cluster.clone(),
            source_slots: common.source_slots.clone(),
            workers: workers.stats.clone(),
            setup: common.setup.clone(),
            max_memory: cfg.max_memory,
            started,
        };
        let (metrics_addr, metrics) = spawn_metrics(sockets.metrics, exposition, &common.stop);
        if joined.how != How::Resumed {
            await_lease(&common.lease);
        }
        Ok(Server {
            addr,
            stop: common.stop,
            stats: workers.stats,
            setup: common.setup,
            workers: workers.threads,
            wakers,
            acceptor: Some(acceptor),
            control,
            member,
            cluster_id,
            cluster,
            lease: common.lease,
            _temporary: joined.temporary,
            metrics_addr,
            metrics,
        })
    }

    /// The address of the metrics endpoint (`metrics_listen`), if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// This server's member id in the cluster (0: it started the cluster).
    pub fn member(&self) -> MemberId {
        self.member
    }

    /// The cluster's id (32 hex digits), as kept in the data dir.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The member this one believes leads the control group, if any.
    pub fn leader(&self) -> Option<MemberId> {
        match self.cluster.leader.load(Ordering::Acquire) {
            0 => None,
            l => u16::try_from(l - 1).ok().map(MemberId),
        }
    }

    /// Whether this member holds its lease now (serves its slots).
    pub fn leased(&self) -> bool {
        self.cluster.leased.load(Ordering::Acquire)
    }

    /// The version of the shard map this server serves by.
    pub fn map_version(&self) -> u32 {
        self.cluster.version.load(Ordering::Acquire)
    }

    /// Per-worker counters.
    pub fn stats(&self) -> &[Arc<WorkerStats>] {
        &self.stats
    }

    /// What connection setup has done so far (updated by the acceptor
    /// thread at least every 50 ms).
    pub fn setup_stats(&self) -> SetupStats {
        let mut s = self.setup.lock().map(|s| *s).unwrap_or_default();
        s.refused_member_ops = self
            .stats
            .iter()
            .map(|w| w.refused_member_ops.load(Ordering::Relaxed))
            .sum();
        s
    }

    /// A flag that stops the server when set (for a signal handler).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Whether the server has been asked to stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Fault injection, for tests of what the cluster does when one member
    /// misbehaves; never for service. `cut_off`: this member's control
    /// thread neither sends nor takes the control group's messages (a
    /// partition between it and the group that clients and backups do not
    /// see). `keep_lease`: its workers serve as if the lease held, whatever
    /// the group says (a clock gone wrong), to show what the fence on the
    /// write path stops on its own.
    #[doc(hidden)]
    pub fn inject(&self, cut_off: bool, keep_lease: bool) {
        self.cluster.cut_off.store(cut_off, Ordering::Relaxed);
        self.lease.keep(keep_lease);
    }

    /// Drains this member before it stops (what SIGTERM does): it stops
    /// serving, and the control group moves each slot it is primary of to
    /// the slot's ready backup, which has every acknowledged write, and
    /// drops its copies. Returns whether that was applied within `within`
    /// (slots with no ready backup stay with it: with one copy, a stop
    /// takes their records with it).
    pub fn hand_off(&self, within: Duration) -> bool {
        self.cluster.drained.store(false, Ordering::Release);
        self.cluster.stopping.store(true, Ordering::Release);
        self.cluster.drain.store(true, Ordering::Release);
        if let Some(w) = self.wakers.last() {
            w.wake();
        }
        let t = std::time::Instant::now();
        while t.elapsed() < within {
            if self.cluster.drained.load(Ordering::Acquire) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// Stops: no new connections; requests already received are answered,
    /// later ones get `ShuttingDown`; then every endpoint closes (the
    /// clients' calls still on the wire fail). Waits for the threads.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake_all();
        self.join_all();
    }

    /// Waits until the server stops (after [`stop_flag`](Self::stop_flag) is set).
    pub fn wait(mut self) {
        self.join_all();
    }

    /// Ends the workers' sleeps, so they see the stop flag now.
    fn wake_all(&self) {
        for w in &self.wakers {
            w.wake();
        }
    }

    fn join_all(&mut self) {
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        for c in self.control.drain(..) {
            let _ = c.join();
        }
        if let Some(m) = self.metrics.take() {
            let _ = m.join();
        }
    }
}

/// The sockets a server listens on, all bound before anything starts.
struct Sockets {
    /// The setup address (`listen`, its port chosen if 0).
    addr: SocketAddr,
    acceptor: Acceptor,
    /// `metrics_listen`'s socket, and its address.
    metrics: Option<(SocketAddr, std::net::TcpListener)>,
    /// Migrations' bulk transfers are set up on a port of their own.
    bulk: mpib::conn::Listener,
    bulk_port: u16,
}

impl Sockets {
    /// Binds the setup, metrics and bulk sockets `cfg` names.
    fn bind(cfg: &Config) -> Result<Sockets, StartError> {
        let listener = Listener::bind(cfg.listen).map_err(|source| StartError::Listen {
            addr: cfg.listen,
            source,
        })?;
        let listen_error = |e: std::io::Error| StartError::Listen {
            addr: cfg.listen,
            source: e.into(),
        };
        let addr = listener.local_addr().map_err(listen_error)?;
        let acceptor = Acceptor::new(
            listener,
            AcceptorOptions {
                deadline: Duration::from_millis(cfg.setup_timeout_ms),
                max_pending: cfg.max_pending_setups,
            },
        )
        .map_err(listen_error)?;
        let metrics = match cfg.metrics_listen {
            Some(addr) => Some(
                crate::metrics_http::bind(addr)
                    .and_then(|l| Ok((l.local_addr()?, l)))
                    .map_err(|source| StartError::Metrics { addr, source })?,
            ),
            None => None,
        };
        let bulk_addr = SocketAddr::new(cfg.listen.ip(), cfg.bulk_port);
        let bulk = mpib::conn::Listener::bind(bulk_addr)
            .map_err(|e| StartError::Bulk(format!("bulk_port {bulk_addr}: {e}")))?;
        let bulk_port = bulk
            .local_addr()
            .map_err(|e| StartError::Bulk(e.to_string()))?
            .port();
        Ok(Sockets {
            addr,
            acceptor,
            metrics,
            bulk,
            bulk_port,
        })
    }
}

/// What the server's threads share, made once at start.
struct Common {
    /// The member's lease: the workers serve only while it holds.
    lease: Arc<Lease>,
    /// Slots given away, held for their new owners, and copies' snapshots.
    source_slots: Arc<SourceSlots>,
    /// The copies arriving here.
    copies: Arc<Copies>,
    /// The bulk transfers' rails.
    rails: Vec<String>,
    stop: Arc<AtomicBool>,
    /// The cluster token, presented to other members.
    cluster_token: Option<kvs_proto::AuthToken>,
    /// Connection setup's counters.
    setup: Arc<Mutex<SetupStats>>,
}

/// Says how the member started (resumed, bootstrapped or joined), when it
/// has a data dir: the binary says what a missing one means; an embedded
/// server (the YCSB demo) needs none.
fn say_how(cfg: &Config, how: How, member: MemberId, cluster_id: &str) {
    match (&cfg.data_dir, how) {
        (None, _) => {}
        (Some(d), How::Resumed) => {
            tracing::info!(
                "resuming member {member} of cluster {cluster_id} from {}",
                d.display()
            );
            if cfg.bootstrap {
                tracing::warn!(
                    "bootstrap is ignored: {} holds a member already. Give \
                     --bootstrap (bootstrap = true) only when creating the cluster and leave it \
                     out of later starts: were this data dir lost, it would start a second, \
                     empty cluster at this address",
                    d.display()
                );
            }
        }
        (Some(d), How::Bootstrapped) => tracing::info!(
            "started cluster {cluster_id} as member 0 (data dir {})",
            d.display()
        ),
        (Some(d), How::Joined) => tracing::info!(
            "joined cluster {cluster_id} as member {member} (data dir {})",
            d.display()
        ),
    }
}

/// A worker's channel and waker: how the acceptor and the control thread
/// reach it.
type Link = (mpsc::Sender<ToWorker>, Waker);

/// The worker threads, once each has its context.
struct Workers {
    /// How to reach each, in their order.
    links: Vec<Link>,
    threads: Vec<JoinHandle<()>>,
    /// Their gauges and published requests.
    stats: Vec<Arc<WorkerStats>>,
    /// What their files kept: `(first, end, worker)` runs of slots whose
    /// copies know their place in their primaries' writes.
    kept: KeptRuns,
}

/// `(first, end, worker)` runs of slots a member's files kept a copy of
/// that knows its place in its primary's writes.
type KeptRuns = Vec<(u32, u32, u16)>;

/// Starts the workers ([`spawn_workers`]) of member `me` (its id and its
/// cluster's) on `map`, while the setup socket (`acceptor`, admitting by
/// `tokens`) answers for the member as they recover their records
/// ([`WhileRecovering`]); returns the workers and the socket, back.
fn start_workers(
    cfg: &Config,
    me: (MemberId, ClusterId),
    map: &ShardMap,
    common: &Common,
    report: &mpsc::Sender<ToControl>,
    (acceptor, tokens): (Acceptor, &Tokens),
) -> Result<(Workers, Acceptor), StartError> {
    let stats: Vec<Arc<WorkerStats>> = (0..cfg.workers).map(|_| Arc::default()).collect();
    let answering = WhileRecovering::start(Recovering {
        acceptor,
        tokens: tokens.clone(),
        cfg: cfg.clone(),
        member: me.0,
        cluster: me.1,
        map: map.clone(),
        stats: stats.clone(),
        done: Arc::new(AtomicBool::new(false)),
    });
    let workers = spawn_workers(cfg, me, map, common, report, stats);
    let acceptor = answering.finish()?;
    Ok((workers?, acceptor))
}

/// Starts `cfg.workers` worker threads of member `me` (its id and its
/// cluster's) on `map`, each with its gauges of `stats`, and waits until
/// each has its context and its records: returns their links, threads and
/// gauges. A worker that fails stops the others.
fn spawn_workers(
    cfg: &Config,
    me: (MemberId, ClusterId),
    map: &ShardMap,
    common: &Common,
    report: &mpsc::Sender<ToControl>,
    stats: Vec<Arc<WorkerStats>>,
) -> Result<Workers, StartError> {
    let (member, cluster) = me;
    let mut txs = Vec::new();
    let mut workers = Vec::new();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<Ready, StartError>>();
    let clock = Clock::new();
    for (w, st) in (0..cfg.workers).zip(stats.iter().cloned()) {
        let (tx, rx) = mpsc::channel::<ToWorker>();
        txs.push(tx.clone());
        let worker = Worker {
            me: Owner { member, worker: w },
            cluster,
            cfg: cfg.clone(),
            map: map.clone(),
            incoming: rx,
            to_self: tx,
            cluster_token: common.cluster_token.clone(),
            report: report.clone(),
            source_slots: common.source_slots.clone(),
            copies: common.copies.clone(),
            rails: common.rails.clone(),
            lease: common.lease.clone(),
            stop: common.stop.clone(),
            stats: st,
            ready: ready_tx.clone(),
            clock,
        };
        workers.push(
            std::thread::Builder::new()
                .name(format!("kvs-worker-{w}"))
                .spawn(move || worker.start())
                .expect("spawn a worker thread"),
        );
    }
    drop(ready_tx);
    let (wakers, kept) = match await_workers(cfg.workers, &ready_rx, &common.stop) {
        Ok(ready) => ready,
        Err(e) => {
            for w in workers {
                let _ = w.join();
            }
            return Err(e);
        }
    };
    if wakers.len() != txs.len() {
        common.stop.store(true, Ordering::Release);
        return Err(StartError::Worker {
            worker: wakers.len() as u16,
            why: crate::start_error::WorkerFailure::Ended,
        });
    }
    Ok(Workers {
        links: txs.into_iter().zip(wakers).collect(),
        threads: workers,
        stats,
        kept,
    })
}

/// The wakers of the `n` workers, in their order, as each says it is ready
/// (fewer if a thread ended before it said so), and the `(first, end,
/// worker)` runs of slots their files kept, in slot order; the first
/// worker that fails raises `stop` and its error is returned.
fn await_workers(
    n: u16,
    ready: &mpsc::Receiver<Result<Ready, StartError>>,
    stop: &AtomicBool,
) -> Result<(Vec<Waker>, KeptRuns), StartError> {
    let mut wakers: Vec<Option<Waker>> = vec![None; n as usize];
    let mut kept = Vec::new();
    for _ in 0..n {
        match ready.recv() {
            Ok(Ok(r)) => {
                kept.extend(r.kept.iter().map(|k| (k.start, k.end, r.worker)));
                wakers[usize::from(r.worker)] = Some(r.waker);
            }
            Ok(Err(e)) => {
                stop.store(true, Ordering::Release);
                return Err(e);
            }
            Err(_) => break,
        }
    }
    kept.sort_unstable();
    Ok((wakers.into_iter().flatten().collect(), kept))
}

/// Starts the control thread `c` and waits until it is ready: returns the
/// thread and its waker. If it fails, `stop` is raised.
fn spawn_control(
    c: Control,
    ready: mpsc::Receiver<Result<Waker, StartError>>,
    stop: &AtomicBool,
) -> Result<(JoinHandle<()>, Waker), StartError> {
    let thread = std::thread::Builder::new()
        .name("kvs-control".into())
        .spawn(move || c.start())
        .expect("spawn the control thread");
    match ready.recv() {
        Ok(Ok(w)) => Ok((thread, w)),
        Ok(Err(e)) => {
            stop.store(true, Ordering::Release);
            Err(e)
        }
        Err(_) => {
            stop.store(true, Ordering::Release);
            Err(StartError::Control(
                "the thread ended before it was ready".into(),
            ))
        }
    }
}

/// Starts the thread that serves migrations' and copies' pulls on the bulk
/// port.
fn spawn_bulk(
    listener: mpib::conn::Listener,
    cfg: &Config,
    common: &Common,
    cluster: &Arc<Shared>,
) -> JoinHandle<()> {
    let b = BulkServer {
        listener,
        source: common.source_slots.clone(),
        cfg: cfg.clone(),
        rails: common.rails.clone(),
        counters: cluster.export.clone(),
        stop: common.stop.clone(),
    };
    std::thread::Builder::new()
        .name("kvs-bulk".into())
        .spawn(move || b.run())
        .expect("spawn the bulk listener")
}

/// Starts the acceptor thread: it sets up the connections `acceptor` takes
/// and hands them to the workers (`links`) or, for control operations, to
/// the control thread (`control`).
fn spawn_acceptor(
    acceptor: Acceptor,
    links: Vec<Link>,
    control: (mpsc::Sender<PendingConnection>, Waker),
    tokens: Tokens,
    common: &Common,
) -> JoinHandle<()> {
    let (stop, setup) = (common.stop.clone(), common.setup.clone());
    std::thread::Builder::new()
        .name("kvs-acceptor".into())
        .spawn(move || accept(acceptor, links, control, tokens, stop, setup))
        .expect("spawn the acceptor")
}

/// Starts the metrics endpoint's thread on `listener`, if `metrics_listen`
/// gave one: returns its address and thread.
fn spawn_metrics(
    listener: Option<(SocketAddr, std::net::TcpListener)>,
    exposition: Exposition,
    stop: &Arc<AtomicBool>,
) -> (Option<SocketAddr>, Option<JoinHandle<()>>) {
    match listener {
        Some((addr, l)) => {
            let t = crate::metrics_http::spawn(l, Arc::new(exposition), stop.clone())
                .expect("spawn the metrics thread");
            (Some(addr), Some(t))
        }
        None => (None, None),
    }
}

/// A new cluster or a new member serves once it holds its lease (once the
/// leader has answered its first lease request, and it has applied what the
/// leader had committed): waits for it, up to 10 s. (A member
/// resuming does not wait: the group may need more members back for a
/// quorum.)
fn await_lease(lease: &Lease) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !lease.holds(std::time::Instant::now()) && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake_all();
        self.join_all();
    }
}
