//! ycsb-driver: YCSB workloads against the copyrpc key-value store.
//!
//! ```text
//! ycsb-driver run -P workloada                          # embedded server, software device
//! ycsb-driver load -P workloads/workloadc -p recordcount=100000 -threads 4 --server host:7000
//! ycsb-driver run  -P workloads/workloadc -p operationcount=1000000 -threads 4 -s --server host:7000
//! ```
//! Java YCSB's options are accepted as Java spells them (`-P`, `-p`,
//! `-threads`, `-target`, `-s`). With no server given, a kvs-server runs in
//! this process on the software device, and `run` loads the records first.
//! A server that requires an auth token gets it from `-p
//! kvs.auth_token_file=FILE`, or else from `KVS_AUTH_TOKEN`.
//!
//! `-p kvs.transport=dc` runs every connection (and the embedded server)
//! over DC: the server's workers receive through one DC target each, however
//! many threads connect (the default, `rc`, is a QP per connection; a
//! running server must use the same as its `transport`).
//!
//! Waiting for answers, a driver thread spins `kvs.spin_us` (default 50),
//! then sleeps until one arrives; `-p kvs.busy_poll=true` spins instead
//! (and so does the embedded server's worker).
//!
//! A lost connection to a single server (it died, or closed the connection)
//! stops the phase: the report covers the operations that completed, an error line
//! on stderr names the server, and the driver exits with status 1. Ctrl-C
//! (SIGINT) ends the phase as `maxexecutiontime` does: no new operation
//! starts, those in flight finish, and the report covers what was done.
//!
//! Against a kvs cluster, `--server` names any member; the driver follows
//! the cluster's map (redirects, migrations, failovers) and says on stderr
//! which map version it ended with. An operation whose member died is sent
//! again by the next map; it counts as an error once its deadline
//! (`-p kvs.timeout_ms`, default 5000) has passed.
//!
//! Built with the `mpi` feature and started by `mpirun`, every rank drives its
//! share (the records of `load` split by `insertstart`/`insertcount`, the
//! operations of `run` split evenly), rank 0 embeds the server when none is
//! given, and rank 0 prints one report merged from all ranks:
//!
//! ```text
//! cargo build --release -p ycsb-driver --features mpi
//! mpirun -np 4 target/release/ycsb-driver run -P workloadc -p operationcount=4000000 --server host:7000
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use copyrpc::transport::Wire;
use copyrpc::IdlePolicy;
use ycsb_driver::db::{kvs::KvsTarget, redis::RedisTarget, Target};
use ycsb_driver::properties::Properties;
use ycsb_driver::report;
use ycsb_driver::runner::{run_phase, Phase, PhaseResult, Progress, RunOptions};
use ycsb_driver::workload::CoreWorkload;

mod ranks;
mod status;

use ranks::{share_among_ranks, Ranks};

