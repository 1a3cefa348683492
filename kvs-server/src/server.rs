//! The server: an acceptor thread for connection setup and N worker threads,
//! each with one copyrpc context (one SRQ, one receive CQ) and the shards it
//! owns.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use copyrpc::conn::{
    Acceptor, AcceptorOptions, ConnError, Connection, Listener, PendingConnection,
};
use copyrpc::transport::{run_on_device, DeviceSpec, OnTransport, Transport};
use copyrpc::{ContextBuilder, Waker};
use kvs_proto::{AuthToken, Owner, SetupAnswer, ShardMap, TokenError};
use mlx5::device::Context as Device;

use crate::config::Config;
use crate::handle::Handler;
use crate::metrics::{Exposition, Published};
use crate::setup::{accept, SetupStats};

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
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Vec<Arc<WorkerStats>>,
    setup: Arc<Mutex<SetupStats>>,
    workers: Vec<JoinHandle<()>>,
    /// Wake the workers (stop requests).
    wakers: Vec<Waker>,
    acceptor: Option<JoinHandle<()>>,
    metrics_addr: Option<SocketAddr>,
    metrics: Option<JoinHandle<()>>,
}

/// How often a worker publishes its counters and checks its clients'
/// connections while it has work.
const PUBLISH: Duration = Duration::from_millis(50);
/// The longest an idle worker sleeps once its counters are published: how
/// late it sees a stop flag that nobody woke it for (a signal handler's;
/// [`Server::shutdown`] wakes the workers).
const IDLE_TICK: Duration = Duration::from_millis(250);

