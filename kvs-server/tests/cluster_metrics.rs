//! The cluster's figures on a member's metrics endpoint, as the alert rules
//! in deploy/ read them: each member's state, the slots short of copies,
//! and the slots a migration has still to move.
//!
//! - A migration whose target is paused (SIGSTOP) stays where it is: its
//!   remaining slots hold still, and fall to 0 once the target runs again.
//! - A member killed (`kill -9`) shows as failed on the others' endpoints,
//!   with the slots it leaves short of their copies.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use kvs_client::{ControlClient, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_proto::MemberId;

#[path = "support/scrape.rs"]
mod scrape;
mod support;

use scrape::{scrape, sum};
use support::{group_view, ServerProcess};

const SLOTS: u32 = 256;

/// A free loopback port for a member's metrics endpoint.
fn metrics_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A member (two workers, 256 slots) with its metrics on `metrics`.
fn member(
    fabric: &str,
    dir: &Path,
    join: Option<SocketAddr>,
    metrics: SocketAddr,
    extra: &[&str],
) -> ServerProcess {
    let m = metrics.to_string();
    let mut args = vec!["--metrics-listen", m.as_str()];
    args.extend_from_slice(extra);
    let cfg = "member_timeout_ms = 1000\nslots = 256\n";
    support::member_process_configured(fabric, dir, "127.0.0.1:0", join, cfg, &args)
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) {
    test_support::wait_until(what, most, Duration::from_millis(20), done);
}

/// `kvs_cluster_member_state` of `member` in `state` at `metrics`.
fn member_state(metrics: SocketAddr, member: u16, state: &str) -> f64 {
    let m = member.to_string();
    sum(
        &scrape(metrics),
        "kvs_cluster_member_state",
        &[("member", &m), ("state", state)],
    )
}

/// A gauge without labels at `metrics`.
fn gauge(metrics: SocketAddr, name: &str) -> f64 {
    sum(&scrape(metrics), name, &[])
}

/// Whether the group, as `at` sees it, has `members` members all up,
/// every slot with its copies, and every entry applied.
fn settled(cc: &mut ControlClient, at: SocketAddr, members: usize) -> bool {
    group_view(cc, at).is_some_and(|g| {
        g.members.len() == members
            && g.members.iter().all(|m| m.state == "up")
            && g.under_replicated_slots == 0
            && g.applied == g.commit
    })
}

/// Puts `n` records of 1 KB through a client of `at`.
fn put_records(at: SocketAddr, fabric: &str, n: u32) {
    let mut c = support::connect(at, fabric, Default::default()).unwrap();
    let v = vec![b'v'; 1000];
    for i in 0..n {
        let k = format!("r{i}");
        let r = c.wait_for(|c, t| c.put(k.as_bytes(), &v, t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }
}

#[test]
fn a_migration_to_a_paused_member_holds_still_until_it_runs_again() {
    let fabric = format!("kvs-cluster-metrics-m-{}", std::process::id());
    // Dropped after the members: their fabric goes with them.
    let _fabric = test_support::FabricGuard(fabric.clone());
    let root = support::temp_dir("cluster-metrics-m");
    let (ma, mb) = (metrics_port(), metrics_port());
    let a = member(&fabric, &root.join("m0"), None, ma, &[]);
    let b = member(&fabric, &root.join("m1"), Some(a.addr), mb, &[]);
    let mut cc = support::control_client(&fabric);
    wait("two members up", Duration::from_secs(30), || {
        settled(&mut cc, a.addr, 2)
    });
    assert_eq!(gauge(ma, "kvs_migration_slots_remaining"), 0.0);
    put_records(a.addr, &fabric, 2000);

    // Every slot to member 1, which stops at once: with two voters nothing
    // more commits, so the migration can neither move nor end.
    let r = cc.request(
        a.addr,
        &ControlRequest::Migrate {
            first: 0,
            end: SLOTS,
            to: MemberId(1),
        },
    );
    assert!(matches!(r, Ok(ControlReply::Started(_))), "{r:?}");
    b.pause(true);
    let before = gauge(ma, "kvs_migration_slots_remaining");
    std::thread::sleep(Duration::from_secs(1));
    let after = gauge(ma, "kvs_migration_slots_remaining");
    assert!(
        before > 0.0 && before <= f64::from(SLOTS),
        "the migration ended before its target stopped: {before}"
    );
    assert_eq!(before, after, "slots moved while the target was stopped");

    // It runs again: the migration carries on and ends.
    b.pause(false);
    wait("the migration ended", Duration::from_secs(60), || {
        gauge(ma, "kvs_migration_slots_remaining") == 0.0
            && gauge(mb, "kvs_migration_slots_remaining") == 0.0
    });
    let st = support::member_status(&mut cc, a.addr).expect("a status");
    let m = st.migration.expect("the migration's status");
    assert!(m.finished && m.error.is_none(), "{m:?}");
    assert_eq!(m.slots_done, SLOTS);
    assert!(sum(&scrape(mb), "kvs_migration_pulled_bytes_total", &[]) > 2e6);
    drop(cc);
}

#[test]
fn a_killed_member_shows_failed_with_the_slots_it_leaves_short() {
    let fabric = format!("kvs-cluster-metrics-f-{}", std::process::id());
    // Dropped after the members: their fabric goes with them.
    let _fabric = test_support::FabricGuard(fabric.clone());
    let root = support::temp_dir("cluster-metrics-f");
    let (ma, mb, mc) = (metrics_port(), metrics_port(), metrics_port());
    let three = ["--replicas", "3"];
    let a = member(&fabric, &root.join("m0"), None, ma, &three);
    let b = member(&fabric, &root.join("m1"), Some(a.addr), mb, &[]);
    let mut c = member(&fabric, &root.join("m2"), Some(a.addr), mc, &[]);
    let mut cc = support::control_client(&fabric);
    wait(
        "three members up, every slot with its 3 copies",
        Duration::from_secs(60),
        || settled(&mut cc, a.addr, 3),
    );
    for m in [ma, mb, mc] {
        wait(
            "every endpoint sees three members up",
            Duration::from_secs(10),
            || (0..3).all(|i| member_state(m, i, "up") == 1.0),
        );
        let s = scrape(m);
        assert_eq!(
            sum(&s, "kvs_cluster_member_state", &[("state", "failed")]),
            0.0
        );
        assert_eq!(sum(&s, "kvs_cluster_member_state", &[]), 3.0);
        assert_eq!(sum(&s, "kvs_under_replicated_slots", &[]), 0.0);
    }

    // Member 2 dies; with replicas = 3 no member is left to take its
    // copies, so every slot stays short of one.
    c.kill9();
    for m in [ma, mb] {
        wait("member 2 marked failed", Duration::from_secs(20), || {
            member_state(m, 2, "failed") == 1.0
        });
        wait(
            "every slot short of a copy",
            Duration::from_secs(10),
            || gauge(m, "kvs_under_replicated_slots") == f64::from(SLOTS),
        );
        let s = scrape(m);
        assert_eq!(sum(&s, "kvs_cluster_member_state", &[("member", "2")]), 1.0);
        assert_eq!(sum(&s, "kvs_cluster_member_state", &[("state", "up")]), 2.0);
    }
    drop((cc, b));
}
