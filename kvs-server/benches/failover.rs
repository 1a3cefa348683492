//! Failover time with synchronous replicas, on the software device: three
//! kvs-server processes with `replicas = 2` and `member_timeout_ms = 500`;
//! a client writes one key of a slot whose primary is the victim, the
//! victim is killed (`kill -9`), and the time from the kill to the first
//! acknowledged write of that key is the failover time. The victim comes
//! back from its data dir and every slot is copied again before the next
//! kill. Published peers are printed beside the figures.
//!
//! ```text
//! cargo bench -p kvs-server --bench failover [-- --kills N]
//! ```

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, ControlOptions, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, GroupView};
use mlx5::sim::fabric::Fabric;

#[path = "../tests/support/mod.rs"]
mod support;

use support::{group_view, ServerProcess};

const MEMBER_TIMEOUT_MS: u64 = 500;

fn member(
    fabric: &str,
    dir: &Path,
    cfg: &Path,
    listen: &str,
    join: Option<SocketAddr>,
) -> ServerProcess {
    let cfg = cfg.to_str().unwrap();
    let extra = ["--config", cfg, "--replicas", "2"];
    support::member_process_with(fabric, dir, listen, 2, join, &extra)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The newest view among the members in `at` that answer.
fn view(cc: &mut ControlClient, at: &[SocketAddr]) -> Option<GroupView> {
    at.iter()
        .filter_map(|&a| group_view(cc, a))
        .max_by_key(|g| (g.term, g.applied))
}

fn in_sync(cc: &mut ControlClient, at: &[SocketAddr]) {
    test_support::wait_until(
        "every slot on two members, ready",
        Duration::from_secs(60),
        Duration::from_millis(5),
        || {
            view(cc, at).is_some_and(|g| {
                g.under_replicated_slots == 0 && g.members.iter().all(|m| m.state == "up")
            })
        },
    );
}

fn main() {
    let kills = support::bench_arg("--kills", 10);
    let fabric = format!("kvs-bench-failover-{}", std::process::id());
    let root = support::temp_dir("bench-failover");
    let cfg = root.join("kvs.toml");
    support::write_file(
        &cfg,
        &format!("member_timeout_ms = {MEMBER_TIMEOUT_MS}\n"),
        0o644,
    );
    let dirs: Vec<_> = (0..3).map(|m| root.join(format!("m{m}"))).collect();
    let mut procs = vec![member(&fabric, &dirs[0], &cfg, "127.0.0.1:0", None)];
    let first = procs[0].addr;
    for d in &dirs[1..] {
        procs.push(member(&fabric, d, &cfg, "127.0.0.1:0", Some(first)));
    }
    let addrs: Vec<SocketAddr> = procs.iter().map(|p| p.addr).collect();
    let mut cc =
        ControlClient::new(&support::client_device(&fabric), ControlOptions::default()).unwrap();
    test_support::wait_until(
        "three members",
        Duration::from_secs(20),
        Duration::from_millis(5),
        || view(&mut cc, &addrs).is_some_and(|g| g.members.len() == 3 && g.leader.is_some()),
    );
    let leader = view(&mut cc, &addrs).and_then(|g| g.leader).unwrap();
    let r = cc
        .request(addrs[leader.index()], &ControlRequest::Rebalance)
        .unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
    test_support::wait_until(
        "the rebalance",
        Duration::from_secs(60),
        Duration::from_millis(5),
        || {
            support::member_status(&mut cc, addrs[leader.index()])
                .and_then(|s| s.migration)
                .is_some_and(|m| m.finished)
        },
    );
    in_sync(&mut cc, &addrs);
    let mut times = Vec::new();
    for k in 0..kills {
        // Victims in turn: members 1 and 2, and every third kill the
        // leader's member 0.
        let victim = [1usize, 2, 0][k % 3];
        let via = addrs[(victim + 1) % 3];
        let mut c = support::connect(via, &fabric, Default::default()).unwrap();
        let key = (0..)
            .map(|i| format!("f{i}"))
            .find(|key| (c.map().owner(key.as_bytes()).member).index() == victim)
            .unwrap();
        let r = c.wait_for(|c, t| c.put(key.as_bytes(), b"before", t));
        assert_eq!(r, Ok(OwnedReply::Done));
        let t0 = Instant::now();
        procs[victim].kill9();
        let mut n = 0u64;
        loop {
            n += 1;
            let r = c.wait_for(|c, t| c.put(key.as_bytes(), b"after", t));
            if r == Ok(OwnedReply::Done) {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no failover: {r:?}");
            std::thread::sleep(Duration::from_micros(200));
        }
        let took = t0.elapsed();
        let r = c.wait_for(|c, t| c.get(key.as_bytes(), t));
        assert_eq!(r, Ok(OwnedReply::Value(b"after".to_vec())));
        println!(
            "kill {k}: member {victim}: first acknowledged write {} after the kill ({n} tries)",
            ms(took)
        );
        times.push(took);
        drop(c);
        let at = addrs[victim].to_string();
        procs[victim] = member(&fabric, &dirs[victim], &cfg, &at, None);
        in_sync(&mut cc, &addrs);
    }
    times.sort_unstable();
    let p50 = times[(times.len() - 1) / 2];
    let max = times[times.len() - 1];
    println!();
    println!(
        "failover, kill -9 to the first acknowledged write on an affected slot, {} kills, \
         member_timeout_ms = {MEMBER_TIMEOUT_MS}:",
        times.len()
    );
    println!(
        "  this store (software device)       p50 {}   max {}",
        ms(p50),
        ms(max)
    );
    println!("  Redis Cluster, default (published) cluster-node-timeout 15 s + 1-2 s");
    println!("  FaRM (published)                   < 50 ms");
    println!("  Mu (published)                     < 1 ms");
    drop(procs);
    Fabric::remove_if_unused(&fabric);
}
