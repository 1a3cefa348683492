//! `copyrpc-bench`: RPC rate and round-trip latency between a client and a
//! server over copyrpc, connected over TCP (or run both as local processes with
//! `--spawn`). Prints Mrps and hdrhistogram percentiles.
//!
//! ```text
//! copyrpc-bench server --listen 0.0.0.0:7000 --device mlx5_0
//! copyrpc-bench client --connect host:7000 --device mlx5_0 --payload 32 --depth 64
//! copyrpc-bench client --spawn --payload 32 --depth 64          # both on this host (software device)
//! ```

use std::cell::RefCell;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use copyrpc::clock::Clock;
use copyrpc::conn::{connect, Listener};
#[cfg(feature = "mpi")]
use copyrpc::transport::run_on_device;
use copyrpc::transport::{run_on_device_as, OnTransport, Transport, Wire};
use copyrpc::{CallFailed, ContextBuilder, IdlePolicy};
use hdrhistogram::Histogram;
use mlx5::device::Context as Device;

#[derive(Parser, Debug)]
#[command(
    name = "copyrpc-bench",
    version,
    about = "copyrpc RPC rate and latency"
)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// Device (`sim0`, `mlx5_0`, `auto`).
    #[arg(long)]
    device: Option<String>,
    /// Receive ring size per endpoint.
    #[arg(long, default_value_t = 1 << 20)]
    ring: u64,
    /// Threads, each with its own context and share of the endpoints.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Endpoints (connections), split over the threads.
    #[arg(long, default_value_t = 1)]
    endpoints: usize,
    /// Without work: `sleep` spins --spin-us, then arms the CQs and sleeps
    /// until a completion event; `spin` polls without pause.
    #[arg(long, value_enum, default_value_t = Idle::Sleep)]
    idle: Idle,
    /// Microseconds of spinning before an idle context sleeps.
    #[arg(long, default_value_t = 50)]
    spin_us: u64,
    /// `rc`: a QP per endpoint; `dc`: one DC target per context and a pool
    /// of DC initiators (mlx5 only). Both sides must use the same.
    #[arg(long, default_value = "rc", value_name = "rc|dc")]
    transport: Wire,
}

/// What an idle context does.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Idle {
    /// Spin, then sleep on a completion channel.
    Sleep,
    /// Spin only.
    Spin,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Answer every request with a response of the same size.
    Server {
        #[command(flatten)]
        common: Common,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:7000")]
        listen: SocketAddr,
    },
    /// Send requests and measure.
    Client(ClientArgs),
    /// As MPI ranks (feature `mpi`): rank 0 calls every other rank, which answer.
    #[cfg(feature = "mpi")]
    Mpi {
        /// Device; `sim` means `sim<rank>` in the fabric `MLX5_SIM_FABRIC` names.
        #[arg(long, default_value = "sim")]
        device: String,
        /// Receive ring size per endpoint.
        #[arg(long, default_value_t = 1 << 20)]
        ring: u64,
        /// Request and response payload bytes.
        #[arg(long, default_value_t = 32)]
        payload: usize,
        /// Calls in flight per peer.
        #[arg(long, default_value_t = 64)]
        depth: usize,
        /// Seconds to measure (after one second of warm-up).
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
    },
}

/// What `copyrpc-bench client` is told.
#[derive(clap::Args, Debug)]
struct ClientArgs {
    #[command(flatten)]
    common: Common,
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:7000")]
    connect: SocketAddr,
    /// Start a server process on this host (software device) first.
    #[arg(long)]
    spawn: bool,
    /// Request and response payload bytes.
    #[arg(long, default_value_t = 32)]
    payload: usize,
    /// Calls in flight per busy endpoint.
    #[arg(long, default_value_t = 64)]
    depth: usize,
    /// Poll after every N calls, so that batches leave while the window
    /// is still being filled (0: poll once the window is full).
    #[arg(long, default_value_t = 0)]
    poll_every: usize,
    /// Endpoints that carry traffic (the rest stay idle); default all.
    #[arg(long)]
    busy: Option<usize>,
    /// Seconds to measure (after one second of warm-up).
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Microseconds each client thread pauses after its window completes,
    /// before the next call: long enough and the server falls asleep, so
    /// the round trip includes its wake-up (use with --depth 1).
    #[arg(long, default_value_t = 0)]
    think_us: u64,
}

