//! The server: an acceptor thread for connection setup, N worker threads
//! ([`crate::worker`]), and a control thread for the cluster
//! ([`crate::control`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use copyrpc::conn::{Acceptor, AcceptorOptions, ConnError, Listener, PendingConnection};
use copyrpc::Waker;
use kvs_proto::{AuthToken, Owner, ShardMap, TokenError};

use crate::config::Config;
use crate::control::{Control, Shared};
use crate::metrics::{Exposition, Published};
use crate::migration::export::BulkServer;
use crate::migration::outgoing::Outgoing;
use crate::push::Pusher;
use crate::setup::{accept, SetupStats};
use crate::worker::{ToWorker, Worker};

/// Counters a worker publishes for stats lines (updated every few thousand
/// loop turns, not per request).
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Requests answered.
    pub ops: AtomicU64,
    /// Connected clients.
    pub clients: AtomicU64,
    /// Keys held.
    pub keys: AtomicU64,
    /// Heap bytes the worker's records take (what `max_memory` caps; see
    /// [`crate::memory`]).
    pub memory_used: AtomicU64,
    /// Copyrpc rings (two per client) in 2 MiB huge pages (`huge_pages`;
    /// zero without it).
    pub(crate) huge_rings: AtomicU64,
    /// Requests by op and result, and service times (for the metrics
    /// endpoint).
    pub(crate) requests: Published,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is not usable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The listening socket.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: ConnError,
    },
    /// The auth token file.
    #[error(transparent)]
    Auth(#[from] TokenError),
    /// The metrics endpoint's socket.
    #[error("metrics_listen {addr}: {source}")]
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A worker could not open the device or build its context.
    #[error("worker {worker}: {why}")]
    Worker {
        /// Which worker.
        worker: u16,
        /// Why.
        why: String,
    },
    /// The control thread could not open the device or build its context.
    #[error("control endpoint: {0}")]
    Control(String),
    /// Joining the cluster failed.
    #[error("{0}")]
    Join(String),
    /// The bulk port for migrations.
    #[error("{0}")]
    Bulk(String),
}

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
    /// The control thread and the keeper's pusher.
    control: Vec<JoinHandle<()>>,
    member: u16,
    cluster: Arc<Shared>,
    metrics_addr: Option<SocketAddr>,
    metrics: Option<JoinHandle<()>>,
}

impl Server {
    /// Starts the workers and the acceptor; returns once every worker has its
    /// context and the socket listens.
    pub fn start(cfg: Config) -> Result<Server, StartError> {
        let started = SystemTime::now();
        cfg.validate()?;
        let auth = match &cfg.auth_token_file {
            Some(p) => Some(AuthToken::from_file(p)?),
            None => None,
        };
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
        // A cluster of its own, or a place in the one it joins.
        let (member, map) = match &cfg.join {
            None => {
                let me = crate::join::advertised(&cfg, addr, None)?;
                let mut map = ShardMap::single(me, cfg.slots, cfg.workers).map_err(|e| {
                    StartError::Config(crate::config::ConfigError::Invalid(e.to_string()))
                })?;
                let _ = map.set_bulk_port(0, bulk_port);
                (0, map)
            }
            Some(j) => {
                let target = crate::join::resolve(j)?;
                let me = crate::join::advertised(&cfg, addr, Some(target))?;
                crate::join::join(&cfg, target, me, bulk_port, auth.clone())?
            }
        };
        let outgoing = Arc::new(Outgoing::default());
        let rails = crate::migration::rail_names(&cfg);
        let stop = Arc::new(AtomicBool::new(false));
        let mut txs = Vec::new();
        let mut workers = Vec::new();
        let mut stats = Vec::new();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(u16, Waker), StartError>>();
        for w in 0..cfg.workers {
            let (tx, rx) = mpsc::channel::<ToWorker>();
            txs.push(tx.clone());
            let (auth, outgoing) = (auth.clone(), outgoing.clone());
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
                            cfg,
                            map,
                            incoming: rx,
                            to_self: tx,
                            auth,
                            outgoing,
                            stop,
                            stats: st,
                            ready,
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
        // The keeper pushes every new map to the other members.
        let pusher = if member == 0 {
            let (tx, rx) = mpsc::channel();
            let own = if addr.ip().is_unspecified() {
                SocketAddr::from(([127, 0, 0, 1], addr.port()))
            } else {
                addr
            };
            let p = Pusher {
                own,
                me: member,
                cfg: cfg.clone(),
                auth: auth.clone(),
                deliveries: rx,
                stop: stop.clone(),
            };
            control.push(
                std::thread::Builder::new()
                    .name("kvs-map-pusher".into())
                    .spawn(move || p.start())
                    .expect("spawn the map pusher"),
            );
            Some(tx)
        } else {
            None
        };
        let (ctl_tx, ctl_rx) = mpsc::channel::<PendingConnection>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let c = Control {
            me: member,
            cfg: cfg.clone(),
            map,
            workers: links.clone(),
            stats: stats.clone(),
            incoming: ctl_rx,
            pusher,
            shared: cluster.clone(),
            outgoing: outgoing.clone(),
            auth: auth.clone(),
            rails: rails.clone(),
            stop: stop.clone(),
            ready: ready_tx,
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
            .spawn(move || accept(acceptor, links, (ctl_tx, control_waker), auth, s2, setup2))
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
            cluster,
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

    /// This server's member id in the cluster (0: it started the cluster
    /// and keeps its map).
    pub fn member(&self) -> u16 {
        self.member
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
