//! An idle server sleeps: with two workers, a connected client and the
//! metrics endpoint, after a second of idling its threads wake fewer than
//! `MAX_WAKES_PER_S` times a second in all and use under 5% of one core over
//! the next two seconds (both read from /proc), and the first request after
//! the idle stretch is answered. With `--busy-poll` the same server spins,
//! which the same reading shows (so the reading can tell the two apart).
//!
//! The wake count is the test's measure of the design: it does not depend on
//! the build or the machine. The CPU bound is a backstop for a thread that
//! works without sleeping. It is loose because this is a debug build on a VM,
//! where one wake-up of even an empty C sleep loop costs about 50 µs of CPU
//! and the server's timers cost 10–20 times what they cost optimized.
//! `scripts/bench-idle.sh` measures the release build (docs/performance.md).

use std::time::{Duration, Instant};

use kvs_client::{ClientOptions, OwnedReply};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{connect, ServerProcess};

/// The timers an idle server keeps, in wake-ups a second: the control
/// thread's Raft tick (10), the RDMA and bulk acceptors' stop checks (20
/// each), the metrics endpoint's (10), each worker's tick (4 each) and the
/// main thread's (4): 72. A thread that polls every millisecond adds 1,000.
const MAX_WAKES_PER_S: u64 = 150;

/// What process `pid`'s threads have used so far: CPU time, and how many
/// times they were put on a CPU (each wake-up is one).
#[derive(Clone, Copy)]
struct Usage {
    cpu: Duration,
    runs: u64,
}

/// The sums of the schedstat run times (nanoseconds) and run counts of
/// process `pid`'s threads; where the kernel keeps no schedstat, the
/// process's user + system time (clock ticks) and its threads' context
/// switches.
fn usage_of(pid: u32) -> Usage {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let (mut ns, mut runs) = (0u64, 0u64);
    for t in tasks {
        let path = t.unwrap().path();
        let Ok(s) = std::fs::read_to_string(path.join("schedstat")) else {
            return Usage {
                cpu: cpu_ticks_of(pid),
                runs: switches_of(pid),
            };
        };
        let f: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
        ns += f[0];
        runs += f[2];
    }
    Usage {
        cpu: Duration::from_nanos(ns),
        runs,
    }
}

/// The voluntary and involuntary context switches of process `pid`'s threads.
fn switches_of(pid: u32) -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if line.contains("ctxt_switches:") {
                n += line
                    .split_whitespace()
                    .last()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
            }
        }
    }
    n
}

fn cpu_ticks_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces), from field 3.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (f[11].parse().unwrap(), f[12].parse().unwrap());
    // SAFETY: sysconf takes no pointers.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_nanos((utime + stime) * 1_000_000_000 / hz)
}

/// Held by each test while it measures: a spinning server beside the
/// sleeping one takes both of a 2-core machine's cores, and the sleeper's
/// every wake-up then waits for a core and costs it more.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Starts a 2-worker server (extra `args`), connects, writes and reads one
/// key, idles `idle`, then measures the server's use over `window`; returns
/// it, after checking the first request after it is answered.
fn idle_use(tag: &str, args: &[&str], idle: Duration, window: Duration) -> Usage {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let fabric = format!("kvs-idle-{tag}-{}", std::process::id());
    let server = ServerProcess::start_on(&fabric, args);
    let mut c = connect(server.addr, &fabric, ClientOptions::default()).unwrap();
    for i in 0..100u32 {
        let k = format!("key{i}");
        c.wait_for(|c, t| c.put(k.as_bytes(), b"value", t)).unwrap();
    }
    std::thread::sleep(idle);
    let pid = server.child.id();
    let (u0, t0) = (usage_of(pid), Instant::now());
    std::thread::sleep(window);
    let u1 = usage_of(pid);
    let wall = t0.elapsed();
    let used = Usage {
        cpu: u1.cpu - u0.cpu,
        runs: u1.runs - u0.runs,
    };
    // The first request after the idle stretch.
    let t = Instant::now();
    let got = c.wait_for(|c, t| c.get(b"key7", t)).unwrap();
    assert_eq!(got, OwnedReply::Value(b"value".to_vec()));
    eprintln!(
        "{tag}: {:?} of CPU and {} wake-ups in {wall:?} ({:.2}% of a core); \
         the first request after idling took {:?}",
        used.cpu,
        used.runs,
        100.0 * used.cpu.as_secs_f64() / wall.as_secs_f64(),
        t.elapsed()
    );
    drop(c);
    drop(server);
    Fabric::remove_if_unused(&fabric);
    used
}

#[test]
fn an_idle_server_sleeps_and_answers_the_first_request_after() {
    let window = Duration::from_secs(2);
    // With the metrics endpoint on, as an operator runs it.
    let used = idle_use(
        "sleep",
        &["--metrics-listen", "127.0.0.1:0"],
        Duration::from_secs(1),
        window,
    );
    let limit = MAX_WAKES_PER_S * window.as_secs();
    assert!(
        used.runs < limit,
        "an idle 2-worker server woke {} times in {window:?} (limit: {limit})",
        used.runs
    );
    assert!(
        used.cpu < window / 20,
        "an idle 2-worker server used {:?} of CPU in {window:?} (limit: 5% of one core)",
        used.cpu
    );
}

#[test]
fn a_busy_polling_server_spins() {
    let window = Duration::from_secs(1);
    let cpu = idle_use("spin", &["--busy-poll"], Duration::from_millis(200), window).cpu;
    // Two spinning workers: twice the sleeping server's limit or more,
    // even when they share the machine's two cores with a build.
    assert!(
        cpu > window / 10,
        "a busy-polling server used only {cpu:?} of CPU in {window:?}"
    );
}
