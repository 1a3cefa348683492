//! Communicator setup over TCP between two threads, end to end: private data
//! both ways, transfers both ways, and the TCP connection as the liveness
//! channel when one side leaves. A peer speaking another record version is
//! refused.

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::thread;

use mlx5::device::ExecMode;
use mpib::conn::{connect_with, Listener};
use mpib::{CloseReason, Config, Error, PendingComm, PolicyKind, SetupError};
use support::*;

#[test]
fn tcp_setup_between_two_threads_then_the_client_leaves() {
    let fabric = unique_name("mpib", "tcp");
    let _g = FabricGuard(fabric.clone());
    let cfg = Config {
        policy: PolicyKind::Adaptive,
        ..Config::default()
    };
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let f2 = fabric.clone();
    let server = thread::spawn(move || {
        let devs = open(&f2, ExecMode::Inline, 4);
        let p = listener.accept_pending().unwrap();
        assert_eq!(p.private_data(), b"client hello");
        assert_eq!(p.peer_info().rails.len(), 2);
        let mut comm = p.establish(&devs[2..], &cfg, b"server hello").unwrap();
        let buf = comm.alloc_buffer(1 << 16).unwrap();
        for k in 0..20u64 {
            let len = (k as usize * 3001) % (1 << 16);
            let r = loop {
                if let Some(r) = comm.irecv(&[buf.all()], k as u32).unwrap() {
                    break r;
                }
            };
            let s = loop {
                if let Some(s) = comm.test(&r).unwrap() {
                    break s;
                }
            };
            assert_eq!(&*s, &[len as u32]);
            assert_eq!(buf.to_vec(0, len).unwrap(), pattern(k, len), "transfer {k}");
        }
        // One back the other way.
        buf.write(0, &pattern(77, 4000)).unwrap();
        let s = loop {
            if let Some(s) = comm.isend(&[buf.span(0, 4000).unwrap()], 0).unwrap() {
                break s;
            }
            comm.progress();
        };
        while comm.test(&s).unwrap().is_none() {}
        // Then wait for a receive the client never answers: the client leaves.
        let r = comm.irecv(&[buf.all()], 1).unwrap().unwrap();
        loop {
            match comm.test(&r) {
                Ok(None) => continue,
                Ok(Some(s)) => panic!("completed with {s:?}"),
                Err(e) => break e,
            }
        }
    });
    let devs = open(&fabric, ExecMode::Inline, 2);
    let (mut comm, pd) = connect_with(addr, &devs, &cfg, b"client hello").unwrap();
    assert_eq!(pd, b"server hello");
    let buf = comm.alloc_buffer(1 << 16).unwrap();
    for k in 0..20u64 {
        let len = (k as usize * 3001) % (1 << 16);
        buf.write(0, &pattern(k, len)).unwrap();
        let s = loop {
            if let Some(s) = comm
                .isend(&[buf.span(0, len as u64).unwrap()], k as u32)
                .unwrap()
            {
                break s;
            }
            comm.progress();
        };
        while comm.test(&s).unwrap().is_none() {}
    }
    let back = comm.alloc_buffer(4000).unwrap();
    let r = comm.irecv(&[back.all()], 0).unwrap().unwrap();
    let s = loop {
        if let Some(s) = comm.test(&r).unwrap() {
            break s;
        }
    };
    assert_eq!(&*s, &[4000]);
    assert_eq!(back.to_vec(0, 4000).unwrap(), pattern(77, 4000));
    assert!(comm.telemetry().rails.iter().all(|r| r.completed_bytes > 0));
    drop(comm);
    let e = server.join().unwrap();
    assert!(
        matches!(e, Error::Closed(CloseReason::PeerGone)),
        "the server sees the client leave: {e}"
    );
}

#[test]
fn a_record_of_another_version_is_refused() {
    let fabric = unique_name("mpib", "tcpver");
    let _g = FabricGuard(fabric.clone());
    let devs = open(&fabric, ExecMode::Inline, 2);
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut info = PendingComm::new(&devs, &Config::default())
        .unwrap()
        .info()
        .clone();
    info.version = 99;
    let client = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let mut line = serde_json::to_string(&info).unwrap();
        line.push('\n');
        s.write_all(line.as_bytes()).unwrap();
        s
    });
    let e = listener.accept_pending().unwrap_err();
    assert!(
        matches!(&e, SetupError::Peer(m) if m.contains("version 99")),
        "{e}"
    );
    drop(client.join().unwrap());
    // And garbage is refused, not a panic.
    let client = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"{\"version\":1,\"rails\":\"x\"}\n").unwrap();
        s
    });
    assert!(matches!(
        listener.accept_pending(),
        Err(SetupError::Peer(_))
    ));
    drop(client.join().unwrap());
}

#[test]
fn mismatched_configurations_are_refused() {
    let fabric = unique_name("mpib", "mismatch");
    let _g = FabricGuard(fabric.clone());
    let devs = open(&fabric, ExecMode::Inline, 4);
    let a = PendingComm::new(&devs[..2], &Config::default()).unwrap();
    for (what, c, rails) in [
        (
            "depth",
            Config {
                depth: 16,
                ..Config::default()
            },
            2,
        ),
        (
            "granularity",
            Config {
                granularity: 64,
                ..Config::default()
            },
            2,
        ),
        (
            "QPs per rail",
            Config {
                qps_per_rail: 3,
                ..Config::default()
            },
            2,
        ),
        ("rails", Config::default(), 1),
    ] {
        let b = PendingComm::new(&devs[2..2 + rails], &c).unwrap();
        let e = b.connect(a.info()).unwrap_err();
        assert!(matches!(e, SetupError::Peer(_)), "{what}: {e}");
    }
    for c in [
        Config {
            depth: 1,
            ..Config::default()
        },
        Config {
            depth: 257,
            ..Config::default()
        },
        Config {
            granularity: 100,
            ..Config::default()
        },
        Config {
            qps_per_rail: 0,
            ..Config::default()
        },
        Config {
            srq_low: Some(4),
            ..Config::default()
        },
        Config {
            srq_low: Some(64),
            srq_high: Some(64),
            ..Config::default()
        },
    ] {
        assert!(
            matches!(PendingComm::new(&devs[..2], &c), Err(SetupError::Config(_))),
            "{c:?}"
        );
    }
    assert!(matches!(
        PendingComm::new(&devs[..3], &Config::default()),
        Err(SetupError::Config(_))
    ));
}
