//! Every store through the one interface: the same calls, the same answers
//! (up to what Java's bindings answer for a missing record).

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::properties::Properties;

/// What an answer was, in a form two stores can be compared by.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Status(Status),
    Record(Vec<u8>),
}

/// Submits one operation, waits for its answer.
fn one<D: Db>(db: &mut D, submit: impl FnOnce(&mut D) -> Result<(), Refused>) -> Seen {
    submit(db).expect("submitted");
    let mut seen = None;
    while db.in_flight() > 0 {
        db.wait(Duration::from_millis(100), |tag, a| {
            assert_eq!(tag, 9);
            seen = Some(match a {
                Answer::Done(s) => Seen::Status(s),
                Answer::Record(r) => Seen::Record(r.to_vec()),
                Answer::Lost(l) => panic!("lost: {l}"),
            });
        })
        .expect("waited");
    }
    seen.expect("answered")
}

/// Insert, read, update one field, read, scan, delete, read, delete.
struct Exercise;

impl UseDb for Exercise {
    type Output = Vec<Seen>;
    fn run<D: Db>(self, mut db: D) -> Vec<Seen> {
        let k: &[u8] = b"user1";
        let two = Fields {
            first: 1,
            data: b"cccc",
        };
        let seen = vec![
            one(&mut db, |d| d.insert(k, b"aaaabbbb", 9)),
            one(&mut db, |d| d.read(k, 9)),
            one(&mut db, |d| d.update(k, two, 9)),
            one(&mut db, |d| d.read(k, 9)),
            one(&mut db, |d| d.scan(k, 10, 9)),
            one(&mut db, |d| d.delete(k, 9)),
            one(&mut db, |d| d.read(k, 9)),
            one(&mut db, |d| d.delete(k, 9)),
        ];
        db.cleanup();
        seen
    }
}

/// Two fields of four bytes; values checked (so every store gives reads
/// back as records).
fn exercise(target: &Target) -> Vec<Seen> {
    let p = Properties::parse("fieldcount=2\nfieldlength=4\nrecordcount=1\n");
    let wl = Arc::new(CoreWorkload::new(&p).unwrap());
    let opts = RunOptions {
        threads: 1,
        depth: 4,
        target_ops: None,
        verify: true,
        idle: Default::default(),
        seed: 1,
        max_time: None,
        interrupt: Default::default(),
        status: false,
    };
    let init = Init {
        wl: &wl,
        opts: &opts,
    };
    target.open(&init, Exercise).expect("connected")
}

/// What both stores answer, but for a missing record: `missing`.
fn expected(missing: Status) -> Vec<Seen> {
    vec![
        Seen::Status(Status::Ok),
        Seen::Record(b"aaaabbbb".to_vec()),
        Seen::Status(Status::Ok),
        Seen::Record(b"aaaacccc".to_vec()),
        Seen::Status(Status::Ok),
        Seen::Status(Status::Ok),
        Seen::Status(missing),
        Seen::Status(missing),
    ]
}

#[test]
#[cfg(feature = "sim")]
fn the_kvs_store_through_the_interface() {
    let fabric = format!("ycsb-db-{}", std::process::id());
    let s = kvs_server::Server::start(kvs_server::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric.clone()),
        stats_interval_s: 0,
        ..kvs_server::Config::default()
    })
    .unwrap();
    let target = Target::Kvs(kvs::KvsTarget {
        server: s.addr().to_string(),
        device: "sim0".into(),
        fabric: Some(fabric.clone()),
        auth_token: None,
        timeout: Duration::from_secs(5),
        transport: copyrpc::transport::Wire::Rc,
    });
    let seen = exercise(&target);
    s.shutdown();
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
    assert_eq!(seen, expected(Status::NotFound));
}

#[test]
#[ignore = "needs redis-server (apt-get install redis-server)"]
fn the_redis_store_through_the_interface() {
    let redis = test_support::RedisServer::start();
    let target = Target::Redis(redis::RedisTarget { url: redis.url() });
    let seen = exercise(&target);
    drop(redis);
    // Java's Redis binding answers ERROR for a missing record.
    assert_eq!(seen, expected(Status::Error));
}
