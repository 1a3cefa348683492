//! Connection setup over TCP, and the TCP connection as the liveness channel.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::mpsc;
use std::thread;

use copyrpc::conn::{connect, Connection, Listener};
use copyrpc::{CallFailed, CloseReason, Context, ContextBuilder};
use mlx5::device::Context as Device;
use mlx5::sim::fabric::Fabric;

type Log = Rc<RefCell<Vec<(u64, Result<Vec<u8>, CallFailed>)>>>;

fn log_handler(log: &Log) -> impl FnMut(u64, Result<&[u8], CallFailed>) {
    let l = log.clone();
    move |u, r| l.borrow_mut().push((u, r.map(|b| b.to_vec())))
}

/// Answers requests (with `answer`) until the client's connection closes;
/// returns how many were answered.
fn serve_until_the_client_leaves<U, F>(
    ctx: &mut Context<U, F>,
    conn: &mut Connection,
    answer: impl Fn(&[u8]) -> Vec<u8>,
) -> u64
where
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    let mut served = 0;
    for i in 0u64.. {
        ctx.poll();
        while let Some(h) = ctx.recv() {
            let d = answer(ctx.request(&h).unwrap());
            ctx.reply(h, &d).unwrap();
            served += 1;
        }
        if i % 64 == 0 && !conn.check(ctx) {
            break;
        }
        assert!(i < 50_000_000, "never saw the client leave");
    }
    served
}

#[test]
fn echo_over_a_tcp_set_up_endpoint_then_the_client_leaves() {
    let fabric = format!("tcp-{}", std::process::id());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let f2 = fabric.clone();
    let server = thread::spawn(move || {
        let dev = Device::open_in(&f2, "sim1").unwrap();
        let mut ctx = ContextBuilder::new()
            .ring_size(1 << 14)
            .build(&dev, |_: u64, _| {})
            .unwrap();
        let mut conn = listener.accept(&mut ctx).unwrap();
        let served = serve_until_the_client_leaves(&mut ctx, &mut conn, |d| {
            d.iter().rev().copied().collect()
        });
        (served, ctx.closed(conn.endpoint()).cloned())
    });
    let dev = Device::open_in(&fabric, "sim0").unwrap();
    let log: Log = Default::default();
    let mut ctx = ContextBuilder::new()
        .ring_size(1 << 14)
        .build(&dev, log_handler(&log))
        .unwrap();
    let conn = connect(addr, &mut ctx).unwrap();
    let ep = conn.endpoint();
    let mut sent = 0u64;
    while log.borrow().len() < 1000 {
        if sent < 1000 {
            let p: Vec<u8> = (0..(sent % 200) as u8).collect();
            if ctx.call(ep, &p, 200, sent).is_ok() {
                sent += 1;
            }
        }
        ctx.poll();
    }
    for (t, r) in log.borrow().iter() {
        let want: Vec<u8> = (0..(*t % 200) as u8).rev().collect();
        assert_eq!(r.as_ref().unwrap(), &want);
    }
    drop(conn);
    let (served, reason) = server.join().unwrap();
    assert_eq!(served, 1000);
    assert!(
        reason.is_some(),
        "the server closed the endpoint when the client left"
    );
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn the_peer_closing_fails_pending_calls() {
    let fabric = format!("tcpclose-{}", std::process::id());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let f2 = fabric.clone();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let server = thread::spawn(move || {
        let dev = Device::open_in(&f2, "sim1").unwrap();
        let mut ctx = ContextBuilder::new()
            .ring_size(4096)
            .build(&dev, |_: u64, _| {})
            .unwrap();
        let mut conn = listener.accept(&mut ctx).unwrap();
        // Take the request but never answer; then close the endpoint.
        go_rx.recv().unwrap();
        for _ in 0..100 {
            ctx.poll();
            while ctx.recv().is_some() {}
        }
        ctx.close(conn.endpoint());
        assert!(!conn.check(&mut ctx), "closing shuts the connection down");
    });
    let dev = Device::open_in(&fabric, "sim0").unwrap();
    let log: Log = Default::default();
    let mut ctx = ContextBuilder::new()
        .ring_size(4096)
        .build(&dev, log_handler(&log))
        .unwrap();
    let mut conn = connect(addr, &mut ctx).unwrap();
    ctx.call(conn.endpoint(), b"never answered", 16, 42)
        .unwrap();
    ctx.poll();
    go_tx.send(()).unwrap();
    let mut alive = true;
    for _ in 0..10_000_000 {
        ctx.poll();
        alive = conn.check(&mut ctx);
        if !alive {
            break;
        }
    }
    assert!(!alive, "the peer's close reached us");
    let log = log.borrow();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].0, 42);
    assert_eq!(
        log[0].1,
        Err(CallFailed(CloseReason::PeerGone)),
        "the pending call failed, saying the peer is gone"
    );
    assert_eq!(ctx.closed(conn.endpoint()), Some(&CloseReason::PeerGone));
    server.join().unwrap();
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_bad_record_is_refused() {
    use std::io::{BufRead, BufReader, Write};
    let fabric = format!("tcpbad-{}", std::process::id());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let t = thread::spawn(move || {
        // The connector speaks first; a record of another version is
        // answered with a refusal saying why, then the connection closes.
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"{\"version\": 99}\n").unwrap();
        let mut r = BufReader::new(&s);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(
            line.contains("\"refused\"") && line.contains("version 99"),
            "{line}"
        );
        line.clear();
        assert_eq!(r.read_line(&mut line).unwrap_or(0), 0, "{line}");
    });
    let dev = Device::open_in(&fabric, "sim1").unwrap();
    let mut ctx = ContextBuilder::new()
        .ring_size(4096)
        .build(&dev, |_: u64, _| {})
        .unwrap();
    let e = listener.accept(&mut ctx).unwrap_err();
    assert!(e.to_string().contains("bad endpoint record"), "{e}");
    t.join().unwrap();
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}

