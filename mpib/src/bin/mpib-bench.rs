//! `mpib-bench`: bulk-transfer bandwidth over one or two rails, in the spirit
//! of nccl-tests and `ib_write_bw`. A sender keeps `--window` transfers in
//! flight to a receiver that keeps its receives posted, for each size in turn,
//! and prints one line per size; beside it, single-thread `memcpy` of the same
//! sizes, the physical limit of a copy on one host.
//!
//! ```text
//! mpib-bench --spawn                                     # both processes on this host (software device)
//! mpib-bench --spawn --link-gbps 24,8 --policy adaptive  # two rails of unequal speed
//! mpib-bench --spawn --latency --sizes 8,4K              # ping-pong: half round trips
//! mpib-bench server --listen 0.0.0.0:7100 --devices mlx5_0,mlx5_1
//! mpib-bench client --connect host:7100 --devices mlx5_0,mlx5_1
//! mpirun -np 2 mpib-bench mpi                            # feature `mpi`: rank 0 sends to rank 1
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use mlx5::device::Context;
use mlx5::sim::fabric::{fabric_name_from_env, Fabric};
use mlx5::sim::link::Link;
use mpib::conn::{connect_with, Listener};
use mpib::{Buffer, CloseReason, Comm, Config, Error, PolicyKind, Request};

#[path = "mpib-bench/latency.rs"]
mod latency;

#[derive(Parser, Debug)]
#[command(
    name = "mpib-bench",
    version,
    about = "mpib bulk-transfer bandwidth, one or two rails, beside memcpy",
    long_about = "Measures mpib's bandwidth: a sender keeps --window transfers in flight to a \
receiver, for each size in turn, and prints `<size> B: <GB/s> GB/s` per size, then \
`memcpy <size> B: <GB/s> GB/s` for single-thread memcpy of the same sizes.\n\n\
Without a subcommand it runs the sender here: with --spawn the receiver is started as a \
second process on this host (the software device), otherwise it connects to a receiver \
started with `mpib-bench server`."
)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    send: SendArgs,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Receive: keep receives posted for whoever connects, until it leaves.
    Server {
        #[command(flatten)]
        common: Common,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:7100")]
        listen: SocketAddr,
        /// Exit after one sender has come and gone.
        #[arg(long)]
        once: bool,
    },
    /// Send to a receiver started with `server` and print the figures.
    Client(SendArgs),
    /// As MPI ranks (feature `mpi`): rank 0 sends to rank 1; rank r uses the
    /// software devices sim{2r} and sim{2r+1} of the fabric MLX5_SIM_FABRIC names.
    #[cfg(feature = "mpi")]
    Mpi(SendArgs),
}

/// What both sides are told (they must agree: the setup refuses a mismatch).
#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// Rails, one device each: 1 or 2.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    rails: u8,
    /// This side's devices, one per rail (`sim0,sim1`, `mlx5_0,mlx5_1`, `rxe0`).
    /// Default: the software devices sim0,sim1 for the sender and sim2,sim3
    /// for the receiver, as two hosts of one fabric.
    #[arg(long, value_delimiter = ',')]
    devices: Vec<String>,
    /// Software-device fabric (default: MLX5_SIM_FABRIC, or `default`).
    #[arg(long)]
    fabric: Option<String>,
    /// Data QPs per rail (as NCCL_IB_QPS_PER_CONNECTION).
    #[arg(long, default_value_t = 2)]
    qps: usize,
    /// FIFO slots: receives the receiver keeps posted.
    #[arg(long, default_value_t = 32)]
    depth: usize,
    /// Largest single-buffer transfer sent eagerly over tag matching, with
    /// no CTS (where both sides' devices have it; 0: never, the default).
    /// Both sides use the smaller of their two values. 8192 is a start.
    #[arg(long, default_value_t = 0)]
    eager_max: usize,
}

