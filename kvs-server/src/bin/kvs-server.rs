//! kvs-server: the sharded key-value server.
//!
//! ```text
//! kvs-server --config kvs.toml
//! kvs-server --listen 0.0.0.0:7000 --workers 4 --device mlx5_0 --replicas 2 \
//!     --data-dir /var/lib/kvs --bootstrap --auth-token-file /etc/kvs/token \
//!     --cluster-token-file /etc/kvs/cluster-token
//! kvs-server --listen 0.0.0.0:7000 --join 10.0.0.4:7000 --data-dir /var/lib/kvs ...
//! ```
//! The first server, started once with `--bootstrap`, starts a cluster and
//! owns every slot; servers started with `--join` (any member's address)
//! become members owning none, until `kvs-admin migrate` or `kvs-admin
//! rebalance` moves slots to them. The members keep the cluster's
//! configuration in a Raft group; with `--data-dir` a member that restarts
//! resumes its place, and an empty data dir without `--bootstrap` or
//! `--join` is refused (it may be a member's lost one). Without
//! `--data-dir` the server starts a cluster of its own unless `--join`.
//! Without a token the server listens only on a loopback address, unless
//! `--allow-unauthenticated` (or `allow_unauthenticated = true`) says that
//! anyone who can reach it may read and write everything.
//! SIGINT (Ctrl-C) and SIGTERM stop it cleanly: it first hands the slots it
//! is primary of to their backups (with `replicas` > 1), then requests
//! already received are answered, later ones are refused with "shutting
//! down", and every connection closes.
//! Its log goes to stderr (`--log`, `--log-format`, `RUST_LOG`; see
//! `kvs_server::logging`); its reports (the start lines, stats lines, the
//! hand-off) to stdout.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use clap::Parser;
use kvs_server::{Config, Server};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Sharded in-memory key-value server over copyrpc (RDMA)",
    after_help = "A cluster with data dirs: start the first server once with --data-dir DIR \
        --bootstrap, the others with --data-dir DIR --join HOST:PORT (any member). Restart them \
        without --bootstrap: each resumes the member its data dir holds (--join is ignored \
        then). A member whose data dir was lost joins again as a new member (kvs-admin forget \
        its old id, then --join HOST:PORT of a live member); --bootstrap would found a second \
        cluster."
)]
struct Args {
    /// TOML configuration file (every key optional; flags override it).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// TCP address for connection setup (clients, members, kvs-admin).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Join the cluster this member belongs to (HOST:PORT of any member)
    /// instead of starting a cluster. The new member owns no slots until
    /// `kvs-admin migrate` or `rebalance` gives it some. Used only while the
    /// data dir holds no member, so a unit file may always give it. Not
    /// with --bootstrap. Config key `join`.
    #[arg(long, value_name = "HOST:PORT")]
    join: Option<String>,
    /// Start a new cluster, this server its member 0, owning every slot,
    /// when --data-dir holds no member. Give it once, to one server, when
    /// the cluster is created, and leave it out of later starts: a data dir
    /// that holds a member resumes it (--bootstrap is then ignored, with a
    /// note), and a member whose data dir was lost must join again
    /// (--join), not found a second cluster at its address. An empty data
    /// dir with neither --bootstrap nor --join is refused. Not with --join.
    /// Without --data-dir the server starts a cluster of its own anyway
    /// (unless --join). Config key `bootstrap`.
    #[arg(long)]
    bootstrap: bool,
    /// Copies of each slot, 1 to 3: a primary and N-1 synchronous backups
    /// on other members, so a member's death loses no acknowledged write.
    /// Read when the cluster starts; `kvs-admin set replicas N` changes it
    /// later. Config key `replicas`.
    #[arg(long, value_name = "N")]
    replicas: Option<u8>,
    /// This member's zone (its host or rack): a slot's copies go to
    /// different zones when there are enough. Config key `zone`.
    #[arg(long, value_name = "NAME")]
    zone: Option<String>,
    /// Where the member keeps its identity (the cluster's id and its own)
    /// and its copy of the control group's log. A data dir that holds a
    /// member is resumed, whatever --join and --bootstrap say: a restart
    /// never starts a second cluster. An empty one joins --join, or starts
    /// a new cluster with --bootstrap; with neither the server refuses to
    /// start (it may be a member's lost data dir). Without it, a temporary
    /// directory that goes with the process (a restart is a new member).
    /// Config key `data_dir`.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Keep the records on disk too, a log per worker in --data-dir:
    /// `none` (memory only: a member restarts empty), `everysec` (each
    /// worker's log flushed once a second: a crash of every copy loses at
    /// most about the last second of writes), or `always` (a write is
    /// acknowledged once its log is flushed; a turn's writes share one
    /// flush). Config key `durability`.
    #[arg(long, value_name = "none|everysec|always")]
    durability: Option<kvs_server::Durability>,
    /// With --durability: each worker snapshots its records (while it
    /// serves) and drops the logs the snapshot holds, once its logs reach
    /// PERCENT of its last snapshot's size and --auto-snapshot-min-size,
    /// as Redis's auto-aof-rewrite-percentage; 0: only when `kvs-admin
    /// snapshot` asks. Default 100. Config key `auto_snapshot_percentage`.
    #[arg(long, value_name = "PERCENT")]
    auto_snapshot_percentage: Option<u32>,
    /// The logs' least size for an automatic snapshot, in bytes or with a
    /// unit (64M, 1G); default 64M. Config key `auto_snapshot_min_size`.
    #[arg(long, value_name = "BYTES", value_parser = kvs_server::store::memory::parse_bytes)]
    auto_snapshot_min_size: Option<u64>,
    /// The most bytes of records each worker's snapshot copies a second,
    /// in bytes or with a unit (32M, 1G): a snapshot's cost spread out
    /// rather than taken at once; 0: no limit. Default 32M. Config key
    /// `snapshot_rate`.
    #[arg(long, value_name = "BYTES", value_parser = kvs_server::store::memory::parse_bytes)]
    snapshot_rate: Option<u64>,
    /// The address clients and members reach this server at, when it is not
    /// `--listen` (behind NAT, or listening on 0.0.0.0). Config key
    /// `advertise`.
    #[arg(long, value_name = "ADDR")]
    advertise: Option<std::net::SocketAddr>,
    /// TCP port (on the --listen address) where migrations set up their
    /// bulk transfers; 0: any free port (the shard map tells the members
    /// which). Config key `bulk_port`.
    #[arg(long, value_name = "PORT")]
    bulk_port: Option<u16>,
    /// The devices of migrations' bulk transfers, one or two rails
    /// (mlx5_0,mlx5_1). Default: the worker device alone on a NIC, sim2 and
    /// sim3 on the software device. Config key `bulk_devices`.
    #[arg(long, value_name = "DEV[,DEV]", value_delimiter = ',')]
    bulk_devices: Option<Vec<String>>,
    /// Worker threads.
    #[arg(long)]
    workers: Option<u16>,
    /// RDMA device: mlx5_0, sim1, … or auto.
    #[arg(long)]
    device: Option<String>,
    /// Software device fabric.
    #[arg(long)]
    fabric: Option<String>,
    /// Seconds between stats lines (0: none).
    #[arg(long)]
    stats_interval: Option<u64>,
    /// File holding the token every client must present (mode 600: readable
    /// by its owner only; 16 bytes or more). It allows data operations
    /// only. Config key `auth_token_file`.
    #[arg(long, value_name = "FILE")]
    auth_token_file: Option<PathBuf>,
    /// File holding the cluster token: the second secret, which members
    /// present to each other and kvs-admin presents (--cluster-token-file).
    /// Only it opens the control endpoint: joins, maps, migrations, pulls,
    /// administration. Mode 600, 16 bytes or more, not the client token;
    /// required with --auth-token-file. Config key `cluster_token_file`.
    #[arg(long, value_name = "FILE")]
    cluster_token_file: Option<PathBuf>,
    /// Serve a non-loopback address without a token: anyone who can reach it
    /// can read and write everything. Config key `allow_unauthenticated`.
    #[arg(long)]
    allow_unauthenticated: bool,
    /// Heap bytes the records may take, in bytes or with a unit (64M, 16G;
    /// powers of 1024); 0: no cap. Split evenly between the workers; a PUT
    /// past a worker's share gets an out-of-memory error, while reads,
    /// deletes and writes that do not grow keep working. It bounds the
    /// records, not the process: add the copyrpc rings and a few MiB.
    /// Config key `max_memory`.
    #[arg(long, value_name = "BYTES", value_parser = kvs_server::store::memory::parse_bytes)]
    max_memory: Option<u64>,
    /// Serve metrics in the Prometheus text format on this address
    /// (`GET /metrics`, HTTP): operations by type and result, service-time
    /// histograms, keys, memory, connections, setups. No token is asked:
    /// bind it where only the monitoring system reaches. Config key
    /// `metrics_listen`.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Workers spin on their CQs when idle instead of sleeping: a core per
    /// worker, always, for the least latency after idle gaps. By default an
    /// idle worker spins `idle_spin_us` (50 µs, adapting up to
    /// `idle_max_spin_us` under load), then sleeps until a request arrives.
    /// Config key `busy_poll`.
    #[arg(long)]
    busy_poll: bool,
    /// Put every client connection's copyrpc rings (a send and a receive
    /// ring per client per worker) in 2 MiB huge pages, so the NIC and the
    /// CPU translate them with fewer entries (MTT/IOTLB, TLB). Needs 2 MiB
    /// pages reserved: `sysctl vm.nr_hugepages=N`, each ring taking whole
    /// pages (a 1 MiB ring one page, so 2 pages per client per worker).
    /// When the pool runs short, rings fall back to normal pages and the
    /// server says so once in its log (`kvs_huge_page_rings` counts the
    /// rings in huge pages). The software device (sim*) ignores it: it has
    /// no huge pages. Config key `huge_pages`.
    #[arg(long)]
    huge_pages: bool,
    /// How copyrpc connections reach their peers. `rc`: one QP per client
    /// per worker, on every device. `dc`: each worker receives through one
    /// DC target and sends through a few DC initiators however many clients
    /// it has (mlx5 only; kernel soft-RoCE has no DC). Every member and
    /// client must use the same. Config key `transport`.
    #[arg(long, value_name = "rc|dc")]
    transport: Option<copyrpc::transport::Wire>,
    /// The log filter: a level (error, warn, info, debug, trace) and levels
    /// per module, `info,kvs_server::cluster=debug,kvs_control::raft=debug`.
    /// The RUST_LOG environment variable, when set, overrides it. Default
    /// info. Config key `log`.
    #[arg(long, value_name = "FILTER")]
    log: Option<String>,
    /// How log lines (on stderr) look: `plain` lines, or `json`, one
    /// object per line for log shippers. Config key `log_format`.
    #[arg(long, value_name = "plain|json")]
    log_format: Option<kvs_server::logging::LogFormat>,
    /// Completions and man pages.
    #[command(flatten)]
    docs: cli_docs::DocsFlags,
}