#[cfg(feature = "mpi")]
fn mpi_bench(device: String, ring: u64, payload: usize, depth: usize, duration: f64) {
    use mpi::traits::Communicator;
    let universe = mpi::initialize().expect("MPI");
    let world = universe.world();
    let me = world.rank();
    let name = if device == "sim" {
        format!("sim{me}")
    } else {
        device
    };
    let dev = mlx5::device::Context::open(&name).unwrap_or_else(|e| {
        eprintln!("rank {me}: {e}");
        std::process::exit(1)
    });
    let go = (ring, payload, depth, duration);
    run_on_device(dev, MpiBench { world: &world, go });
}

/// [`mpi_bench`]'s work: the communicator and (ring, payload, depth, duration).
#[cfg(feature = "mpi")]
struct MpiBench<'a> {
    world: &'a mpi::topology::SimpleCommunicator,
    go: (u64, usize, usize, f64),
}

#[cfg(feature = "mpi")]
impl OnTransport for MpiBench<'_> {
    type Output = ();
    fn run<T: Transport>(self, dev: Device) {
        mpi_bench_on::<T>(self.world, &dev, self.go)
    }
}

/// [`mpi_bench`] on transport `T`: (ring, payload, depth, duration).
#[cfg(feature = "mpi")]
fn mpi_bench_on<T: Transport>(
    world: &mpi::topology::SimpleCommunicator,
    dev: &Device,
    (ring, payload, depth, duration): (u64, usize, usize, f64),
) {
    use mpi::traits::{Communicator, CommunicatorCollectives};
    let me = world.rank();
    let clock = Clock::new();
    let hist = Rc::new(RefCell::new(
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap(),
    ));
    let count = Rc::new(RefCell::new(0u64));
    let (h2, c2) = (hist.clone(), count.clone());
    let handler = move |t0: u64, r: Result<&[u8], CallFailed>| {
        if r.is_ok() {
            *c2.borrow_mut() += 1;
            if t0 != 0 {
                let _ = h2.borrow_mut().record(clock.ns().saturating_sub(t0).max(1));
            }
        }
    };
    let n = world.size() as u32;
    let mut ctx = ContextBuilder::new()
        .ring_size(ring)
        .max_endpoints(n)
        .build_on::<T, _, _>(dev, handler)
        .unwrap_or_else(|e| die(&format!("rank {me}: {e}")));
    let eps = copyrpc::mpi_setup::connect_all(world, &mut ctx)
        .unwrap_or_else(|e| die(&format!("rank {me}: connecting the ranks: {e}")));
    let peers: Vec<_> = eps.iter().flatten().copied().collect();
    let data = vec![0x5au8; payload];
    let mut out = vec![0u8; payload.max(1)];
    let (warm, dur) = (Duration::from_secs(1), Duration::from_secs_f64(duration));
    let start = Instant::now();
    let mut measured_from = 0u64;
    let mut started = false;
    let mut seq = 0u64;
    let mut iter = 0u64;
    let mut el = Duration::ZERO;
    loop {
        iter += 1;
        if iter % 256 == 0 {
            el = start.elapsed();
        }
        if !started && el >= warm {
            started = true;
            measured_from = *count.borrow();
            hist.borrow_mut().reset();
        }
        if el >= warm + dur {
            break;
        }
        if me == 0 {
            for &ep in &peers {
                while ctx.pending_calls(ep) < depth {
                    seq += 1;
                    let t0 = if seq % 16 == 0 || depth == 1 {
                        clock.ns().max(1)
                    } else {
                        0
                    };
                    if ctx.call(ep, &data, payload, t0).is_err() {
                        break;
                    }
                }
            }
        }
        ctx.poll();
        while let Some(h) = ctx.recv() {
            let len = ctx.request(&h).map_or(0, |d| {
                out[..d.len()].copy_from_slice(d);
                d.len()
            });
            let _ = ctx.reply(h, &out[..len]);
        }
    }
    // Drain what is in flight, then finish together.
    for _ in 0..100_000 {
        ctx.poll();
        while let Some(h) = ctx.recv() {
            let _ = ctx.reply(h, &[]);
        }
    }
    world.barrier();
    if me == 0 {
        let done = *count.borrow() - measured_from;
        let h = hist.borrow();
        println!(
            "copyrpc over MPI: {payload} B, {} peer(s), depth {depth}: {:.3} Mrps; round trip p50 {:.2} us, p99 {:.2} us",
            peers.len(),
            done as f64 / dur.as_secs_f64() / 1e6,
            h.value_at_quantile(0.5) as f64 / 1000.0,
            h.value_at_quantile(0.99) as f64 / 1000.0
        );
    }
}

