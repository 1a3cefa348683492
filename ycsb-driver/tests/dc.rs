//! YCSB over DC: the driver binary, with `-p kvs.transport=dc`, against a
//! kvs-server whose `transport` is `dc` (its workers receive through one DC
//! target each), every operation `Return=OK` and every value read checked;
//! a driver on the other transport is told so.

use std::process::Command;

use copyrpc::transport::Wire;
use kvs_server::{Config, Server};

mod support;
use mlx5::sim::fabric::Fabric;
use support::{ok_count, output_within};

fn server(fabric: &str) -> Server {
    Server::start(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric.into()),
        workers: 2,
        stats_interval_s: 0,
        transport: Wire::Dc,
        ..Config::default()
    })
    .unwrap()
}

fn driver(cmd: &str, addr: &str, fabric: &str, transport: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ycsb-driver"));
    c.args([cmd, "-P", "workloada", "-p", "recordcount=500"])
        .args(["-p", "operationcount=4000", "-p", "dataintegrity=true"])
        .args(["-threads", "4", "--depth", "8", "--server", addr])
        .args([
            "-p",
            &format!("kvs.fabric={fabric}"),
            "-p",
            "kvs.device=sim0",
        ])
        .args(["-p", &format!("kvs.transport={transport}")]);
    c
}

#[test]
fn workload_a_over_dc_every_operation_ok() {
    let fabric = format!("ycsb-dc-{}", std::process::id());
    let s = server(&fabric);
    let addr = s.addr().to_string();
    let load = output_within(&mut driver("load", &addr, &fabric, "dc"), 120);
    let out = String::from_utf8_lossy(&load.stdout);
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    assert!(out.contains("[INSERT], Return=OK, 500"), "{out}");
    let run = output_within(&mut driver("run", &addr, &fabric, "dc"), 120);
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        ok_count(&out, "READ") + ok_count(&out, "UPDATE"),
        4000,
        "{out}"
    );
    assert!(
        !out.contains("Return=ERROR") && !out.contains("NOT_FOUND") && !out.contains("UNEXPECTED"),
        "{out}"
    );
    s.shutdown();
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_driver_on_rc_against_a_dc_server_is_told_why() {
    let fabric = format!("ycsb-dcrc-{}", std::process::id());
    let s = server(&fabric);
    let out = output_within(
        &mut driver("run", &s.addr().to_string(), &fabric, "rc"),
        120,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("on DC") && err.contains("on RC"), "{err}");
    s.shutdown();
    Fabric::remove_if_unused(&fabric);
}
