//! A backup restarted after a stop catches up on what it missed instead of
//! taking a whole copy: two member processes, `replicas = 2`,
//! `durability = "always"`, the founder the only voter (so it marks the
//! backup failed alone). The backup is killed (`kill -9`), or stopped as
//! systemd stops it (SIGTERM: it drains first, and the drain drops its
//! copies from the map); records are overwritten, deleted and added while
//! it is down and marked failed; it restarts from its data dir and becomes
//! every slot's ready backup again.
//! The founder's metrics show the copies: none whole, and catch-ups of a
//! few kilobytes against megabytes of records. Then the founder drains, the
//! caught-up copies become the primaries, and every record reads back
//! from them as the last acknowledged write left it.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use kvs_client::{ControlClient, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest};
use prometheus_parse::{Scrape, Value};

mod support;

use support::{group_view, ServerProcess};

const RECORDS: u32 = 4000;
const VALUE: usize = 500;

/// Each member's config: the founder alone votes, and marks a silent
/// member failed after half a second.
const CONFIG: &str = "member_timeout_ms = 500\ncontrol_voters = 1\n";

fn member(fabric: &str, dir: &Path, listen: &str, join: Option<SocketAddr>) -> ServerProcess {
    let extra = ["--replicas", "2", "--durability", "always"];
    support::member_process_configured(fabric, dir, listen, join, CONFIG, &extra)
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) {
    test_support::wait_until(what, most, Duration::from_millis(10), done);
}

/// The founder's copies so far: (whole, whole bytes, catch-ups, their
/// bytes), parsed from its metrics endpoint by a Prometheus parser.
fn copies(metrics: SocketAddr) -> (f64, f64, f64, f64) {
    let (code, _, body) = support::http_get(metrics, "/metrics");
    assert_eq!(code, 200, "{body}");
    let samples = Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .unwrap()
        .samples;
    let get = |name: &str, kind: &str| {
        samples
            .iter()
            .find(|s| s.metric == name && s.labels.get("kind") == Some(kind))
            .map(|s| match s.value {
                Value::Counter(v) | Value::Untyped(v) => v,
                ref v => panic!("{name}: {v:?}"),
            })
            .unwrap_or_else(|| panic!("no {name}{{kind={kind}}} in\n{body}"))
    };
    (
        get("kvs_backup_copies_total", "whole"),
        get("kvs_backup_copy_bytes_total", "whole"),
        get("kvs_backup_copies_total", "catch_up"),
        get("kvs_backup_copy_bytes_total", "catch_up"),
    )
}

/// Whether both members are up and every slot's backup is ready.
fn healthy(cc: &mut ControlClient, at: SocketAddr) -> bool {
    group_view(cc, at).is_some_and(|g| {
        g.members.len() == 2
            && g.members.iter().all(|m| m.state == "up")
            && g.under_replicated_slots == 0
            && g.applied == g.commit
    })
}

fn value(i: u32, round: u32) -> Vec<u8> {
    format!("{i}.{round}:{}", "v".repeat(VALUE)).into_bytes()
}

#[test]
fn a_backup_killed_and_restarted_catches_up_instead_of_a_whole_copy() {
    restart_catches_up("kill", ServerProcess::kill9);
}

#[test]
fn a_backup_stopped_and_restarted_catches_up_instead_of_a_whole_copy() {
    restart_catches_up("term", |b| {
        assert!(b.term(Duration::from_secs(20)), "{}", b.printed());
    });
}

/// Every record of `want` reads back through `c` as the last
/// acknowledged write left it (`None`: deleted).
fn reads_back(c: &mut kvs_client::Client<u64>, want: &BTreeMap<String, Option<Vec<u8>>>) {
    for (k, v) in want {
        let got = c.wait_for(|c, t| c.get(k.as_bytes(), t)).unwrap();
        let expect = v.clone().map_or(OwnedReply::NotFound, OwnedReply::Value);
        assert_eq!(got, expect, "{k}");
    }
}

