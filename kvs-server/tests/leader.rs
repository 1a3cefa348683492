//! The control group's leader dies (`kill -9` of its process) under load, in
//! the middle of a migration: a new leader within two member timeouts, the
//! migration finishes under it (its state is in the group's log), other
//! migrations go on without the old leader, the old leader restarted from
//! its data dir (no `--join`) comes back as a follower, every member agrees
//! on one cluster, leader and map, no migrated record is lost, and the
//! recorded history of the load shows no lost write and no stale read.

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kvs_client::{ControlClient, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus};
use mlx5::sim::fabric::Fabric;

#[path = "support/history.rs"]
mod history;
#[path = "support/load.rs"]
mod load;
mod support;

use history::History;
use load::{load, read_back};
use support::{member_status as status, ServerProcess};

fn member(fabric: &str, dir: &Path, listen: &str, join: Option<SocketAddr>) -> ServerProcess {
    support::member_process(fabric, dir, listen, 2, join)
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) -> Duration {
    test_support::wait_until(what, most, Duration::from_millis(5), done)
}

/// Starts a migration at the leader, asked at `leader` and found as
/// `kvs-admin` finds it: following `Keeper` answers (a member that is not
/// the leader names it; under load leadership can move again after the
/// test learned it) and waiting out `NoLeader`. Returns where it started.
fn start_migration(
    cc: &mut ControlClient,
    leader: SocketAddr,
    first: u32,
    end: u32,
    to: MemberId,
) -> SocketAddr {
    let mut at = leader;
    for _ in 0..100 {
        match cc
            .request(at, &ControlRequest::Migrate { first, end, to })
            .unwrap()
        {
            ControlReply::Started(_) => return at,
            ControlReply::Keeper { addr } if addr.ip().is_unspecified() => {
                at = SocketAddr::new(at.ip(), addr.port());
            }
            ControlReply::Keeper { addr } => at = addr,
            ControlReply::NoLeader => std::thread::sleep(Duration::from_millis(50)),
            r => panic!("migrating {first}..{end} to {to:?}: {r:?}"),
        }
    }
    panic!("no leader took the migration of {first}..{end}");
}

/// Waits until the member at `at` says the migration is over, without error.
fn migration_over(cc: &mut ControlClient, at: SocketAddr) {
    wait("a migration", Duration::from_secs(60), || {
        status(cc, at)
            .and_then(|s| s.migration)
            .is_some_and(|m| m.finished && m.error.is_none())
    });
}

/// Starts a migration at the leader and waits for its end.
fn migrate(cc: &mut ControlClient, leader: SocketAddr, first: u32, end: u32, to: MemberId) {
    let at = start_migration(cc, leader, first, end, to);
    migration_over(cc, at);
}

/// Preloaded records: `p{i}`, 1 KiB each.
fn preloaded(i: u32) -> (String, Vec<u8>) {
    (
        format!("p{i}"),
        format!("{i}:{}", "x".repeat(1024)).into_bytes(),
    )
}

