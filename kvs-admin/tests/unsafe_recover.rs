//! `kvs-admin unsafe-recover`: two of three voters lost for good stop the
//! control group; the third, told to, forces a group of its own, leads it
//! and serves again, with the data-loss warning said first.

use std::time::{Duration, Instant};

use kvs_client::OwnedReply;
use serde_json::Value;

mod support;
use support::Cluster;

fn status(c: &Cluster) -> Value {
    let r = c.admin(&["status", "--json"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    serde_json::from_str(&r.stdout).unwrap()
}

fn wait(c: &Cluster, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let t = Instant::now();
    loop {
        let j = status(c);
        if done(&j) {
            return j;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{what}: {j}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_last_of_three_voters_recovers_the_group_and_serves() {
    let mut c = Cluster::start("recover", 3);
    wait(&c, "three voters", |j| {
        (0..3).all(|m| j["members"][m]["voter"] == true)
    });
    // Members 0 and 1 are lost for good: member 2 holds no lease.
    c.servers.remove(0).shutdown();
    c.servers.remove(0).shutdown();
    wait(&c, "the lease lapses", |j| {
        j["members"][2]["lease"] == false
    });
    // Refused unless confirmed, after the warning.
    let r = c.admin(&["unsafe-recover", "0", "1"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(r.stderr.contains("never be started again"), "{}", r.stderr);
    assert!(r.stderr.contains("--yes"), "{}", r.stderr);
    let r = c.admin(&["unsafe-recover", "0", "1", "--yes"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(
        r.stderr.contains("WARNING: unsafe recovery"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("recovered"), "{}", r.stdout);
    let j = wait(&c, "member 2 leads alone", |j| {
        j["leader"] == 2 && j["members"][2]["lease"] == true
    });
    assert_eq!(j["members"][0]["state"], "left", "{j}");
    assert_eq!(j["members"][1]["state"], "left", "{j}");
    // It serves every slot: member 0's went to it, empty.
    let mut kv = c.client(0);
    for i in 0..50 {
        let k = format!("key{i}");
        assert_eq!(
            kv.wait_for(|c, t| c.put(k.as_bytes(), b"v", t)),
            Ok(OwnedReply::Done)
        );
        assert_eq!(
            kv.wait_for(|c, t| c.get(k.as_bytes(), t)),
            Ok(OwnedReply::Value(b"v".to_vec()))
        );
    }
}