/// Starts the server the config file and flags describe, prints its stats
/// line every `stats_interval` seconds, and stops it (its slots handed
/// over first) at SIGINT or SIGTERM or when it stops itself.
fn main() {
    // A thread's panic ends the process: a server with a dead thread keeps
    // its lease and serves none of that thread's slots.
    kvs_server::abort_on_panic();
    grow_heaps_in_large_steps();
    cli_docs::serve::<Args>();
    let a = Args::parse();
    a.docs.alone::<Args>();
    let mut cfg = match &a.config {
        // Checked once the flags are in (Server::start).
        Some(p) => Config::read(p).unwrap_or_else(|e| die(&e.to_string())),
        None => Config::default(),
    };
    apply_flags(a, &mut cfg);
    kvs_server::logging::init(&cfg.log, cfg.log_format).unwrap_or_else(|e| die(&e.to_string()));
    let open = cfg.auth_token_file.is_none() && !cfg.loopback_only();
    let interval = cfg.stats_interval_s;
    let max_memory = cfg.max_memory;
    check_open_files(&cfg);
    let ephemeral = cfg.data_dir.is_none();
    let server = Server::start(cfg).unwrap_or_else(|e| die(&e.to_string()));
    say_started(&server, ephemeral, open);
    // SIGINT and SIGTERM (systemd's stop): hand the slots to their backups,
    // then stop.
    // The signal wakes this thread at once; otherwise it wakes every
    // `MAIN_TICK` only, to see a stop the server decided itself and to print
    // the stats line: an idle server's threads sleep.
    let (signal, signalled) = std::sync::mpsc::sync_channel::<()>(1);
    if let Err(e) = ctrlc::set_handler(move || {
        let _ = signal.try_send(());
    }) {
        die(&format!("cannot install the signal handler: {e}"));
    }
    let stopped = server.stop_flag();
    let start = Instant::now();
    let mut last = Instant::now();
    let mut prev: Vec<u64> = vec![0; server.stats().len()];
    while !stopped.load(Ordering::Acquire) {
        match signalled.recv_timeout(MAIN_TICK) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
        if interval > 0 && last.elapsed() >= Duration::from_secs(interval) {
            let dt = last.elapsed().as_secs_f64();
            last = Instant::now();
            let line = stats_line(&server, start, dt, &mut prev, max_memory);
            println!("{line}");
        }
    }
    if !stopped.load(Ordering::Acquire) {
        hand_off(&server);
    }
    println!("kvs-server: shutting down");
    server.shutdown();
}

