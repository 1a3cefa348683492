//! A dead server stops the driver: `kill -9` of the server process under
//! YCSB load, and the driver exits non-zero within 10 s, with the report of
//! what completed and an error line naming the lost server.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

mod support;
use support::report_value;
use test_support::{kill9, KillOnDrop};

/// Names the fabric of the server the child process runs.
const SERVER_FABRIC: &str = "YCSB_DEAD_SERVER_FABRIC";

/// Runs in the child process only (does nothing in a normal test run): a
/// kvs-server that prints its address and serves until it is killed.
#[test]
fn child_server() {
    let Ok(fabric) = std::env::var(SERVER_FABRIC) else {
        return;
    };
    // Its log on stderr, which the parent keeps and shows when a test fails.
    kvs_server::logging::init("info", kvs_server::logging::LogFormat::Plain).unwrap();
    let s = Server::start(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric),
        workers: 2,
        stats_interval_s: 0,
        ..Config::default()
    })
    .unwrap();
    println!("ADDR {}", s.addr());
    s.wait();
}

#[test]
fn a_killed_server_stops_the_driver_with_a_report_and_an_error() {
    let fabric = format!("ycsb-dead-{}", std::process::id());
    let mut server = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_server", "--nocapture", "--test-threads=1"])
            .env(SERVER_FABRIC, &fabric)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(server.0.stdout.take().unwrap()).lines();
    let addr = loop {
        match lines.next() {
            // After the test harness's "test child_server ... ".
            Some(Ok(l)) => {
                if let Some((_, a)) = l.split_once("ADDR ") {
                    break a.trim().to_owned();
                }
            }
            _ => panic!("the server process never said where it listens"),
        }
    };
    let (threads, depth) = (2u64, 16u64);
    let mut driver = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_ycsb-driver"))
            .args(["run", "-P", "workloadc", "-p", "recordcount=1000"])
            .args([
                "-p",
                "operationcount=1000000000",
                "-s",
                "-p",
                "status.interval=1",
            ])
            .args([
                "-threads",
                &threads.to_string(),
                "--depth",
                &depth.to_string(),
            ])
            .args(["--server", &addr, "-p"])
            .arg(format!("kvs.fabric={fabric}"))
            .args(["-p", "kvs.device=sim0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Status lines on stderr say when operations are being done.
    let support::DriverOutput {
        status: rx,
        stdout: out_reader,
        stderr: err_reader,
    } = support::read_driver(&mut driver.0);
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        kill9(&mut driver.0);
        kill9(&mut server.0);
        panic!("the driver never got going: {}", err_reader.join().unwrap());
    }
    // Under load: the server dies without any cleanup.
    kill9(&mut server.0);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = driver.0.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(10) {
            kill9(&mut driver.0);
            panic!(
                "the driver was still running 10 s after its server died: {}",
                err_reader.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t.elapsed();
    let err = err_reader.join().unwrap();
    let out = out_reader.join().unwrap();
    eprintln!("the driver exited {status} {took:?} after the kill");
    assert_eq!(status.code(), Some(1), "{err}\n{out}");
    assert!(
        err.contains(&format!("lost the connection to the server at {addr}")),
        "{err}"
    );
    // The report covers what completed: some operations, far from all, and
    // as errors only those that were on the wire when the server died.
    let answered =
        report_value(&out, "READ", "Return=NOT_FOUND") + report_value(&out, "READ", "Return=OK");
    assert!(answered > 0 && answered < 1_000_000_000, "{out}");
    let errors = report_value(&out, "READ", "Return=ERROR");
    assert!(
        (1..=threads * depth).contains(&errors),
        "{errors} errors: {out}"
    );
    assert!(
        err.contains(&format!(
            "the {} of 1000000000 operations",
            answered + errors
        )),
        "{err}\n{out}"
    );
    Fabric::remove_if_unused(&fabric);
}
