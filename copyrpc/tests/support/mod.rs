//! Two copyrpc contexts in one process, stepped from one thread: on two
//! software devices, or on one real device (kernel soft-RoCE in the rxe
//! guest) over the verbs data path.
#![allow(dead_code)]

pub mod sleep;

/// `#[test] fn $rc` runs `$f` on the RC direct path, `#[test] fn $dc` on DC
/// (for test files that declare `#[macro_use] mod support;`).
#[allow(unused_macros)]
macro_rules! on_rc_and_dc {
    ($f:ident, $rc:ident, $dc:ident) => {
        #[test]
        fn $rc() {
            $f::<copyrpc::transport::Mlx5>()
        }
        #[test]
        fn $dc() {
            $f::<copyrpc::transport::Dc>()
        }
    };
}

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use copyrpc::transport::{Mlx5, Transport};
use copyrpc::{
    CallError, CallFailed, CloseReason, Context, ContextBuilder, EndpointId, RecvHandle, ReplyError,
};
use mlx5::device::{Context as Device, ExecMode};
use mlx5::sim::fabric::Fabric;

/// Responses as the client's callback saw them: (user data, payload or failure).
pub type Log = Rc<RefCell<Vec<(u64, Result<Vec<u8>, CallFailed>)>>>;
pub type Handler = Box<dyn FnMut(u64, Result<&[u8], CallFailed>)>;

pub struct World<T: Transport = Mlx5> {
    /// The software devices' fabric (empty on a real device).
    pub fabric: String,
    pub client: Context<u64, Handler, T>,
    pub server: Context<u64, Handler, T>,
    pub log: Log,
    pub server_log: Log,
    pub pairs: Vec<(EndpointId, EndpointId)>,
    pub devs: (Device, Device),
    /// A real device completes work on its own time: loops are bounded by a
    /// deadline instead of a step count.
    pub realtime: bool,
}

impl<T: Transport> Drop for World<T> {
    fn drop(&mut self) {
        if !self.fabric.is_empty() {
            Fabric::remove_if_unused(&self.fabric);
        }
    }
}

/// How long a loop on a real device may take before the test fails.
const REALTIME_LIMIT: Duration = Duration::from_secs(60);

fn handler(log: &Log) -> Handler {
    let l = log.clone();
    Box::new(move |u, r| l.borrow_mut().push((u, r.map(|b| b.to_vec()))))
}

/// A world with `n` connected endpoint pairs.
pub fn world(tag: &str, mode: ExecMode, b: ContextBuilder, n: usize) -> World {
    world_t::<Mlx5>(tag, mode, b, n)
}

/// [`world`] on transport `T`.
pub fn world_t<T: Transport>(tag: &str, mode: ExecMode, b: ContextBuilder, n: usize) -> World<T> {
    // One fabric per test and transport: the two may run at once.
    let t = std::any::type_name::<T>().rsplit("::").next().unwrap_or("");
    let fabric = format!("rpc-{}-{tag}-{t}", std::process::id());
    let d0 = Device::open_in_mode(&fabric, "sim0", mode).unwrap();
    let d1 = Device::open_in_mode(&fabric, "sim1", mode).unwrap();
    let mut w = world_on::<T>((d0, d1), b, n);
    w.fabric = fabric;
    w
}

/// The device the real-device tests run on (`COPYRPC_TEST_DEVICE`, e.g.
/// `rxe0` in the rxe guest), or `None` when unset.
pub fn test_device() -> Option<String> {
    std::env::var("COPYRPC_TEST_DEVICE").ok()
}

/// A world on `devs` (client, server: one device twice is loopback) with
/// transport `T`; `realtime` unless both are software devices.
pub fn world_on<T: Transport>(devs: (Device, Device), b: ContextBuilder, n: usize) -> World<T> {
    let (d0, d1) = devs;
    let log: Log = Default::default();
    let server_log: Log = Default::default();
    let mut client = b.build_on::<T, _, _>(&d0, handler(&log)).unwrap();
    let mut server = b.build_on::<T, _, _>(&d1, handler(&server_log)).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..n {
        let (c, ci) = client.create_endpoint().unwrap();
        let (s, si) = server.create_endpoint().unwrap();
        client.connect(c, &si).unwrap();
        server.connect(s, &ci).unwrap();
        pairs.push((c, s));
    }
    let realtime = !(d0.name().starts_with("sim") && d1.name().starts_with("sim"));
    World {
        fabric: String::new(),
        client,
        server,
        log,
        server_log,
        pairs,
        devs: (d0, d1),
        realtime,
    }
}