/// What the sender is told.
#[derive(clap::Args, Debug, Clone)]
struct SendArgs {
    #[command(flatten)]
    common: Common,
    /// Receiver address.
    #[arg(long, default_value = "127.0.0.1:7100")]
    connect: SocketAddr,
    /// Start the receiver as a second process on this host first (a fabric of
    /// its own, unless --fabric names one).
    #[arg(long)]
    spawn: bool,
    /// Transfer sizes (K, M and G suffixes: powers of 1024).
    #[arg(long, value_delimiter = ',', value_parser = parse_size,
          default_value = "4K,64K,1M,16M,64M")]
    sizes: Vec<u64>,
    /// How the sender splits each transfer between two rails:
    /// `static[:FRACTION_ON_RAIL0]`, `rate[:RATE0:RATE1]` or `adaptive`.
    #[arg(long, default_value = "static")]
    policy: PolicyKind,
    /// Software device only: link model of rail 0 and rail 1 in Gbit/s
    /// (e.g. 24,8), on both sides' devices. Default: no model (memory speed).
    #[arg(long, value_delimiter = ',')]
    link_gbps: Vec<f64>,
    /// Seconds to measure each size (after a short warm-up).
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Transfers in flight (at most --depth).
    #[arg(long)]
    window: Option<usize>,
    /// Ping-pong instead of streaming: the receiver sends each transfer
    /// back, and each size prints the half round trip (median and p99), as
    /// ucx_perftest's tag_lat does.
    #[arg(long)]
    latency: bool,
    /// With --latency: post the receive of the answer after sending, not
    /// before, so its CTS (without eager transfers) is not there ahead of
    /// the answer.
    #[arg(long, requires = "latency")]
    late_recv: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n <= mpib::MAX_SIZE)
        .ok_or_else(|| {
            format!(
                "{s:?}: a size in bytes (K, M, G suffixes), at most {}",
                mpib::MAX_SIZE
            )
        })
}