/// Puts the flags given in `a` over the config file's settings in `cfg`.
fn apply_flags(a: Args, cfg: &mut Config) {
    if let Some(v) = a.listen {
        cfg.listen = v;
    }
    if a.join.is_some() {
        cfg.join = a.join;
    }
    if a.bootstrap {
        cfg.bootstrap = true;
    }
    if a.data_dir.is_some() {
        cfg.data_dir = a.data_dir;
    }
    if let Some(v) = a.durability {
        cfg.durability = v;
    }
    if let Some(v) = a.auto_snapshot_percentage {
        cfg.auto_snapshot_percentage = v;
    }
    if let Some(v) = a.auto_snapshot_min_size {
        cfg.auto_snapshot_min_size = v;
    }
    if let Some(v) = a.snapshot_rate {
        cfg.snapshot_rate = v;
    }
    if a.advertise.is_some() {
        cfg.advertise = a.advertise;
    }
    if let Some(v) = a.bulk_port {
        cfg.bulk_port = v;
    }
    if let Some(v) = a.bulk_devices {
        cfg.bulk_devices = v;
    }
    if let Some(v) = a.workers {
        cfg.workers = v;
    }
    if let Some(v) = a.device {
        cfg.device = v;
    }
    if a.fabric.is_some() {
        cfg.fabric = a.fabric;
    }
    if let Some(v) = a.stats_interval {
        cfg.stats_interval_s = v;
    }
    if a.auth_token_file.is_some() {
        cfg.auth_token_file = a.auth_token_file;
    }
    if let Some(v) = a.replicas {
        cfg.replicas = v;
    }
    if a.zone.is_some() {
        cfg.zone = a.zone;
    }
    if a.cluster_token_file.is_some() {
        cfg.cluster_token_file = a.cluster_token_file;
    }
    if a.allow_unauthenticated {
        cfg.allow_unauthenticated = true;
    }
    if a.busy_poll {
        cfg.busy_poll = true;
    }
    if let Some(v) = a.transport {
        cfg.transport = v;
    }
    if a.huge_pages {
        cfg.huge_pages = true;
    }
    if let Some(v) = a.max_memory {
        cfg.max_memory = v;
    }
    if a.metrics_listen.is_some() {
        cfg.metrics_listen = a.metrics_listen;
    }
    if let Some(v) = a.log {
        cfg.log = v;
    }
    if let Some(v) = a.log_format {
        cfg.log_format = v;
    }
}

