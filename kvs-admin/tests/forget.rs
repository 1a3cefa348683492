//! `kvs-admin forget`: a dead member removed for good, refused while it owns
//! slots unless `--force` declares their records lost; the cluster goes on
//! without it and its id is not used again. Before that, a migration or a
//! rebalance that would move its slots (no copy elsewhere) is refused.

use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::Cluster;

fn status(c: &Cluster) -> Value {
    let r = c.admin(&["status", "--json"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    serde_json::from_str(&r.stdout).unwrap()
}

#[test]
fn a_dead_member_is_forgotten_and_its_slots_need_force() {
    let mut c = Cluster::start("forget", 3);
    // Member 2 owns a few slots, then dies.
    let r = c.admin(&["migrate", "--slots", "0-15", "--to", "2"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    let gone = c.addr(2);
    c.servers.remove(2).shutdown();
    let t = Instant::now();
    while status(&c)["members"][2]["state"] != "failed" {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", status(&c));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its slots have no other copy (replicas = 1): moving them is refused
    // up front, saying why and what can be done, not started to stall.
    let last = status(&c)["migration"].clone();
    for args in [
        &["migrate", "--slots", "0-15", "--to", "1"][..],
        &["rebalance"][..],
    ] {
        let r = c.admin(args);
        assert_eq!(r.code(), Some(1), "{args:?}: {r:?}");
        assert!(
            r.stderr
                .contains("slots 0-15 are on member 2, which is Failed")
                && r.stderr.contains("kvs-admin forget 2 --force"),
            "{args:?}: {}",
            r.stderr
        );
    }
    assert_eq!(status(&c)["migration"], last, "nothing started");
    // It owns slots: refused without --force, saying what to do.
    let r = c.admin(&["forget", "2"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(
        r.stderr.contains("owns 16 slots") && r.stderr.contains("--force"),
        "{}",
        r.stderr
    );
    // By address, with --force: gone, its slots given to the others, empty.
    let r = c.admin(&["forget", &gone.to_string(), "--force"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(r.stdout.contains("member 2"), "{}", r.stdout);
    let j = status(&c);
    assert_eq!(j["members"][2]["state"], "left");
    assert_eq!(j["members"][2]["map_slots"], 0);
    let slots: u64 = (0..2)
        .map(|m| j["members"][m]["slots"].as_u64().unwrap())
        .sum();
    assert_eq!(slots, u64::from(support::SLOTS), "{j}");
    // The status is clean: a forgotten member is no warning.
    let r = c.admin(&["status"]);
    assert!(!r.stdout.contains("warning"), "{}", r.stdout);
    // Forgotten once is forgotten.
    let r = c.admin(&["forget", "2"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(r.stderr.contains("forgotten already"), "{}", r.stderr);
}