/// A failure, said plainly; the process exits 1.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    #[error("{0}")]
    Usage(String),
    #[error("device {name}: {source}")]
    Device {
        name: String,
        source: mlx5::device::DeviceError,
    },
    #[error(transparent)]
    Setup(#[from] mpib::SetupError),
    #[error("connect to the receiver at {addr}: {source} (start `mpib-bench server` there, or use --spawn)")]
    Connect {
        addr: SocketAddr,
        source: mpib::SetupError,
    },
    #[error(transparent)]
    Transfer(#[from] Error),
    #[error(transparent)]
    Fabric(#[from] mlx5::sim::fabric::FabricError),
    #[error("receiver process: {0}")]
    Child(String),
}

fn main() {
    let args = Args::parse();
    let r = match args.cmd {
        Some(Cmd::Server {
            common,
            listen,
            once,
        }) => serve(&common, listen, once),
        Some(Cmd::Client(send)) => send_main(&send),
        #[cfg(feature = "mpi")]
        Some(Cmd::Mpi(send)) => mpi_main(&send),
        None => send_main(&args.send),
    };
    if let Err(e) = r {
        eprintln!("mpib-bench: {e}");
        std::process::exit(1);
    }
}

fn config(c: &Common, policy: PolicyKind) -> Config {
    Config {
        qps_per_rail: c.qps,
        depth: c.depth,
        policy,
        eager_max: c.eager_max,
        ..Config::default()
    }
}

/// Opens this side's rails: the named devices, or software devices `first`,
/// `first + 1` of the fabric.
fn open_rails(c: &Common, first: u32) -> Result<Vec<Context>, BenchError> {
    let names: Vec<String> = if c.devices.is_empty() {
        (0..u32::from(c.rails))
            .map(|r| format!("sim{}", first + r))
            .collect()
    } else {
        c.devices.clone()
    };
    if names.len() != usize::from(c.rails) {
        return Err(BenchError::Usage(format!(
            "--rails {} needs {} device(s), got {}",
            c.rails,
            c.rails,
            names.join(",")
        )));
    }
    let fabric = c.fabric.clone().unwrap_or_else(fabric_name_from_env);
    names
        .iter()
        .map(|n| {
            let r = if n.starts_with("sim") {
                Context::open_in(&fabric, n)
            } else {
                Context::open(n)
            };
            r.map_err(|source| BenchError::Device {
                name: n.clone(),
                source,
            })
        })
        .collect()
}

/// The receiver: answers senders one after another (or one, with `once`).
fn serve(c: &Common, listen: SocketAddr, once: bool) -> Result<(), BenchError> {
    let devs = open_rails(c, 2)?;
    let listener = Listener::bind(listen)?;
    // The spawning sender reads this line to know where to connect.
    println!("listening {}", listener.local_addr()?);
    loop {
        let pending = listener.accept_pending()?;
        // The largest size, then 1 if the sender wants its transfers back.
        let data = pending.private_data();
        let max = data
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| BenchError::Usage("sender sent no size".into()))?;
        let echo = data.get(8) == Some(&1);
        // The sender's policy is its own business; the receiver's is unused.
        let mut comm = pending.establish(&devs, &config(c, PolicyKind::default()), &[])?;
        if echo {
            latency::echo(&mut comm, max)?;
        } else {
            receive(&mut comm, max)?;
        }
        if once {
            return Ok(());
        }
    }
}

/// Keeps `depth` receives of `max` bytes posted until the sender leaves.
fn receive(comm: &mut Comm, max: u64) -> Result<(), BenchError> {
    let buf = comm.alloc_buffer(max.max(1) as usize)?;
    let depth = comm.config().depth;
    let mut posted: VecDeque<Request> = VecDeque::with_capacity(depth);
    loop {
        while posted.len() < depth {
            match comm.irecv(&[buf.all()], 0) {
                Ok(Some(r)) => posted.push_back(r),
                Ok(None) => break,
                Err(e) => return gone_or(e),
            }
        }
        if let Some(r) = posted.front() {
            match comm.test(r) {
                Ok(Some(_)) => {
                    posted.pop_front();
                }
                Ok(None) => comm.progress(),
                Err(e) => return gone_or(e),
            }
        }
    }
}

/// The sender leaving is how a run ends.
fn gone_or(e: Error) -> Result<(), BenchError> {
    match e {
        Error::Closed(CloseReason::PeerGone) => Ok(()),
        e => Err(e.into()),
    }
}

fn send_main(a: &SendArgs) -> Result<(), BenchError> {
    let c = &a.common;
    if c.rails == 1 && !a.link_gbps.is_empty() && a.link_gbps.len() != 1 {
        return Err(BenchError::Usage("--rails 1 takes one --link-gbps".into()));
    }
    let mut common = c.clone();
    let mut child = None;
    let mut addr = a.connect;
    // A fabric of our own is removed however the run ends (declared first,
    // so it is dropped after the devices and the communicator).
    let mut _own_fabric = None;
    if a.spawn {
        let fabric = common
            .fabric
            .clone()
            .unwrap_or_else(|| format!("mpib-bench-{}", std::process::id()));
        if common.fabric.is_none() {
            _own_fabric = Some(RemoveFabric(fabric.clone()));
        }
        common.fabric = Some(fabric.clone());
        set_links(&fabric, c.rails, &a.link_gbps)?;
        let (ch, at) = spawn_receiver(&common)?;
        child = Some(ch);
        addr = at;
    } else if !a.link_gbps.is_empty() {
        let fabric = common.fabric.clone().unwrap_or_else(fabric_name_from_env);
        set_links(&fabric, c.rails, &a.link_gbps)?;
    }
    let devs = open_rails(&common, 0)?;
    let max = a.sizes.iter().copied().max().unwrap_or(0);
    let mut private = max.to_le_bytes().to_vec();
    private.push(u8::from(a.latency));
    let (mut comm, _) = connect_with(addr, &devs, &config(&common, a.policy), &private)
        .map_err(|source| BenchError::Connect { addr, source })?;
    print_header(a, &devs);
    let r = if a.latency {
        latency::run(&mut comm, &a.sizes, a.duration, a.late_recv)
    } else {
        run_sizes(&mut comm, a)
    };
    comm.close();
    drop(comm);
    if let Some(mut ch) = child {
        let st = ch.wait().map_err(|e| BenchError::Child(e.to_string()))?;
        if !st.success() {
            return Err(BenchError::Child(format!("exited with {st}")));
        }
    }
    r
}

/// Removes a fabric this run created when dropped (if no process uses it).
struct RemoveFabric(String);

impl Drop for RemoveFabric {
    fn drop(&mut self) {
        Fabric::remove_if_unused(&self.0);
    }
}

/// Sets the link model of rail r on both sides' software devices (sim r and
/// sim 2+r).
fn set_links(fabric: &str, rails: u8, gbps: &[f64]) -> Result<(), BenchError> {
    if gbps.is_empty() {
        return Ok(());
    }
    if gbps.len() != usize::from(rails) || gbps.iter().any(|g| !(g.is_finite() && *g > 0.0)) {
        return Err(BenchError::Usage(format!(
            "--link-gbps wants {rails} positive rate(s) in Gbit/s, one per rail"
        )));
    }
    let f = Fabric::open(fabric)?;
    for (r, &g) in gbps.iter().enumerate() {
        for dev in [r as u32, 2 + r as u32] {
            f.set_link(dev, Some(Link::rate(g)))?;
        }
    }
    Ok(())
}

/// Starts `mpib-bench server --once` on a free port; returns it and its
/// address.
fn spawn_receiver(c: &Common) -> Result<(std::process::Child, SocketAddr), BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::Child(e.to_string()))?;
    let mut cmd = Command::new(exe);
    cmd.args(["server", "--once", "--listen", "127.0.0.1:0"])
        .args(["--rails", &c.rails.to_string()])
        .args(["--qps", &c.qps.to_string()])
        .args(["--depth", &c.depth.to_string()])
        .args(["--eager-max", &c.eager_max.to_string()])
        .stdout(Stdio::piped());
    if let Some(f) = &c.fabric {
        cmd.args(["--fabric", f]);
    }
    let mut ch = cmd.spawn().map_err(|e| BenchError::Child(e.to_string()))?;
    let out = ch
        .stdout
        .take()
        .ok_or_else(|| BenchError::Child("no stdout".into()))?;
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
        .map_err(|e| BenchError::Child(e.to_string()))?;
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| BenchError::Child(format!("did not start: {line:?}")))?;
    Ok((ch, addr))
}

