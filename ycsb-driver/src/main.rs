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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use ycsb_driver::measure::Measurements;
use ycsb_driver::properties::Properties;
use ycsb_driver::report::{self, StatusInfo};
use ycsb_driver::runner::{run_phase, Phase, PhaseResult, Progress, RunOptions, Target};
use ycsb_driver::workload::CoreWorkload;

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Command {
    Load,
    Run,
}

/// The workloads shipped with the driver, as Java's `workloads/` has them.
const SHIPPED: [(&str, &str); 6] = [
    ("workloada", include_str!("../workloads/workloada")),
    ("workloadb", include_str!("../workloads/workloadb")),
    ("workloadc", include_str!("../workloads/workloadc")),
    ("workloadd", include_str!("../workloads/workloadd")),
    ("workloade", include_str!("../workloads/workloade")),
    ("workloadf", include_str!("../workloads/workloadf")),
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

fn die(m: &dyn std::fmt::Display) -> ! {
    eprintln!("ycsb-driver: {m}");
    std::process::exit(1)
}

fn main() {
    let a = Args::parse_from(java_args());
    if a.db != "kvs" && a.db != "redis" {
        die(&format!("unknown binding {:?} (kvs or redis)", a.db));
    }
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
    let full_props = props.clone();
    let ranks = Ranks::init();
    if ranks.size > 1 {
        share_among_ranks(&mut props, a.command, &ranks);
    }
    let num = |k: &str, d: u64| props.get_u64(k, d).unwrap_or_else(|e| die(&e));
    // Spin, then sleep while waiting (default), or spin only.
    let busy_poll = props
        .get_bool("kvs.busy_poll", false)
        .unwrap_or_else(|e| die(&e));
    let spin_us = num("kvs.spin_us", copyrpc::DEFAULT_SPIN.as_micros() as u64).min(1_000_000);
    let idle = if busy_poll {
        copyrpc::IdlePolicy::Spin
    } else {
        copyrpc::IdlePolicy::sleep_after(std::time::Duration::from_micros(spin_us))
    };
    let threads = num("threadcount", 1) as usize;
    let depth = num("kvs.depth", 1) as usize;
    let target_ops = props.get_f64("target", 0.0).unwrap_or_else(|e| die(&e));
    let verify = props
        .get_bool("dataintegrity", false)
        .unwrap_or_else(|e| die(&e));
    let status_interval = Duration::from_secs(num("status.interval", 10).max(1));
    let percentiles: Vec<f64> = props
        .get_str("hdrhistogram.percentiles", "50,95,99")
        .split(',')
        .map(|p| {
            p.trim()
                .parse()
                .unwrap_or_else(|_| die(&format!("bad percentile {p:?}")))
        })
        .collect();
    let wl = Arc::new(CoreWorkload::new(&props).unwrap_or_else(|e| die(&e)));

    // The server: given, or embedded on the software device.
    let mut embedded = None;
    // A request's deadline: past it, the operation counts as an error.
    let timeout = std::time::Duration::from_millis(num("kvs.timeout_ms", 5000));
    let transport: copyrpc::transport::Wire = props
        .get_str("kvs.transport", "rc")
        .parse()
        .unwrap_or_else(|e: String| die(&format!("kvs.transport: {e}")));
    let target = match props.get("kvs.server") {
        _ if a.db == "redis" => Target::Redis {
            url: format!(
                "redis://{}:{}/",
                props.get_str("redis.host", "127.0.0.1"),
                num("redis.port", 6379)
            ),
        },
        Some(s) => Target::Kvs {
            server: s.to_owned(),
            device: props.get_str("kvs.device", "auto").to_owned(),
            fabric: props.get("kvs.fabric").map(str::to_owned),
            auth_token: kvs_client::auth_token(
                props.get("kvs.auth_token_file").map(std::path::Path::new),
            )
            .unwrap_or_else(|e| die(&e)),
            timeout,
            transport,
        },
        None if ranks.rank != 0 => {
            // Rank 0 embeds the server; the others learn where it is.
            let (server, fabric) = ranks.broadcast_server(None);
            Target::Kvs {
                server,
                device: "sim0".into(),
                fabric: Some(fabric),
                auth_token: None,
                timeout,
                transport,
            }
        }
        None => {
            let fabric = format!("ycsb-{}", std::process::id());
            let record = wl.field_count() * wl.field_length();
            let cfg = kvs_server::Config {
                listen: "127.0.0.1:0".parse().expect("an address"),
                device: "sim1".into(),
                fabric: Some(fabric.clone()),
                workers: num("kvs.workers", 1) as u16,
                max_value: (record + 1024).max(kvs_server::Config::default().max_value),
                stats_interval_s: 0,
                busy_poll,
                idle_spin_us: spin_us,
                idle_max_spin_us: spin_us.max(kvs_server::Config::default().idle_max_spin_us),
                transport,
                ..kvs_server::Config::default()
            };
            let s = kvs_server::Server::start(cfg).unwrap_or_else(|e| die(&e));
            eprintln!(
                "ycsb-driver: embedded kvs-server ({} worker(s)) on the software device, fabric {fabric}",
                num("kvs.workers", 1)
            );
            let t = Target::Kvs {
                server: s.addr().to_string(),
                device: "sim0".into(),
                fabric: Some(fabric.clone()),
                auth_token: None,
                timeout,
                transport,
            };
            if ranks.size > 1 {
                ranks.broadcast_server(Some((s.addr().to_string(), fabric.clone())));
            }
            embedded = Some((s, fabric));
            t
        }
    };
    let opts = RunOptions {
        threads,
        depth,
        target_ops: (target_ops > 0.0).then_some(target_ops),
        verify,
        idle,
        seed: num("kvs.seed", 0x5eed),
        max_time: match num("maxexecutiontime", 0) {
            0 => None,
            s => Some(Duration::from_secs(s)),
        },
        interrupt: Arc::new(AtomicBool::new(false)),
        status: a.status,
    };
    let flag = opts.interrupt.clone();
    if let Err(e) = ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed)) {
        eprintln!("ycsb-driver: Ctrl-C will not end the run cleanly: {e}");
    }
    if a.command == Command::Run && embedded.is_some() {
        // All the records, whatever share of the operations this rank has.
        let lw = Arc::new(CoreWorkload::new(&full_props).unwrap_or_else(|e| die(&e)));
        eprintln!(
            "ycsb-driver: loading {} records into the embedded server first",
            lw.load_count()
        );
        let p = Arc::new(Progress::default());
        let r = run_phase(&lw, Phase::Load, &target, &opts, &p).unwrap_or_else(|e| die(&e));
        if let Some(lost) = &r.lost {
            die(&format!("loading the embedded server: {lost}"));
        }
        eprintln!(
            "ycsb-driver: loaded {} records in {} ms",
            r.operations,
            r.runtime.as_millis()
        );
    }
    let phase = match a.command {
        Command::Load => Phase::Load,
        Command::Run => Phase::Run,
    };
    let todo = match phase {
        Phase::Load => wl.load_count(),
        Phase::Run => wl.operation_count(),
    };
    let progress = Arc::new(Progress::default());
    let status = a.status.then(|| {
        let p = progress.clone();
        std::thread::spawn(move || status_lines(&p, status_interval, todo))
    });
    ranks.barrier();
    let r = run_phase(&wl, phase, &target, &opts, &progress).unwrap_or_else(|e| die(&e));
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
    // A lost connection stopped the phase: the report covers what completed,
    // and the driver fails.
    let lost = r.lost.clone().map(|l| {
        let server = match &target {
            Target::Kvs { server, .. } => server.as_str(),
            Target::Redis { url } => url.as_str(),
        };
        format!(
            "stopped: lost the connection to the server at {server} ({l}); \
             the report covers the {} of {todo} operations that completed",
            r.operations
        )
    });
    // Every rank's measurements, merged at rank 0 (which alone reports);
    // the run time is the slowest rank's.
    let Some((r, ms)) = ranks.gather(r) else {
        ranks.barrier();
        if let Some(why) = lost {
            die(&why);
        }
        return;
    };
    let mut out = std::io::stdout().lock();
    report::write_text_report(&mut out, ms, r.operations, &r.measurements, &percentiles)
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