/// A metrics endpoint's address, free now.
fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A member stops as systemd stops it (SIGTERM: its drain hands each slot
/// it leads over to a backup and drops its copies, which it keeps on
/// disk), records change while it is down, and it restarts from its data
/// dir: its kept copies stand where the new primaries' terms began, so
/// each catches up.
#[test]
fn a_primary_stopped_and_restarted_catches_up_instead_of_a_whole_copy() {
    primary_restart_catches_up("term", |a| {
        assert!(a.term(Duration::from_secs(30)), "{}", a.printed());
    });
}

/// The same with `kill -9` of the idle member: the others promote their
/// copies, which stood at its last writes, and its records, whose position
/// it journaled once they were quiet, catch up in their terms.
#[test]
fn a_primary_killed_and_restarted_catches_up_instead_of_a_whole_copy() {
    primary_restart_catches_up("kill", |a| {
        // A slot's position is journaled once it was quiet through two
        // passes of the worker's chores (idle: every wait, at most 250 ms
        // apart).
        std::thread::sleep(Duration::from_millis(1500));
        a.kill9();
    });
}

/// The test, with the founder stopped by `stop`. Three members of two
/// workers each, `replicas = 3`, every member a voter, the slots
/// rebalanced: the founder leads a third of them and backs up the rest.
/// The runs the group deals its copies in after its restart are not those
/// of before (its slots' new primary leads the ones next to them too), so
/// only its restart naming which worker kept each copy puts the copy
/// there.
fn primary_restart_catches_up(tag: &str, stop: impl FnOnce(&mut ServerProcess)) {
    let fabric = format!("kvs-catch-up-primary-{tag}-{}", std::process::id());
    let _fabric = test_support::FabricGuard(fabric.clone());
    let root = support::temp_dir(&format!("catch-up-primary-{tag}"));
    let dirs = [root.join("m0"), root.join("m1"), root.join("m2")];
    let metrics = [free_addr(), free_addr()];
    let config = root.join("member.toml");
    std::fs::write(&config, "member_timeout_ms = 500\n").unwrap();
    let config = config.to_str().unwrap();
    let start =
        |dir: &Path, listen: &str, join: Option<SocketAddr>, metrics: Option<SocketAddr>| {
            let m = metrics.map(|m| m.to_string());
            let mut extra = vec![
                "--config",
                config,
                "--replicas",
                "3",
                "--durability",
                "always",
            ];
            if let Some(m) = m.as_deref() {
                extra.extend(["--metrics-listen", m]);
            }
            support::member_process_with(&fabric, dir, listen, 2, join, &extra)
        };
    let mut a = start(&dirs[0], "127.0.0.1:0", None, None);
    let a_addr = a.addr;
    let b = start(&dirs[1], "127.0.0.1:0", Some(a_addr), Some(metrics[0]));
    let c3 = start(&dirs[2], "127.0.0.1:0", Some(a_addr), Some(metrics[1]));
    let mut cc = support::control_client(&fabric);
    // Up and not drained: a drained member's copies are not wanted, so
    // before its restart is applied no slot counts as short of one.
    let healthy = |cc: &mut ControlClient| {
        group_view(cc, b.addr).is_some_and(|g| {
            g.members.len() == 3
                && g.members.iter().all(|m| m.state == "up" && !m.drained)
                && g.under_replicated_slots == 0
                && g.applied == g.commit
        })
    };
    wait("three members", Duration::from_secs(60), || {
        healthy(&mut cc)
    });
    let r = cc.request(a_addr, &ControlRequest::Rebalance).unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
    wait("the rebalance", Duration::from_secs(90), || {
        support::member_status(&mut cc, a_addr)
            .and_then(|s| s.migration)
            .is_some_and(|m| m.finished)
            && healthy(&mut cc)
    });

    let mut want: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    let mut c = support::connect(a_addr, &fabric, Default::default()).unwrap();
    for i in 0..RECORDS {
        let (k, v) = (format!("r{i}"), value(i, 0));
        let r = c.wait_for(|c, t| c.put(k.as_bytes(), &v, t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
        want.insert(k, Some(v));
    }
    drop(c);
    let total = |m: &[SocketAddr]| {
        m.iter()
            .map(|&m| copies(m))
            .fold((0.0, 0.0, 0.0, 0.0), |t, c| {
                (t.0 + c.0, t.1 + c.1, t.2 + c.2, t.3 + c.3)
            })
    };
    let before = total(&metrics);

    // The founder stops; the others write on.
    stop(&mut a);
    let mut c = support::connect(b.addr, &fabric, Default::default()).unwrap();
    for i in (0..RECORDS).step_by(40) {
        let k = format!("r{i}");
        let v = value(i, 1);
        want.insert(k.clone(), Some(v.clone()));
        assert_eq!(
            c.wait_for(|c, t| c.put(k.as_bytes(), &v, t)),
            Ok(OwnedReply::Done),
            "{k}"
        );
    }

    // Back from its data dir: every slot's ready backup again.
    let a = start(&dirs[0], &a_addr.to_string(), None, None);
    let t = std::time::Instant::now();
    while !healthy(&mut cc) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the founder not every slot's ready backup within 60 s:\n{}",
            a.printed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = total(&metrics);
    let (whole, whole_bytes) = (after.0 - before.0, after.1 - before.1);
    let (catch_ups, catch_up_bytes) = (after.2 - before.2, after.3 - before.3);
    eprintln!(
        "after the primary's restart: {whole} whole copies ({whole_bytes} bytes), \
         {catch_ups} catch-ups ({catch_up_bytes} bytes)"
    );
    assert_eq!(
        whole,
        0.0,
        "a slot was copied whole: {after:?}\n{}\n---\n{}\n---\n{}",
        a.printed(),
        b.printed(),
        c3.printed()
    );
    assert!(catch_ups > 0.0 && catch_up_bytes > 0.0, "{after:?}");
    reads_back(&mut c, &want);
    drop(c);
    drop(cc);
}

/// The test, with the backup stopped by `stop`.
fn restart_catches_up(tag: &str, stop: impl FnOnce(&mut ServerProcess)) {
    let fabric = format!("kvs-catch-up-{tag}-{}", std::process::id());
    // Dropped after the members: their fabric goes with them.
    let _fabric = test_support::FabricGuard(fabric.clone());
    let root = support::temp_dir(&format!("catch-up-{tag}"));
    let (d0, d1) = (root.join("m0"), root.join("m1"));
    let metrics = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let ma = metrics.to_string();
    let a = support::member_process_configured(
        &fabric,
        &d0,
        "127.0.0.1:0",
        None,
        CONFIG,
        &[
            "--replicas",
            "2",
            "--durability",
            "always",
            "--metrics-listen",
            &ma,
        ],
    );
    let mut b = member(&fabric, &d1, "127.0.0.1:0", Some(a.addr));
    let b_addr = b.addr;
    let mut cc = support::control_client(&fabric);
    wait("every slot backed up", Duration::from_secs(60), || {
        healthy(&mut cc, a.addr)
    });

    // The records, acknowledged with both copies.
    let mut want: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    let mut c = support::connect(a.addr, &fabric, Default::default()).unwrap();
    for i in 0..RECORDS {
        let (k, v) = (format!("r{i}"), value(i, 0));
        let r = c.wait_for(|c, t| c.put(k.as_bytes(), &v, t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
        want.insert(k, Some(v));
    }
    let before = copies(metrics);
    assert!(before.0 > 0.0, "the first copies were whole: {before:?}");

    // The backup stops; the founder marks it failed and writes on alone.
    stop(&mut b);
    for i in (0..RECORDS).step_by(40) {
        let k = format!("r{i}");
        let r = if i % 80 == 0 {
            want.insert(k.clone(), None);
            c.wait_for(|c, t| c.delete(k.as_bytes(), t))
        } else {
            let v = value(i, 1);
            want.insert(k.clone(), Some(v.clone()));
            c.wait_for(|c, t| c.put(k.as_bytes(), &v, t))
        };
        assert!(
            matches!(r, Ok(OwnedReply::Done | OwnedReply::NotFound)),
            "{k}: {r:?}"
        );
    }
    for i in RECORDS..RECORDS + 50 {
        let (k, v) = (format!("r{i}"), value(i, 1));
        assert_eq!(
            c.wait_for(|c, t| c.put(k.as_bytes(), &v, t)),
            Ok(OwnedReply::Done)
        );
        want.insert(k, Some(v));
    }
    wait("the backup marked failed", Duration::from_secs(20), || {
        group_view(&mut cc, a.addr).is_some_and(|g| g.members.iter().any(|m| m.state == "failed"))
    });

    // Back from its data dir: every slot's ready backup again.
    let b = member(&fabric, &d1, &b_addr.to_string(), None);
    let t = std::time::Instant::now();
    while !healthy(&mut cc, a.addr) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the backup not ready within 60 s:\n{}",
            b.printed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = copies(metrics);
    let (whole, whole_bytes) = (after.0 - before.0, after.1 - before.1);
    let (catch_ups, catch_up_bytes) = (after.2 - before.2, after.3 - before.3);
    let data = f64::from(RECORDS) * (VALUE as f64 + 16.0);
    eprintln!(
        "after the restart: {whole} whole copies ({whole_bytes} bytes), {catch_ups} catch-ups \
         ({catch_up_bytes} bytes), of {data} bytes of records"
    );
    assert_eq!(
        whole,
        0.0,
        "a slot was copied whole: {after:?}\n{}\n---\n{}",
        a.printed(),
        b.printed()
    );
    assert!(catch_ups > 0.0 && catch_up_bytes > 0.0, "{after:?}");
    assert!(catch_up_bytes < data / 10.0, "{catch_up_bytes} of {data}");

    // The caught-up copies serve: the founder drains, and every record
    // reads back from the backup as the last acknowledged write left it.
    let r = cc.request(a.addr, &ControlRequest::Drain);
    assert!(matches!(r, Ok(ControlReply::Ok)), "{r:?}");
    wait("the founder drained", Duration::from_secs(20), || {
        support::member_status(&mut cc, a.addr).is_some_and(|s| s.drained)
    });
    drop(c);
    let mut c = support::connect(b.addr, &fabric, Default::default()).unwrap();
    reads_back(&mut c, &want);
    drop(c);
    drop(cc);
}
