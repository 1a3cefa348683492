//! `--huge-pages` (config key `huge_pages`): `--help` teaches it, and a
//! server started with it on the software device serves as usual, says once
//! per worker that this device has no huge pages, and reports no ring in huge
//! pages (`kvs_huge_page_rings`). This proves the plumbing only: whether the
//! rings really get huge pages is checked on soft-RoCE in the rxe guest
//! (`scripts/rxe/ycsb-a.sh` with `HUGE=1`, run by `scripts/rxe/run-tests.sh`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use kvs_client::{ClientOptions, OwnedReply};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{connect, run_server, temp_dir, write_file, ServerProcess};

#[test]
fn help_teaches_the_flag() {
    let (status, out) = run_server(&["--help"]);
    assert!(status.success(), "{out}");
    let text = out.split_whitespace().collect::<Vec<_>>().join(" ");
    for what in [
        "--huge-pages",
        "2 MiB huge pages",
        "vm.nr_hugepages",
        "fall back to normal pages",
        "software device",
        "huge_pages",
    ] {
        assert!(text.contains(what), "--help lacks {what:?}: {out}");
    }
}

/// The body of `GET /metrics` at `url` (`http://host:port/metrics`).
fn scrape(url: &str) -> String {
    let addr = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/metrics"))
        .expect("a metrics URL");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: kvs\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.split_once("\r\n\r\n").expect("a head").1.to_string()
}

/// Starts a 2-worker server with `args`, runs a client through both workers
/// and returns what the server printed and its metrics.
fn serve_with(tag: &str, args: &[&str]) -> (String, String) {
    let fabric = format!("kvs-huge-{tag}-{}", std::process::id());
    let mut all = vec!["--metrics-listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let server = ServerProcess::start_on(&fabric, &all);
    let mut c = connect(server.addr, &fabric, ClientOptions::default()).unwrap();
    for i in 0..200u32 {
        let k = format!("key{i}");
        c.wait_for(|c, t| c.put(k.as_bytes(), k.as_bytes(), t))
            .unwrap();
    }
    for i in (0..200u32).step_by(7) {
        let k = format!("key{i}");
        let got = c.wait_for(|c, t| c.get(k.as_bytes(), t)).unwrap();
        assert_eq!(got, OwnedReply::Value(k.into_bytes()));
    }
    let url = server
        .printed()
        .lines()
        .find_map(|l| {
            l.strip_prefix("kvs-server: metrics on ")
                .map(str::to_string)
        })
        .expect("the metrics line");
    // The workers publish their gauges within 50 ms of going idle.
    let t = Instant::now();
    let metrics = loop {
        let m = scrape(&url);
        if m.contains("kvs_connections{worker=\"1\"} 1") || t.elapsed() > Duration::from_secs(10) {
            break m;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(c);
    let printed = server.output();
    Fabric::remove_if_unused(&fabric);
    (printed, metrics)
}

const SOFTWARE: &str = "huge_pages: the software device has no huge pages";

#[test]
fn the_flag_and_the_key_reach_every_worker_and_the_software_device_says_it_has_none() {
    let (printed, metrics) = serve_with("flag", &["--huge-pages"]);
    for w in 0..2 {
        let line = format!("kvs_server::serving::worker: worker {w}: {SOFTWARE}");
        assert_eq!(printed.matches(&line).count(), 1, "{printed}");
    }
    for w in 0..2 {
        let gauge = format!("kvs_huge_page_rings{{worker=\"{w}\"}} 0\n");
        assert!(metrics.contains(&gauge), "{metrics}");
    }

    let dir = temp_dir("huge-config");
    let file = dir.join("kvs.toml");
    write_file(&file, "huge_pages = true\n", 0o644);
    let (printed, _) = serve_with("config", &["--config", file.to_str().unwrap()]);
    assert_eq!(printed.matches(SOFTWARE).count(), 2, "{printed}");

    // Without it, nothing is said.
    let (printed, metrics) = serve_with("off", &[]);
    assert!(!printed.contains("huge_pages"), "{printed}");
    assert!(
        metrics.contains("kvs_huge_page_rings{worker=\"0\"} 0\n"),
        "{metrics}"
    );
}
