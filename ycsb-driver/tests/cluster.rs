//! YCSB workload A across a cluster of three kvs-server processes while slots
//! move: half of one member's slots go to another and back, then a
//! rebalance spreads them over all three. Every operation must be OK and
//! every read verified (`dataintegrity`); afterwards the keys summed over
//! the members are the records loaded, and the members and the driver agree
//! on the map version.

use kvs_proto::MemberId;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus};
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{ok_count, report_value};

/// Set in a child process: "FABRIC" or "FABRIC JOIN_ADDR".
const CHILD: &str = "YCSB_CLUSTER_MEMBER";
const SLOTS: u32 = 512;
const RECORDS: u64 = 3000;

/// Runs in a child process only: a cluster member that prints its address
/// and serves until it is killed.
#[test]
fn child_member() {
    let Ok(v) = std::env::var(CHILD) else {
        return;
    };
    // Its log on stderr, which the parent keeps and shows when a test fails.
    kvs_server::logging::init("info", kvs_server::logging::LogFormat::Plain).unwrap();
    let mut it = v.split(' ');
    let fabric = it.next().unwrap().to_owned();
    let s = Server::start(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric),
        workers: 2,
        slots: SLOTS,
        max_value: 4096,
        stats_interval_s: 0,
        join: it.next().map(str::to_owned),
        ..Config::default()
    })
    .unwrap();
    println!("ADDR {}", s.addr());
    s.wait();
}

/// A member process, killed when dropped.
struct Member {
    child: Child,
    addr: SocketAddr,
}

impl Member {
    fn start(fabric: &str, join: Option<SocketAddr>) -> Member {
        let arg = match join {
            Some(j) => format!("{fabric} {j}"),
            None => fabric.to_owned(),
        };
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_member", "--nocapture", "--test-threads=1"])
            .env(CHILD, arg)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some((_, a)) = l.split_once("ADDR ") {
                        break a.trim().parse().unwrap();
                    }
                }
                _ => panic!("a member process never said where it listens"),
            }
        };
        // The rest of its output is not needed; keep the pipe drained.
        std::thread::spawn(move || for _ in lines {});
        Member { child, addr }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn control(fabric: &str) -> ControlClient {
    let dev = copyrpc::transport::DeviceSpec {
        name: "sim0",
        fabric: Some(fabric),
        software: "sim0",
    }
    .open()
    .unwrap();
    ControlClient::new(&dev, ControlOptions::default()).unwrap()
}

fn status(cc: &mut ControlClient, addr: SocketAddr) -> MemberStatus {
    match cc.request(addr, &ControlRequest::Status).unwrap() {
        ControlReply::Status(s) => s,
        other => panic!("{other:?}"),
    }
}