/// Warns if the open-file limit (raised to its maximum first) is below what
/// `cfg`'s workers could need: every client holds a TCP connection per
/// worker (its liveness channel) and every setup under way one more.
fn check_open_files(cfg: &Config) {
    let wanted =
        u64::from(cfg.workers) * u64::from(cfg.max_endpoints) + cfg.max_pending_setups as u64 + 64;
    let files = raise_open_file_limit();
    if files < wanted {
        tracing::warn!(
            "the open-file limit is {files}; {wanted} would let every worker take max_endpoints \
             clients with max_pending_setups setups under way (raise it: ulimit -n, or \
             LimitNOFILE= in the systemd unit)"
        );
    }
}

/// Says what the started `server` is: its data dir is temporary
/// (`ephemeral`), anyone may use it (`open`) (both in the log), where its
/// metrics and its setup socket are (on stdout, which scripts and tests
/// read). The warnings come before the line that says the server is up,
/// so whoever waits for that line has seen them.
fn say_started(server: &Server, ephemeral: bool, open: bool) {
    if ephemeral {
        tracing::info!(
            "no data_dir: this member's identity lives in a temporary directory that goes with \
             the process, so a restart starts a new member (with --data-dir a restart resumes it)"
        );
    }
    if open {
        tracing::warn!(
            "no auth token (allow_unauthenticated): anyone who can reach {} can read and write \
             everything",
            server.addr()
        );
    }
    if let Some(m) = server.metrics_addr() {
        println!("kvs-server: metrics on http://{m}/metrics");
    }
    println!(
        "kvs-server: member {} of cluster {}, map version {}",
        server.member(),
        server.cluster_id(),
        server.map_version()
    );
    println!("kvs-server: listening on {}", server.addr());
}