#[derive(Parser, Debug)]
#[command(version, about = "YCSB workloads against the copyrpc key-value store")]
struct Args {
    /// load: insert the records; run: the operation mix.
    #[arg(value_enum)]
    command: Command,
    /// The database binding: `kvs` (the copyrpc store) or `redis` (Java
    /// YCSB's Redis data model; `-p redis.host=… -p redis.port=…`).
    #[arg(default_value = "kvs")]
    db: String,
    /// Workload property file: a path, or a shipped workload by name
    /// (`workloada` … `workloadf`).
    #[arg(short = 'P')]
    property_files: Vec<String>,
    /// A property, `name=value` (overrides the files).
    #[arg(short = 'p')]
    properties: Vec<String>,
    /// Driver threads (property `threadcount`).
    #[arg(long)]
    threads: Option<usize>,
    /// Target operations per second, all threads (property `target`).
    #[arg(long)]
    target: Option<f64>,
    /// Status lines on stderr every `status.interval` seconds (default 10).
    #[arg(short = 's')]
    status: bool,
    /// A running kvs-server (property `kvs.server`); none: embedded. Its
    /// `transport` is `-p kvs.transport=rc|dc` (default rc). One
    /// that requires an auth token: `-p kvs.auth_token_file=FILE` (a file
    /// readable by its owner only) or the environment variable
    /// KVS_AUTH_TOKEN. A lost connection stops the run with exit status 1.
    #[arg(long)]
    server: Option<String>,
    /// Operations each thread keeps in flight (property `kvs.depth`, default 1:
    /// Java YCSB's one at a time).
    #[arg(long)]
    depth: Option<usize>,
    /// Writes the latency percentile plot (SVG) here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Writes the latency percentiles (CSV) here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Completions and man pages.
    #[command(flatten)]
    docs: cli_docs::DocsFlags,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Command {
    Load,
    Run,
}

/// The workloads shipped with the driver, as Java's `workloads/` has them.
const SHIPPED: [(&str, &str); 6] = [
    ("workloada", include_str!("../../../workloads/workloada")),
    ("workloadb", include_str!("../../../workloads/workloadb")),
    ("workloadc", include_str!("../../../workloads/workloadc")),
    ("workloadd", include_str!("../../../workloads/workloadd")),
    ("workloade", include_str!("../../../workloads/workloade")),
    ("workloadf", include_str!("../../../workloads/workloadf")),
];

/// Java's single-dash long options, spelled as clap wants them.
fn java_args() -> Vec<String> {
    std::env::args()
        .map(|a| match a.as_str() {
            "-threads" | "-target" | "-db" => format!("-{a}"),
            _ => a,
        })
        .collect()
}

/// Prints the error and exits with status 1.
fn die(m: &dyn std::fmt::Display) -> ! {
    eprintln!("ycsb-driver: {m}");
    std::process::exit(1)
}

fn main() {
    cli_docs::serve::<Args>();
    let a = Args::parse_from(java_args());
    a.docs.alone::<Args>();
    // The log of the embedded server and of the libraries (the software
    // device standing in for a NIC, say): warnings and errors, on stderr;
    // RUST_LOG raises it.
    if let Err(e) = kvs_server::logging::init("warn", kvs_server::logging::LogFormat::Plain) {
        die(&e.to_string());
    }
    if a.db != "kvs" && a.db != "redis" {
        die(&format!("unknown binding {:?} (kvs or redis)", a.db));
    }
    let mut props = properties(&a);
    let full_props = props.clone();
    let ranks = Ranks::init();
    if ranks.size > 1 {
        share_among_ranks(&mut props, a.command, &ranks);
    }
    let set = Settings::read(&props);
    let wl = Arc::new(CoreWorkload::new(&props).unwrap_or_else(|e| die(&e)));
    let (target, embedded) = target(&a, &props, &set, &wl, &ranks);
    let opts = set.run_options(a.status);
    let flag = opts.interrupt.clone();
    if let Err(e) = ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed)) {
        eprintln!("ycsb-driver: Ctrl-C will not end the run cleanly: {e}");
    }
    if a.command == Command::Run && embedded.is_some() {
        preload(&full_props, &target, &opts);
    }
    let (phase, todo) = match a.command {
        Command::Load => (Phase::Load, wl.load_count()),
        Command::Run => (Phase::Run, wl.operation_count()),
    };
    let r = run(&wl, phase, &target, &opts, &ranks, set.status_interval);
    // A lost connection stopped the phase: the report covers what completed,
    // and the driver fails.
    let lost = r.lost.clone().map(|l| {
        format!(
            "stopped: lost the connection to the server at {} ({l}); \
             the report covers the {} of {todo} operations that completed",
            target.address(),
            r.operations
        )
    });
    // Every rank's measurements, merged at rank 0 (which alone reports);
    // the run time is the slowest rank's.
    if let Some((r, ms)) = ranks.gather(r) {
        write_reports(&a, &r, ms, &set.percentiles);
    }
    ranks.barrier();
    if let Some((s, _fabric)) = embedded {
        s.shutdown();
        #[cfg(feature = "sim")]
        mlx5::sim::fabric::Fabric::remove_if_unused(&_fabric);
    }
    if let Some(why) = lost {
        die(&why);
    }
}

/// The properties: the files (a path, or a shipped workload by name), then
/// `-p`, then the options that set properties.
fn properties(a: &Args) -> Properties {
    let mut props = Properties::new();
    for f in &a.property_files {
        let path = std::path::Path::new(f);
        if path.exists() {
            let p = Properties::load(path).unwrap_or_else(|e| die(&format!("{f}: {e}")));
            props.merge(&p);
        } else {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(f);
            match SHIPPED.iter().find(|(n, _)| *n == name) {
                Some((_, text)) => props.parse_into(text),
                None => die(&format!("{f}: no such file or shipped workload")),
            }
        }
    }
    for kv in &a.properties {
        if !props.set_assignment(kv) {
            die(&format!("-p {kv}: expected name=value"));
        }
    }
    if let Some(t) = a.threads {
        props.set("threadcount", t.to_string());
    }
    if let Some(t) = a.target {
        props.set("target", t.to_string());
    }
    if let Some(s) = &a.server {
        props.set("kvs.server", s.clone());
    }
    if let Some(d) = a.depth {
        props.set("kvs.depth", d.to_string());
    }
    props
}

