//! Workloads A-F end to end against a kvs-server on the software device:
//! embedded (driver threads and server in this process) and as two processes
//! (the ycsb-driver binary against this process's server), every operation
//! `Return=OK` and every value read checked (`dataintegrity`).

use std::process::Command;
use std::sync::Arc;

use kvs_server::{Config, Server};

mod support;
use mlx5::sim::fabric::Fabric;
use support::{ok_count, output_within, report_value};
use ycsb_driver::db::{kvs::KvsTarget, Target};
use ycsb_driver::measure::{OpKind, Series, Status};
use ycsb_driver::properties::Properties;
use ycsb_driver::runner::{run_phase, Phase, Progress, RunOptions};
use ycsb_driver::workload::CoreWorkload;

/// The core workloads, A to F.
const WORKLOADS: [&str; 6] = [
    "workloada",
    "workloadb",
    "workloadc",
    "workloadd",
    "workloade",
    "workloadf",
];

fn server(fabric: &str, workers: u16) -> Server {
    Server::start(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric.into()),
        workers,
        stats_interval_s: 0,
        ..Config::default()
    })
    .unwrap()
}

fn workload(name: &str) -> String {
    std::fs::read_to_string(format!("{}/workloads/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn workloads_a_to_f_embedded_every_operation_ok_and_verified() {
    let fabric = format!("ycsb-wl-{}", std::process::id());
    let s = server(&fabric, 2);
    let target = Target::Kvs(KvsTarget {
        server: s.addr().to_string(),
        device: "sim0".into(),
        fabric: Some(fabric.clone()),
        auth_token: None,
        timeout: std::time::Duration::from_secs(5),
        transport: copyrpc::transport::Wire::Rc,
    });
    // Every workload, then F and A again writing whole records
    // (`writeallfields`: a read-modify-write's write is the whole record).
    let all_fields = [("workloadf", true), ("workloada", true)];
    for (w, write_all) in WORKLOADS.iter().map(|w| (*w, false)).chain(all_fields) {
        let mut p = Properties::parse(&workload(w));
        p.set("writeallfields", write_all.to_string());
        p.set("recordcount", "300");
        p.set("operationcount", "1500");
        p.set("fieldcount", "4");
        p.set("fieldlength", "50");
        p.set("zeropadding", "1");
        let wl = Arc::new(CoreWorkload::new(&p).unwrap());
        let opts = RunOptions {
            threads: 2,
            depth: 4,
            target_ops: None,
            verify: true,
            idle: Default::default(),
            seed: 7,
            max_time: None,
            interrupt: Default::default(),
            status: false,
        };
        let progress = Arc::new(Progress::default());
        // The workloads share the server and the key names; each loads its
        // records again (the same deterministic values, key by key and field
        // by field), and every read checks them.
        let load = run_phase(&wl, Phase::Load, &target, &opts, &progress).unwrap();
        assert_eq!(load.operations, 300, "{w}");
        assert_eq!(
            load.measurements.status_count(OpKind::Insert, Status::Ok),
            300,
            "{w}"
        );
        let run = run_phase(&wl, Phase::Run, &target, &opts, &progress).unwrap();
        assert_eq!(run.operations, 1500, "{w}");
        let m = &run.measurements;
        let mut ops = 0;
        for op in [OpKind::Read, OpKind::Update, OpKind::Insert, OpKind::Scan] {
            let n = m.operations(Series::Op(op));
            assert_eq!(m.status_count(op, Status::Ok), n, "{w} {op}");
            for st in Status::ALL.into_iter().filter(|s| *s != Status::Ok) {
                assert_eq!(m.status_count(op, st), 0, "{w} {op} {st}");
            }
            assert!(!m.has_series(Series::Failed(op)), "{w} {op} failed");
            ops += n;
        }
        // A read-modify-write counts once as itself and once each in READ and
        // UPDATE.
        let rmw = m.operations(Series::Op(OpKind::ReadModifyWrite));
        assert_eq!(ops - rmw, 1500, "{w}: every operation accounted for");
        match w {
            "workloadc" => assert_eq!(m.operations(Series::Op(OpKind::Read)), 1500),
            "workloade" => assert!(m.operations(Series::Op(OpKind::Scan)) > 1300),
            "workloadf" => assert!(rmw > 600),
            _ => {}
        }
    }
    s.shutdown();
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn workloads_a_to_f_with_the_driver_binary_as_a_second_process() {
    let fabric = format!("ycsb-2p-{}", std::process::id());
    let s = server(&fabric, 1);
    let drive = |cmd: &str, w: &str| {
        let out = output_within(
            Command::new(env!("CARGO_BIN_EXE_ycsb-driver"))
                .args([
                    cmd,
                    "-P",
                    w,
                    "-p",
                    "recordcount=200",
                    "-p",
                    "operationcount=2000",
                ])
                .args(["-p", "dataintegrity=true", "-threads", "2", "--depth", "4"])
                .args(["--server", &s.addr().to_string(), "-p"])
                .arg(format!("kvs.fabric={fabric}"))
                .args(["-p", "kvs.device=sim0"]),
            120,
        );
        assert!(
            out.status.success(),
            "{w} {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    for w in WORKLOADS {
        // Each workload loads its records again (the same values), and every
        // read checks them.
        let load = drive("load", w);
        assert!(load.contains("[INSERT], Return=OK, 200"), "{w}: {load}");
        let run = drive("run", w);
        assert!(run.starts_with("[OVERALL], RunTime(ms), "), "{w}: {run}");
        let ok = |op: &str| ok_count(&run, op);
        // A read-modify-write counts once in READ and once in UPDATE.
        let rmw = report_value(&run, "READ-MODIFY-WRITE", "Operations");
        assert_eq!(
            ok("READ") + ok("UPDATE") + ok("INSERT") + ok("SCAN") - rmw,
            2000,
            "{w}: every operation OK: {run}"
        );
        assert!(
            !run.contains("Return=ERROR")
                && !run.contains("Return=NOT_FOUND")
                && !run.contains("UNEXPECTED"),
            "{w}: {run}"
        );
        match w {
            "workloadc" => assert_eq!(ok("READ"), 2000, "{run}"),
            "workloadd" => assert!(ok("INSERT") > 0, "{run}"),
            "workloade" => assert!(ok("SCAN") > 1500, "{run}"),
            "workloadf" => assert!(rmw > 600, "{run}"),
            _ => {}
        }
    }
    s.shutdown();
    Fabric::remove_if_unused(&fabric);
}

/// A driver process killed in the middle of a run leaves the server serving
/// everyone else.
#[test]
fn a_client_killed_mid_run_does_not_disturb_the_others() {
    let fabric = format!("ycsb-kill-{}", std::process::id());
    let s = server(&fabric, 1);
    let addr = s.addr().to_string();
    let driver = |ops: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ycsb-driver"));
        c.args(["run", "-P", "workloadc", "-p", "recordcount=100"])
            .args(["-p", &format!("operationcount={ops}"), "--depth", "8"])
            .args(["--server", &addr, "-p"])
            .arg(format!("kvs.fabric={fabric}"))
            .args(["-p", "kvs.device=sim0"]);
        c
    };
    let mut victim = driver("1000000000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Let it connect and get going, then kill it without any cleanup.
    let t = std::time::Instant::now();
    while s.stats()[0].ops.load(std::sync::atomic::Ordering::Relaxed) < 10_000 {
        assert!(t.elapsed().as_secs() < 60, "the victim never got going");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    // Others still get every answer (their keys were never loaded: NOT_FOUND
    // is the answer; what matters is that each one comes).
    for _ in 0..2 {
        let out = output_within(&mut driver("5000"), 120);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    s.shutdown();
    Fabric::remove_if_unused(&fabric);
}

/// `maxexecutiontime` ends a run that the operation count would not: the
/// report covers what was done.
#[test]
fn maxexecutiontime_ends_the_run() {
    let t = std::time::Instant::now();
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_ycsb-driver")).args([
            "run",
            "-P",
            "workloadc",
            "-p",
            "recordcount=100",
            "-p",
            "operationcount=1000000000",
            "-p",
            "maxexecutiontime=1",
        ]),
        120,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8(out.stdout).unwrap();
    let reads = support::ok_count(&report, "READ");
    assert!(reads > 0 && reads < 1_000_000_000, "{report}");
    assert!(t.elapsed().as_secs() < 60);
}
