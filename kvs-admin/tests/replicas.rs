//! `kvs-admin set replicas` against an in-process cluster: raising the
//! count gives every slot a ready backup on the other member (status shows
//! it), lowering it drops them, and a count out of range is a usage error.

use std::sync::atomic::{AtomicUsize, Ordering};
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

/// The slot ranges of `j`, checked to cover every slot once, in order.
fn ranges(j: &Value) -> &Vec<Value> {
    let ranges = j["slot_ranges"].as_array().unwrap();
    let mut next = 0;
    for r in ranges {
        assert_eq!(r["first"], next, "{j}");
        next = r["last"].as_u64().unwrap() + 1;
    }
    assert_eq!(next, u64::from(SLOTS), "{j}");
    ranges
}

#[test]
fn replicas_are_raised_copied_and_dropped() {
    let fabric = format!("kvs-admin-replicas-{}", std::process::id());
    // Member 0 in zone "a", member 1 in zone "b".
    let n = AtomicUsize::new(0);
    let c = Cluster::start_with(fabric, 2, move |cfg| kvs_server::Config {
        zone: Some(["a", "b"][n.fetch_add(1, Ordering::Relaxed) % 2].into()),
        ..cfg
    });
    // Something to copy.
    let mut client = c.client(0);
    for i in 0..200 {
        let k = format!("key{i}");
        let r = client.wait_for(|c, t| c.put(k.as_bytes(), b"value", t));
        assert_eq!(r, Ok(OwnedReply::Done));
    }
    let j = status(&c);
    assert_eq!(j["replicas"], 1, "{j}");
    assert_eq!(j["under_replicated_slots"], 0, "{j}");
    assert_eq!(j["members"][0]["zone"], "a", "{j}");
    assert_eq!(j["members"][1]["zone"], "b", "{j}");
    assert!(
        ranges(&j)
            .iter()
            .all(|r| r["backups"] == serde_json::json!([])),
        "{j}"
    );

    // Two copies, asked through member 1 (which sends kvs-admin on to the
    // leader): the command waits until every slot has its backup.
    let r = c.admin_via(c.addr(1), &["set", "replicas", "2"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(
        r.stdout.starts_with(&format!(
            "replicas set to 2 (was 1) by the leader at {}; each slot gets 1 synchronous \
             backup on other members",
            c.addr(0)
        )),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("every slot has 2 copies: its primary and 1 ready backup"),
        "{}",
        r.stdout
    );
    // Every member's view may lag the leader's for a moment.
    let t = Instant::now();
    let j = loop {
        let j = status(&c);
        if j["under_replicated_slots"] == 0 && j["replicas"] == 2 {
            break j;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "status never showed every slot copied: {j}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for r in ranges(&j) {
        let primary = r["primary"].as_u64().unwrap();
        let backups = r["backups"].as_array().unwrap();
        assert_eq!(backups.len(), 1, "{r}");
        assert_eq!(backups[0]["member"], 1 - primary, "{r}");
        assert_eq!(backups[0]["ready"], true, "{r}");
    }
    assert_eq!(j["members"][1]["backup_slots"], SLOTS, "{j}");
    let r = c.admin(&["status"]);
    assert!(
        r.stdout
            .contains("\nreplicas 2, under-replicated slots 0\n"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(&format!(
            "member 1 ({}), zone b, backs up {SLOTS} slots (",
            c.addr(1)
        )),
        "{}",
        r.stdout
    );

    // One copy: the backups go at once.
    let r = c.admin(&["set", "replicas", "1"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(
        r.stdout.contains("(was 2)") && r.stdout.contains("backups are dropped at once"),
        "{}",
        r.stdout
    );
    let t = Instant::now();
    loop {
        let j = status(&c);
        let dropped = ranges(&j)
            .iter()
            .all(|r| r["backups"] == serde_json::json!([]));
        if j["replicas"] == 1 && dropped {
            assert_eq!(j["under_replicated_slots"], 0, "{j}");
            assert_eq!(j["members"][1]["backup_slots"], 0, "{j}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the backups were never dropped: {j}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The records stayed with their primary.
    let r = client.wait_for(|c, t| c.get(b"key7", t));
    assert_eq!(r, Ok(OwnedReply::Value(b"value".to_vec())));

    // Out of range: a usage error, nothing sent.
    for bad in ["4", "0"] {
        let r = c.admin(&["set", "replicas", bad]);
        assert_eq!(r.code(), Some(2), "{r:?}");
        assert!(
            r.stderr.contains(&format!(
                "invalid value '{bad}' for '<N>': a cluster keeps 1 to 3 copies of each slot"
            )),
            "{}",
            r.stderr
        );
    }
    assert_eq!(status(&c)["replicas"], 1);
}

#[test]
fn set_replicas_help_teaches_what_the_count_does() {
    let fabric = format!("kvs-admin-replicas-help-{}", std::process::id());
    let nobody: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let r = support::admin(&fabric, nobody, &["set", "replicas", "--help"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    for want in [
        "a primary and N-1 synchronous backups",
        "in other zones when members give a `zone`",
        "under_replicated_slots",
        "falling to 0",
        "Lowering N drops backups at once",
        "--no-wait",
        "kvs-admin set replicas 2",
    ] {
        assert!(r.stdout.contains(want), "{want}: {}", r.stdout);
    }
    let r = support::admin(&fabric, nobody, &["--help"]);
    assert!(
        r.stdout.contains("kvs-admin set replicas 2"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("  set "), "{}", r.stdout);
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
}

#[test]
fn more_copies_than_members_are_taken_but_not_waited_for() {
    let c = Cluster::start("replicas-alone", 1);
    let r = c.admin(&["set", "replicas", "2"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(
        r.stdout.contains(
            "note: only 1 member is up, so slots get at most 1 copy until more members join"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains(&format!(
            "kvs-admin: replicas is 2, but only 1 member is up: {SLOTS} slots stay \
             under-replicated until more members join"
        )),
        "{}",
        r.stderr
    );
    let j = status(&c);
    assert_eq!(j["replicas"], 2, "{j}");
    assert_eq!(j["under_replicated_slots"], SLOTS, "{j}");
    let r = c.admin(&["status"]);
    assert!(
        r.stdout.contains(&format!(
            "\nreplicas 2, under-replicated slots {SLOTS}\n  0-255       primary member 0, no backup\n"
        )),
        "{}",
        r.stdout
    );
    // --no-wait returns once the leader has it.
    let r = c.admin(&["set", "replicas", "3", "--no-wait"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(r.stdout.contains("not waiting"), "{}", r.stdout);
}
