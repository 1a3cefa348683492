//! A dead server is an error, never a hang: after a `kill -9` of the server
//! process, a client's requests on the wire and every later one fail
//! promptly.

use kvs_proto::MemberId;
use std::time::{Duration, Instant};

use copyrpc::CloseReason;
use kvs_client::{ClientOptions, KvError, SubmitError};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{connect, ServerProcess};

#[test]
fn a_killed_server_fails_outstanding_and_new_requests() {
    let fabric = format!("kvs-dead-{}", std::process::id());
    let mut server = ServerProcess::start_on(&fabric, &[]);
    let mut c = connect(server.addr, &fabric, ClientOptions::default()).unwrap();
    c.wait_for(|c, t| c.put(b"k", b"v", t)).unwrap();
    server.kill9();
    // Requests written before the client knows: they reach a dead peer.
    let keys: Vec<Vec<u8>> = (0..64u32).map(|i| format!("key{i}").into_bytes()).collect();
    for (i, k) in keys.iter().enumerate() {
        c.get(k, i as u64).unwrap();
    }
    let t = Instant::now();
    let mut failed = 0;
    while failed < keys.len() {
        c.poll(|tag, r| match r {
            // The liveness channel closed (or, had the device noticed first,
            // the transport gave up): never "closed by this side".
            Err(KvError::Failed(why @ (CloseReason::PeerGone | CloseReason::Transport(_)))) => {
                assert!((tag as usize) < keys.len());
                eprintln!("request {tag}: {why}");
                failed += 1;
            }
            other => panic!("request {tag} of a dead server: {other:?}"),
        });
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{failed} of 64 requests failed 10 s after the server died"
        );
    }
    eprintln!("every request failed {:?} after the kill", t.elapsed());
    assert_eq!(c.in_flight(), 0);
    // And every later one, at once: the member is unreachable (its
    // connections closed; the client tries again only after a backoff).
    let t = Instant::now();
    let mut later = 0;
    for (i, k) in keys.iter().enumerate() {
        match c.get(k, 1000 + i as u64) {
            Err(SubmitError::Closed(..)) => later += 1,
            Ok(()) => {}
            other => panic!("a request after the server died: {other:?}"),
        }
    }
    while later < keys.len() {
        c.poll(|tag, r| match r {
            Err(KvError::Unreachable {
                member: MemberId(0),
                ..
            }) => later += 1,
            other => panic!("request {tag} after the server died: {other:?}"),
        });
        assert!(t.elapsed() < Duration::from_secs(1), "{later} of 64 failed");
    }
    drop(c);
    Fabric::remove_if_unused(&fabric);
}