/// The reply an echo server gives: the request with every byte incremented.
pub fn transform(d: &[u8]) -> Vec<u8> {
    d.iter().map(|b| b.wrapping_add(1)).collect()
}

impl<T: Transport> World<T> {
    /// Whether a loop that started at `start` may take step number `step` of
    /// at most `limit` (on a real device: until [`REALTIME_LIMIT`]).
    pub fn may_step(&self, step: usize, limit: usize, start: Instant) -> bool {
        if self.realtime {
            start.elapsed() < REALTIME_LIMIT
        } else {
            step < limit
        }
    }

    /// One step: both sides poll; the server answers every request (echo,
    /// transformed). Returns the number of requests answered.
    pub fn step(&mut self) -> usize {
        self.client.poll();
        self.server.poll();
        let mut n = 0;
        while let Some(h) = self.server.recv() {
            let d = transform(self.server.request(&h).unwrap());
            self.server.reply(h, &d).unwrap();
            n += 1;
        }
        n
    }

    /// Steps until `count` responses were logged (panics after `limit` steps).
    pub fn until_responses(&mut self, count: usize, limit: usize) {
        let start = Instant::now();
        let mut step = 0;
        while self.may_step(step, limit, start) {
            if self.log.borrow().len() >= count {
                return;
            }
            self.step();
            step += 1;
        }
        panic!(
            "only {} of {count} responses after {limit} steps",
            self.log.borrow().len()
        );
    }
}

pub use test_support::Rng;

pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as u8).wrapping_mul(37) ^ (i as u8).wrapping_add((seed >> 8) as u8))
        .collect()
}

/// Sends `count` calls of sizes from `sizes`, retrying the retryable errors;
/// verifies every response byte.
pub fn echo_run<T: Transport>(w: &mut World<T>, count: u64, mut size: impl FnMut(u64) -> usize) {
    let (c, _) = w.pairs[0];
    let mut sent = 0u64;
    let mut steps = 0;
    let start = Instant::now();
    while (w.log.borrow().len() as u64) < count {
        while sent < count {
            let len = size(sent);
            let p = payload(sent, len);
            match w.client.call(c, &p, len, sent) {
                Ok(()) => sent += 1,
                Err(e) if e.is_retryable() => break,
                Err(e) => panic!("call {sent}: {e}"),
            }
        }
        w.step();
        steps += 1;
        assert!(
            w.may_step(steps, 1_000_000, start),
            "stuck: {} of {count}",
            w.log.borrow().len()
        );
    }
    let log = w.log.borrow();
    let mut seen = vec![false; count as usize];
    for (tag, r) in log.iter() {
        let len = size(*tag);
        let got = r.as_ref().expect("no failures");
        assert_eq!(got, &transform(&payload(*tag, len)), "call {tag} ({len} B)");
        assert!(!seen[*tag as usize], "call {tag} answered twice");
        seen[*tag as usize] = true;
    }
    assert!(seen.iter().all(|&s| s));
}

/// The flow-control invariant and the reservation bound on every endpoint.
pub fn check<T: Transport>(w: &World<T>) {
    for &(c, s) in &w.pairs {
        for f in [
            w.client.flow_state(c).unwrap(),
            w.server.flow_state(s).unwrap(),
        ] {
            assert!(f.invariant_holds(), "{f:?}");
            assert!(f.peer_unused_credit <= f.resp_reservation, "{f:?}");
        }
    }
}