/// Java's status thread: a line on stderr every `every` until the phase ends.
fn status_lines(p: &Progress, every: Duration, todo: u64) {
    let start = Instant::now();
    let mut last = start;
    let mut last_ops = 0;
    let mut interval = Measurements::new();
    loop {
        let finished = {
            let t = Instant::now() + every;
            loop {
                if p.finished.load(Ordering::Acquire) {
                    break true;
                }
                if Instant::now() >= t {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let now = Instant::now();
        // The threads add their intervals into the shared one; take it whole.
        if let Ok(mut g) = p.interval.lock() {
            std::mem::swap(&mut *g, &mut interval);
        }
        let total = p.done.load(Ordering::Relaxed);
        let info = StatusInfo {
            label: "",
            wall_clock: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            elapsed_ms: now.duration_since(start).as_millis() as u64,
            interval_ms: now.duration_since(last).as_millis().max(1) as u64,
            total_ops: total,
            last_total_ops: last_ops,
            todo_ops: todo.saturating_sub(total),
        };
        eprintln!("{}", report::status_line(&info, &interval));
        interval.clear();
        last = now;
        last_ops = total;
        if finished {
            break;
        }
    }
}

/// Gives this rank its share: `load` splits the records (by `insertstart`
/// and `insertcount`, as several Java clients are run), `run` the operations.
fn share_among_ranks(props: &mut Properties, cmd: Command, ranks: &Ranks) {
    let (r, n) = (ranks.rank as u64, ranks.size as u64);
    let get = |k: &str, d: u64| props.get_u64(k, d).unwrap_or_else(|e| die(&e));
    let split = |total: u64| ycsb_driver::workload::ops_for_thread(total, ranks.rank, ranks.size);
    let before = |total: u64| r * (total / n) + r.min(total % n);
    match cmd {
        Command::Load => {
            let records = get("recordcount", 0);
            let start = get("insertstart", 0);
            let total = get("insertcount", records.saturating_sub(start));
            props.set("insertstart", (start + before(total)).to_string());
            props.set("insertcount", split(total).to_string());
        }
        Command::Run => {
            let ops = get("operationcount", 0);
            props.set("operationcount", split(ops).to_string());
        }
    }
}

/// This process among the driver processes: MPI ranks under `mpirun` (feature
/// `mpi`), else alone.
struct Ranks {
    rank: usize,
    size: usize,
    #[cfg(feature = "mpi")]
    world: Option<(
        mpi::environment::Universe,
        mpi::topology::SimpleCommunicator,
    )>,
}

impl Ranks {
    #[cfg(not(feature = "mpi"))]
    fn init() -> Ranks {
        Ranks { rank: 0, size: 1 }
    }

    #[cfg(feature = "mpi")]
    fn init() -> Ranks {
        use mpi::traits::Communicator;
        match mpi::initialize() {
            Some(u) => {
                let w = u.world();
                Ranks {
                    rank: w.rank() as usize,
                    size: w.size() as usize,
                    world: Some((u, w)),
                }
            }
            None => Ranks {
                rank: 0,
                size: 1,
                world: None,
            },
        }
    }

    fn barrier(&self) {
        #[cfg(feature = "mpi")]
        if let Some((_, w)) = &self.world {
            use mpi::traits::CommunicatorCollectives;
            w.barrier();
        }
    }

    /// Rank 0's embedded server (address, fabric), sent to every rank.
    #[allow(unused_variables)]
    fn broadcast_server(&self, mine: Option<(String, String)>) -> (String, String) {
        #[cfg(feature = "mpi")]
        if let Some((_, w)) = &self.world {
            use mpi::traits::{Communicator, Root};
            let mut buf = [0u8; 512];
            if let Some((a, f)) = &mine {
                let line = format!("{a}\n{f}");
                buf[..line.len()].copy_from_slice(line.as_bytes());
            }
            w.process_at_rank(0).broadcast_into(&mut buf[..]);
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            let text = String::from_utf8_lossy(&buf[..end]).into_owned();
            let (a, f) = text.split_once('\n').unwrap_or((&text, ""));
            return (a.to_owned(), f.to_owned());
        }
        mine.unwrap_or_else(|| die(&"no embedded server to share"))
    }

    /// Rank 0 gets every rank's result merged, with the slowest rank's run
    /// time in ms; the other ranks get `None`.
    fn gather(&self, r: PhaseResult) -> Option<(PhaseResult, u64)> {
        let ms = r.runtime.as_millis().max(1) as u64;
        #[cfg(feature = "mpi")]
        if let Some((_, w)) = &self.world {
            use mpi::traits::{Communicator, Destination, Source};
            if self.rank != 0 {
                let mut b = r.measurements.to_bytes();
                b.extend_from_slice(&r.operations.to_le_bytes());
                b.extend_from_slice(&ms.to_le_bytes());
                w.process_at_rank(0).send(&b[..]);
                return None;
            }
            let mut all = r;
            let mut slowest = ms;
            for from in 1..self.size {
                let (b, _) = w.process_at_rank(from as i32).receive_vec::<u8>();
                if b.len() < 16 {
                    die(&format!("rank {from} sent a short result"));
                }
                let (m, tail) = b.split_at(b.len() - 16);
                let m = Measurements::from_bytes(m)
                    .unwrap_or_else(|e| die(&format!("rank {from}: {e}")));
                all.measurements.merge(&m);
                all.operations += u64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
                slowest = slowest.max(u64::from_le_bytes(tail[8..].try_into().expect("8 bytes")));
            }
            return Some((all, slowest));
        }
        Some((r, ms))
    }
}
