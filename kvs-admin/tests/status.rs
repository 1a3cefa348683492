//! `kvs-admin status` against in-process clusters: every member with its
//! slots, keys and map version, as text and as JSON; members that do not
//! answer; a contact that does not exist; tokens; --watch.

use kvs_proto::MemberId;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kvs_client::OwnedReply;
use serde_json::Value;

mod support;
use support::{Cluster, SLOTS};

/// Puts `n` keys through a client of member 0 (which owns every slot), and
/// waits until its workers have published the count (they do so every few
/// hundred milliseconds).
fn put_keys(c: &Cluster, n: u64) {
    let mut client = c.client(0);
    for i in 0..n {
        let k = format!("key{i}");
        let r = client.wait_for(|c, t| c.put(k.as_bytes(), b"value", t));
        assert_eq!(r, Ok(OwnedReply::Done));
    }
    let t = Instant::now();
    let keys = || -> u64 {
        c.servers[0]
            .stats()
            .iter()
            .map(|s| s.keys.load(Ordering::Relaxed))
            .sum()
    };
    while keys() != n {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "keys never published"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The member table's row of member `id`, split at whitespace: id, address,
/// map version, workers, slots, keys, bytes (two words), note.
fn member_row(stdout: &str, id: MemberId, addr: SocketAddr) -> Vec<String> {
    let addr = addr.to_string();
    stdout
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|w| w.len() >= 2 && w[0] == id.to_string() && w[1] == addr)
        .unwrap_or_else(|| panic!("no row for member {id} at {addr}:\n{stdout}"))
}

#[test]
fn status_shows_every_member_its_slots_keys_and_map_version() {
    let c = Cluster::start("status-text", 3);
    put_keys(&c, 100);
    // Asked through a member that is not the keeper.
    let r = c.admin_via(c.addr(1), &["status"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    let out = &r.stdout;
    assert!(
        out.starts_with("cluster ")
            && out.contains(&format!(
                ": map version 3, {SLOTS} slots, 3 members (asked {})\n",
                c.addr(1)
            )),
        "{out}"
    );
    assert!(!out.contains("warning"), "{out}");
    for (id, slots, keys) in [(0, "256", "100"), (1, "0", "0"), (2, "0", "0")] {
        let row = member_row(out, MemberId(id), c.addr(usize::from(id)));
        assert_eq!(row[2..6], ["3", "2", slots, keys], "{out}");
    }
    // Member 0 started the cluster and leads its control group.
    assert!(
        member_row(out, MemberId(0), c.addr(0))
            .ends_with(&["up".to_string(), "leader".to_string()]),
        "{out}"
    );
    assert!(
        member_row(out, MemberId(2), c.addr(2)).ends_with(&["up".to_string(), "voter".to_string()]),
        "{out}"
    );
    // Per worker: member 0's two workers own half the slots each.
    assert!(
        out.contains(&format!("member 0 ({}), leader\n", c.addr(0))),
        "{out}"
    );
    let worker_rows: Vec<Vec<&str>> = out
        .lines()
        .skip_while(|l| !l.starts_with("member 0 ("))
        .skip(2)
        .take(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(worker_rows[0][..3], ["0", "128", "0-127"], "{out}");
    assert_eq!(worker_rows[1][..3], ["1", "128", "128-255"], "{out}");
    assert!(
        out.contains(&format!("member 2 ({})\n", c.addr(2))),
        "{out}"
    );
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn status_json_is_one_document_with_the_figures() {
    let c = Cluster::start("status-json", 2);
    put_keys(&c, 50);
    let r = c.admin(&["status", "--json"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert_eq!(r.stdout.lines().count(), 1, "{}", r.stdout);
    let j: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["contact"], c.addr(0).to_string());
    assert_eq!(j["map_version"], 2);
    assert_eq!(j["slots"], SLOTS);
    assert_eq!(j["migration"], Value::Null);
    let members = j["members"].as_array().unwrap();
    assert_eq!(members.len(), 2);
    for (i, m) in members.iter().enumerate() {
        assert_eq!(m["member"], i);
        assert_eq!(m["addr"], c.addr(i).to_string());
        assert_eq!(m["answered"], true);
        assert_eq!(m["error"], Value::Null);
        assert_eq!(m["map_version"], 2);
        assert_eq!(m["workers"].as_array().unwrap().len(), 2);
    }
    assert_eq!(members[0]["slots"], SLOTS);
    assert_eq!(members[0]["map_slots"], SLOTS);
    assert_eq!(members[0]["keys"], 50);
    assert!(members[0]["bytes"].as_u64().unwrap() > 0);
    assert_eq!(members[1]["slots"], 0);
    assert_eq!(members[1]["keys"], 0);
    let w = &members[0]["workers"];
    assert_eq!(w[0]["slots"], 128);
    assert_eq!(
        w[1]["ranges"],
        serde_json::json!([{ "first": 128, "last": 255 }])
    );
    let keys: u64 = w
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["keys"].as_u64().unwrap())
        .sum();
    assert_eq!(keys, 50);
    assert_eq!(members[1]["workers"][0]["ranges"], serde_json::json!([]));
}

#[test]
fn a_member_that_does_not_answer_is_named_and_the_others_are_shown() {
    let mut c = Cluster::start("status-down", 3);
    let gone = c.addr(2);
    c.servers.remove(2).shutdown();
    let r = c.admin(&["status"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    let warning = format!("warning: member 2 ({gone}) did not answer: connect to {gone}");
    assert!(r.stdout.contains(&warning), "{}", r.stdout);
    assert_eq!(
        member_row(&r.stdout, MemberId(0), c.addr(0))[2..5],
        ["3", "2", "256"]
    );
    assert_eq!(
        member_row(&r.stdout, MemberId(1), c.addr(1))[2..5],
        ["3", "2", "0"]
    );
    let row = member_row(&r.stdout, MemberId(2), gone);
    assert_eq!(row[2..8], ["-", "2", "0", "-", "-", "down"]);

    let r = c.admin(&["status", "--json"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    let j: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["members"][1]["answered"], true);
    assert_eq!(j["members"][2]["answered"], false);
    assert_eq!(j["members"][2]["state"], "down");
    assert_eq!(j["members"][1]["state"], "up");
    assert!(
        j["cluster_id"].as_str().is_some_and(|s| s.len() == 32),
        "{j}"
    );
    assert!(j["leader"].as_u64().is_some(), "{j}");
    assert!(j["members"][2]["error"]
        .as_str()
        .unwrap()
        .contains(&gone.to_string()));
    assert_eq!(j["members"][2]["keys"], Value::Null);
}

#[test]
fn status_where_nothing_listens_fails_with_one_clear_line() {
    let fabric = format!("kvs-admin-nobody-{}", std::process::id());
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = l.local_addr().unwrap();
    drop(l);
    let r = support::admin(&fabric, nobody, &["status"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(
        r.stderr
            .starts_with(&format!("kvs-admin: connect to {nobody}: ")),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    // A name that does not resolve (the last --server counts).
    let r = support::admin(
        &fabric,
        nobody,
        &["status", "--server", "no-such-host.invalid:7000"],
    );
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(
        r.stderr
            .starts_with("kvs-admin: cannot resolve no-such-host.invalid:7000: "),
        "{}",
        r.stderr
    );
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_missing_or_wrong_token_is_refused_and_the_right_one_is_taken() {
    let dir = std::env::temp_dir().join(format!("kvs-admin-token-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    };
    let good = write("good", "the-cluster-token\n");
    let client = write("client", "the-client-token-0\n");
    let bad = write("bad", "another-token-of-16\n");
    let fabric = format!("kvs-admin-token-{}", std::process::id());
    let (g, cl) = (good.clone(), client.clone());
    let c = Cluster::start_with(fabric, 1, move |cfg| kvs_server::Config {
        auth_token_file: Some(cl.clone()),
        cluster_token_file: Some(g.clone()),
        ..cfg
    });
    let r = c.admin(&["status"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(
        r.stderr.starts_with("kvs-admin: connect to ") && r.stderr.contains("cluster token"),
        "{}",
        r.stderr
    );
    let r = c.admin(&["--cluster-token-file", bad.to_str().unwrap(), "status"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(r.stderr.contains("wrong auth token"), "{}", r.stderr);
    // The client token opens the data path, never the control endpoint.
    let r = c.admin(&["--cluster-token-file", client.to_str().unwrap(), "status"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert!(
        r.stderr
            .contains("the client token cannot issue control operations"),
        "{}",
        r.stderr
    );
    let r = c.admin(&["--cluster-token-file", good.to_str().unwrap(), "status"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    assert!(r.stdout.contains(": map version 1,"), "{}", r.stdout);
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn status_watch_repeats_until_stopped() {
    let c = Cluster::start("status-watch", 1);
    let mut child = support::command(
        &c.fabric,
        c.addr(0),
        &["status", "--json", "--watch", "0.2"],
    )
    .spawn()
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    for _ in 0..3 {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a status every 0.2 s");
        let j: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(j["members"][0]["slots"], SLOTS);
    }
    // Still running: it stops only when told.
    assert!(child.try_wait().unwrap().is_none());
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
}
