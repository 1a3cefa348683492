//! The metrics endpoint: scraped over plain TCP and parsed by a Prometheus
//! text-format parser, its values match what was done (operations by type
//! and result, the latency histogram's count, keys, memory, connections,
//! refused setups); other paths get 404; a client that connects and sends
//! nothing delays no other scrape.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use kvs_client::{AuthToken, ClientOptions, ConnectError, KvError, OwnedReply};
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;
use prometheus_parse::{Sample, Value};

#[path = "support/scrape.rs"]
mod scrape;
mod support;
use scrape::{scrape, sum};
use support::{connect, temp_dir, test_config, write_file};

const TOKEN: &str = "metrics-test-token-1";
const CLUSTER_TOKEN: &str = "metrics-cluster-token-1";

fn ops(samples: &[Sample], op: &str, result: &str) -> f64 {
    sum(
        samples,
        "kvs_operations_total",
        &[("op", op), ("result", result)],
    )
}

#[test]
fn the_endpoint_reports_what_was_done() {
    let dir = temp_dir("metrics");
    let token_file = dir.join("token");
    write_file(&token_file, TOKEN, 0o600);
    let cluster_token_file = dir.join("cluster-token");
    write_file(&cluster_token_file, CLUSTER_TOKEN, 0o600);
    let fabric = format!("kvs-metrics-{}", std::process::id());
    let max_memory = 8u64 << 20;
    let server = Server::start(Config {
        auth_token_file: Some(token_file),
        cluster_token_file: Some(cluster_token_file),
        max_memory,
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..test_config(&fabric)
    })
    .unwrap();
    let m = server.metrics_addr().expect("an endpoint");
    // Before anything: zero of everything, the cap, no connections.
    let s = scrape(m);
    assert_eq!(ops(&s, "get", "ok"), 0.0);
    assert_eq!(sum(&s, "kvs_memory_limit_bytes", &[]), max_memory as f64);
    assert_eq!(sum(&s, "kvs_connections", &[]), 0.0);

    // A wrong token: refused.
    let wrong = ClientOptions {
        auth_token: Some(AuthToken::new("not-the-token").unwrap()),
        ..ClientOptions::default()
    };
    assert!(matches!(
        connect(server.addr(), &fabric, wrong),
        Err(ConnectError::Refused(_))
    ));
    let mut c = connect(
        server.addr(),
        &fabric,
        ClientOptions {
            auth_token: Some(AuthToken::new(TOKEN).unwrap()),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    for k in 0..10u8 {
        let r = c.wait_for(|c, t| c.put(&[b'k', k], &[k; 100], t));
        assert_eq!(r, Ok(OwnedReply::Done));
    }
    for k in 0..10u8 {
        let r = c.wait_for(|c, t| c.get(&[b'k', k], t));
        assert_eq!(r, Ok(OwnedReply::Value(vec![k; 100])));
    }
    for k in 0..3u8 {
        let r = c.wait_for(|c, t| c.get(&[b'x', k], t));
        assert_eq!(r, Ok(OwnedReply::NotFound));
    }
    let r = c.wait_for(|c, t| c.delete(b"k\x00", t));
    assert_eq!(r, Ok(OwnedReply::Done));
    // Over max_value: an error, counted as too_large.
    let r = c.wait_for(|c, t| c.put(b"big", &[0; 3000], t));
    assert!(matches!(r, Err(KvError::TooLarge(_))), "{r:?}");
    let r = c.wait_for(|c, t| c.scan(b"", 100, t));
    assert!(
        matches!(r, Ok(OwnedReply::Scan(ref v, true)) if v.len() == 9),
        "{r:?}"
    );

    // The workers publish at least every 50 ms; the setup counters too.
    let t = Instant::now();
    let s = loop {
        let s = scrape(m);
        let setups = sum(&s, "kvs_setups_total", &[("result", "admitted")]);
        if ops(&s, "scan", "ok") == 2.0 && setups >= 2.0 {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{s:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ops(&s, "put", "ok"), 10.0);
    assert_eq!(ops(&s, "get", "ok"), 10.0);
    assert_eq!(ops(&s, "get", "not_found"), 3.0);
    assert_eq!(ops(&s, "delete", "ok"), 1.0);
    assert_eq!(ops(&s, "put", "too_large"), 1.0);
    assert_eq!(ops(&s, "update_range", "ok"), 0.0);
    // Every request is in the histogram, per worker.
    let total = sum(&s, "kvs_operations_total", &[]);
    assert!(total >= 27.0, "{total}");
    assert_eq!(sum(&s, "kvs_request_duration_seconds_count", &[]), total);
    for w in ["0", "1"] {
        let n = sum(&s, "kvs_operations_total", &[("worker", w)]);
        let h = s
            .iter()
            .find(|x| {
                x.metric == "kvs_request_duration_seconds" && x.labels.get("worker") == Some(w)
            })
            .expect("a histogram per worker");
        let Value::Histogram(b) = &h.value else {
            panic!("{h:?}")
        };
        let inf = b.iter().find(|b| b.less_than == f64::INFINITY).unwrap();
        assert_eq!(inf.count, n, "worker {w}");
        assert!(b.windows(2).all(|p| p[0].count <= p[1].count), "{b:?}");
        assert!(sum(&s, "kvs_request_duration_seconds_sum", &[("worker", w)]) > 0.0);
    }
    assert_eq!(sum(&s, "kvs_keys", &[]), 9.0);
    assert!(sum(&s, "kvs_memory_used_bytes", &[]) >= 9.0 * 100.0);
    assert_eq!(sum(&s, "kvs_memory_limit_bytes", &[]), max_memory as f64);
    assert_eq!(sum(&s, "kvs_connections", &[("worker", "0")]), 1.0);
    assert_eq!(sum(&s, "kvs_connections", &[("worker", "1")]), 1.0);
    assert!(sum(&s, "kvs_setups_total", &[("result", "refused_auth")]) >= 1.0);
    assert_eq!(sum(&s, "kvs_build_info", &[]), 1.0);
    // A one-member cluster that never migrated.
    assert_eq!(sum(&s, "kvs_map_version", &[]), 1.0);
    assert_eq!(sum(&s, "kvs_member", &[]), 0.0);
    // Alone, it leads its control group and holds its lease.
    assert_eq!(sum(&s, "kvs_control_leader", &[]), 0.0);
    assert!(sum(&s, "kvs_control_term", &[]) >= 1.0);
    assert_eq!(sum(&s, "kvs_lease", &[]), 1.0);
    assert_eq!(sum(&s, "kvs_migration_held_slots", &[]), 0.0);
    assert_eq!(sum(&s, "kvs_migration_pulled_bytes_total", &[]), 0.0);
    assert_eq!(sum(&s, "kvs_migration_sent_bytes_total", &[]), 0.0);
    assert!(sum(&s, "process_start_time_seconds", &[]) > 1.6e9);
    // No records on disk: no disk metrics.
    assert!(!s.iter().any(|x| x.metric.starts_with("kvs_log")), "{s:?}");

    // Other paths and methods.
    let (code, _, body) = support::http_get(m, "/");
    assert_eq!(code, 404, "{body}");
    let mut raw = TcpStream::connect(m).unwrap();
    raw.write_all(b"DELETE /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    let mut raw = TcpStream::connect(m).unwrap();
    raw.write_all(b"\x16\x03\x01 not http\r\n\r\n").unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    // A client that connects and sends nothing, and one that sends half a
    // request: a scrape beside them is answered at once.
    let stalled = TcpStream::connect(m).unwrap();
    let mut half = TcpStream::connect(m).unwrap();
    half.write_all(b"GET /metr").unwrap();
    let t = Instant::now();
    let s = scrape(m);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(ops(&s, "put", "ok"), 10.0);
    drop((stalled, half));

    drop(c);
    server.shutdown();
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn the_disk_metrics_follow_the_logs_and_snapshots() {
    let dir = temp_dir("metrics-disk");
    let fabric = format!("kvs-metrics-disk-{}", std::process::id());
    let server = Server::start(Config {
        data_dir: Some(dir.join("member")),
        bootstrap: true,
        durability: kvs_server::Durability::Always,
        // A snapshot as soon as the logs hold 4 KiB.
        auto_snapshot_min_size: 4 << 10,
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..test_config(&fabric)
    })
    .unwrap();
    let m = server.metrics_addr().expect("an endpoint");
    let s = scrape(m);
    assert_eq!(sum(&s, "kvs_snapshots_total", &[]), 0.0);
    assert_eq!(sum(&s, "kvs_snapshot_bytes", &[]), 0.0);
    assert_eq!(sum(&s, "kvs_snapshot_in_progress", &[]), 0.0);
    assert!(
        s.iter().any(|x| x.metric == "kvs_recovery_seconds"),
        "{s:?}"
    );
    let mut c = connect(server.addr(), &fabric, ClientOptions::default()).unwrap();
    let value = vec![b'v'; 1000];
    for i in 0..40u32 {
        let k = format!("key{i}");
        c.put(k.as_bytes(), &value, 1).unwrap();
        let mut done = false;
        while !done {
            c.wait(Duration::from_millis(10), |_, r| {
                assert!(r.is_ok(), "{r:?}");
                done = true;
            })
            .unwrap();
        }
    }
    // Each worker's logs passed 4 KiB: a snapshot each, then a log that
    // is small again.
    let t = Instant::now();
    let s = loop {
        let s = scrape(m);
        // Published with the other gauges, a moment after the writes.
        let on_disk = sum(&s, "kvs_snapshot_bytes", &[]) + sum(&s, "kvs_log_bytes", &[]);
        if sum(&s, "kvs_snapshots_total", &[]) >= 2.0 && on_disk > 40.0 * 1000.0 {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{s:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // A worker's logs grow to its last snapshot's size (or 4 KiB) and then
    // are snapshotted: what they hold stays below that, and a put.
    let (snap, log) = (
        sum(&s, "kvs_snapshot_bytes", &[]),
        sum(&s, "kvs_log_bytes", &[]),
    );
    assert!(snap > 0.0, "{snap}");
    assert!(log < snap + 2.0 * (4096.0 + 1100.0), "{log} {snap}");
    // Under always, a flush per turn that wrote: at least one per put.
    let flushes = sum(&s, "kvs_log_fsync_seconds_count", &[]);
    assert!(flushes >= 40.0, "{flushes}");
    assert!(sum(&s, "kvs_log_fsync_seconds_sum", &[]) > 0.0);
    drop(c);
    server.shutdown();
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_taken_metrics_port_fails_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fabric = format!("kvs-metrics-taken-{}", std::process::id());
    let e = Server::start(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric.clone()),
        stats_interval_s: 0,
        metrics_listen: Some(taken.local_addr().unwrap()),
        ..Config::default()
    })
    .unwrap_err();
    assert!(
        e.to_string().starts_with("metrics_listen 127.0.0.1:"),
        "{e}"
    );
    Fabric::remove_if_unused(&fabric);
}
