//! `kvs-admin drain` against an in-process cluster: with two copies of
//! every slot, the drained member's slots move to their ready backups on
//! the other member, status shows it drained, and every record reads
//! back; with one copy nothing can move, and the command says so.

use std::time::{Duration, Instant};

use kvs_client::OwnedReply;
use serde_json::Value;

mod support;
use support::{Cluster, SLOTS};

/// `status --json` through member 0.
fn status(c: &Cluster) -> Value {
    let r = c.admin(&["status", "--json"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    serde_json::from_str(&r.stdout).unwrap()
}

/// Asks for the status until `done` says yes (at most 30 s, then fails
/// with `what`).
fn status_until(c: &Cluster, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let t = Instant::now();
    loop {
        let j = status(c);
        if done(&j) {
            return j;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{what}: {j}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_drained_member_hands_its_slots_to_their_backups() {
    let fabric = format!("kvs-admin-drain-{}", std::process::id());
    let c = Cluster::start_with(fabric, 2, |cfg| kvs_server::Config { replicas: 2, ..cfg });
    // Half the slots at member 1, each with a ready backup on the other.
    let r = c.admin(&["rebalance"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    let half = u64::from(SLOTS / 2);
    status_until(&c, "never balanced and fully copied", |j| {
        j["replicas"] == 2
            && j["under_replicated_slots"] == 0
            && j["members"][1]["map_slots"] == half
            && j["members"][1]["backup_slots"] == half
    });
    let mut client = c.client(0);
    let keys: Vec<String> = (0..200).map(|i| format!("key{i}")).collect();
    for k in &keys {
        let r = client.wait_for(|c, t| c.put(k.as_bytes(), k.as_bytes(), t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }

    let r = c.admin(&["drain", "1"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(
        r.stdout.starts_with(&format!(
            "member 1 ({}) is draining: it stopped serving",
            c.addr(1)
        )),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with(
            "member 1 drained: its slots moved to their ready backups; 0 slots had no ready \
             backup and stay with it (it serves them)\n"
        ),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("replicas is 1"), "{}", r.stdout);

    // Member 0 owns every slot, member 1 none, and it dropped its copies
    // (the figures the workers count may trail the map for a moment).
    let j = status_until(&c, "member 1 never showed drained and empty", |j| {
        j["members"][1]["drained"] == true
            && j["members"][1]["map_slots"] == 0
            && j["members"][1]["slots"] == 0
            && j["members"][1]["keys"] == 0
            && j["members"][0]["slots"] == SLOTS
    });
    assert_eq!(j["members"][0]["drained"], false, "{j}");
    assert_eq!(j["members"][0]["map_slots"], SLOTS, "{j}");
    assert_eq!(j["members"][1]["backup_slots"], 0, "{j}");
    let r = c.admin(&["status"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(
        r.stdout
            .contains(&format!("\nmember 1 ({}), drained", c.addr(1))),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout
            .contains(&format!("\nmember 0 ({}), leader, drained", c.addr(0))),
        "{}",
        r.stdout
    );

    // Every record reads back, from its backup turned primary.
    for k in &keys {
        let r = client.wait_for(|c, t| c.get(k.as_bytes(), t));
        assert_eq!(r, Ok(OwnedReply::Value(k.as_bytes().to_vec())), "{k}");
    }

    // A member the cluster lacks: refused, nothing sent.
    let r = c.admin(&["drain", "7"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(
        r.stderr
            .contains("kvs-admin: no member 7: the cluster has members 0-1"),
        "{}",
        r.stderr
    );
    assert_eq!(status(&c)["members"][0]["drained"], false);
}

#[test]
fn a_member_that_cannot_be_reached_is_a_clear_error() {
    let mut c = Cluster::start("drain-gone", 2);
    let gone = c.addr(1);
    c.servers.remove(1).shutdown();
    let r = c.admin(&["drain", &gone.to_string()]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(
        r.stderr
            .starts_with("kvs-admin: cannot reach member 1 to drain it: ")
            && r.stderr.contains(&gone.to_string()),
        "{}",
        r.stderr
    );
}

#[test]
fn with_one_copy_nothing_moves_and_the_output_says_so() {
    let c = Cluster::start("drain-alone", 1);
    let r = c.admin(&["drain", "0"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "warning: replicas is 1, so no slot has a backup and nothing can move: the {SLOTS} \
             slots of member 0 stay with it"
        )),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with(&format!(
            "member 0 drained: its slots moved to their ready backups; {SLOTS} slots had no \
             ready backup and stay with it (it serves them)\n"
        )),
        "{}",
        r.stdout
    );
    let j = status(&c);
    assert_eq!(j["members"][0]["drained"], true, "{j}");
    assert_eq!(j["members"][0]["map_slots"], SLOTS, "{j}");
    // It serves them again.
    let mut client = c.client(0);
    let r = client.wait_for(|c, t| c.put(b"k", b"v", t));
    assert_eq!(r, Ok(OwnedReply::Done));
}

#[test]
fn drain_help_says_what_it_does_and_what_it_cannot() {
    let fabric = format!("kvs-admin-drain-help-{}", std::process::id());
    let nobody: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let r = support::admin(&fabric, nobody, &["drain", "--help"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    for want in [
        "stops serving",
        "ready backup",
        "until it restarts",
        "SIGTERM (systemd stop) does the same before the server exits",
        "A restart brings the member back into use",
        "With replicas = 1 no slot has a backup, so nothing can move",
        "--no-wait",
        "--max-wait",
        "kvs-admin drain 1",
    ] {
        assert!(r.stdout.contains(want), "{want}: {}", r.stdout);
    }
    let r = support::admin(&fabric, nobody, &["--help"]);
    assert!(r.stdout.contains("  drain "), "{}", r.stdout);
    assert!(r.stdout.contains("kvs-admin drain 1"), "{}", r.stdout);
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
}