/// Random interleavings of call / reply / poll on both sides of pair 0
/// (each side both a client and a server), `target` calls each way: the
/// invariant holds after every step, credits never go negative (u64
/// arithmetic would panic in debug builds), and every call is answered
/// exactly once with the right bytes.
pub fn interleave<T: Transport>(w: &mut World<T>, seed: u64, ring: u64, target: u64) {
    let (c, s) = w.pairs[0];
    let mut rng = Rng(seed);
    let max_len = (ring / 4 - 44) as usize;
    let (mut c_sent, mut s_sent) = (0u64, 1u64 << 40);
    let (mut c_held, mut s_held): (Vec<RecvHandle>, Vec<RecvHandle>) = (Vec::new(), Vec::new());
    let (mut c_data, mut s_data): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
    for _ in 0..20_000 {
        match rng.below(6) {
            0 if c_sent < target => {
                let len = rng.below(max_len as u64 + 1) as usize;
                match w.client.call(c, &payload(c_sent, len), len, c_sent) {
                    Ok(()) => c_sent += 1,
                    Err(e) => assert!(e.is_retryable(), "{e}"),
                }
            }
            1 if s_sent < (1 << 40) + target => {
                let len = rng.below(max_len as u64 + 1) as usize;
                match w.server.call(s, &payload(s_sent, len), len, s_sent) {
                    Ok(()) => s_sent += 1,
                    Err(e) => assert!(e.is_retryable(), "{e}"),
                }
            }
            2 => {
                w.client.poll();
                while let Some(h) = w.client.recv() {
                    c_data.push(transform(w.client.request(&h).unwrap()));
                    c_held.push(h);
                }
            }
            3 => {
                w.server.poll();
                while let Some(h) = w.server.recv() {
                    s_data.push(transform(w.server.request(&h).unwrap()));
                    s_held.push(h);
                }
            }
            4 if !c_held.is_empty() => {
                let k = rng.below(c_held.len() as u64) as usize;
                let h = c_held.swap_remove(k);
                let d = c_data.swap_remove(k);
                w.client.reply(h, &d).unwrap();
            }
            5 if !s_held.is_empty() => {
                let k = rng.below(s_held.len() as u64) as usize;
                let h = s_held.swap_remove(k);
                let d = s_data.swap_remove(k);
                w.server.reply(h, &d).unwrap();
            }
            _ => {}
        }
        check(w);
    }
    // Drain: answer everything, keep polling.
    let start = Instant::now();
    let mut step = 0;
    while (w.log.borrow().len() as u64) < c_sent
        || (w.server_log.borrow().len() as u64) < s_sent - (1 << 40)
    {
        assert!(w.may_step(step, 2000, start), "seed {seed}: drained");
        step += 1;
        for (h, d) in c_held.drain(..).zip(c_data.drain(..)) {
            w.client.reply(h, &d).unwrap();
        }
        for (h, d) in s_held.drain(..).zip(s_data.drain(..)) {
            w.server.reply(h, &d).unwrap();
        }
        w.client.poll();
        w.server.poll();
        while let Some(h) = w.client.recv() {
            c_data.push(transform(w.client.request(&h).unwrap()));
            c_held.push(h);
        }
        while let Some(h) = w.server.recv() {
            s_data.push(transform(w.server.request(&h).unwrap()));
            s_held.push(h);
        }
        check(w);
    }
    for (log, sent, base) in [(&w.log, c_sent, 0u64), (&w.server_log, s_sent, 1u64 << 40)] {
        let log = log.borrow();
        assert_eq!(
            log.len() as u64,
            sent - base,
            "seed {seed}: every call answered"
        );
        let mut seen = std::collections::HashSet::new();
        for (t, r) in log.iter() {
            assert!(seen.insert(*t), "seed {seed}: call {t} answered twice");
            let d = r.as_ref().unwrap();
            assert_eq!(
                &transform(&payload(*t, d.len())),
                d,
                "seed {seed}: call {t}"
            );
        }
    }
    assert!(
        c_sent > 50 && s_sent - (1 << 40) > 50,
        "seed {seed}: enough traffic ({c_sent})"
    );
}

/// The server consumes requests but sends nothing (it holds its replies), so
/// no batch carries its consumer position back: the client must READ it.
/// Needs a 16 KiB ring.
pub fn read_fallback<T: Transport>(w: &mut World<T>) {
    let (c, _) = w.pairs[0];
    let mut held = Vec::new();
    let mut accepted = 0u64;
    let mut ring_full = 0;
    let start = Instant::now();
    let mut step = 0;
    while w.may_step(step, 10_000, start) {
        step += 1;
        if accepted == 40 {
            break;
        }
        match w.client.call(c, &payload(accepted, 1000), 0, accepted) {
            Ok(()) => accepted += 1,
            Err(CallError::RingFull(_)) => ring_full += 1,
            Err(e) => panic!("{e}"),
        }
        w.client.poll();
        w.server.poll();
        while let Some(h) = w.server.recv() {
            held.push(h);
        }
    }
    assert_eq!(
        accepted, 40,
        "40 KB of requests through a 16 KB ring without a single server batch"
    );
    assert!(ring_full > 0);
    let reads = w.client.stats(c).reads;
    assert!(reads > 0, "the READ fallback was taken");
    assert_eq!(
        w.server.stats(w.pairs[0].1).batches,
        0,
        "the server sent nothing"
    );
    for h in held.drain(..) {
        w.server.reply(h, b"").unwrap();
    }
    w.until_responses(40, 1000);
    assert!(w
        .log
        .borrow()
        .iter()
        .all(|(_, r)| r.as_deref() == Ok(&[][..])));
}