/// A long-lived server with a one-endpoint table serves clients one after
/// another: each leaving client's endpoint is removed and its slot reused.
#[test]
fn a_server_removes_endpoints_of_clients_that_left() {
    let fabric = format!("tcp-seq-{}", std::process::id());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let f2 = fabric.clone();
    let server = thread::spawn(move || {
        let dev = Device::open_in(&f2, "sim1").unwrap();
        let mut ctx = ContextBuilder::new()
            .max_endpoints(1)
            .build(&dev, |_: u64, _| {})
            .unwrap();
        let mut served = Vec::new();
        for _ in 0..3 {
            let mut conn = listener.accept(&mut ctx).unwrap();
            let n = serve_until_the_client_leaves(&mut ctx, &mut conn, <[u8]>::to_vec);
            assert!(ctx.remove(conn.endpoint()));
            assert_eq!(ctx.endpoints(), 0);
            served.push(n);
        }
        served
    });
    for round in 0..3u64 {
        let dev = Device::open_in(&fabric, "sim0").unwrap();
        let log: Log = Default::default();
        let mut ctx = ContextBuilder::new()
            .build(&dev, log_handler(&log))
            .unwrap();
        let conn = connect(addr, &mut ctx).unwrap();
        let ep = conn.endpoint();
        let mut sent = 0u64;
        while log.borrow().len() < 100 {
            if sent < 100 && ctx.call(ep, &[round as u8; 24], 24, sent).is_ok() {
                sent += 1;
            }
            ctx.poll();
        }
        for (_, r) in log.borrow().iter() {
            assert_eq!(r.as_ref().unwrap(), &vec![round as u8; 24]);
        }
    }
    assert_eq!(server.join().unwrap(), vec![100, 100, 100]);
    Fabric::remove_if_unused(&fabric);
}