/// The driver's own properties, read once.
struct Settings {
    /// `kvs.busy_poll`: spin only, here and in the embedded server.
    busy_poll: bool,
    /// `kvs.spin_us`: how long to spin before sleeping.
    spin_us: u64,
    threads: usize,
    depth: usize,
    /// `target` (0: as fast as possible).
    target_ops: f64,
    /// `dataintegrity`.
    verify: bool,
    status_interval: Duration,
    /// `hdrhistogram.percentiles`.
    percentiles: Vec<f64>,
    /// `kvs.timeout_ms`: past it, an operation counts as an error.
    timeout: Duration,
    transport: Wire,
    seed: u64,
    /// `maxexecutiontime` (0: none).
    max_time: u64,
    /// `kvs.workers`: the embedded server's workers.
    workers: u16,
}

impl Settings {
    fn read(props: &Properties) -> Settings {
        let num = |k: &str, d: u64| props.get_u64(k, d).unwrap_or_else(|e| die(&e));
        let flag = |k: &str| props.get_bool(k, false).unwrap_or_else(|e| die(&e));
        let percentiles = props
            .get_str("hdrhistogram.percentiles", "50,95,99")
            .split(',')
            .map(|p| {
                p.trim()
                    .parse()
                    .unwrap_or_else(|_| die(&format!("bad percentile {p:?}")))
            })
            .collect();
        Settings {
            busy_poll: flag("kvs.busy_poll"),
            spin_us: num("kvs.spin_us", copyrpc::DEFAULT_SPIN.as_micros() as u64).min(1_000_000),
            threads: num("threadcount", 1) as usize,
            depth: num("kvs.depth", 1) as usize,
            target_ops: props.get_f64("target", 0.0).unwrap_or_else(|e| die(&e)),
            verify: flag("dataintegrity"),
            status_interval: Duration::from_secs(num("status.interval", 10).max(1)),
            percentiles,
            timeout: Duration::from_millis(num("kvs.timeout_ms", 5000)),
            transport: props
                .get_str("kvs.transport", "rc")
                .parse()
                .unwrap_or_else(|e: String| die(&format!("kvs.transport: {e}"))),
            seed: num("kvs.seed", 0x5eed),
            max_time: num("maxexecutiontime", 0),
            workers: num("kvs.workers", 1) as u16,
        }
    }

    /// Spin, then sleep while waiting (default), or spin only.
    fn idle(&self) -> IdlePolicy {
        if self.busy_poll {
            IdlePolicy::Spin
        } else {
            IdlePolicy::sleep_after(Duration::from_micros(self.spin_us))
        }
    }

    fn run_options(&self, status: bool) -> RunOptions {
        RunOptions {
            threads: self.threads,
            depth: self.depth,
            target_ops: (self.target_ops > 0.0).then_some(self.target_ops),
            verify: self.verify,
            idle: self.idle(),
            seed: self.seed,
            max_time: (self.max_time > 0).then(|| Duration::from_secs(self.max_time)),
            interrupt: Arc::new(AtomicBool::new(false)),
            status,
        }
    }

    /// A kvs store on the software device, in `fabric`, at `server`.
    fn software_kvs(&self, server: String, fabric: String) -> Target {
        Target::Kvs(KvsTarget {
            server,
            device: "sim0".into(),
            fabric: Some(fabric),
            auth_token: None,
            timeout: self.timeout,
            transport: self.transport,
        })
    }
}

/// An embedded server and its fabric.
type Embedded = (kvs_server::Server, String);

/// The store: Redis, the kvs server given, or one embedded here (rank 0
/// embeds it and tells the other ranks where it is).
fn target(
    a: &Args,
    props: &Properties,
    set: &Settings,
    wl: &CoreWorkload,
    ranks: &Ranks,
) -> (Target, Option<Embedded>) {
    let num = |k: &str, d: u64| props.get_u64(k, d).unwrap_or_else(|e| die(&e));
    match props.get("kvs.server") {
        _ if a.db == "redis" => {
            let host = props.get_str("redis.host", "127.0.0.1");
            let url = format!("redis://{host}:{}/", num("redis.port", 6379));
            (Target::Redis(RedisTarget { url }), None)
        }
        Some(s) => {
            let auth_token = props.get("kvs.auth_token_file").map(std::path::Path::new);
            let t = KvsTarget {
                server: s.to_owned(),
                device: props.get_str("kvs.device", "auto").to_owned(),
                fabric: props.get("kvs.fabric").map(str::to_owned),
                auth_token: kvs_client::auth_token(auth_token).unwrap_or_else(|e| die(&e)),
                timeout: set.timeout,
                transport: set.transport,
            };
            (Target::Kvs(t), None)
        }
        None if ranks.rank != 0 => {
            let (server, fabric) = ranks.broadcast_server(None);
            (set.software_kvs(server, fabric), None)
        }
        None => {
            let (s, fabric) = embed(set, wl);
            let server = s.addr().to_string();
            if ranks.size > 1 {
                ranks.broadcast_server(Some((server.clone(), fabric.clone())));
            }
            (set.software_kvs(server, fabric.clone()), Some((s, fabric)))
        }
    }
}

