//! Connection setup over TCP, and the TCP connection as the liveness channel.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::mpsc;
use std::thread;

use copyrpc::conn::{connect, Connection, Listener};
use copyrpc::{CallFailed, Context, ContextBuilder};
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
    assert!(log[0].1.is_err(), "the pending call failed");
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
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        assert!(line.contains("\"version\":1"), "{line}");
        s.write_all(b"{\"version\": 99}\n").unwrap();
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
