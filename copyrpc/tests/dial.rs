//! Connection setup without blocking the context's thread (`conn::dial`).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use copyrpc::conn::{connect, dial, retain_live, ConnError, Connection, Dial, Listener};
use copyrpc::{CallError, CallFailed, Context, ContextBuilder, EndpointId};
use mlx5::device::Context as Device;
use mlx5::sim::fabric::Fabric;

type Log = Rc<RefCell<Vec<(u64, Result<Vec<u8>, CallFailed>)>>>;
type Handler = Box<dyn FnMut(u64, Result<&[u8], CallFailed>)>;

/// A client context on `sim0` of `fabric`, logging its responses.
fn client(fabric: &str) -> (Context<u64, Handler>, Log) {
    let dev = Device::open_in(fabric, "sim0").unwrap();
    let log: Log = Default::default();
    let l = log.clone();
    let h: Handler = Box::new(move |u, r| l.borrow_mut().push((u, r.map(|b| b.to_vec()))));
    (ContextBuilder::new().build(&dev, h).unwrap(), log)
}

/// A server on `sim1`: accepts `now` peers, serves them (echo) until `go`,
/// then accepts `later` more and serves everyone until all have left.
fn server(
    fabric: &str,
    listener: Listener,
    now: usize,
    later: usize,
    go: mpsc::Receiver<()>,
) -> thread::JoinHandle<()> {
    let fabric = fabric.to_string();
    thread::spawn(move || {
        let dev = Device::open_in(&fabric, "sim1").unwrap();
        let mut ctx = ContextBuilder::new().build(&dev, |_: u64, _| {}).unwrap();
        let mut conns: Vec<Connection> = (0..now)
            .map(|_| listener.accept(&mut ctx).unwrap())
            .collect();
        let mut waiting = true;
        let start = Instant::now();
        while waiting || !conns.is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "clients never left"
            );
            if waiting && go.try_recv().is_ok() {
                waiting = false;
                for _ in 0..later {
                    conns.push(listener.accept(&mut ctx).unwrap());
                }
            }
            ctx.poll();
            while let Some(h) = ctx.recv() {
                let d = ctx.request(&h).unwrap().to_vec();
                ctx.reply(h, &d).unwrap();
            }
            retain_live(&mut conns, &mut ctx);
        }
    })
}

/// Polls `d` until it is done (the client context polled meanwhile).
fn finish_dial(d: &mut Dial, ctx: &mut Context<u64, Handler>) -> Result<Connection, ConnError> {
    let start = Instant::now();
    loop {
        if let Some(r) = d.poll(ctx) {
            return r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the dial never ended"
        );
        ctx.poll();
        thread::sleep(Duration::from_millis(1));
    }
}

/// Calls `ep` with `tag` and polls until the answer (an echo) is logged.
fn call_answered(ctx: &mut Context<u64, Handler>, log: &Log, ep: EndpointId, tag: u64) {
    ctx.call(ep, &tag.to_le_bytes(), 16, tag).unwrap();
    let start = Instant::now();
    while !log.borrow().iter().any(|(t, _)| *t == tag) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "call {tag} unanswered"
        );
        ctx.poll();
    }
    let log = log.borrow();
    let (_, r) = log.iter().find(|(t, _)| *t == tag).unwrap();
    assert_eq!(r.as_ref().unwrap(), &tag.to_le_bytes());
}