/// Starts a kvs-server in this process on the software device, in a fabric
/// of its own.
fn embed(set: &Settings, wl: &CoreWorkload) -> Embedded {
    let fabric = format!("ycsb-{}", std::process::id());
    let record = wl.field_count() * wl.field_length();
    let defaults = kvs_server::Config::default();
    let cfg = kvs_server::Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        device: "sim1".into(),
        fabric: Some(fabric.clone()),
        workers: set.workers,
        max_value: (record + 1024).max(defaults.max_value),
        stats_interval_s: 0,
        busy_poll: set.busy_poll,
        idle_spin_us: set.spin_us,
        idle_max_spin_us: set.spin_us.max(defaults.idle_max_spin_us),
        transport: set.transport,
        ..defaults
    };
    // A panic in the embedded server's threads (or the driver's) ends the
    // run at once, instead of leaving it waiting on a dead worker.
    kvs_server::abort_on_panic();
    let s = kvs_server::Server::start(cfg).unwrap_or_else(|e| die(&e));
    eprintln!(
        "ycsb-driver: embedded kvs-server ({} worker(s)) on the software device, fabric {fabric}",
        set.workers
    );
    (s, fabric)
}

/// Loads every record into the embedded server before `run` (all of them,
/// whatever share of the operations this rank has).
fn preload(full_props: &Properties, target: &Target, opts: &RunOptions) {
    let lw = Arc::new(CoreWorkload::new(full_props).unwrap_or_else(|e| die(&e)));
    eprintln!(
        "ycsb-driver: loading {} records into the embedded server first",
        lw.load_count()
    );
    let p = Arc::new(Progress::default());
    let r = run_phase(&lw, Phase::Load, target, opts, &p).unwrap_or_else(|e| die(&e));
    if let Some(lost) = &r.lost {
        die(&format!("loading the embedded server: {lost}"));
    }
    eprintln!(
        "ycsb-driver: loaded {} records in {} ms",
        r.operations,
        r.runtime.as_millis()
    );
}

/// Runs the phase once every rank is ready, with status lines when asked.
fn run(
    wl: &Arc<CoreWorkload>,
    phase: Phase,
    target: &Target,
    opts: &RunOptions,
    ranks: &Ranks,
    every: Duration,
) -> PhaseResult {
    let todo = match phase {
        Phase::Load => wl.load_count(),
        Phase::Run => wl.operation_count(),
    };
    let progress = Arc::new(Progress::default());
    let status = opts.status.then(|| {
        let p = progress.clone();
        std::thread::spawn(move || status::status_lines(&p, every, todo))
    });
    ranks.barrier();
    let r = run_phase(wl, phase, target, opts, &progress).unwrap_or_else(|e| die(&e));
    if let Some(s) = status {
        let _ = s.join();
    }
    if opts.interrupt.load(Ordering::Relaxed) {
        eprintln!(
            "ycsb-driver: interrupted: the report covers the {} operations done",
            r.operations
        );
    }
    if let Some(v) = r.map_version {
        eprintln!("ycsb-driver: shard map version {v} at the end");
    }
    r
}

/// The text report on stdout, and the plot and CSV when asked for.
fn write_reports(a: &Args, r: &PhaseResult, ms: u64, percentiles: &[f64]) {
    let mut out = std::io::stdout().lock();
    report::write_text_report(&mut out, ms, r.operations, &r.measurements, percentiles)
        .unwrap_or_else(|e| die(&e));
    let _ = out.flush();
    if let Some(p) = &a.plot {
        let title = format!(
            "YCSB {} latency",
            a.property_files.last().map(String::as_str).unwrap_or("")
        );
        let mut f = std::fs::File::create(p).unwrap_or_else(|e| die(&e));
        report::write_svg_plot(&mut f, &title, &r.measurements).unwrap_or_else(|e| die(&e));
    }
    if let Some(p) = &a.csv {
        let mut f = std::fs::File::create(p).unwrap_or_else(|e| die(&e));
        report::write_csv(&mut f, &r.measurements).unwrap_or_else(|e| die(&e));
    }
}
