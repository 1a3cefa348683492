//! Killing kvs-admin in the middle of a migration changes nothing: the
//! servers run migrations, and every record is readable after it.

use std::time::{Duration, Instant};

use kvs_client::OwnedReply;

mod support;
use support::Cluster;

#[test]
fn a_migration_outlives_the_admin_tool_killed_mid_way() {
    let c = Cluster::start("killed", 2);
    let mut kv = c.client(0);
    let n = 20_000u32;
    let val = |i: u32| format!("{i}:{}", "x".repeat(500)).into_bytes();
    for i in 0..n {
        let k = format!("key{i}");
        assert_eq!(
            kv.wait_for(|c, t| c.put(k.as_bytes(), &val(i), t)),
            Ok(OwnedReply::Done)
        );
    }
    // kvs-admin follows the migration; it is killed once it has started.
    let mut admin = support::command(
        &c.fabric,
        c.addr(0),
        &["migrate", "--slots", "0-255", "--to", "1"],
    )
    .spawn()
    .unwrap();
    let (_out, _err) = support::readers(&mut admin);
    let t = Instant::now();
    while c.servers[1].map_version() < 3 {
        assert!(t.elapsed() < Duration::from_secs(30), "it never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    admin.kill().unwrap();
    admin.wait().unwrap();
    let killed_at = c.servers[0].map_version();
    // The servers finish it: member 1 owns every slot, member 0 holds
    // nothing.
    let r = loop {
        let r = support::admin(&c.fabric, c.addr(0), &["status", "--json"]);
        let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        if j["migration"]["finished"] == true && j["members"][0]["slots"] == 0 {
            break j;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{}", r.stdout);
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(r["members"][1]["slots"], 256, "{r}");
    assert_eq!(r["migration"]["error"], serde_json::Value::Null, "{r}");
    assert!(
        c.servers[0].map_version() > killed_at,
        "the migration was over before kvs-admin was killed"
    );
    for i in 0..n {
        let k = format!("key{i}");
        assert_eq!(
            kv.wait_for(|c, t| c.get(k.as_bytes(), t)),
            Ok(OwnedReply::Value(val(i))),
            "{k}"
        );
    }
}