fn listen() -> (Listener, SocketAddr) {
    let l = Listener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

#[test]
fn a_dial_completes_once_the_listener_answers_and_its_connection_works() {
    let fabric = format!("dial-ok-{}", std::process::id());
    let (listener, addr) = listen();
    let (go_tx, go_rx) = mpsc::channel();
    let srv = server(&fabric, listener, 0, 1, go_rx);
    let (mut ctx, log) = client(&fabric);
    let mut d = dial(addr, &mut ctx, b"hi", Duration::from_secs(10)).unwrap();
    assert_eq!(d.peer_addr(), addr);
    assert_eq!(ctx.endpoints(), 1, "the endpoint exists from the start");
    // The listener has not accepted yet: nothing to finish.
    for _ in 0..20 {
        assert!(d.poll(&mut ctx).is_none());
        thread::sleep(Duration::from_millis(5));
    }
    go_tx.send(()).unwrap();
    let conn = finish_dial(&mut d, &mut ctx).unwrap();
    assert_eq!(conn.endpoint(), d.endpoint());
    call_answered(&mut ctx, &log, conn.endpoint(), 7);
    // A spent dial says so and leaves the connection's endpoint alone.
    assert!(matches!(d.poll(&mut ctx), Some(Err(ConnError::Io(_)))));
    d.abandon(&mut ctx);
    assert_eq!(ctx.endpoints(), 1);
    call_answered(&mut ctx, &log, conn.endpoint(), 8);
    drop(conn);
    srv.join().unwrap();
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_refused_dial_fails_with_the_reason_and_removes_its_endpoint() {
    let fabric = format!("dial-refused-{}", std::process::id());
    let (listener, addr) = listen();
    let srv = thread::spawn(move || listener.accept_pending().unwrap().refuse("not today"));
    let (mut ctx, _log) = client(&fabric);
    let mut d = dial(addr, &mut ctx, b"", Duration::from_secs(10)).unwrap();
    match finish_dial(&mut d, &mut ctx) {
        Err(ConnError::Refused(why)) => assert_eq!(why, "not today"),
        other => panic!("{other:?}"),
    }
    assert_eq!(ctx.endpoints(), 0);
    assert!(matches!(
        ctx.call(d.endpoint(), b"x", 16, 1),
        Err(CallError::NoEndpoint(1))
    ));
    srv.join().unwrap();
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn a_dial_nobody_answers_times_out_in_its_time() {
    let fabric = format!("dial-silent-{}", std::process::id());
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    // Accepts, reads nothing, writes nothing, until the test ends.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let srv = thread::spawn(move || {
        let (_silent, _) = l.accept().unwrap();
        let _ = done_rx.recv();
    });
    let (mut ctx, _log) = client(&fabric);
    let budget = Duration::from_millis(300);
    let t = Instant::now();
    let mut d = dial(addr, &mut ctx, b"", budget).unwrap();
    match finish_dial(&mut d, &mut ctx) {
        Err(ConnError::Timeout(b)) => assert_eq!(b, budget),
        other => panic!("{other:?}"),
    }
    let took = t.elapsed();
    assert!(
        took >= budget && took < budget + Duration::from_secs(2),
        "failed after {took:?}"
    );
    assert_eq!(ctx.endpoints(), 0);
    done_tx.send(()).unwrap();
    srv.join().unwrap();
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn the_context_serves_other_endpoints_while_a_dial_is_pending() {
    let fabric = format!("dial-busy-{}", std::process::id());
    let (listener, addr) = listen();
    let (go_tx, go_rx) = mpsc::channel();
    let srv = server(&fabric, listener, 1, 1, go_rx);
    let (mut ctx, log) = client(&fabric);
    let first = connect(addr, &mut ctx).unwrap();
    let mut d = dial(addr, &mut ctx, b"", Duration::from_secs(10)).unwrap();
    // Calls over the first connection are answered while the dial waits on
    // the listener.
    for tag in 0..50 {
        call_answered(&mut ctx, &log, first.endpoint(), tag);
        assert!(d.poll(&mut ctx).is_none());
    }
    go_tx.send(()).unwrap();
    let second = finish_dial(&mut d, &mut ctx).unwrap();
    call_answered(&mut ctx, &log, second.endpoint(), 100);
    call_answered(&mut ctx, &log, first.endpoint(), 101);
    drop((first, second));
    srv.join().unwrap();
    drop(ctx);
    Fabric::remove_if_unused(&fabric);
}
