//! The Redis backend against a real redis-server (Debian's), started here on
//! a free port: load and run with every value read checked. Ignored unless
//! asked for (`.ci/run` installs redis-server and runs it):
//! `cargo test -p ycsb-driver --test redis -- --ignored`.

use std::process::Command;

mod support;
use support::{ok_count, output_within, report_value};
use test_support::RedisServer;

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
    let r = RedisServer::start();
    let load = drive("load", "workloada", r.port(), "8", false);
    assert_eq!(ok_count(&load, "INSERT"), 300, "{load}");
    // F again writing whole records (`writeallfields`).
    let runs = [
        ("workloada", "1", false),
        ("workloadf", "8", false),
        ("workloade", "4", false),
        ("workloadf", "8", true),
    ];
    for (w, depth, write_all) in runs {
        let run = drive("run", w, r.port(), depth, write_all);
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