/// How long a draining worker keeps answering (`ShuttingDown`) before it
/// closes its endpoints.
const DRAIN: Duration = Duration::from_millis(200);

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
        let map = ShardMap::single(addr, cfg.slots, cfg.workers)
            .map_err(|e| StartError::Config(crate::config::ConfigError::Invalid(e.to_string())))?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut txs = Vec::new();
        let mut workers = Vec::new();
        let mut stats = Vec::new();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(u16, Waker), StartError>>();
        for w in 0..cfg.workers {
            let (tx, rx) = mpsc::channel::<PendingConnection>();
            txs.push(tx);
            let st = Arc::new(WorkerStats::default());
            stats.push(st.clone());
            let (cfg, map, stop, ready) =
                (cfg.clone(), map.clone(), stop.clone(), ready_tx.clone());
            workers.push(
                std::thread::Builder::new()
                    .name(format!("kvs-worker-{w}"))
                    .spawn(move || {
                        Worker {
                            w,
                            cfg,
                            map,
                            incoming: rx,
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
        let links = txs.into_iter().zip(wakers.iter().cloned()).collect();
        let s2 = stop.clone();
        let setup = Arc::new(Mutex::new(SetupStats::default()));
        let setup2 = setup.clone();
        let acceptor = std::thread::Builder::new()
            .name("kvs-acceptor".into())
            .spawn(move || accept(acceptor, links, auth, s2, setup2))
            .expect("spawn the acceptor");
        let (metrics_addr, metrics) = match metrics_listener {
            Some((addr, l)) => {
                let exposition = Arc::new(Exposition {
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

/// One worker thread: what it was given at start.
struct Worker {
    w: u16,
    cfg: Config,
    map: ShardMap,
    incoming: Receiver<PendingConnection>,
    stop: Arc<AtomicBool>,
    stats: Arc<WorkerStats>,
    /// The worker's number and waker once its context is built.
    ready: Sender<Result<(u16, Waker), StartError>>,
}

impl Worker {
    /// Opens the worker's device and serves on the transport it calls for.
    fn start(self) {
        let spec = DeviceSpec {
            name: &self.cfg.device,
            fabric: self.cfg.fabric.as_deref(),
            software: "sim1",
        };
        match spec.open() {
            Ok(dev) => run_on_device(dev, self),
            Err(e) => {
                let why = e.to_string();
                let _ = self.ready.send(Err(StartError::Worker {
                    worker: self.w,
                    why,
                }));
            }
        }
    }
}

impl OnTransport for Worker {
    type Output = ();

    /// The worker's service loop on transport `T`.
    fn run<T: Transport>(self, dev: Device) {
        let Worker {
            w,
            cfg,
            map,
            incoming,
            stop,
            stats,
            ready,
        } = self;
        let fail = |why: String| StartError::Worker { worker: w, why };
        let built = ContextBuilder::new()
            .idle(cfg.idle_policy())
            .ring_size(cfg.ring_size)
            .max_endpoints(cfg.max_endpoints)
            .srq_size(4096)
            .cq_size(16384)
            .build_on::<T, _, _>(&dev, |_: u64, _| {});
        let mut ctx = match built {
            Ok(c) => c,
            Err(e) => {
                let _ = ready.send(Err(fail(e.to_string())));
                return;
            }
        };
        let _ = ready.send(Ok((w, ctx.waker())));
        drop(ready);
        let me = Owner {
            member: 0,
            worker: w,
        };
        let mut h = Handler::new(me, map, cfg.max_key, cfg.max_value)
            .with_memory_limit(cfg.max_memory, cfg.workers);
        let mut conns: Vec<Connection> = Vec::new();
        // The setup answer: how many workers (connections to make) and slots.
        let answer = SetupAnswer {
            workers: cfg.workers,
            slots: cfg.slots,
            member: me.member,
        }
        .encode();
        let mut out = Vec::with_capacity(cfg.max_value + 64);
        let mut ops = 0u64;
        let mut turn = 0u32;
        let mut last_check = Instant::now();
        let mut drain_until: Option<Instant> = None;
        let mut wait_failed = false;
        let mut published = 0u64;
        loop {
            // Idle, the worker sleeps (after a spin) until a request, a new
            // client (the acceptor wakes it), or the tick: a short one while
            // counters wait to be published.
            let tick = if ops != published { PUBLISH } else { IDLE_TICK };
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
            while let Some(req) = ctx.recv() {
                let max = req.max_response();
                match ctx.request(&req) {
                    Some(b) => h.handle(b, max, &mut out),
                    None => out.clear(),
                }
                // Only a closed endpoint or an allowance below the header refuses
                // a reply; nothing more can be said to that caller.
                let _ = ctx.reply(req, &out);
                ops += 1;
            }
            // Under load the chores below run every 256 turns; idle, after
            // every wait.
            turn = turn.wrapping_add(1);
            let idle = n == 0;
            if !idle && turn % 256 != 0 {
                continue;
            }
            // New clients.
            loop {
                match incoming.try_recv() {
                    Ok(p) if drain_until.is_none() => match p.establish(&mut ctx, &answer) {
                        Ok(c) => conns.push(c),
                        Err(e) => eprintln!("kvs-server: worker {w}: a client's setup failed: {e}"),
                    },
                    Ok(p) => p.refuse("the server is shutting down"),
                    Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => break,
                }
            }
            if (idle || turn % 4096 == 0) && last_check.elapsed() >= PUBLISH {
                last_check = Instant::now();
                published = ops;
                // Clients that left: their endpoints are removed.
                copyrpc::conn::retain_live(&mut conns, &mut ctx);
                stats.ops.store(ops, Ordering::Relaxed);
                stats.clients.store(conns.len() as u64, Ordering::Relaxed);
                stats.keys.store(h.store.len() as u64, Ordering::Relaxed);
                stats
                    .memory_used
                    .store(h.store.memory_used() as u64, Ordering::Relaxed);
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
        // Answers already written go out; then every endpoint closes.
        ctx.poll();
        for c in &mut conns {
            ctx.close(c.endpoint());
            c.check(&mut ctx);
        }
        stats.ops.store(ops, Ordering::Relaxed);
        stats.clients.store(0, Ordering::Relaxed);
    }
}
