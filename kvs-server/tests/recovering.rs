//! A member restarted from its data dir answers while it recovers: a
//! durable member is filled with records, killed with `kill -9` and
//! started again at its address. While its workers load their logs it
//! answers status saying it is recovering, each worker with bytes read of
//! its total (never more than the total, never going back); it refuses
//! other control requests with the typed `Recovering` answer and data
//! connections at their setup; its log says how far it got. Then it
//! serves, its status is the usual one, and every record reads back.

use std::path::Path;
use std::time::{Duration, Instant};

use kvs_client::{Client, ControlClient, ControlOptions, KvError, OwnedReply, SubmitError};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus, RecoveryProgress};

mod support;
use support::{answer, client_of, ServerProcess};

/// Records written, and their values' size: about 80 MB of log, two
/// seconds or so of replay in a debug build.
const RECORDS: u32 = 80_000;
const VALUE: usize = 1000;

const FLAGS: [&str; 4] = [
    "--durability",
    "everysec",
    "--auto-snapshot-percentage",
    "0",
];

fn key(i: u32) -> String {
    format!("r{i:06}")
}

fn value(i: u32) -> Vec<u8> {
    let mut v = format!("{i}:").into_bytes();
    v.resize(VALUE, b'a' + (i % 26) as u8);
    v
}

/// Writes the records through `c`, many at a time; every one must be
/// acknowledged.
fn fill(c: &mut Client<u64>) {
    let (mut done, mut bad) = (0u32, None::<String>);
    let mut tally = |r: Result<OwnedReply, KvError>| match r {
        Ok(OwnedReply::Done) => done += 1,
        other => {
            bad.get_or_insert(format!("{other:?}"));
        }
    };
    for i in 0..RECORDS {
        let (k, v) = (key(i), value(i));
        loop {
            match c.put(k.as_bytes(), &v, u64::from(i)) {
                Ok(()) => break,
                Err(SubmitError::Busy(_)) => {
                    c.poll(|_, r| tally(r.map(OwnedReply::from)));
                }
                Err(e) => panic!("put {k}: {e}"),
            }
        }
    }
    let t = Instant::now();
    while c.in_flight() > 0 {
        assert!(t.elapsed() < Duration::from_secs(30), "answers missing");
        c.wait(Duration::from_millis(10), |_, r| {
            tally(r.map(OwnedReply::from))
        })
        .unwrap();
    }
    assert_eq!((done, bad), (RECORDS, None));
}

/// The longest time a worker's "recovered from … in S s" line gives.
fn took_seconds(out: &str) -> f64 {
    out.lines()
        .filter(|l| l.contains("recovered from"))
        .filter_map(|l| l.rsplit(" in ").next())
        .filter_map(|t| t.trim().trim_end_matches(" s").parse::<f64>().ok())
        .fold(0.0, f64::max)
}

fn member(fabric: &str, dir: &Path) -> ServerProcess {
    support::member_process_with(fabric, dir, "127.0.0.1:0", 2, None, &FLAGS)
}

/// A control client that gives up on a member quickly.
fn control(fabric: &str) -> ControlClient {
    let opts = ControlOptions {
        setup_timeout: Duration::from_secs(1),
        call_timeout: Duration::from_secs(1),
        ..ControlOptions::default()
    };
    ControlClient::new(&support::client_device(fabric), opts).unwrap()
}

/// What was seen of the member while it recovered.
#[derive(Default)]
struct Seen {
    /// Each recovering status, in order.
    statuses: Vec<MemberStatus>,
    /// The answer to a snapshot request while it recovered, and whether
    /// it still recovered after it.
    snapshot: Option<(ControlReply, bool)>,
    /// A client's connection attempt while it recovered, and whether it
    /// still recovered after it.
    connect: Option<(String, bool)>,
}

