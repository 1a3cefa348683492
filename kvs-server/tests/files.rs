//! Open files: the server raises its open-file limit to the hard maximum
//! (each client holds a TCP connection per worker) and says so when even
//! that is too low for its settings; and out of descriptors, its acceptor
//! drops the oldest waiting setups so that a good client still gets in.

use std::os::unix::process::CommandExt;

use mlx5::sim::fabric::Fabric;

mod support;
use support::ServerProcess;

/// The soft and hard open-file limits of process `pid`, from /proc.
fn open_files(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[3].parse().unwrap(), f[4].parse().unwrap())
}

/// kvs-server on `fabric` started with open-file limits `soft` and `hard`
/// (and flags `extra`).
fn start_limited(fabric: &str, soft: u64, hard: u64, extra: &[&str]) -> ServerProcess {
    let mut cmd = ServerProcess::command_on(fabric, extra);
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    ServerProcess::start_command(cmd)
}

#[test]
fn the_open_file_limit_is_raised_to_the_hard_one_or_the_shortfall_said() {
    let fabric = format!("kvs-files-{}", std::process::id());
    // The hard limit of this test process bounds what a child may get.
    let (_, hard) = open_files(std::process::id());
    let hard = hard.min(1 << 20);
    if hard >= 4096 {
        let s = start_limited(&fabric, 256, hard, &["--workers", "1"]);
        assert_eq!(open_files(s.child.id()), (hard, hard));
        let out = s.output();
        assert!(!out.contains("open-file limit"), "{out}");
    }
    // One worker, 1024 endpoints, 1024 setups: 300 is too few.
    let s = start_limited(&fabric, 300, 300, &["--workers", "1"]);
    assert_eq!(open_files(s.child.id()), (300, 300));
    let out = s.output();
    assert!(
        out.contains(" WARN kvs_server: the open-file limit is 300; 2112 would"),
        "{out}"
    );
    Fabric::remove_if_unused(&fabric);
}

/// Out of descriptors: a server whose limit is 64 faces 200 idle
/// connections. Its acceptor makes room by dropping the oldest waiting ones
/// (accept(2) fails with EMFILE), so a good client still connects and is
/// answered while the idle ones stay open, and the server goes on.
#[test]
fn out_of_descriptors_the_oldest_waiting_peers_make_room() {
    use kvs_client::{ClientOptions, OwnedReply};
    use std::time::{Duration, Instant};
    let fabric = format!("kvs-files-emfile-{}", std::process::id());
    let s = start_limited(
        &fabric,
        64,
        64,
        &["--workers", "1", "--metrics-listen", "127.0.0.1:0"],
    );
    let idle: Vec<std::net::TcpStream> = (0..200)
        .map(|_| std::net::TcpStream::connect(s.addr).unwrap())
        .collect();
    // Let the acceptor meet EMFILE with all of them queued.
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let mut c = support::connect(s.addr, &fabric, ClientOptions::default())
        .unwrap_or_else(|e| panic!("a good client beside 200 idle sockets: {e}"));
    c.wait_for(|c, t| c.put(b"k", b"v", t)).unwrap();
    assert_eq!(
        c.wait_for(|c, t| c.get(b"k", t)).unwrap(),
        OwnedReply::Value(b"v".to_vec())
    );
    let took = t.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?}");
    drop(idle);
    drop(c);
    // The acceptor did meet EMFILE: it evicted waiting peers.
    let printed = s.printed();
    let metrics = printed
        .lines()
        .find_map(|l| l.strip_prefix("kvs-server: metrics on http://"))
        .and_then(|l| l.strip_suffix("/metrics"))
        .expect("the metrics address")
        .to_owned();
    let evicted = evicted_setups(&metrics);
    assert!(
        evicted > 0.0,
        "no setup was evicted: the limit was never met"
    );
    let out = s.output();
    assert!(!out.contains("panicked"), "{out}");
    eprintln!(
        "connected and answered in {took:?} beside 200 idle sockets with 64 descriptors \
         ({evicted} waiting setups evicted)"
    );
    Fabric::remove_if_unused(&fabric);
}

/// `kvs_setups_total{result="evicted"}` from the metrics endpoint at `addr`.
fn evicted_setups(addr: &str) -> f64 {
    use std::io::{Read, Write};
    let mut t = std::net::TcpStream::connect(addr).unwrap();
    t.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    t.read_to_string(&mut body).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix("kvs_setups_total{result=\"evicted\"} "))
        .unwrap_or_else(|| panic!("no evicted count in {body}"))
        .trim()
        .parse()
        .unwrap()
}
