//! The server raises its open-file limit to the hard maximum (each client
//! holds a TCP connection per worker), and says so when even that is too low
//! for its settings.

use std::os::unix::process::CommandExt;
use std::process::Command;

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

/// kvs-server on `fabric` started with open-file limits `soft` and `hard`.
fn start_limited(fabric: &str, soft: u64, hard: u64) -> ServerProcess {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kvs-server"));
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--device",
        "sim1",
        "--fabric",
        fabric,
    ]);
    cmd.args(["--stats-interval", "0"]);
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
        let s = start_limited(&fabric, 256, hard);
        assert_eq!(open_files(s.child.id()), (hard, hard));
        let out = s.output();
        assert!(!out.contains("open-file limit"), "{out}");
    }
    // One worker, 1024 endpoints, 1024 setups: 300 is too few.
    let s = start_limited(&fabric, 300, 300);
    assert_eq!(open_files(s.child.id()), (300, 300));
    let out = s.output();
    assert!(
        out.contains("WARNING: the open-file limit is 300; 2112 would"),
        "{out}"
    );
    Fabric::remove_if_unused(&fabric);
}
