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
use kvs_proto::Owner;

use crate::cluster::control::Control;
use crate::cluster::replicas::Replication;
use crate::cluster::start::How;
use crate::cluster::temp_dir::TempDir;
use crate::cluster_view::Shared;
use crate::config::Config;
use crate::lease::Lease;
use crate::metrics::Exposition;
use crate::migration::copy_in::Copies;
use crate::migration::export::BulkServer;
use crate::migration::outgoing::Outgoing;
use crate::serving::setup::{accept, SetupStats, Tokens};
use crate::serving::worker::Worker;
use crate::start_error::StartError;
use crate::to_control::ToControl;
use crate::to_worker::ToWorker;
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
    member: u16,
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
    /// context and the socket listens.
    pub fn start(cfg: Config) -> Result<Server, StartError> {
        let started = SystemTime::now();
        cfg.validate()?;
        let tokens = Tokens::read(&cfg)?;
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
        let metrics_listener = match cfg.metrics_listen {
            Some(addr) => Some(
                crate::metrics_http::bind(addr)
                    .and_then(|l| Ok((l.local_addr()?, l)))
                    .map_err(|source| StartError::Metrics { addr, source })?,
            ),
            None => None,
        };
        // Migrations' bulk transfers are set up on a port of their own.
        let bulk_addr = SocketAddr::new(cfg.listen.ip(), cfg.bulk_port);
        let bulk = mpib::conn::Listener::bind(bulk_addr)
            .map_err(|e| StartError::Bulk(format!("bulk_port {bulk_addr}: {e}")))?;
        let bulk_port = bulk
            .local_addr()
            .map_err(|e| StartError::Bulk(e.to_string()))?
            .port();
        // The member's part in the control group: resumed from the data
        // dir, or a new cluster, or a place in the one it joins.
        let joined = crate::cluster::start::start(&cfg, addr, bulk_port, tokens.cluster.clone())?;
        let member = joined.group.me();
        let cluster_id = joined.group.cluster_id().to_string();
        let cluster_bytes = joined.group.cluster_id().bytes();
        let map = joined.map.clone();
        match (&cfg.data_dir, joined.how) {
            // The binary says what a missing data dir means; an embedded
            // server (the YCSB demo) needs none.
            (None, _) => {}
            (Some(d), How::Resumed) => eprintln!(
                "kvs-server: resuming member {member} of cluster {cluster_id} from {}",
                d.display()
            ),
            (Some(d), How::Bootstrapped) => eprintln!(
                "kvs-server: started cluster {cluster_id} as member 0 (data dir {})",
                d.display()
            ),
            (Some(d), How::Joined) => eprintln!(
                "kvs-server: joined cluster {cluster_id} as member {member} (data dir {})",
                d.display()
            ),
        }
        let own = crate::cluster::start::advertised(&cfg, addr, None)?;
        let lease = Arc::new(Lease::new(usize::from(cfg.workers)));
        let outgoing = Arc::new(Outgoing::default());
        let copies = Arc::new(Copies::default());
        let rails = crate::migration::rail_names(&cfg);
        let stop = Arc::new(AtomicBool::new(false));
        let mut txs = Vec::new();
        let mut workers = Vec::new();
        let mut stats = Vec::new();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(u16, Waker), StartError>>();
        let (report_tx, report_rx) = mpsc::channel::<ToControl>();
        let clock = Clock::new();
        for w in 0..cfg.workers {
            let (tx, rx) = mpsc::channel::<ToWorker>();
            txs.push(tx.clone());
            let (cluster_token, outgoing, lease) =
                (tokens.cluster.clone(), outgoing.clone(), lease.clone());
            let (copies, rails) = (copies.clone(), rails.clone());
            let report = report_tx.clone();
            let st = Arc::new(WorkerStats::default());
            stats.push(st.clone());
            let (cfg, map, stop, ready) =
                (cfg.clone(), map.clone(), stop.clone(), ready_tx.clone());
            workers.push(
                std::thread::Builder::new()
                    .name(format!("kvs-worker-{w}"))
                    .spawn(move || {
                        Worker {
                            me: Owner { member, worker: w },
                            cluster: cluster_bytes,
                            cfg,
                            map,
                            incoming: rx,
                            to_self: tx,
                            cluster_token,
                            report,
                            outgoing,
                            copies,
                            rails,
                            lease,
                            stop,
                            stats: st,
                            ready,
                            clock,
                        }
                        .start()
                    })
                    .expect("spawn a worker thread"),
            );
        }
        drop(ready_tx);
        let mut wakers: Vec<Option<Waker>> = vec![None; cfg.workers as usize];
        for _ in 0..cfg.workers {
            match ready_rx.recv() {
                Ok(Ok((w, waker))) => wakers[w as usize] = Some(waker),
                Ok(Err(e)) => {
                    stop.store(true, Ordering::Release);
                    for w in workers {
                        let _ = w.join();
                    }
                    return Err(e);
                }
                Err(_) => break,
            }
        }
        let wakers: Vec<Waker> = wakers.into_iter().flatten().collect();
        if wakers.len() != txs.len() {
            stop.store(true, Ordering::Release);
            return Err(StartError::Worker {
                worker: wakers.len() as u16,
                why: "the worker thread ended before it was ready".into(),
            });
        }
        let links: Vec<(mpsc::Sender<ToWorker>, Waker)> =
            txs.into_iter().zip(wakers.iter().cloned()).collect();
        let cluster = Arc::new(Shared {
            member,
            version: AtomicU32::new(map.version()),
            ..Shared::default()
        });
        let mut control = Vec::new();
        let (ctl_tx, ctl_rx) = mpsc::channel::<PendingConnection>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let how = joined.how;
        let c = Control {
            cfg: cfg.clone(),
            group: joined.group,
            map,
            own,
            bulk_port,
            workers: links.clone(),
            stats: stats.clone(),
            incoming: ctl_rx,
            shared: cluster.clone(),
            lease: lease.clone(),
            outgoing: outgoing.clone(),
            copies,
            cluster_token: tokens.cluster.clone(),
            rails: rails.clone(),
            stop: stop.clone(),
            ready: ready_tx,
            replication: Replication::new(report_rx, how == How::Resumed),
        };
        control.push(
            std::thread::Builder::new()
                .name("kvs-control".into())
                .spawn(move || c.start())
                .expect("spawn the control thread"),
        );
        let control_waker = match ready_rx.recv() {
            Ok(Ok(w)) => w,
            Ok(Err(e)) => {
                stop.store(true, Ordering::Release);
                return Err(e);
            }
            Err(_) => {
                stop.store(true, Ordering::Release);
                return Err(StartError::Control(
                    "the thread ended before it was ready".into(),
                ));
            }
        };
        let mut wakers = wakers;
        wakers.push(control_waker.clone());
        let b = BulkServer {
            listener: bulk,
            outgoing: outgoing.clone(),
            cfg: cfg.clone(),
            rails,
            shared: cluster.clone(),
            stop: stop.clone(),
        };
        control.push(
            std::thread::Builder::new()
                .name("kvs-bulk".into())
                .spawn(move || b.run())
                .expect("spawn the bulk listener"),
        );
        let s2 = stop.clone();
        let setup = Arc::new(Mutex::new(SetupStats::default()));
        let setup2 = setup.clone();
        let acceptor = std::thread::Builder::new()
            .name("kvs-acceptor".into())
            .spawn(move || accept(acceptor, links, (ctl_tx, control_waker), tokens, s2, setup2))
            .expect("spawn the acceptor");
        let (metrics_addr, metrics) = match metrics_listener {
            Some((addr, l)) => {
                let exposition = Arc::new(Exposition {
                    cluster: cluster.clone(),
                    outgoing: outgoing.clone(),
                    workers: stats.clone(),
                    setup: setup.clone(),
                    max_memory: cfg.max_memory,
                    started,
                });
                let t = crate::metrics_http::spawn(l, exposition, stop.clone())
                    .expect("spawn the metrics thread");
                (Some(addr), Some(t))
            }
            None => (None, None),
        };
        // A new cluster or a new member serves once it holds its lease (at
        // once, or at the leader's first heartbeat). A member resuming does
        // not wait: the group may need more members back for a quorum.
        if how != How::Resumed {
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while !lease.holds(std::time::Instant::now()) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Ok(Server {
            addr,
            stop,
            stats,
            setup,
            workers,
            wakers,
            acceptor: Some(acceptor),
            control,
            member,
            cluster_id,
            cluster,
            lease,
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
    pub fn member(&self) -> u16 {
        self.member
    }

    /// The cluster's id (32 hex digits), as kept in the data dir.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The member this one believes leads the control group, if any.
    pub fn leader(&self) -> Option<u16> {
        match self.cluster.leader.load(Ordering::Acquire) {
            0 => None,
            l => u16::try_from(l - 1).ok(),
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
        self.setup.lock().map(|s| *s).unwrap_or_default()
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

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake_all();
        self.join_all();
    }
}
