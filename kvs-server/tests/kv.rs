//! The server and the client library end to end on the software device.

use kvs_client::{Client, ClientOptions, KvError, OwnedReply, Reply, SubmitError};
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

mod support;

fn start(fabric: &str, workers: u16) -> Server {
    Server::start(Config {
        workers,
        slots: 64,
        max_key: 64,
        ring_size: 1 << 16,
        ..support::test_config(fabric)
    })
    .unwrap()
}

fn client(server: &Server, fabric: &str) -> Client<u64> {
    let opts = ClientOptions {
        ring_size: 1 << 16,
        value_allowance: 2048,
        scan_allowance: 8192,
        ..ClientOptions::default()
    };
    support::connect(server.addr(), fabric, opts).unwrap()
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}
fn value(i: u32, round: u32) -> Vec<u8> {
    let n = 1 + (i * 37 + round * 11) as usize % 300;
    (0..n)
        .map(|j| (i as usize * 7 + j + round as usize) as u8)
        .collect()
}

#[test]
fn every_operation_on_two_workers_with_data_checked() {
    let fabric = format!("kv-ops-{}", std::process::id());
    let server = start(&fabric, 2);
    let mut c = client(&server, &fabric);
    assert_eq!(c.map().members()[0].workers, 2);
    // 500 puts in flight at once (retrying while busy), then every get.
    let n = 500u32;
    let mut next = 0u32;
    let mut done = 0u32;
    while done < n {
        while next < n {
            match c.put(&key(next), &value(next, 0), u64::from(next)) {
                Ok(()) => next += 1,
                Err(SubmitError::Busy(_)) => break,
                Err(e) => panic!("{e}"),
            }
        }
        done += c.poll(|_, r| assert!(matches!(r, Ok(Reply::Done)), "{r:?}")) as u32;
    }
    for i in (0..n).step_by(7) {
        let r = c.wait_for(|c, t| c.get(&key(i), t)).unwrap();
        assert_eq!(r, OwnedReply::Value(value(i, 0)), "key {i}");
    }
    // Update a range, delete, not found.
    let r = c
        .wait_for(|c, t| c.update_range(&key(3), 0, b"XY", t))
        .unwrap();
    assert_eq!(r, OwnedReply::Done);
    let mut want = value(3, 0);
    want[..2].copy_from_slice(b"XY");
    assert_eq!(
        c.wait_for(|c, t| c.get(&key(3), t)).unwrap(),
        OwnedReply::Value(want)
    );
    let past = value(4, 0).len() as u32;
    assert_eq!(
        c.wait_for(|c, t| c.update_range(&key(4), past, b"Z", t)),
        Err(KvError::OutOfRange)
    );
    assert_eq!(
        c.wait_for(|c, t| c.delete(&key(5), t)).unwrap(),
        OwnedReply::Done
    );
    assert_eq!(
        c.wait_for(|c, t| c.get(&key(5), t)).unwrap(),
        OwnedReply::NotFound
    );
    // A scan gathers both workers' keys in order.
    let r = c.wait_for(|c, t| c.scan(&key(100), 10, t)).unwrap();
    let OwnedReply::Scan(recs, complete) = r else {
        panic!("{r:?}")
    };
    assert!(complete);
    let keys: Vec<_> = recs.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys, (100..110).map(key).collect::<Vec<_>>());
    for (i, (_, v)) in (100..110).zip(&recs) {
        assert_eq!(v, &value(i, 0));
    }
    // A scan larger than the allowance stops early and says so.
    let r = c.wait_for(|c, t| c.scan(&key(0), 400, t)).unwrap();
    let OwnedReply::Scan(recs, complete) = r else {
        panic!("{r:?}")
    };
    assert!(!complete);
    assert!(!recs.is_empty() && recs.len() < 400);
    assert!(recs.windows(2).all(|w| w[0].0 < w[1].0));
    // Limits: a clear error, and the server carries on.
    assert!(matches!(
        c.wait_for(|c, t| c.put(&[b'k'; 65], b"v", t)),
        Err(KvError::TooLarge(m)) if m.contains("key of 65 bytes")
    ));
    assert!(matches!(
        c.wait_for(|c, t| c.put(b"k", &[0; 2049], t)),
        Err(KvError::TooLarge(m)) if m.contains("value of 2049 bytes")
    ));
    assert_eq!(
        c.wait_for(|c, t| c.get(&key(9), t)).unwrap(),
        OwnedReply::Value(value(9, 0))
    );
    drop(c);
    server.shutdown();
    Fabric::remove_if_unused(&fabric);
}