#[test]
fn the_leader_dies_under_load_and_nothing_is_lost_or_stale() {
    let fabric = format!("kvs-leader-{}", std::process::id());
    let root = support::temp_dir("leader");
    let dirs: Vec<PathBuf> = (0..3).map(|m| root.join(format!("m{m}"))).collect();
    let mut a = member(&fabric, &dirs[0], "127.0.0.1:0", None);
    let b = member(&fabric, &dirs[1], "127.0.0.1:0", Some(a.addr));
    let c = member(&fabric, &dirs[2], "127.0.0.1:0", Some(a.addr));
    let addrs = [a.addr, b.addr, c.addr];
    let mut cc = support::control_client(&fabric);
    wait(
        "three voters under member 0",
        Duration::from_secs(20),
        || {
            status(&mut cc, a.addr)
                .and_then(|s| s.group)
                .is_some_and(|g| g.leader == Some(MemberId(0)) && g.members.iter().all(|m| m.voter))
        },
    );
    // The slots go to members 1 and 2: the leader's death loses no record
    // (records live in memory; replicas are another matter).
    migrate(&mut cc, a.addr, 0, 512, MemberId(1));
    migrate(&mut cc, a.addr, 512, 1024, MemberId(2));
    // Records for a migration to move while the leader dies.
    let preload = 16_000;
    let mut loader = support::connect(b.addr, &fabric, Default::default()).unwrap();
    for i in 0..preload {
        let (k, v) = preloaded(i);
        let r = loader.wait_for(|c, t| c.put(k.as_bytes(), &v, t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }
    drop(loader);

    let h = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            load(
                h.clone(),
                b.addr,
                fabric.clone(),
                t * 100,
                100,
                stop.clone(),
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));

    // The leader dies while member 1's slots move to member 2.
    start_migration(&mut cc, a.addr, 0, 512, MemberId(2));
    let m = status(&mut cc, a.addr).unwrap().migration.unwrap();
    assert!(
        !m.finished,
        "the migration ended before the leader died: {m:?}"
    );
    a.kill9();
    let mut new_leader = None;
    let elected = wait("a new leader", Duration::from_secs(10), || {
        new_leader = [1u16, 2]
            .iter()
            .filter_map(|&m| status(&mut cc, addrs[usize::from(m)]))
            .filter_map(|s| s.group)
            .find_map(|g| g.leader.filter(|&l| l != MemberId(0)));
        new_leader.is_some()
    });
    let new_leader = new_leader.unwrap();
    assert!(
        elected <= Duration::from_secs(2),
        "a new leader {elected:?} after the kill (member_timeout_ms = 1000)"
    );
    let failed = wait(
        "the old leader marked failed",
        Duration::from_secs(10),
        || {
            status(&mut cc, addrs[new_leader.index()])
                .and_then(|s| s.group)
                .is_some_and(|g| g.members[0].state == "failed")
        },
    ) + elected;
    // The migration finishes under the new leader, and others go on
    // without the old one, under load.
    let leader_addr = addrs[new_leader.index()];
    migration_over(&mut cc, leader_addr);
    migrate(&mut cc, leader_addr, 0, 64, MemberId(1));
    // Back from its data dir, without --join: the same member of the same
    // cluster, a follower.
    let a = member(&fabric, &dirs[0], &a.addr.to_string(), None);
    wait(
        "one cluster, one leader, one map",
        Duration::from_secs(20),
        || {
            let views: Vec<MemberStatus> =
                addrs.iter().filter_map(|&m| status(&mut cc, m)).collect();
            views.len() == 3
                && views.iter().all(|s| {
                    let g = s.group.as_ref();
                    g.map(|g| (&g.cluster_id, g.leader, g.members[0].state.as_str()))
                        == views[0]
                            .group
                            .as_ref()
                            .map(|g| (&g.cluster_id, Some(new_leader), "up"))
                        && s.map_version == views[0].map_version
                })
        },
    );
    let g = status(&mut cc, a.addr).unwrap().group.unwrap();
    assert_eq!(
        g.leader,
        Some(new_leader),
        "the old leader came back as a follower"
    );
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Release);
    for w in workers {
        w.join().unwrap();
    }
    // Every key read once more, after everything.
    let mut reader = support::connect(b.addr, &fabric, Default::default()).unwrap();
    let s = read_back(&mut reader, &h, 200, (0..preload).map(preloaded));
    assert!(s.writes_ok > 200 && s.reads_ok > 200, "{s:?}");
    eprintln!(
        "leader failover: new leader (member {new_leader}) {elected:?} after the kill, old \
         leader marked failed after {failed:?}; history: {s:?}"
    );
    drop((reader, cc));
    drop((a, b, c));
    Fabric::remove_if_unused(&fabric);
}