fn device(common: &Common, default: &str) -> mlx5::device::Context {
    let name = common.device.clone().unwrap_or_else(|| default.to_string());
    mlx5::device::Context::open(&name).unwrap_or_else(|e| die(&e))
}

/// The process's resident memory, in bytes (0 where /proc has no statm).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// What one side's endpoints cost: the context's own memory (resident
/// growth while it was built, `rss0` to `rss1`), then per endpoint the
/// resident growth while the `n` endpoints were set up, and what each
/// holds by construction (its two rings; on RC its QP's send queue).
fn memory_line(side: &str, common: &Common, n: usize, rss0: u64, rss1: u64) -> String {
    let per = resident_bytes().saturating_sub(rss1) / n.max(1) as u64;
    // ContextBuilder's default send queue: 256 basic blocks of 64 B.
    let qp = match common.transport {
        Wire::Rc => "a QP with a 16 KiB send queue",
        Wire::Dc => "no QP (the context's 4 DCIs and its DCT are shared)",
    };
    format!(
        "copyrpc-bench {side} memory ({}): context {} KiB resident; per endpoint {:.1} KiB \
         resident over {n} endpoints, holding 2 rings of {} B and {qp}",
        common.transport,
        rss1.saturating_sub(rss0) / 1024,
        per as f64 / 1024.0,
        common.ring,
    )
}

/// Prints `e` and exits with status 1.
fn die(e: &dyn std::fmt::Display) -> ! {
    eprintln!("copyrpc-bench: {e}");
    std::process::exit(1)
}