/// An acceptor thread reads each peer's record (and the private data saying
/// which worker it wants) and hands the pending connection to that worker,
/// which gives it an endpoint in its own context and answers with its own
/// private data.
#[test]
fn an_acceptor_thread_hands_connections_to_workers_by_private_data() {
    use copyrpc::conn::{connect_with, PendingConnection, MAX_PRIVATE_DATA};
    let fabric = format!("tcppriv-{}", std::process::id());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let workers: Vec<(mpsc::Sender<PendingConnection>, thread::JoinHandle<u64>)> = (0..2u8)
        .map(|w| {
            let (tx, rx) = mpsc::channel::<PendingConnection>();
            let f = fabric.clone();
            let h = thread::spawn(move || {
                let dev = Device::open_in(&f, &format!("sim{}", 1 + w)).unwrap();
                let mut ctx = ContextBuilder::new()
                    .ring_size(1 << 14)
                    .build(&dev, |_: u64, _| {})
                    .unwrap();
                let pending = rx.recv().unwrap();
                assert_eq!(pending.private_data(), &[b'w', w]);
                let mut conn = pending.establish(&mut ctx, &[b'W', w, 7]).unwrap();
                // Each worker tags its answers with its number.
                serve_until_the_client_leaves(&mut ctx, &mut conn, |d| {
                    let mut v = d.to_vec();
                    v.push(w);
                    v
                })
            });
            (tx, h)
        })
        .collect();
    let txs: Vec<_> = workers.iter().map(|(tx, _)| tx.clone()).collect();
    let acceptor = thread::spawn(move || {
        for _ in 0..2 {
            let p = listener.accept_pending().unwrap();
            let w = p.private_data()[1] as usize;
            txs[w].send(p).unwrap();
        }
    });
    let dev = Device::open_in(&fabric, "sim0").unwrap();
    let log: Log = Default::default();
    let mut ctx = ContextBuilder::new()
        .ring_size(1 << 14)
        .build(&dev, log_handler(&log))
        .unwrap();
    // Too much private data is refused before anything is sent.
    let e = connect_with(addr, &mut ctx, &[0; MAX_PRIVATE_DATA + 1]).unwrap_err();
    assert!(e.to_string().contains("private data"), "{e}");
    // (The refused attempt connected nothing: the acceptor sees only the next two.)
    let mut conns: Vec<Connection> = [1u8, 0]
        .iter()
        .map(|&w| {
            let c = connect_with(addr, &mut ctx, &[b'w', w]).unwrap();
            assert_eq!(c.peer_private_data(), &[b'W', w, 7]);
            c
        })
        .collect();
    for (i, c) in conns.iter().enumerate() {
        ctx.call(c.endpoint(), &[i as u8], 16, i as u64).unwrap();
    }
    while log.borrow().len() < 2 {
        ctx.poll();
    }
    let mut got: Vec<_> = log
        .borrow()
        .iter()
        .map(|(u, r)| (*u, r.clone().unwrap()))
        .collect();
    got.sort();
    // Connection 0 went to worker 1, connection 1 to worker 0.
    assert_eq!(got, vec![(0, vec![0, 1]), (1, vec![1, 0])]);
    acceptor.join().unwrap();
    for c in conns.iter_mut() {
        ctx.close(c.endpoint());
        c.check(&mut ctx);
    }
    for (_, h) in workers {
        assert_eq!(h.join().unwrap(), 1);
    }
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}

