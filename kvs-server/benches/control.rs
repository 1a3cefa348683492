//! The control group's figures, on the software device: how long a map
//! change takes to commit with three voters, how long the leader takes to
//! mark a killed member failed, and how long a new leader takes when the
//! leader is killed. Three kvs-server processes with data dirs (the log is
//! written with `fdatasync`, so the figures include the disk).
//!
//! ```text
//! cargo bench -p kvs-server --bench control [-- --commits N --kills N --leader-kills N]
//! ```

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::control::{ControlReply, ControlRequest};
use mlx5::sim::fabric::Fabric;

#[path = "../tests/support/mod.rs"]
mod support;

use support::{group_view as view, member_status as status, ServerProcess};

fn member(fabric: &str, dir: &Path, listen: &str, join: Option<SocketAddr>) -> ServerProcess {
    support::member_process(fabric, dir, listen, 1, join)
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) -> Duration {
    test_support::wait_until(what, most, Duration::from_micros(500), done)
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let commits = support::bench_arg("--commits", 200);
    let kills = support::bench_arg("--kills", 10);
    let leader_kills = support::bench_arg("--leader-kills", 5);
    let fabric = format!("kvs-bench-control-{}", std::process::id());
    let root = support::temp_dir("bench-control");
    let dirs: Vec<_> = (0..3).map(|m| root.join(format!("m{m}"))).collect();
    let mut procs = vec![member(&fabric, &dirs[0], "127.0.0.1:0", None)];
    let first = procs[0].addr;
    for d in &dirs[1..] {
        procs.push(member(&fabric, d, "127.0.0.1:0", Some(first)));
    }
    let addrs: Vec<SocketAddr> = procs.iter().map(|p| p.addr).collect();
    let opts = ControlOptions {
        setup_timeout: Duration::from_secs(2),
        call_timeout: Duration::from_secs(5),
        ..ControlOptions::default()
    };
    let mut cc = ControlClient::new(&support::client_device(&fabric), opts).expect("a client");
    wait("three voters", Duration::from_secs(30), || {
        view(&mut cc, first).is_some_and(|g| g.members.iter().all(|m| m.voter))
    });
    let fs = std::process::Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(root.as_os_str())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("control group: 3 voters, member_timeout_ms = 1000, data dirs on {fs}");

    // Map-change commit latency: a one-slot migration's start is answered
    // once its entry is committed and applied at the leader (proposal,
    // replication to a quorum, each member's fdatasync, apply). Empty slots
    // move back and forth between members 1 and 2.
    let leader = |cc: &mut ControlClient| -> MemberId {
        addrs
            .iter()
            .find_map(|&a| view(cc, a).and_then(|g| g.leader))
            .expect("a leader")
    };
    let l = leader(&mut cc);
    let mut lat = Vec::with_capacity(commits);
    for i in 0..commits {
        let to = MemberId(1 + (i % 2) as u16);
        let req = ControlRequest::Migrate {
            first: 0,
            end: 1,
            to,
        };
        let t = Instant::now();
        let r = cc.request(addrs[l.index()], &req).expect("an answer");
        lat.push(t.elapsed());
        assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
        wait("the migration", Duration::from_secs(30), || {
            status(&mut cc, addrs[l.index()])
                .and_then(|s| s.migration)
                .is_some_and(|m| m.finished)
        });
    }
    println!(
        "map change commit (migrate start answered), {commits} changes: p50 {}  p99 {}  max {}",
        ms(percentile(&mut lat, 0.5)),
        ms(percentile(&mut lat, 0.99)),
        ms(percentile(&mut lat, 1.0))
    );

    // Failure detection: a follower killed, until the leader's committed
    // state calls it failed; then it comes back from its data dir.
    let mut detect = Vec::new();
    for i in 0..kills {
        let l = leader(&mut cc);
        let victim = (1..3u16)
            .map(|d| MemberId((l.0 + d) % 3))
            .nth(i % 2)
            .expect("a follower");
        let v = victim.index();
        procs[v].kill9();
        let t = Instant::now();
        wait("the failed mark", Duration::from_secs(10), || {
            view(&mut cc, addrs[l.index()]).is_some_and(|g| g.members[v].state == "failed")
        });
        detect.push(t.elapsed());
        procs[v] = member(&fabric, &dirs[v], &addrs[v].to_string(), None);
        wait("the member back up", Duration::from_secs(20), || {
            view(&mut cc, addrs[l.index()]).is_some_and(|g| g.members[v].state == "up")
        });
    }
    println!(
        "failure detection (kill -9 of a follower to its committed failed mark), {kills} kills: \
         p50 {}  max {}",
        ms(percentile(&mut detect, 0.5)),
        ms(percentile(&mut detect, 1.0))
    );

    // Leader failover: the leader killed, until another member names a new
    // leader.
    let mut elect = Vec::new();
    for _ in 0..leader_kills {
        let l = (leader(&mut cc)).index();
        procs[l].kill9();
        let t = Instant::now();
        wait("a new leader", Duration::from_secs(10), || {
            (0..3)
                .filter(|&m| m != l)
                .filter_map(|m| view(&mut cc, addrs[m]))
                .any(|g| g.leader.is_some_and(|x| x.index() != l))
        });
        elect.push(t.elapsed());
        procs[l] = member(&fabric, &dirs[l], &addrs[l].to_string(), None);
        wait("the old leader back up", Duration::from_secs(20), || {
            addrs.iter().all(|&a| {
                view(&mut cc, a).is_some_and(|g| g.members.iter().all(|m| m.state == "up"))
            })
        });
    }
    println!(
        "leader election (kill -9 of the leader to a new one), {leader_kills} kills: p50 {}  \
         max {}",
        ms(percentile(&mut elect, 0.5)),
        ms(percentile(&mut elect, 1.0))
    );
    println!(
        "published, for comparison: Redis Cluster marks a node failed after cluster-node-timeout \
         (15 s by default) and fails over 1-2 s later; etcd's default election timeout is 1 s"
    );
    drop(cc);
    drop(procs);
    Fabric::remove_if_unused(&fabric);
}