fn server(common: Common, listen: SocketAddr) {
    let listener = Listener::bind(listen).unwrap_or_else(|e| {
        eprintln!("copyrpc-bench: {e}");
        std::process::exit(1)
    });
    // Announce the port (for --spawn) once listening.
    println!("LISTENING {}", listener.local_addr().unwrap());
    let per = common.endpoints.div_ceil(common.threads);
    let threads: Vec<_> = (0..common.threads)
        .map(|t| {
            let l = listener.tcp_clone();
            let common = common.clone();
            std::thread::spawn(move || {
                let dev = device(&common, "sim1");
                let n = per.min(common.endpoints - (t * per).min(common.endpoints));
                let serve = Serve {
                    l: &l,
                    common: &common,
                    n,
                };
                if let Err((_, e)) = run_on_device_as(dev, common.transport, serve) {
                    die(&e)
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

/// The context both TCP sides build for `n` endpoints: the same ring size on
/// both ends, an SRQ and CQ sized for deep windows.
fn builder(common: &Common, n: usize) -> ContextBuilder {
    let idle = match common.idle {
        Idle::Spin => IdlePolicy::Spin,
        Idle::Sleep => IdlePolicy::sleep_after(Duration::from_micros(common.spin_us)),
    };
    ContextBuilder::new()
        .idle(idle)
        .ring_size(common.ring)
        .max_endpoints(n.max(1) as u32)
        .srq_size(4096)
        .cq_size(16384)
}

/// One server thread on transport `T`: accepts `n` endpoints and echoes
/// until every client is gone.
/// One server thread: `n` endpoints accepted on `l`.
struct Serve<'a> {
    l: &'a Listener,
    common: &'a Common,
    n: usize,
}

impl OnTransport for Serve<'_> {
    type Output = ();
    fn run<T: Transport>(self, dev: Device) {
        serve::<T>(&dev, self.l, self.common, self.n)
    }
}

fn serve<T: Transport>(dev: &Device, l: &Listener, common: &Common, n: usize) {
    let rss0 = resident_bytes();
    let mut ctx = builder(common, n)
        .build_on::<T, _, _>(dev, |_: u64, _| {})
        .unwrap_or_else(|e| die(&e));
    let rss1 = resident_bytes();
    // A client whose setup fails (another ring size, a dropped connection)
    // is told so by the setup itself; the server waits for the next one.
    let mut conns = copyrpc::conn::LiveSet::new().unwrap_or_else(|e| die(&e));
    let mut accepted = 0;
    while accepted < n {
        match l.accept(&mut ctx) {
            Ok(c) => match conns.insert(c) {
                Ok(()) => accepted += 1,
                Err((_, e)) => eprintln!("copyrpc-bench: a client's connection: {e}"),
            },
            Err(e) => eprintln!("copyrpc-bench: a client's setup failed: {e}"),
        }
    }
    eprintln!("{}", memory_line("server", common, n, rss0, rss1));
    let mut i = 0u64;
    let mut last_check = Instant::now();
    // Replies echo the request; one buffer, reused.
    let mut out = vec![0u8; 1 << 16];
    while !conns.is_empty() {
        // Sleeps when idle (--idle sleep); the timeout bounds the liveness
        // checks' period.
        let n = ctx
            .wait(Duration::from_millis(100))
            .unwrap_or_else(|e| die(&e));
        while let Some(h) = ctx.recv() {
            let len = match ctx.request(&h) {
                Some(d) => {
                    let len = d.len().min(h.max_response()).min(out.len());
                    out[..len].copy_from_slice(&d[..len]);
                    len
                }
                None => 0,
            };
            let _ = ctx.reply(h, &out[..len]);
        }
        // Liveness: every 100 ms (one read per connection), not per poll.
        i += 1;
        if (n == 0 || i % 1024 == 0) && last_check.elapsed() >= Duration::from_millis(100) {
            last_check = Instant::now();
            // A dead connection's endpoint is removed: its QP and
            // rings are freed.
            conns.retain_live(&mut ctx);
        }
    }
    if common.idle == Idle::Sleep {
        eprintln!("copyrpc-bench server: slept {} times", ctx.sleeps());
    }
}

/// A client thread's figures, shared by its loop and its response callback.
struct Shared {
    hist: Histogram<u64>,
    done: u64,
    failed: u64,
    measuring: bool,
}

impl Shared {
    /// Nothing counted, not measuring yet (warming up).
    fn new() -> Shared {
        Shared {
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap(),
            done: 0,
            failed: 0,
            measuring: false,
        }
    }

    /// The warm-up is over: counting starts from zero.
    fn start_measuring(&mut self) {
        self.measuring = true;
        self.done = 0;
        self.hist.reset();
    }
}

/// The response callback of a client thread: counts responses (while
/// measuring) and failures into `shared`, and records the round trip of the
/// calls that carry their start time.
///
/// User data: the call's start time in ns since `clock`'s origin, for one
/// call in 16 (0 for the others: two clock reads per call would be a
/// measurable share of a 32-byte RPC).
fn recorder(
    shared: Rc<RefCell<Shared>>,
    clock: Clock,
) -> impl FnMut(u64, Result<&[u8], CallFailed>) {
    move |t0: u64, r: Result<&[u8], CallFailed>| {
        let mut s = shared.borrow_mut();
        match r {
            Ok(_) if s.measuring => {
                s.done += 1;
                if t0 != 0 {
                    let _ = s.hist.record(clock.ns().saturating_sub(t0).max(1));
                }
            }
            Ok(_) => {}
            Err(_) => s.failed += 1,
        }
    }
}

/// One client thread: its endpoints and its load.
struct ClientThread {
    common: Common,
    /// Server address.
    addr: SocketAddr,
    /// Endpoints, and how many of them carry traffic.
    n: usize,
    busy: usize,
    payload: usize,
    depth: usize,
    /// Calls between polls (0: poll once the window is full).
    poll_every: usize,
    warm: Duration,
    dur: Duration,
    /// Pause after each completed window.
    think: Option<Duration>,
}

impl ClientThread {
    fn start(self) -> (u64, Histogram<u64>, u64) {
        let dev = device(&self.common, "sim0");
        let wire = self.common.transport;
        run_on_device_as(dev, wire, self).unwrap_or_else(|(_, e)| die(&e))
    }
}

impl OnTransport for ClientThread {
    type Output = (u64, Histogram<u64>, u64);
    fn run<T: Transport>(self, dev: Device) -> Self::Output {
        client_on::<T>(&dev, self)
    }
}

/// A client thread on transport `T`.
fn client_on<T: Transport>(dev: &Device, job: ClientThread) -> (u64, Histogram<u64>, u64) {
    let ClientThread {
        common,
        addr,
        n,
        busy,
        payload,
        depth,
        poll_every,
        warm,
        dur,
        think,
    } = job;
    let common = &common;
    let shared = Rc::new(RefCell::new(Shared::new()));
    let clock = Clock::new();
    let handler = recorder(shared.clone(), clock);
    let rss0 = resident_bytes();
    let mut ctx = builder(common, n)
        .build_on::<T, _, _>(dev, handler)
        .unwrap_or_else(|e| die(&e));
    let rss1 = resident_bytes();
    let conns: Vec<_> = (0..n)
        .map(|_| connect(addr, &mut ctx).unwrap_or_else(|e| die(&format!("{addr}: {e}"))))
        .collect();
    eprintln!("{}", memory_line("client", common, n, rss0, rss1));
    let eps: Vec<_> = conns.iter().take(busy).map(|c| c.endpoint()).collect();
    let data = vec![0x5au8; payload];
    let start = Instant::now();
    let mut inflight = vec![0usize; eps.len()];
    let mut iter = 0u64;
    let mut el = Duration::ZERO;
    let mut seq = 0u64;
    let batch = if poll_every == 0 {
        usize::MAX
    } else {
        poll_every
    };
    let mut unpolled = 0usize;
    loop {
        iter += 1;
        if iter % 256 == 0 || think.is_some() {
            el = start.elapsed();
        }
        if el >= warm && !shared.borrow().measuring {
            shared.borrow_mut().start_measuring();
        }
        if el >= warm + dur {
            break;
        }
        for (k, &ep) in eps.iter().enumerate() {
            while inflight[k] < depth {
                seq += 1;
                let t0 = if seq % 16 == 0 || depth == 1 {
                    clock.ns().max(1)
                } else {
                    0
                };
                match ctx.call(ep, &data, payload, t0) {
                    Ok(()) => {
                        inflight[k] += 1;
                        unpolled += 1;
                        if unpolled >= batch {
                            unpolled = 0;
                            ctx.poll();
                        }
                    }
                    Err(_) => break,
                }
            }
        }
        if let Err(e) = ctx.wait(Duration::from_millis(100)) {
            die(&e);
        }
        // Responses free slots: recount from the per-endpoint pending calls.
        for (k, &ep) in eps.iter().enumerate() {
            inflight[k] = ctx.pending_calls(ep);
        }
        if let Some(t) = think {
            if inflight.iter().all(|&f| f == 0) {
                std::thread::sleep(t);
            }
        }
    }
    let s = shared.borrow();
    if common.idle == Idle::Sleep {
        eprintln!("copyrpc-bench client thread: slept {} times", ctx.sleeps());
    }
    (s.done, s.hist.clone(), s.failed)
}

/// Starts the server as a child process of this binary, on a software
/// fabric (`MLX5_SIM_FABRIC`, or one of this process's own, which the
/// child inherits) with `common`'s settings; returns it and the address it
/// announces.
fn spawn_server(common: &Common) -> (std::process::Child, SocketAddr) {
    let fabric = std::env::var("MLX5_SIM_FABRIC")
        .unwrap_or_else(|_| format!("bench-{}", std::process::id()));
    std::env::set_var("MLX5_SIM_FABRIC", &fabric);
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--ring",
            &common.ring.to_string(),
        ])
        .args([
            "--threads",
            &common.threads.to_string(),
            "--endpoints",
            &common.endpoints.to_string(),
            "--idle",
            match common.idle {
                Idle::Sleep => "sleep",
                Idle::Spin => "spin",
            },
            "--spin-us",
            &common.spin_us.to_string(),
            "--transport",
            &common.transport.to_string(),
        ])
        .args(
            common
                .device
                .as_ref()
                .map(|_| vec!["--device".to_string(), "sim1".to_string()])
                .unwrap_or_default(),
        )
        .env("MLX5_SIM_FABRIC", &fabric)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(c.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("LISTENING ")
        .expect("server announces its port")
        .parse()
        .unwrap();
    (c, addr)
}

/// The `client` command: runs the load on its threads and prints the result.
fn client(args: ClientArgs) {
    let ClientArgs {
        common,
        connect: mut addr,
        spawn,
        payload,
        depth,
        poll_every,
        busy,
        duration,
        think_us,
    } = args;
    let mut child = None;
    if spawn {
        let (c, at) = spawn_server(&common);
        addr = at;
        child = Some(c);
    }
    let busy = busy
        .unwrap_or(common.endpoints)
        .min(common.endpoints)
        .max(1);
    let per = common.endpoints.div_ceil(common.threads);
    let warm = Duration::from_secs(1);
    let dur = Duration::from_secs_f64(duration);
    let threads: Vec<_> = (0..common.threads)
        .map(|t| {
            let common = common.clone();
            let n = per.min(common.endpoints - (t * per).min(common.endpoints));
            let b = busy.div_ceil(common.threads).min(n);
            std::thread::spawn(move || {
                ClientThread {
                    common,
                    addr,
                    n,
                    busy: b,
                    payload,
                    depth,
                    poll_every,
                    warm,
                    dur,
                    think: (think_us > 0).then(|| Duration::from_micros(think_us)),
                }
                .start()
            })
        })
        .collect();
    let mut done = 0;
    let mut failed = 0;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    for t in threads {
        let (d, h, f) = t.join().unwrap();
        done += d;
        failed += f;
        hist.add(h).unwrap();
    }
    let mrps = done as f64 / dur.as_secs_f64() / 1e6;
    println!(
        "copyrpc ({}): {payload} B, {} endpoints ({busy} busy), depth {depth}{}{}, idle {}, {} thread(s): {mrps:.3} Mrps; round trip p50 {:.2} us, p99 {:.2} us, p99.9 {:.2} us{}",
        common.transport,
        common.endpoints,
        if poll_every > 0 {
            format!(" (poll every {poll_every})")
        } else {
            String::new()
        },
        if think_us > 0 {
            format!(", think {think_us} us")
        } else {
            String::new()
        },
        match common.idle {
            Idle::Sleep => format!("sleep after {} us", common.spin_us),
            Idle::Spin => "spin".into(),
        },
        common.threads,
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
        hist.value_at_quantile(0.999) as f64 / 1000.0,
        if failed > 0 { format!(" ({failed} failed)") } else { String::new() }
    );
    if let Some(mut c) = child {
        let _ = c.wait();
        #[cfg(feature = "sim")]
        if let Ok(f) = std::env::var("MLX5_SIM_FABRIC") {
            mlx5::sim::fabric::Fabric::remove_if_unused(&f);
        }
    }
}

fn main() {
    match Args::parse().cmd {
        Cmd::Server { common, listen } => server(common, listen),
        Cmd::Client(args) => client(args),
        #[cfg(feature = "mpi")]
        Cmd::Mpi {
            device,
            ring,
            payload,
            depth,
            duration,
        } => mpi_bench(device, ring, payload, depth, duration),
    }
}