/// A setup the listening side cannot make (here, rings of different sizes)
/// fails on the connecting side with the listener's reason, not with a
/// closed connection.
#[test]
fn a_setup_the_listener_cannot_make_is_refused_saying_why() {
    use copyrpc::conn::ConnError;
    let fabric = format!("tcpring-{}", std::process::id());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let f2 = fabric.clone();
    let server = thread::spawn(move || {
        let dev = Device::open_in(&f2, "sim1").unwrap();
        let mut ctx = ContextBuilder::new()
            .ring_size(1 << 12)
            .build(&dev, |_: u64, _| {})
            .unwrap();
        let e = listener.accept(&mut ctx).unwrap_err();
        assert_eq!(ctx.endpoints(), 0);
        e.to_string()
    });
    let dev = Device::open_in(&fabric, "sim0").unwrap();
    let mut ctx = ContextBuilder::new()
        .ring_size(1 << 14)
        .build(&dev, |_: u64, _| {})
        .unwrap();
    match connect(addr, &mut ctx) {
        Err(ConnError::Refused(why)) => {
            assert!(
                why.starts_with("endpoint setup failed") && why.contains("ring size"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ctx.endpoints(), 0);
    let e = server.join().unwrap();
    assert!(e.contains("ring size"), "{e}");
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}

/// A listener that accepts and then says nothing, or dribbles its record a
/// byte at a time, fails the setup with `ConnError::Timeout` once the whole
/// setup's time is up, not a read timeout per byte.
#[test]
fn a_silent_or_dribbling_listener_fails_the_setup_in_its_time() {
    use copyrpc::conn::{connect_within, ConnError};
    use std::io::Write;
    use std::time::{Duration, Instant};
    let fabric = format!("tcp-slow-{}", std::process::id());
    let dev = Device::open_in(&fabric, "sim0").unwrap();
    let mut ctx = ContextBuilder::new()
        .build(&dev, |_: u64, _: Result<&[u8], CallFailed>| {})
        .unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = thread::spawn(move || {
        // The first peer: accepted, never answered.
        let (silent, _) = l.accept().unwrap();
        // The second: a byte of a record every 50 ms, for 5 s.
        let (mut slow, _) = l.accept().unwrap();
        for _ in 0..100 {
            if slow.write_all(b" ").is_err() {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        drop(silent);
    });
    let budget = Duration::from_millis(400);
    for what in ["silent", "dribbling"] {
        let t = Instant::now();
        match connect_within(addr, &mut ctx, b"", budget) {
            Err(ConnError::Timeout(d)) => assert_eq!(d, budget, "{what}"),
            other => panic!("{what} listener: {other:?}"),
        }
        let took = t.elapsed();
        assert!(
            took >= budget && took < budget + Duration::from_secs(2),
            "{what} listener: failed after {took:?}"
        );
    }
    // The failed setups left no endpoint behind.
    assert_eq!(ctx.endpoints(), 0);
    server.join().unwrap();
    Fabric::remove_if_unused(&fabric);
}

/// A server watching its clients' channels through a `LiveSet` removes
/// exactly the endpoints whose client left, and those it closed itself
/// (whose clients then see the channel close); the rest stay.
#[test]
fn a_live_set_removes_exactly_the_endpoints_whose_channel_ended() {
    use copyrpc::conn::LiveSet;
    let fabric = format!("tcp-live-{}", std::process::id());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let f2 = fabric.clone();
    let (to_server, from_client) = mpsc::channel::<()>();
    let (to_client, from_server) = mpsc::channel::<()>();
    let server = thread::spawn(move || {
        let dev = Device::open_in(&f2, "sim1").unwrap();
        let mut ctx = ContextBuilder::new()
            .max_endpoints(8)
            .ring_size(4096)
            .build(&dev, |_: u64, _| {})
            .unwrap();
        let mut set = LiveSet::new().unwrap();
        let mut eps = Vec::new();
        for _ in 0..6 {
            let c = listener.accept(&mut ctx).unwrap();
            eps.push(c.endpoint());
            set.insert(c).unwrap();
        }
        assert_eq!(set.retain_live(&mut ctx), 0, "every client is there");
        to_client.send(()).unwrap();
        // The client drops its connection 1.
        from_client.recv().unwrap();
        let mut removed = 0;
        for _ in 0..1000 {
            removed += set.retain_live(&mut ctx);
            if removed > 0 {
                break;
            }
            thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(removed, 1);
        assert_eq!(set.len(), 5);
        assert!(!set.endpoints().any(|e| e == eps[1]));
        assert_eq!(ctx.endpoints(), 5);
        // This side closes endpoint 3: its connection is shut down.
        ctx.close(eps[3]);
        assert_eq!(set.retain_live(&mut ctx), 1);
        assert_eq!((set.len(), ctx.endpoints()), (4, 4));
        to_client.send(()).unwrap();
        from_client.recv().unwrap();
        set.close_all(&mut ctx);
        assert!(set.is_empty());
        to_client.send(()).unwrap();
    });
    let dev = Device::open_in(&fabric, "sim0").unwrap();
    let mut ctx = ContextBuilder::new()
        .ring_size(4096)
        .build(&dev, |_: u64, _| {})
        .unwrap();
    let mut conns: Vec<Option<Connection>> = (0..6)
        .map(|_| Some(connect(addr, &mut ctx).unwrap()))
        .collect();
    from_server.recv().unwrap();
    drop(conns[1].take());
    to_server.send(()).unwrap();
    from_server.recv().unwrap();
    // Connection 3 was shut down by the server; the others are open.
    let alive: Vec<bool> = conns
        .iter_mut()
        .map(|c| c.as_mut().is_some_and(|c| c.check(&mut ctx)))
        .collect();
    assert_eq!(alive, [true, false, true, false, true, true]);
    to_server.send(()).unwrap();
    from_server.recv().unwrap();
    let alive = conns
        .iter_mut()
        .flatten()
        .filter_map(|c| c.check(&mut ctx).then_some(()))
        .count();
    assert_eq!(alive, 0, "close_all shut every connection down");
    server.join().unwrap();
    Fabric::remove_if_unused(&fabric);
}
