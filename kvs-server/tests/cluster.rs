//! Several servers under one shard map: joining, map distribution, status,
//! and clients that bootstrap from any member.

use kvs_proto::MemberId;
use std::net::SocketAddr;

use kvs_client::{ControlClient, ControlOptions, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus};
use kvs_server::{Config, Server, StartError};
use mlx5::sim::fabric::Fabric;

mod support;

fn config(fabric: &str, workers: u16, join: Option<SocketAddr>) -> Config {
    Config {
        workers,
        slots: 256,
        join: join.map(|a| a.to_string()),
        ..support::test_config(fabric)
    }
}

/// A data dir for a member a test restarts, removed when the test ends.
struct DataDir(std::path::PathBuf);

impl DataDir {
    fn new(tag: &str) -> DataDir {
        let p = std::env::temp_dir().join(format!("kvs-cluster-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        DataDir(p)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Shuts `s` down and starts it again at its address from its data dir
/// `dir`, with `workers` workers (its memory is gone with it; `join` is
/// given, as a unit file would, and does not matter to a member that
/// resumes).
fn restart_at_its_address(
    s: Server,
    fabric: &str,
    workers: u16,
    join: SocketAddr,
    dir: &DataDir,
) -> Server {
    let addr = s.addr();
    s.shutdown();
    Server::start(Config {
        listen: addr,
        data_dir: Some(dir.0.clone()),
        ..config(fabric, workers, Some(join))
    })
    .unwrap()
}

fn control(fabric: &str) -> ControlClient {
    ControlClient::new(&support::client_device(fabric), ControlOptions::default()).unwrap()
}

/// A fabric named after `tag` and this process, and a cluster of two
/// members with two workers each: the keeper, and one that joined it.
fn two_members(tag: &str) -> (String, Server, Server) {
    let fabric = format!("{tag}-{}", std::process::id());
    let a = Server::start(config(&fabric, 2, None)).unwrap();
    let b = Server::start(config(&fabric, 2, Some(a.addr()))).unwrap();
    (fabric, a, b)
}

/// Sets keys `key0..key{n}` to `val(i)` through `c`.
fn put_all(c: &mut kvs_client::Client<u64>, n: u32, val: impl Fn(u32) -> Vec<u8>) {
    for i in 0..n {
        let k = format!("key{i}");
        assert_eq!(
            c.wait_for(|c, t| c.put(k.as_bytes(), &val(i), t)),
            Ok(OwnedReply::Done)
        );
    }
}

/// Reads keys `key0..key{n}` back through `c`: each must be `val(i)`.
fn get_all(c: &mut kvs_client::Client<u64>, n: u32, val: impl Fn(u32) -> Vec<u8>) {
    for i in 0..n {
        let k = format!("key{i}");
        assert_eq!(
            c.wait_for(|c, t| c.get(k.as_bytes(), t)),
            Ok(OwnedReply::Value(val(i))),
            "{k}"
        );
    }
}

fn status(cc: &mut ControlClient, addr: SocketAddr) -> MemberStatus {
    match cc.request(addr, &ControlRequest::Status).unwrap() {
        ControlReply::Status(s) => s,
        other => panic!("{other:?}"),
    }
}

#[test]
fn servers_join_and_every_member_learns_the_map() {
    let fabric = format!("kvs-cluster-join-{}", std::process::id());
    let a = Server::start(config(&fabric, 2, None)).unwrap();
    assert_eq!((a.member(), a.map_version()), (MemberId(0), 1));
    let (bdir, cdir) = (DataDir::new("join-b"), DataDir::new("join-c"));
    let b = Server::start(Config {
        data_dir: Some(bdir.0.clone()),
        ..config(&fabric, 2, Some(a.addr()))
    })
    .unwrap();
    assert_eq!((b.member(), b.map_version()), (MemberId(1), 2));
    assert_eq!(b.cluster_id(), a.cluster_id());
    // Through a member that is not the leader: sent on to the leader.
    let c = Server::start(Config {
        data_dir: Some(cdir.0.clone()),
        ..config(&fabric, 1, Some(b.addr()))
    })
    .unwrap();
    assert_eq!((c.member(), c.map_version()), (MemberId(2), 3));
    // Member 1 applies version 3 from the group's log.
    let t = std::time::Instant::now();
    while b.map_version() != 3 {
        assert!(t.elapsed().as_secs() < 20, "member 1 never got version 3");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut cc = control(&fabric);
    for (s, member, workers) in [(&a, 0, 2), (&b, 1, 2), (&c, 2, 1)] {
        let st = status(&mut cc, s.addr());
        assert_eq!((st.member, st.map_version), (MemberId(member), 3));
        assert_eq!(st.workers.len(), workers);
        // The first server owns every slot until slots move.
        let slots: u32 = st.workers.iter().map(|w| w.slots).sum();
        assert_eq!(slots, if member == 0 { 256 } else { 0 });
    }

    // Data goes to the owner.
    let mut client = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    assert_eq!(client.map().version(), 3);
    assert_eq!(client.map().members().len(), 3);
    for i in 0..200u32 {
        let k = format!("key{i}");
        let r = client.wait_for(|c, t| c.put(k.as_bytes(), b"v", t));
        assert_eq!(r, Ok(OwnedReply::Done));
    }
    let keys: u64 = status(&mut cc, a.addr())
        .workers
        .iter()
        .map(|w| w.keys)
        .sum();
    assert!(keys <= 200);

    // A member that restarts from its data dir is the same member of the
    // same cluster; the map changes only for its new bulk port (any free
    // one), which it asks the group to record.
    let b = restart_at_its_address(b, &fabric, 2, a.addr(), &bdir);
    assert_eq!((b.member(), b.cluster_id()), (MemberId(1), a.cluster_id()));
    let t = std::time::Instant::now();
    while b.map_version() != 4 {
        assert!(
            t.elapsed().as_secs() < 20,
            "map version {}",
            b.map_version()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // ... but not with another worker count.
    let c_addr = c.addr();
    c.shutdown();
    let e = Server::start(Config {
        listen: c_addr,
        data_dir: Some(cdir.0.clone()),
        ..config(&fabric, 3, None)
    })
    .unwrap_err();
    assert!(
        matches!(&e, StartError::Join(m) if m.contains("member 2, which has 1 workers")),
        "{e}"
    );
    // A server at a member's address without its data dir is refused: it
    // would be a second member 2.
    let e = Server::start(Config {
        listen: c_addr,
        ..config(&fabric, 1, Some(a.addr()))
    })
    .unwrap_err();
    assert!(
        matches!(&e, StartError::Join(m) if m.contains("is member 2 already")),
        "{e}"
    );
    drop(client);
    drop(cc);
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_join_that_cannot_succeed_says_why() {
    let fabric = format!("kvs-cluster-nojoin-{}", std::process::id());
    // Nobody listens there.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = l.local_addr().unwrap();
    drop(l);
    let e = Server::start(config(&fabric, 1, Some(nobody))).unwrap_err();
    assert!(
        matches!(&e, StartError::Join(m) if m.contains(&nobody.to_string())),
        "{e}"
    );
    let e = Server::start(Config {
        join: Some("no-such-host.invalid:7000".into()),
        ..config(&fabric, 1, None)
    })
    .unwrap_err();
    assert!(
        matches!(&e, StartError::Join(m) if m.contains("no-such-host")),
        "{e}"
    );
    Fabric::remove_if_unused(&fabric);
}

/// Waits until the keeper says the migration is over; its status.
fn migration_over(
    cc: &mut ControlClient,
    keeper: SocketAddr,
) -> kvs_proto::control::MigrationStatus {
    let t = std::time::Instant::now();
    loop {
        let st = status(cc, keeper);
        if let Some(m) = st.migration.filter(|m| m.finished) {
            return m;
        }
        assert!(t.elapsed().as_secs() < 60, "the migration did not end");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn every_slot_moves_to_a_new_member_and_back_with_every_record() {
    let (fabric, a, b) = two_members("kvs-cluster-move");
    let mut c = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    let n = 3000u32;
    let val = |i: u32| format!("value-{i}-{}", "x".repeat((i % 200) as usize)).into_bytes();
    put_all(&mut c, n, val);
    drop(c);
    let mut cc = control(&fabric);
    // Everything to member 1.
    start_migration(&mut cc, a.addr(), 0, 256, MemberId(1));
    // Only one at a time.
    let again = cc
        .request(
            b.addr(),
            &ControlRequest::Migrate {
                first: 0,
                end: 256,
                to: MemberId(1),
            },
        )
        .unwrap();
    match again {
        // Sent on by member 1 to the keeper, which refuses.
        ControlReply::Keeper { addr } => {
            assert_eq!(addr, a.addr());
            let r = cc
                .request(
                    addr,
                    &ControlRequest::Migrate {
                        first: 0,
                        end: 10,
                        to: MemberId(0),
                    },
                )
                .unwrap();
            assert!(
                matches!(&r, ControlReply::Error { message } if message.contains("already running"))
                    || matches!(&r, ControlReply::Started(_)),
                "{r:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let m = migration_over(&mut cc, a.addr());
    assert_eq!(m.error, None);
    assert_eq!(m.slots_total, 256);
    let t = std::time::Instant::now();
    while status(&mut cc, a.addr()).held.0 > 0 || a.map_version() != b.map_version() {
        assert!(t.elapsed().as_secs() < 20, "the source kept its copy");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Workers publish their figures within a few hundred milliseconds.
    let keys = |cc: &mut ControlClient, s: &Server| -> u64 {
        status(cc, s.addr()).workers.iter().map(|w| w.keys).sum()
    };
    while keys(&mut cc, &a) != 0 || keys(&mut cc, &b) != u64::from(n) {
        assert!(
            t.elapsed().as_secs() < 20,
            "{} and {} keys",
            keys(&mut cc, &a),
            keys(&mut cc, &b)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Four chunks of 64 slots, each pulled by both of member 1's workers,
    // over one bulk connection per worker.
    let sa = status(&mut cc, a.addr());
    assert_eq!(sa.bulk_served, (2, 8), "connections and pulls: {sa:?}");
    let sb = status(&mut cc, b.addr());
    assert_eq!(sb.workers.iter().map(|w| w.slots).sum::<u32>(), 256);
    // Both of member 1's workers pulled.
    assert!(sb.workers.iter().all(|w| w.keys > 0), "{sb:?}");
    let mut c = support::connect(b.addr(), &fabric, Default::default()).unwrap();
    get_all(&mut c, n, val);
    drop(c);
    drop(cc);
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_rail_that_goes_down_mid_migration_is_left_and_nothing_is_lost() {
    let (fabric, a, b) = two_members("kvs-cluster-rail");
    let mut c = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    let n = 4000u32;
    let val = |i: u32| format!("{i}:{}", "v".repeat(1000)).into_bytes();
    put_all(&mut c, n, val);
    drop(c);
    let mut cc = control(&fabric);
    start_migration(&mut cc, a.addr(), 0, 256, MemberId(1));
    // Once the first chunk is in, rail 1 (sim3) loses its link.
    let t = std::time::Instant::now();
    loop {
        let m = status(&mut cc, a.addr()).migration.unwrap();
        assert!(!m.finished, "the migration ended before the rail went down");
        if m.slots_done >= 64 {
            break;
        }
        assert!(t.elapsed().as_secs() < 30);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let f = mlx5::sim::fabric::Fabric::open(&fabric).unwrap();
    f.set_port_down(3, true).unwrap();
    let m = migration_over(&mut cc, a.addr());
    assert_eq!((m.error, m.slots_done), (None, 256));
    assert!(f.port_down(3));
    let mut c = support::connect(b.addr(), &fabric, Default::default()).unwrap();
    get_all(&mut c, n, val);
    f.set_port_down(3, false).unwrap();
    drop((c, cc, f));
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}

/// Starts a migration of `first..end` to `to` at the keeper.
fn start_migration(cc: &mut ControlClient, keeper: SocketAddr, first: u32, end: u32, to: MemberId) {
    let r = cc
        .request(keeper, &ControlRequest::Migrate { first, end, to })
        .unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
}

/// Keys `key{i}` for `i` in `0..n`, each set to `v{i}-0` through `c`.
fn load(c: &mut kvs_client::Client<u64>, n: u32, pad: usize) {
    put_all(c, n, |i| format!("v{i}-0{}", "p".repeat(pad)).into_bytes());
}

#[test]
fn a_client_holding_an_old_map_keeps_working_across_map_versions() {
    let (fabric, a, b) = two_members("kvs-cluster-old-map");
    let c_ = Server::start(config(&fabric, 1, Some(a.addr()))).unwrap();
    let mut writer = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    load(&mut writer, 2000, 20);
    // This client learns the map now and then sits idle while it changes.
    let mut old = support::connect(c_.addr(), &fabric, Default::default()).unwrap();
    let v0 = old.map().version();
    let mut cc = control(&fabric);
    for (first, end, to) in [(0, 128, 1), (64, 200, 2), (0, 256, 0), (100, 256, 2)] {
        start_migration(&mut cc, a.addr(), first, end, MemberId(to));
        migration_over(&mut cc, a.addr());
    }
    let final_version = a.map_version();
    assert!(final_version >= v0 + 8, "{v0} -> {final_version}");
    // Every key through the old map: redirected, never an error.
    for i in 0..2000 {
        let k = format!("key{i}");
        let want = format!("v{i}-0{}", "p".repeat(20)).into_bytes();
        assert_eq!(
            old.wait_for(|c, t| c.get(k.as_bytes(), t)),
            Ok(OwnedReply::Value(want)),
            "{k}"
        );
        let v = format!("v{i}-1");
        assert_eq!(
            old.wait_for(|c, t| c.put(k.as_bytes(), v.as_bytes(), t)),
            Ok(OwnedReply::Done)
        );
    }
    assert!(old.redirects() > 0);
    // It ends on the map the members serve by.
    let t = std::time::Instant::now();
    while old.map().version() != final_version {
        old.poll(|_, _| {});
        assert!(t.elapsed().as_secs() < 10, "{}", old.map().version());
    }
    // And the other client, which wrote before all this, reads the new values.
    for i in (0..2000).step_by(7) {
        let k = format!("key{i}");
        assert_eq!(
            writer.wait_for(|c, t| c.get(k.as_bytes(), t)),
            Ok(OwnedReply::Value(format!("v{i}-1").into_bytes()))
        );
    }
    drop((old, writer, cc));
    c_.shutdown();
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}

/// Writes every key over and over from a thread of its own until told to
/// stop; returns the last value acknowledged for each key.
fn writer(
    fabric: String,
    contact: SocketAddr,
    n: u32,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut c = support::connect(contact, &fabric, Default::default()).unwrap();
        let mut acked: Vec<String> = (0..n)
            .map(|i| format!("v{i}-0{}", "p".repeat(200)))
            .collect();
        let mut round = 1u32;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for i in 0..n {
                let (k, v) = (format!("key{i}"), format!("v{i}-{round}"));
                match c.wait_for(|c, t| c.put(k.as_bytes(), v.as_bytes(), t)) {
                    Ok(OwnedReply::Done) => acked[i as usize] = v.clone(),
                    other => panic!("{k}: {other:?}"),
                }
                // Deletes and re-puts too: a tombstone must hold.
                if i % 17 == 0 {
                    assert_eq!(
                        c.wait_for(|c, t| c.delete(k.as_bytes(), t)),
                        Ok(OwnedReply::Done)
                    );
                    assert_eq!(
                        c.wait_for(|c, t| c.get(k.as_bytes(), t)),
                        Ok(OwnedReply::NotFound)
                    );
                    assert_eq!(
                        c.wait_for(|c, t| c.put(k.as_bytes(), v.as_bytes(), t)),
                        Ok(OwnedReply::Done)
                    );
                }
            }
            round += 1;
        }
        acked
    })
}

#[test]
fn writes_during_migrations_and_a_cancel_are_never_lost() {
    let (fabric, a, b) = two_members("kvs-cluster-cancel");
    let n = 3000;
    let mut c = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    load(&mut c, n, 200);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let w = writer(fabric.clone(), b.addr(), n, stop.clone());
    let mut cc = control(&fabric);
    // A whole move, then one cancelled after its first chunk.
    start_migration(&mut cc, a.addr(), 0, 256, MemberId(1));
    migration_over(&mut cc, a.addr());
    start_migration(&mut cc, a.addr(), 0, 256, MemberId(0));
    assert_eq!(
        cc.request(a.addr(), &ControlRequest::Cancel).unwrap(),
        ControlReply::Ok
    );
    let m = migration_over(&mut cc, a.addr());
    assert!(m.cancelled && m.slots_done < 256, "{m:?}");
    assert_eq!(
        cc.request(a.addr(), &ControlRequest::Cancel).unwrap(),
        ControlReply::error("no migration is running")
    );
    // And back to where it started, with writes still going.
    start_migration(&mut cc, a.addr(), 0, 256, MemberId(0));
    migration_over(&mut cc, a.addr());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = w.join().unwrap();
    for (i, v) in acked.iter().enumerate() {
        let k = format!("key{i}");
        assert_eq!(
            c.wait_for(|c, t| c.get(k.as_bytes(), t)),
            Ok(OwnedReply::Value(v.clone().into_bytes())),
            "{k}"
        );
    }
    drop((c, cc));
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_target_that_restarts_mid_migration_pulls_its_chunk_again() {
    let fabric = format!("kvs-cluster-restart-{}", std::process::id());
    let bdir = DataDir::new("restart-b");
    let a = Server::start(config(&fabric, 2, None)).unwrap();
    let b = Server::start(Config {
        data_dir: Some(bdir.0.clone()),
        ..config(&fabric, 2, Some(a.addr()))
    })
    .unwrap();
    let mut c = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    let n = 6000;
    load(&mut c, n, 800);
    let mut cc = control(&fabric);
    start_migration(&mut cc, a.addr(), 0, 256, MemberId(1));
    // The first chunk is handed over; the target goes away (its memory with
    // it) and comes back at its address, from its data dir.
    let t = std::time::Instant::now();
    while b.map_version() < 3 {
        assert!(t.elapsed().as_secs() < 30);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let b = restart_at_its_address(b, &fabric, 2, a.addr(), &bdir);
    assert_eq!(b.member(), MemberId(1));
    let m = migration_over(&mut cc, a.addr());
    assert_eq!((m.error, m.slots_done), (None, 256));
    // Every record was loaded before the migration: all are at member 1
    // (read by a new client: the old one's connections to member 1 died
    // with it).
    drop(c);
    let mut c = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    for i in 0..n {
        let k = format!("key{i}");
        let want = format!("v{i}-0{}", "p".repeat(800)).into_bytes();
        assert_eq!(
            c.wait_for(|c, t| c.get(k.as_bytes(), t)),
            Ok(OwnedReply::Value(want)),
            "{k}"
        );
    }
    drop((c, cc));
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
}
