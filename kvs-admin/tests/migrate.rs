//! `kvs-admin migrate` and `rebalance` against an in-process cluster: what
//! kvs-admin checks against the map before it asks the keeper anything.

mod support;
use support::Cluster;

#[test]
fn migrate_checks_slots_and_member_against_the_map_before_asking_the_keeper() {
    let c = Cluster::start("migrate-args", 3);
    for (args, want) in [
        (
            ["--slots", "0-9999", "--to", "1"],
            "slot range 0-9999 out of bounds: the cluster has 256 slots (0-255)".to_string(),
        ),
        (
            ["--slots", "256", "--to", "1"],
            "slot range 256 out of bounds: the cluster has 256 slots (0-255)".to_string(),
        ),
        (
            ["--slots", "0-9", "--to", "7"],
            "no member 7: the cluster has members 0-2".to_string(),
        ),
        (
            ["--slots", "0-9", "--to", "10.0.0.9:7000"],
            "unknown server 10.0.0.9:7000".to_string(),
        ),
    ] {
        let mut a = vec!["migrate"];
        a.extend(args);
        // Through the keeper and through another member alike.
        for via in [c.addr(0), c.addr(2)] {
            let r = c.admin_via(via, &a);
            assert_eq!(r.code(), Some(1), "{a:?}: {r:?}");
            assert!(
                r.stderr.starts_with(&format!("kvs-admin: {want}")),
                "{a:?}: {}",
                r.stderr
            );
            assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
            assert!(r.stdout.is_empty(), "{}", r.stdout);
        }
    }
    // Nothing was asked of the keeper.
    assert_eq!(c.servers[0].map_version(), 3);
    // The member's address works as --to: the slots move.
    let to = c.addr(2).to_string();
    let r = c.admin(&["migrate", "--slots", "0-9", "--to", &to]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    let st = c.admin_via(c.addr(2), &["status", "--json"]);
    let j: serde_json::Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(j["members"][2]["slots"], 10, "{}", st.stdout);
    assert_eq!(j["members"][0]["slots"], 246, "{}", st.stdout);
}

#[test]
fn malformed_arguments_are_usage_errors() {
    let fabric = format!("kvs-admin-usage-{}", std::process::id());
    let nobody: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    for (args, want) in [
        (
            &["migrate", "--slots", "5-3", "--to", "1"][..],
            "slot range 5-3 is backwards",
        ),
        (
            &["migrate", "--slots", "x", "--to", "1"],
            "'x' is not a slot range",
        ),
        (
            &["migrate", "--slots", "1", "--to", "nobody"],
            "'nobody' is neither",
        ),
        (&["migrate", "--slots", "1"], "--to"),
        (&["status", "--watch", "0"], "must be more than 0 seconds"),
        (&["frobnicate"], "unrecognized subcommand"),
    ] {
        let r = support::admin(&fabric, nobody, args);
        assert_eq!(r.code(), Some(2), "{args:?}: {r:?}");
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
    }
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
}

#[test]
fn rebalance_of_a_balanced_cluster_says_so_and_sends_nothing() {
    let c = Cluster::start("rebalance-none", 1);
    let r = c.admin(&["rebalance"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert_eq!(
        r.stdout,
        "nothing to move: the 256 slots are spread evenly over the 1 member (map version 1)\n"
    );
}

#[test]
fn help_teaches_the_commands_and_that_servers_drive_migrations() {
    let r = support::run({
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_kvs-admin"));
        c.arg("--help")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    });
    assert_eq!(r.code(), Some(0), "{r:?}");
    for want in [
        "status",
        "migrate",
        "rebalance",
        "cancel",
        "killing it (Ctrl-C) neither stops nor",
        "kvs-admin migrate --slots 0-511 --to 1",
        "--server <HOST:PORT>",
    ] {
        assert!(r.stdout.contains(want), "{want}: {}", r.stdout);
    }
}