fn print_header(a: &SendArgs, devs: &[Context]) {
    let names: Vec<&str> = devs.iter().map(Context::name).collect();
    let links = if a.link_gbps.is_empty() {
        "no link model".to_owned()
    } else {
        let g: Vec<String> = a.link_gbps.iter().map(|g| format!("{g}")).collect();
        format!("links {} Gbit/s", g.join(" + "))
    };
    let mode = if a.latency {
        "ping-pong".to_owned()
    } else {
        format!("window {}", window(a))
    };
    println!(
        "# mpib-bench: {} rail(s) ({}), policy {:?}, {} QPs per rail, {mode}, eager up to {} B, {links}, {} s per size",
        a.common.rails,
        names.join("+"),
        a.policy,
        a.common.qps,
        a.common.eager_max,
        a.duration
    );
}

fn window(a: &SendArgs) -> usize {
    a.window.unwrap_or(a.common.depth).clamp(1, a.common.depth)
}

/// Sends each size for `duration` and prints its line; then memcpy's.
fn run_sizes(comm: &mut Comm, a: &SendArgs) -> Result<(), BenchError> {
    let max = a.sizes.iter().copied().max().unwrap_or(0);
    let buf = comm.alloc_buffer(max.max(1) as usize)?;
    for &size in &a.sizes {
        let before = comm.stats().rail_bytes;
        // Warm-up: a tenth of the time, at least a few transfers.
        stream(comm, &buf, size, window(a), a.duration / 10.0)?;
        let mid = comm.stats().rail_bytes;
        let (bytes, took) = stream(comm, &buf, size, window(a), a.duration)?;
        let after = comm.stats().rail_bytes;
        let r0 = (after[0] - mid[0]) as f64;
        let r1 = (after[1] - mid[1]) as f64;
        let _ = before;
        let share = if r0 + r1 > 0.0 { r0 / (r0 + r1) } else { 1.0 };
        println!(
            "{size} B: {:.3} GB/s  (rail 0 {:.0}%, {} transfers)",
            bytes as f64 / took.as_secs_f64() / 1e9,
            share * 100.0,
            bytes / size.max(1)
        );
    }
    for &size in &a.sizes {
        println!(
            "memcpy {size} B: {:.3} GB/s",
            memcpy_gbps(size as usize, a.duration.min(1.0))
        );
    }
    Ok(())
}

