//! `kvs-admin snapshot` against an in-process cluster: member 0 keeps its
//! records on disk (`durability = "always"`), member 1 in memory only.
//! Member 0's workers put a snapshot in place and status shows it; member
//! 1 refuses, in its own words, and asking every member says which one did
//! not snapshot.

use kvs_client::OwnedReply;
use serde_json::Value;

mod support;
use support::Cluster;

/// `status --json` through member 0.
fn status(c: &Cluster) -> Value {
    let r = c.admin(&["status", "--json"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    serde_json::from_str(&r.stdout).unwrap()
}

/// Member `m`'s workers' `disk` figure `what`, summed.
fn disk_sum(j: &Value, m: usize, what: &str) -> u64 {
    j["members"][m]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["disk"][what].as_u64().unwrap())
        .sum()
}

#[test]
fn a_member_with_records_on_disk_snapshots_and_status_shows_it() {
    let dir = test_support::TempDir::new("kvs-admin", "snapshot");
    let data = dir.join("member-0");
    let fabric = format!("kvs-admin-snapshot-{}", std::process::id());
    // The first server (the one that joins nobody) keeps its records on
    // disk.
    let c = Cluster::start_with(fabric, 2, |cfg| match cfg.join {
        Some(_) => cfg,
        None => kvs_server::Config {
            data_dir: Some(data.clone()),
            bootstrap: true,
            durability: kvs_server::Durability::Always,
            ..cfg
        },
    });
    // Records to snapshot (member 0 owns every slot).
    let mut client = c.client(0);
    for i in 0..200 {
        let k = format!("key{i}");
        let r = client.wait_for(|c, t| c.put(k.as_bytes(), &[b'v'; 100], t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }
    let j = status(&c);
    assert_eq!(disk_sum(&j, 0, "snapshots"), 0, "{j}");
    // Member 1 shows nothing of disks.
    let w = j["members"][1]["workers"][0].as_object().unwrap();
    assert!(!w.contains_key("disk"), "{w:?}");

    let r = c.admin(&["snapshot", "0"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(
        r.stdout.starts_with(&format!(
            "member 0 ({}) is snapshotting: each of its 2 workers copies its records",
            c.addr(0)
        )),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(&format!(
            "\nmember 0 ({}): the snapshots of its 2 workers in place after ",
            c.addr(0)
        )),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains(": snapshots "), "{}", r.stdout);
    assert!(r.stdout.contains(", logs "), "{}", r.stdout);

    // Both workers have put one in place, holding the records.
    let j = status(&c);
    assert_eq!(disk_sum(&j, 0, "snapshots"), 2, "{j}");
    assert!(disk_sum(&j, 0, "snapshot_bytes") > 200 * 100, "{j}");
    for w in j["members"][0]["workers"].as_array().unwrap() {
        assert_eq!(w["disk"]["snapshotting"], Value::Null, "{j}");
    }
    let r = c.admin(&["status"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(
        r.stdout.contains("  disk: logs ") && r.stdout.contains(" (2 taken since the start)"),
        "{}",
        r.stdout
    );
    assert_eq!(r.stdout.matches("  disk: ").count(), 1, "{}", r.stdout);

    // Member 1 keeps its records in memory only: refused, in its words.
    let r = c.admin(&["snapshot", &c.addr(1).to_string()]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(
        r.stderr.starts_with(&format!(
            "kvs-admin: member 1 ({}) refused the snapshot: member 1 keeps its records in \
             memory only (durability = \"none\")",
            c.addr(1)
        )),
        "{}",
        r.stderr
    );

    // Every member: member 0 snapshots again, and the command fails
    // naming member 1.
    let r = c.admin(&["snapshot"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(
        r.stdout.contains("member 0 (") && r.stdout.contains(" in place after "),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("refused the snapshot"), "{}", r.stderr);
    assert!(
        r.stderr
            .ends_with("kvs-admin: 1 of 2 members snapshotted; not member 1 (said above)\n"),
        "{}",
        r.stderr
    );
    assert_eq!(disk_sum(&status(&c), 0, "snapshots"), 4);

    // The records are all there still.
    for i in 0..200 {
        let k = format!("key{i}");
        let r = client.wait_for(|c, t| c.get(k.as_bytes(), t));
        assert_eq!(r, Ok(OwnedReply::Value(vec![b'v'; 100])), "{k}");
    }
}

#[test]
fn snapshot_help_teaches_what_a_snapshot_is() {
    let fabric = format!("kvs-admin-snapshot-help-{}", std::process::id());
    let nobody: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let r = support::admin(&fabric, nobody, &["snapshot", "--help"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    for want in [
        "worker-W.snap",
        "replays only the logs written since",
        "durability = \"none\" refuses",
        "auto_snapshot_percentage",
        "auto_snapshot_min_size",
        "Backups: run it first",
        "--no-wait",
        "--max-wait",
        "kvs-admin snapshot 1",
    ] {
        assert!(r.stdout.contains(want), "{want}: {}", r.stdout);
    }
    let r = support::admin(&fabric, nobody, &["--help"]);
    assert!(r.stdout.contains("  snapshot "), "{}", r.stdout);
    assert!(r.stdout.contains("kvs-admin snapshot\n"), "{}", r.stdout);
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
}
