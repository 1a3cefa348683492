//! One dead member blocks only its own slots: a new client connects through
//! a live member, reads the live member's keys, and gets a prompt error
//! naming the dead member for the others' (never a hang, never a failed
//! connect); a server of another cluster at its address is refused, by
//! clients and control clients alike, with an error that says so; the dead
//! member is connected again once it is back and its backoff has passed.

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kvs_client::{Client, ControlClient, ControlOptions, KvError, OwnedReply, SubmitError};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus};
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

mod support;

/// The longest one request may take to be answered here (an answer or an
/// error): a dead member must not make a request hang.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

fn config(fabric: &str, join: Option<SocketAddr>) -> Config {
    Config {
        workers: 2,
        slots: 256,
        join: join.map(|a| a.to_string()),
        ..support::test_config(fabric)
    }
}

fn status(cc: &mut ControlClient, addr: SocketAddr) -> MemberStatus {
    match cc.request(addr, &ControlRequest::Status).unwrap() {
        ControlReply::Status(s) => s,
        other => panic!("{other:?}"),
    }
}

/// Moves slots `first..end` to member `to` and waits until the migration
/// is over and both members serve by the same map.
fn migrate(cc: &mut ControlClient, a: &Server, b: &Server, first: u32, end: u32, to: MemberId) {
    let r = cc
        .request(a.addr(), &ControlRequest::Migrate { first, end, to })
        .unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
    let t = Instant::now();
    loop {
        let st = status(cc, a.addr());
        if let Some(m) = st.migration.filter(|m| m.finished) {
            assert_eq!(m.error, None);
            break;
        }
        assert!(t.elapsed().as_secs() < 60, "the migration did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    while a.map_version() != b.map_version() {
        assert!(t.elapsed().as_secs() < 60, "the members' maps differ");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Submits one request through `c` (tag 7) and polls until it completes,
/// failing the test if that takes longer than [`ANSWER_WITHIN`].
fn answer(
    c: &mut Client<u64>,
    what: &str,
    mut submit: impl FnMut(&mut Client<u64>, u64) -> Result<(), SubmitError<u64>>,
) -> Result<OwnedReply, KvError> {
    const TAG: u64 = 7;
    let t = Instant::now();
    loop {
        match submit(c, TAG) {
            Ok(()) => break,
            Err(SubmitError::Busy(_)) => {
                c.poll(|_, _| {});
            }
            Err(e) => panic!("{what}: not sent: {e}"),
        }
        assert!(t.elapsed() < ANSWER_WITHIN, "{what}: not sent in time");
    }
    let mut out = None;
    while out.is_none() {
        c.wait(Duration::from_millis(10), |tag, r| {
            assert_eq!(tag, TAG, "{what}");
            out = Some(r.map(OwnedReply::from));
        })
        .unwrap();
        assert!(
            out.is_some() || t.elapsed() < ANSWER_WITHIN,
            "{what}: no answer within {ANSWER_WITHIN:?}"
        );
    }
    out.expect("loop ends with an answer")
}

fn key(i: u32) -> String {
    format!("key{i}")
}

fn value(i: u32) -> Vec<u8> {
    format!("value-{i}").into_bytes()
}

#[test]
fn a_dead_member_fails_only_its_slots_for_a_new_client() {
    let fabric = format!("kvs-dead-member-{}", std::process::id());
    let a = Server::start(config(&fabric, None)).unwrap();
    // Member 1 keeps a data dir, to come back as itself.
    let bdir = std::env::temp_dir().join(format!("kvs-dead-member-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bdir);
    let b = Server::start(Config {
        data_dir: Some(bdir.clone()),
        ..config(&fabric, Some(a.addr()))
    })
    .unwrap();
    assert_eq!((a.member(), b.member()), (MemberId(0), MemberId(1)));
    let n = 400u32;
    let mut c = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    for i in 0..n {
        let k = key(i);
        let r = answer(&mut c, &k, |c, t| c.put(k.as_bytes(), &value(i), t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }
    drop(c);
    // Half the slots (and their records) to member 1.
    let mut cc =
        ControlClient::new(&support::client_device(&fabric), ControlOptions::default()).unwrap();
    migrate(&mut cc, &a, &b, 0, 128, MemberId(1));
    drop(cc);
    // Both members hold keys, and every key reads back.
    let mut c = support::connect(a.addr(), &fabric, Default::default()).unwrap();
    let owners: Vec<MemberId> = (0..n)
        .map(|i| c.map().owner(key(i).as_bytes()).member)
        .collect();
    let of_1 = owners.iter().filter(|&&m| m == MemberId(1)).count();
    assert!(
        of_1 > 0 && of_1 < n as usize,
        "{of_1} of {n} keys at member 1"
    );
    for i in 0..n {
        let k = key(i);
        let r = answer(&mut c, &k, |c, t| c.get(k.as_bytes(), t));
        assert_eq!(r, Ok(OwnedReply::Value(value(i))), "{k}");
    }
    drop(c);

    // Member 1 goes away.
    let b_addr = b.addr();
    b.shutdown();

    // A new client through member 0: connects, and serves member 0's keys.
    let t = Instant::now();
    let mut c = support::connect(a.addr(), &fabric, Default::default())
        .expect("a new client connects while member 1 is down");
    assert_eq!(c.map().members().len(), 2);
    let mut unreachable = 0;
    let mut held = 0;
    for i in 0..n {
        let k = key(i);
        let r = answer(&mut c, &k, |c, t| c.get(k.as_bytes(), t));
        match (owners[i as usize], r) {
            (MemberId(0), r) => assert_eq!(r, Ok(OwnedReply::Value(value(i))), "{k}"),
            (
                _,
                Err(
                    e @ KvError::Unreachable {
                        member: MemberId(1),
                        addr,
                        ..
                    },
                ),
            ) => {
                assert_eq!(addr, b_addr, "{k}: {e}");
                let msg = e.to_string();
                assert!(
                    msg.contains("member 1") && msg.contains(&b_addr.to_string()),
                    "{msg}"
                );
                if unreachable == 0 {
                    eprintln!("{k}: {msg}");
                }
                if msg.contains("in a row") {
                    held += 1;
                }
                unreachable += 1;
            }
            (_, r) => panic!("{k} of the dead member 1: {r:?}"),
        }
    }
    let took = t.elapsed();
    eprintln!("{n} reads ({unreachable} of member 1) in {took:?} after the connect");
    assert_eq!(unreachable, of_1);
    // Most of member 1's requests failed at once, held off by the backoff
    // rather than each trying to connect.
    assert!(
        held > 0 && held >= unreachable / 2,
        "{held} of {unreachable}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    // Writes to member 0 work; a scan needs member 1 and says so.
    let k0 = (0..n)
        .find(|&i| owners[i as usize] == MemberId(0))
        .map(key)
        .unwrap();
    let r = answer(&mut c, "put", |c, t| c.put(k0.as_bytes(), b"again", t));
    assert_eq!(r, Ok(OwnedReply::Done));
    match answer(&mut c, "scan", |c, t| c.scan(b"", 10, t)) {
        Err(KvError::Unreachable {
            member: MemberId(1),
            ..
        }) => {}
        other => panic!("a scan with member 1 down: {other:?}"),
    }
    assert_eq!(c.in_flight(), 0);

    // A server of another cluster at member 1's address (started without
    // its data dir: a new cluster) is refused by the client, which learnt
    // the cluster's id from member 0, and by a control client that did.
    let impostor = Server::start(Config {
        listen: b_addr,
        ..config(&fabric, None)
    })
    .unwrap();
    assert_ne!(impostor.cluster_id(), a.cluster_id());
    let k1 = (0..n)
        .find(|&i| owners[i as usize] == MemberId(1))
        .map(key)
        .unwrap();
    let t = Instant::now();
    let msg = loop {
        match answer(&mut c, &k1, |c, t| c.put(k1.as_bytes(), b"lost", t)) {
            Err(
                e @ KvError::Unreachable {
                    member: MemberId(1),
                    ..
                },
            ) if !e.to_string().contains("in a row") => break e.to_string(),
            Err(KvError::Unreachable {
                member: MemberId(1),
                ..
            }) => {}
            other => panic!("{k1} at another cluster's server: {other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(15), "never tried again");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        msg.contains("belongs to cluster") && msg.contains(a.cluster_id()),
        "{msg}"
    );
    let mut cc =
        ControlClient::new(&support::client_device(&fabric), ControlOptions::default()).unwrap();
    assert_eq!(status(&mut cc, a.addr()).member, MemberId(0));
    let e = cc.request(b_addr, &ControlRequest::Status).unwrap_err();
    assert!(
        matches!(e, kvs_client::ControlError::OtherCluster { .. }),
        "{e}"
    );
    assert!(e.to_string().contains(impostor.cluster_id()), "{e}");
    drop(cc);
    impostor.shutdown();
    // A fresh client: the one above holds member 1 off for its backoff.
    drop(c);
    let mut c = support::connect(a.addr(), &fabric, Default::default()).unwrap();

    // Member 1 comes back at its address from its data dir (its records
    // are gone with it): once its backoff is over, a request connects to it
    // again.
    let b = Server::start(Config {
        listen: b_addr,
        data_dir: Some(bdir.clone()),
        ..config(&fabric, Some(a.addr()))
    })
    .unwrap();
    assert_eq!(b.member(), MemberId(1));
    let t = Instant::now();
    loop {
        match answer(&mut c, &k1, |c, t| c.put(k1.as_bytes(), b"back", t)) {
            Ok(OwnedReply::Done) => break,
            Err(KvError::Unreachable {
                member: MemberId(1),
                ..
            }) => {}
            other => panic!("{k1} after member 1 came back: {other:?}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "member 1 was not connected again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = answer(&mut c, &k1, |c, t| c.get(k1.as_bytes(), t));
    assert_eq!(r, Ok(OwnedReply::Value(b"back".to_vec())));
    drop(c);
    b.shutdown();
    a.shutdown();
    Fabric::remove_if_unused(&fabric);
    let _ = std::fs::remove_dir_all(&bdir);
}
