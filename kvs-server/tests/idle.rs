//! An idle server sleeps: with two workers, a connected client and the
//! metrics endpoint, after a second of idling it uses under 2% of one core
//! over the next two seconds (its CPU time read from /proc), and the first
//! request after the idle stretch is answered. With `--busy-poll` the same server spins, which the
//! same reading shows (so the reading can tell the two apart).

use std::time::{Duration, Instant};

use kvs_client::{ClientOptions, OwnedReply};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{connect, ServerProcess};

/// The CPU time process `pid`'s threads have used: the sum of their
/// schedstat run times (nanoseconds), or where the kernel keeps no
/// schedstat, the process's user + system time (clock ticks).
fn cpu_of(pid: u32) -> Duration {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let mut ns = 0u64;
    for t in tasks {
        let Ok(s) = std::fs::read_to_string(t.unwrap().path().join("schedstat")) else {
            return cpu_ticks_of(pid);
        };
        ns += s.split_whitespace().next().unwrap().parse::<u64>().unwrap();
    }
    Duration::from_nanos(ns)
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
/// key, idles `idle`, then measures the server's CPU over `window`; returns
/// that CPU time, after checking the first request after it is answered.
fn idle_cpu(tag: &str, args: &[&str], idle: Duration, window: Duration) -> Duration {
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
    let (c0, t0) = (cpu_of(pid), Instant::now());
    std::thread::sleep(window);
    let cpu = cpu_of(pid) - c0;
    let wall = t0.elapsed();
    // The first request after the idle stretch.
    let t = Instant::now();
    let got = c.wait_for(|c, t| c.get(b"key7", t)).unwrap();
    assert_eq!(got, OwnedReply::Value(b"value".to_vec()));
    eprintln!(
        "{tag}: {cpu:?} of CPU in {wall:?} ({:.2}% of a core); the first request after idling took {:?}",
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        t.elapsed()
    );
    drop(c);
    drop(server);
    Fabric::remove_if_unused(&fabric);
    cpu
}

#[test]
fn an_idle_server_sleeps_and_answers_the_first_request_after() {
    let window = Duration::from_secs(2);
    // With the metrics endpoint on, as an operator runs it.
    let cpu = idle_cpu(
        "sleep",
        &["--metrics-listen", "127.0.0.1:0"],
        Duration::from_secs(1),
        window,
    );
    assert!(
        cpu < window / 50,
        "an idle 2-worker server used {cpu:?} of CPU in {window:?} (limit: 2% of one core)"
    );
}

#[test]
fn a_busy_polling_server_spins() {
    let window = Duration::from_secs(1);
    let cpu = idle_cpu("spin", &["--busy-poll"], Duration::from_millis(200), window);
    // Two spinning workers: five times the sleeping server's limit or more,
    // even when they share the machine's two cores with a build.
    assert!(
        cpu > window / 10,
        "a busy-polling server used only {cpu:?} of CPU in {window:?}"
    );
}
