//! A migration's source killed mid-migration keeps the records it gave
//! away: two member processes, one copy of each slot, `durability =
//! "always"`, the founder the only voter. The target is paused (SIGSTOP),
//! so it pulls nothing; every slot starts moving from the founder to it,
//! and once the founder has handed a chunk over it is killed (`kill -9`)
//! and started again from its data dir. Its workers recover the slots
//! given away from their logs and hold them for the target again; the
//! target goes on, the migration ends without an error, and every record
//! reads back from the target.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, MigrationStatus};
use kvs_proto::MemberId;

mod support;

use support::ServerProcess;

const RECORDS: u32 = 4_000;
const VALUE: usize = 1000;

fn member(fabric: &str, dir: &Path, listen: &str, join: Option<SocketAddr>) -> ServerProcess {
    let extra = ["--replicas", "1", "--durability", "always"];
    support::member_process_configured(fabric, dir, listen, join, "control_voters = 1\n", &extra)
}

fn value(i: u32) -> Vec<u8> {
    format!("{i}:{}", "m".repeat(VALUE)).into_bytes()
}

fn migration(cc: &mut ControlClient, at: SocketAddr) -> Option<MigrationStatus> {
    support::member_status(cc, at).and_then(|s| s.migration)
}

#[test]
fn a_source_killed_mid_migration_keeps_the_records_it_gave_away() {
    let fabric = format!("kvs-source-restart-{}", std::process::id());
    // Dropped after the members: their fabric goes with them.
    let _fabric = test_support::FabricGuard(fabric.clone());
    let root = support::temp_dir("source-restart");
    let (d0, d1) = (root.join("m0"), root.join("m1"));
    let mut a = member(&fabric, &d0, "127.0.0.1:0", None);
    let b = member(&fabric, &d1, "127.0.0.1:0", Some(a.addr));
    let a_addr = a.addr;
    let mut cc = support::control_client(&fabric);
    test_support::wait_until(
        "two members",
        Duration::from_secs(20),
        Duration::from_millis(10),
        || support::group_view(&mut cc, a_addr).is_some_and(|g| g.members.len() == 2),
    );
    let mut c = support::connect(a_addr, &fabric, Default::default()).unwrap();
    let slots = c.map().slots();
    for i in 0..RECORDS {
        let k = format!("m{i}");
        let r = c.wait_for(|c, t| c.put(k.as_bytes(), &value(i), t));
        assert_eq!(r, Ok(OwnedReply::Done), "{k}");
    }
    drop(c);

    // Every slot to the paused member; the founder killed once it handed
    // a chunk over.
    b.pause(true);
    let r = cc
        .request(
            a_addr,
            &ControlRequest::Migrate {
                first: 0,
                end: slots,
                to: MemberId(1),
            },
        )
        .unwrap();
    assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
    let t = Instant::now();
    loop {
        let m = migration(&mut cc, a_addr).expect("a migration");
        assert!(!m.finished, "the migration ended before the kill: {m:?}");
        if m.slots_moving > 0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{m:?}");
    }
    eprintln!("killed the source at {m:?}", m = migration(&mut cc, a_addr));
    // Given away in the founder's map: its workers exported the chunk.
    std::thread::sleep(Duration::from_millis(300));
    a.kill9();
    let a = member(&fabric, &d0, &a_addr.to_string(), None);
    b.pause(false);

    // The migration ends, every slot at the target, with every record.
    let t = Instant::now();
    let m = loop {
        if let Some(m) = migration(&mut cc, a_addr).filter(|m| m.finished) {
            break m;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "the migration did not end:\n{}\n---\n{}",
            a.printed(),
            b.printed()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(m.error, None, "{m:?}\n{}", a.printed());
    eprintln!("the migration ended {:?} after the restart", t.elapsed());
    assert!(
        a.printed().contains("recovered from"),
        "no log replayed:\n{}",
        a.printed()
    );
    let mut c = support::connect(b.addr, &fabric, Default::default()).unwrap();
    for i in 0..RECORDS {
        let k = format!("m{i}");
        let got = c.wait_for(|c, t| c.get(k.as_bytes(), t));
        assert!(
            got == Ok(OwnedReply::Value(value(i))),
            "{k}: {:?}",
            got.map(|r| match r {
                OwnedReply::Value(v) => format!("a value of {} bytes", v.len()),
                other => format!("{other:?}"),
            })
        );
    }
    drop(c);
    drop(cc);
}