/// Asks the member at `s` what it is until it serves again (60 s at most):
/// its statuses while it recovers, and how it answers other requests then.
fn watch(cc: &mut ControlClient, s: &ServerProcess, fabric: &str) -> (Seen, MemberStatus) {
    let mut seen = Seen::default();
    let t = Instant::now();
    loop {
        assert!(t.elapsed() < Duration::from_secs(60), "{}", s.printed());
        let Some(st) = support::member_status(cc, s.addr) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if !st.recovering {
            return (seen, st);
        }
        seen.statuses.push(st);
        let still = |cc: &mut ControlClient| {
            support::member_status(cc, s.addr).is_some_and(|s| s.recovering)
        };
        if seen.snapshot.is_none() {
            if let Ok(r) = cc.request(s.addr, &ControlRequest::Snapshot) {
                seen.snapshot = Some((r, still(cc)));
            }
        } else if seen.connect.is_none() {
            let e = support::connect(s.addr, fabric, Default::default());
            let e = e.map_or_else(|e| e.to_string(), |_| "connected".to_string());
            seen.connect = Some((e, still(cc)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The workers' progress in a recovering status.
fn progress(s: &MemberStatus) -> Vec<RecoveryProgress> {
    s.workers
        .iter()
        .map(|w| w.recovering.expect("each worker says how far it got"))
        .collect()
}

/// Checks the statuses seen while it recovered: each says so, with no
/// view of the group, no worker past its total, none going back; a
/// worker that has not counted its files yet says zero of zero.
fn check_statuses(seen: &Seen) {
    assert!(
        !seen.statuses.is_empty(),
        "the member answered no status while it recovered"
    );
    let mut last: Option<Vec<RecoveryProgress>> = None;
    for s in &seen.statuses {
        assert!(s.group.is_none() && s.workers.len() == 2, "{s:?}");
        let now = progress(s);
        for p in &now {
            assert!(p.read <= p.total, "{p:?}");
        }
        if now.iter().all(|p| p.total > 0) {
            let sum = RecoveryProgress::sum(now.iter().copied()).total;
            assert!(sum > 70 << 20, "{now:?}");
        }
        if let Some(before) = &last {
            for (b, n) in before.iter().zip(&now) {
                assert!(b.read <= n.read, "went back: {b:?} then {n:?}");
            }
        }
        last = Some(now);
    }
    assert!(
        seen.statuses.iter().any(|s| {
            let p = RecoveryProgress::sum(progress(s));
            0 < p.read && p.read < p.total
        }),
        "never seen under way"
    );
}

/// Checks how it refused what it does not serve while it recovered (a
/// refusal that came after it served is no refusal to check).
fn check_refusals(seen: &Seen) {
    match &seen.snapshot {
        Some((ControlReply::Recovering { progress }, _)) => {
            assert!(progress.read <= progress.total, "{progress:?}")
        }
        Some((other, true)) => panic!("a snapshot while recovering: {other:?}"),
        _ => {}
    }
    if let Some((e, still)) = &seen.connect {
        assert!(
            e.contains("recovering its records") || !still,
            "a client while recovering: {e}"
        );
    }
}

#[test]
fn a_restarted_member_says_how_far_its_recovery_got_then_serves() {
    let fabric = format!("kvs-recovering-{}", std::process::id());
    // Dropped after the members: their fabric goes with them.
    let _fabric = test_support::FabricGuard(fabric.clone());
    let dir = support::temp_dir("recovering");
    let mut m = member(&fabric, dir.path());
    let t = Instant::now();
    fill(&mut client_of(&m, &fabric));
    eprintln!("filled in {:?}", t.elapsed());
    let mut cc = control(&fabric);
    let before = support::member_status(&mut cc, m.addr).expect("a status");
    assert!(!before.recovering && before.workers.iter().all(|w| w.recovering.is_none()));
    let addr = m.addr;
    m.kill9();

    let t = Instant::now();
    let cmd = support::member_command(&fabric, dir.path(), &addr.to_string(), 2, None, &FLAGS);
    let again = ServerProcess::launch_at(cmd, addr);
    let (seen, after) = watch(&mut cc, &again, &fabric);
    eprintln!(
        "recovered in {:?}: {} statuses while recovering",
        t.elapsed(),
        seen.statuses.len()
    );
    eprintln!("meanwhile: {:?}, {:?}", seen.snapshot, seen.connect);
    check_statuses(&seen);
    check_refusals(&seen);
    // Serving again: the usual status, with every record.
    assert!(after.group.is_some(), "{after:?}");
    assert!(after.workers.iter().all(|w| w.recovering.is_none()));
    // Its workers publish their counts within a few turns.
    let t = Instant::now();
    loop {
        let s = support::member_status(&mut cc, addr);
        let keys: Option<u64> = s.map(|s| s.workers.iter().map(|w| w.keys).sum());
        if keys == Some(u64::from(RECORDS)) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "keys: {keys:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = Instant::now();
    while !again.listening() {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", again.printed());
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut c = client_of(&again, &fabric);
    for i in (0..RECORDS).step_by(997) {
        let got = answer(&mut c, |c| c.get(key(i).as_bytes(), 1));
        assert_eq!(got, Ok(OwnedReply::Value(value(i))), "{}", key(i));
    }
    drop(c);
    let out = again.output();
    assert!(out.contains("recovered from"), "{out}");
    // Its log said how far it got, about once a second.
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(": recovering, "))
        .collect();
    eprintln!("{}", lines.join("\n"));
    for l in &lines {
        assert!(l.contains(" bytes (") && l.contains("%) after "), "{l}");
    }
    if took_seconds(&out) > 1.5 {
        assert!(!lines.is_empty(), "{out}");
    }
}