/// The periodic stats line: the time since `start`, memory used (of
/// `max_memory`, if capped) and each worker's rate over the `dt` seconds
/// since `prev` (its ops counts, updated), clients, keys and memory.
fn stats_line(
    server: &Server,
    start: Instant,
    dt: f64,
    prev: &mut [u64],
    max_memory: u64,
) -> String {
    let used: u64 = server
        .stats()
        .iter()
        .map(|s| s.memory_used.load(Ordering::Relaxed))
        .sum();
    let mut line = format!(
        "kvs-server: {:.0} s: memory {}",
        start.elapsed().as_secs_f64(),
        mib(used)
    );
    if max_memory > 0 {
        line += &format!(" of {} ({:.0}%)", mib(max_memory), pct(used, max_memory));
    }
    for (w, (s, p)) in server.stats().iter().zip(prev.iter_mut()).enumerate() {
        let ops = s.ops.load(Ordering::Relaxed);
        line += &format!(
            " [worker {w}: {:.0} ops/s, {} clients, {} keys, {}]",
            (ops - *p) as f64 / dt,
            s.clients.load(Ordering::Relaxed),
            s.keys.load(Ordering::Relaxed),
            mib(s.memory_used.load(Ordering::Relaxed))
        );
        *p = ops;
    }
    line
}

/// Hands the member's slots over before it stops (SIGINT, SIGTERM), and
/// says how that went.
fn hand_off(server: &Server) {
    let t = Instant::now();
    if server.hand_off(HAND_OFF) {
        println!(
            "kvs-server: handed its slots over in {:.0} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
    } else {
        tracing::warn!(
            "the control group did not take this member's slots within {} s (no leader?); \
             stopping anyway",
            HAND_OFF.as_secs()
        );
    }
}

/// How often the main thread looks at the server's own stop flag and the
/// stats interval.
const MAIN_TICK: Duration = Duration::from_millis(250);

/// How long a stopping member waits for the group to take its slots.
const HAND_OFF: Duration = Duration::from_secs(10);

/// Raises this process's open-file limit to its hard maximum, as Redis does
/// for its clients (the usual soft limit, 1024, would cap the server far
/// below its settings); returns the limit in force.
fn raise_open_file_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or fill one valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < r.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
    }
    r.rlim_cur
}

/// How much more than it needs glibc's malloc asks of the kernel when a
/// heap grows.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const HEAP_STEP: libc::c_int = 64 << 20;

/// Has glibc's malloc grow its heaps [`HEAP_STEP`] at a time rather than
/// 128 KiB (its default `M_TOP_PAD`). A worker thread allocates from a heap
/// of its own (an arena), which grows by an `mprotect(2)` per step: a
/// recovery allocating a record per change made one per 128 KiB, a fifth
/// of its CPU time in the kernel's address-space updates (300,000 records
/// of 1 KiB: 1.4 CPU-seconds, 1.1 with this). A step costs address space
/// only: pages are touched, and counted, as records fill them. A heap keeps
/// up to this much free at its top instead of handing it back.
fn grow_heaps_in_large_steps() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of the allocator (taking its
    // lock); no memory is handed over.
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, HEAP_STEP);
    }
}

/// Bytes as MiB with one decimal.
fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

fn pct(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

fn die(m: &str) -> ! {
    eprintln!("kvs-server: {m}");
    std::process::exit(1)
}