/// 40 calls answered in reverse order of arrival: the responses come back in
/// reply order, every byte right.
pub fn out_of_order<T: Transport>(w: &mut World<T>) {
    let (c, _) = w.pairs[0];
    // 40 calls of 96 B allowance each fit the initial credit (ring / 4).
    for i in 0..40u64 {
        w.client.call(c, &payload(i, 40), 40, i).unwrap();
    }
    let mut handles = Vec::new();
    let start = Instant::now();
    let mut step = 0;
    while handles.len() < 40 {
        assert!(w.may_step(step, 100_000, start), "40 requests arrived");
        step += 1;
        w.client.poll();
        w.server.poll();
        while let Some(h) = w.server.recv() {
            // Answer from the data now (it is released at the next poll).
            let d = transform(w.server.request(&h).unwrap());
            handles.push((h, d));
        }
    }
    // Reply in reverse order of arrival.
    while let Some((h, d)) = handles.pop() {
        w.server.reply(h, &d).unwrap();
    }
    w.until_responses(40, 10_000);
    let order: Vec<u64> = w.log.borrow().iter().map(|(t, _)| *t).collect();
    assert_eq!(
        order,
        (0..40).rev().collect::<Vec<_>>(),
        "responses in reply order"
    );
    for (t, r) in w.log.borrow().iter() {
        assert_eq!(r.as_ref().unwrap(), &transform(&payload(*t, 40)));
    }
}

/// Removing an endpoint with calls in flight fails them through the callback;
/// a handle of a removed endpoint cannot be answered; the peer's endpoint
/// closes once its QP gives up, and a neighbouring pair (pair 1) is not
/// disturbed.
pub fn remove_in_flight<T: Transport>(w: &mut World<T>) {
    let (c0, s0) = w.pairs[0];
    let (c1, s1) = w.pairs[1];
    // Server-side handle taken, then the server removes the endpoint.
    w.client.call(c0, &payload(1, 64), 64, 1).unwrap();
    w.client.poll();
    w.server.poll();
    let h = w.server.recv().expect("request delivered");
    assert_eq!(h.endpoint(), s0);
    assert!(w.server.remove(s0));
    assert!(w.server.request(&h).is_none());
    assert!(matches!(
        w.server.reply(h, b"late"),
        Err(ReplyError::Closed(CloseReason::Local))
    ));
    // A new endpoint takes the slot; the stale id does not reach it.
    let (s_new, _) = w.server.create_endpoint().unwrap();
    assert_eq!(s_new.index(), s0.index());
    assert_ne!(s_new, s0);
    assert!(w.server.flow_state(s0).is_none());
    assert!(w.server.flow_state(s_new).is_some());

    // The client's call on the removed pair fails once its QP gives up on the
    // silent peer (transport retries: ACK timeout 14, 1 + 6 tries, about half
    // a second); calls on the other pair keep working meanwhile.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut k = 0u64;
    let _ = w.client.call(c0, b"more", 8, 100);
    while w.client.closed(c0).is_none() && std::time::Instant::now() < deadline {
        w.client.call(c1, &payload(k, 16), 16, 1000 + k).unwrap();
        while !w.log.borrow().iter().any(|(u, _)| *u == 1000 + k) {
            assert!(std::time::Instant::now() < deadline, "call {k} answered");
            w.step();
        }
        k += 1;
    }
    assert!(
        w.client.closed(c0).is_some(),
        "the peer of a removed endpoint must close"
    );
    let log = w.log.borrow();
    let call1 = log.iter().find(|(u, _)| *u == 1).expect("call 1 finished");
    assert!(matches!(call1.1, Err(CallFailed(_))));
    for (u, r) in log.iter().filter(|(u, _)| *u >= 1000) {
        assert_eq!(r.as_ref().unwrap(), &transform(&payload(u - 1000, 16)));
    }
    assert!(w.server.closed(s1).is_none());
    drop(log);

    // Client removes its side with the call still pending: it fails locally.
    let (c2, c2i) = w.client.create_endpoint().unwrap();
    let (s2, s2i) = w.server.create_endpoint().unwrap();
    w.client.connect(c2, &s2i).unwrap();
    w.server.connect(s2, &c2i).unwrap();
    w.client.call(c2, b"pending", 8, 7).unwrap();
    assert!(w.client.remove(c2));
    let log = w.log.borrow();
    let r = &log.iter().find(|(u, _)| *u == 7).unwrap().1;
    assert_eq!(r, &Err(CallFailed(CloseReason::Local)));
}