/// Starts a migration at the keeper and waits for its end.
fn migrate(cc: &mut ControlClient, keeper: SocketAddr, req: ControlRequest) {
    let r = cc.request(keeper, &req).unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{req:?}: {r:?}");
    let t = Instant::now();
    loop {
        let m = status(cc, keeper).migration.unwrap();
        if m.finished {
            assert_eq!(m.error, None, "{req:?}");
            assert!(!m.cancelled);
            assert_eq!(m.slots_done, m.slots_total);
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{req:?} never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn driver(cmd: &str, fabric: &str, server: SocketAddr) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ycsb-driver"));
    c.args([cmd, "-P", "workloada", "-p"])
        .arg(format!("recordcount={RECORDS}"))
        .args(["-p", "dataintegrity=true", "-p", "fieldcount=4"])
        .args(["-p", "fieldlength=100", "--depth", "16"])
        .args(["--server", &server.to_string(), "-p"])
        .arg(format!("kvs.fabric={fabric}"))
        .args(["-p", "kvs.device=sim0"]);
    c
}

#[test]
fn workload_a_runs_clean_while_slots_move_back_and_forth() {
    let fabric = format!("ycsb-cluster-{}", std::process::id());
    let a = Member::start(&fabric, None);
    let b = Member::start(&fabric, Some(a.addr));
    let c = Member::start(&fabric, Some(a.addr));
    let mut cc = control(&fabric);

    let load = support::output_within(driver("load", &fabric, a.addr).args(["-threads", "2"]), 120);
    let out = String::from_utf8_lossy(&load.stdout);
    assert!(
        load.status.success(),
        "{}\n{out}",
        String::from_utf8_lossy(&load.stderr)
    );
    assert_eq!(ok_count(&out, "INSERT"), RECORDS, "{out}");

    for threads in ["2", "3"] {
        // The driver bootstraps from a member that owns nothing yet, or
        // from the keeper, and runs until every move is over and 1 s more.
        let contact = if threads == "2" { c.addr } else { a.addr };
        let mut run = driver("run", &fabric, contact)
            .args(["-threads", threads, "-p", "operationcount=1000000000"])
            .args([
                "-p",
                "maxexecutiontime=600",
                "-s",
                "-p",
                "status.interval=1",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(run.stderr.take().unwrap());
        let mut line = String::new();
        let t = Instant::now();
        while !line.contains("current ops/sec") {
            line.clear();
            assert!(
                err.read_line(&mut line).unwrap() > 0,
                "the driver ended early"
            );
            assert!(t.elapsed() < Duration::from_secs(60));
        }
        let err_rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let mut stdout = run.stdout.take().unwrap();
        let out_rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        // Half of the keeper's slots to member 1, and back.
        let half = SLOTS / 2;
        let keeper = a.addr;
        migrate(
            &mut cc,
            keeper,
            ControlRequest::Migrate {
                first: 0,
                end: half,
                to: MemberId(1),
            },
        );
        migrate(
            &mut cc,
            keeper,
            ControlRequest::Migrate {
                first: 0,
                end: half,
                to: MemberId(0),
            },
        );
        // Spread over all three (the second round finds them spread).
        match cc.request(keeper, &ControlRequest::Rebalance).unwrap() {
            ControlReply::Started(_) => {
                let t = Instant::now();
                loop {
                    let m = status(&mut cc, keeper).migration.unwrap();
                    if m.finished {
                        assert_eq!((m.error, m.slots_done), (None, m.slots_total));
                        break;
                    }
                    assert!(t.elapsed() < Duration::from_secs(60));
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            ControlReply::Ok => assert_eq!(threads, "3", "the first rebalance moved nothing"),
            other => panic!("{other:?}"),
        }
        std::thread::sleep(Duration::from_secs(1));
        // Ctrl-C ends the run with the report of what was done.
        // SAFETY: kill(2) of a child this test spawned and has not reaped.
        unsafe {
            libc::kill(run.id() as libc::pid_t, libc::SIGINT);
        }
        let t = Instant::now();
        let st = loop {
            if let Some(st) = run.try_wait().unwrap() {
                break st;
            }
            if t.elapsed() > Duration::from_secs(30) {
                let _ = run.kill();
                panic!("the driver did not end after Ctrl-C");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = out_rest.join().unwrap();
        let err = err_rest.join().unwrap();
        assert!(st.success(), "{st}: {err}\n{out}");
        assert!(err.contains("interrupted"), "{err}");
        // Every operation OK, every read verified.
        let reads = ok_count(&out, "READ");
        let updates = ok_count(&out, "UPDATE");
        assert!(reads > 1000 && updates > 1000, "{out}");
        for l in out.lines().filter(|l| l.contains("Return=")) {
            assert!(l.contains("Return=OK"), "{l}\n{out}");
        }
        assert_eq!(report_value(&out, "READ", "Operations"), reads, "{out}");
        // The members and the driver agree on the map.
        let versions: Vec<u32> = [a.addr, b.addr, c.addr]
            .iter()
            .map(|&m| status(&mut cc, m).map_version)
            .collect();
        assert!(versions.windows(2).all(|w| w[0] == w[1]), "{versions:?}");
        assert!(
            err.contains(&format!("shard map version {} at the end", versions[0])),
            "{versions:?}: {err}"
        );
        // Every record is somewhere, once (workload A inserts nothing).
        let t = Instant::now();
        loop {
            let keys: u64 = [a.addr, b.addr, c.addr]
                .iter()
                .map(|&m| {
                    status(&mut cc, m)
                        .workers
                        .iter()
                        .map(|w| w.keys)
                        .sum::<u64>()
                })
                .sum();
            if keys == RECORDS {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "{keys} keys");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    drop((a, b, c));
    Fabric::remove_if_unused(&fabric);
}