/// Keeps `window` sends of `size` bytes in flight for `secs`; returns the
/// bytes that completed and the time they took.
fn stream(
    comm: &mut Comm,
    buf: &Buffer,
    size: u64,
    window: usize,
    secs: f64,
) -> Result<(u64, Duration), BenchError> {
    let span = buf.span(0, size)?;
    let mut inflight: VecDeque<Request> = VecDeque::with_capacity(window);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let t0 = Instant::now();
    let mut done = 0u64;
    let mut sending = true;
    while sending || !inflight.is_empty() {
        if sending && Instant::now() >= end {
            sending = false;
        }
        while sending && inflight.len() < window {
            match comm.isend(&[span], 0)? {
                Some(r) => inflight.push_back(r),
                None => break,
            }
        }
        match inflight.front() {
            Some(r) => {
                if comm.test(r)?.is_some() {
                    inflight.pop_front();
                    done += size;
                } else {
                    comm.progress();
                }
            }
            None => comm.progress(),
        }
    }
    Ok((done, t0.elapsed()))
}

/// Single-thread memcpy of `size` bytes, buffers touched first, for about
/// `secs`: bytes copied per second, in GB/s.
fn memcpy_gbps(size: usize, secs: f64) -> f64 {
    let src = vec![0x5au8; size.max(1)];
    let mut dst = vec![0u8; size.max(1)];
    dst.copy_from_slice(&src);
    let mut n = 0u64;
    let t0 = Instant::now();
    while n < 3 || t0.elapsed().as_secs_f64() < secs {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        n += 1;
    }
    (n * size as u64) as f64 / t0.elapsed().as_secs_f64() / 1e9
}

#[cfg(feature = "mpi")]
fn mpi_main(a: &SendArgs) -> Result<(), BenchError> {
    use mpi::collective::CommunicatorCollectives;
    use mpi::traits::Communicator;
    if a.latency {
        return Err(BenchError::Usage(
            "--latency runs between two processes of --spawn, or server and client".into(),
        ));
    }
    let universe =
        mpi::initialize().ok_or_else(|| BenchError::Usage("MPI is initialised already".into()))?;
    let world = universe.world();
    if world.size() != 2 {
        return Err(BenchError::Usage(format!(
            "needs 2 ranks, has {}",
            world.size()
        )));
    }
    let me = world.rank() as u32;
    if me == 0 {
        let fabric = a.common.fabric.clone().unwrap_or_else(fabric_name_from_env);
        set_links(&fabric, a.common.rails, &a.link_gbps)?;
    }
    world.barrier();
    let devs = open_rails(&a.common, 2 * me)?;
    let mut comms = mpib::mpi_setup::connect_all(&world, &devs, &config(&a.common, a.policy))?;
    let peer = 1 - me as usize;
    let mut comm = comms[peer]
        .take()
        .ok_or_else(|| BenchError::Usage("no communicator with the other rank".into()))?;
    let max = a.sizes.iter().copied().max().unwrap_or(0);
    let r = if me == 0 {
        print_header(a, &devs);
        run_sizes(&mut comm, a)
    } else {
        receive(&mut comm, max)
    };
    // Without a liveness channel the receiver learns the end from its QPs;
    // a barrier ends the run for both.
    comm.close();
    world.barrier();
    r
}
