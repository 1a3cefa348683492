//! The Redis backend against a real redis-server (Debian's), started here on
//! a free port: load and run with every value read checked. Ignored unless
//! asked for (`.ci/run` installs redis-server and runs it):
//! `cargo test -p ycsb-driver --test redis -- --ignored`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{ok_count, output_within, report_value};

struct Redis(Child, u16);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis() -> Redis {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (apt-get install redis-server)");
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Redis(child, port)
}

fn drive(cmd: &str, w: &str, port: u16, depth: &str, write_all: bool) -> String {
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_ycsb-driver"))
            .args([cmd, "redis", "-P", w, "-p", "recordcount=300"])
            .args(["-p", &format!("writeallfields={write_all}")])
            .args(["-p", "operationcount=3000", "-p", "dataintegrity=true"])
            .args(["-p", &format!("redis.port={port}"), "-threads", "2"])
            .args(["--depth", depth]),
        120,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "needs redis-server (apt-get install redis-server)"]
fn workloads_against_redis_every_read_checked() {
    let r = redis();
    let load = drive("load", "workloada", r.1, "8", false);
    assert_eq!(ok_count(&load, "INSERT"), 300, "{load}");
    // F again writing whole records (`writeallfields`).
    let runs = [
        ("workloada", "1", false),
        ("workloadf", "8", false),
        ("workloade", "4", false),
        ("workloadf", "8", true),
    ];
    for (w, depth, write_all) in runs {
        let run = drive("run", w, r.1, depth, write_all);
        assert!(!run.contains("Return=ERROR"), "{w}: {run}");
        assert!(!run.contains("UNEXPECTED_STATE"), "{w}: {run}");
        let ops = ok_count(&run, "READ")
            + ok_count(&run, "UPDATE")
            + ok_count(&run, "SCAN")
            + ok_count(&run, "INSERT")
            - report_value(&run, "READ-MODIFY-WRITE", "Operations");
        assert_eq!(ops, 3000, "{w}: {run}");
    }
}
