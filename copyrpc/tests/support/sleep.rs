//! Contexts that sleep when idle (`IdlePolicy::SpinThenSleep`), each on a
//! thread of its own, as a server and a client run: the bodies the software
//! device and the rxe guest both run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use copyrpc::transport::Transport;
use copyrpc::{CallFailed, ContextBuilder, IdlePolicy};
use mlx5::device::Context as Device;

use super::transform;

/// Longer than any test runs: a wait that needs its timeout to return has
/// lost a wake-up, and the test's own deadline fails first.
const NEVER: Duration = Duration::from_secs(600);
/// How long one call may take, sleeps on both sides included.
const CALL_LIMIT: Duration = Duration::from_secs(20);

/// This thread's CPU time.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn builder() -> ContextBuilder {
    ContextBuilder::new()
        .ring_size(1 << 14)
        .idle(IdlePolicy::sleep_after(Duration::from_micros(50)))
}

/// What the server thread saw.
pub struct ServerReport {
    pub answered: u64,
    pub sleeps: u64,
    /// Waits that ended with nothing to do (a wake-up without work).
    pub empty_waits: u64,
}

/// An echo server on `dev` that waits with a timeout it never reaches and
/// answers every eighth call late, and a client on `cdev` that makes `n`
/// calls with pauses long enough for both sides to fall asleep between some
/// of them. Every answer is checked, every
/// call must finish in [`CALL_LIMIT`] (a lost wake-up leaves a side asleep
/// for [`NEVER`]), both sides must have slept, and the server stops when its
/// waker fires.
pub fn sleepers_answer_every_call<T: Transport>(cdev: Device, sdev: Device, n: u64) {
    let (info_tx, info_rx) = mpsc::channel();
    let (back_tx, back_rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let server = std::thread::spawn(move || {
        let mut ctx = builder()
            .build_on::<T, u64, _>(&sdev, |_, _: Result<&[u8], CallFailed>| {})
            .unwrap();
        let (ep, info) = ctx.create_endpoint().unwrap();
        info_tx.send((info, ctx.waker())).unwrap();
        let peer = back_rx.recv().unwrap();
        ctx.connect(ep, &peer).unwrap();
        let mut r = ServerReport {
            answered: 0,
            sleeps: 0,
            empty_waits: 0,
        };
        while !stop2.load(Ordering::Acquire) {
            if ctx.wait(NEVER).unwrap() == 0 {
                r.empty_waits += 1;
            }
            while let Some(req) = ctx.recv() {
                let body = ctx.request(&req).unwrap();
                // Every eighth call is answered late, past the client's
                // longest spin, so the client sleeps however fast the
                // others come back.
                if u32::from_le_bytes([body[0], body[1], body[2], body[3]]) % 8 == 7 {
                    std::thread::sleep(Duration::from_millis(3));
                }
                let out = transform(body);
                ctx.reply(req, &out).unwrap();
                r.answered += 1;
            }
        }
        r.sleeps = ctx.sleeps();
        r
    });
    let (sinfo, waker) = info_rx.recv().unwrap();
    let got = Arc::new(std::sync::Mutex::new(Vec::<(u64, Vec<u8>)>::new()));
    let g2 = got.clone();
    let mut ctx = builder()
        .build_on::<T, u64, _>(&cdev, move |u, r: Result<&[u8], CallFailed>| {
            g2.lock().unwrap().push((u, r.unwrap().to_vec()));
        })
        .unwrap();
    let (ep, info) = ctx.create_endpoint().unwrap();
    ctx.connect(ep, &sinfo).unwrap();
    back_tx.send(info).unwrap();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for i in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Half the calls follow a pause of up to 4 ms: both sides sleep.
        if rng % 2 == 0 {
            std::thread::sleep(Duration::from_micros(rng % 4000));
        }
        let payload = (i as u32).to_le_bytes().repeat(1 + (rng % 16) as usize);
        ctx.call(ep, &payload, 256, i).unwrap();
        let t = Instant::now();
        while got.lock().unwrap().len() as u64 <= i {
            ctx.wait(CALL_LIMIT.saturating_sub(t.elapsed())).unwrap();
            assert!(
                t.elapsed() < CALL_LIMIT,
                "call {i}: no answer in {CALL_LIMIT:?} (a lost wake-up?)"
            );
        }
        let (u, body) = got.lock().unwrap()[i as usize].clone();
        assert_eq!((u, body), (i, transform(&payload)), "call {i}");
    }
    let client_sleeps = ctx.sleeps();
    stop.store(true, Ordering::Release);
    let t = Instant::now();
    waker.wake();
    let r = server.join().unwrap();
    assert!(t.elapsed() < CALL_LIMIT, "the waker did not end the wait");
    assert_eq!(r.answered, n);
    eprintln!(
        "{n} calls; server slept {} times ({} empty waits), client {client_sleeps}",
        r.sleeps, r.empty_waits
    );
    assert!(r.sleeps > 0, "the server never slept");
    assert!(client_sleeps > 0, "the client never slept");
}

/// An idle context's `wait` sleeps: over `idle`, the waiting thread's
/// `wait` returns at most once every 100 ms and the thread uses under
/// `1 / cpu_share` of `idle` in CPU time; then a call from another context is
/// answered. The count of returns is the measure that does not depend on the
/// machine's speed; the CPU bound catches a wait that spins.
pub fn an_idle_context_costs_no_cpu<T: Transport>(
    cdev: Device,
    sdev: Device,
    idle: Duration,
    cpu_share: u32,
) {
    let (info_tx, info_rx) = mpsc::channel();
    let (back_tx, back_rx) = mpsc::channel();
    // The server says when its idle stretch is over; only then is the call
    // made (on a slow device the server's connect alone can take longer than
    // any fixed allowance the client could wait).
    let (idle_tx, idle_rx) = mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let mut ctx = builder()
            .build_on::<T, u64, _>(&sdev, |_, _: Result<&[u8], CallFailed>| {})
            .unwrap();
        let (ep, info) = ctx.create_endpoint().unwrap();
        info_tx.send(info).unwrap();
        ctx.connect(ep, &back_rx.recv().unwrap()).unwrap();
        let (c0, t0) = (thread_cpu(), Instant::now());
        let mut waits = 0u32;
        while t0.elapsed() < idle {
            ctx.wait(idle.saturating_sub(t0.elapsed())).unwrap();
            waits += 1;
            assert!(ctx.recv().is_none(), "a request while idle");
        }
        let cpu = thread_cpu() - c0;
        // Now answer one call.
        idle_tx.send(()).unwrap();
        let t = Instant::now();
        loop {
            ctx.wait(NEVER).unwrap();
            if let Some(req) = ctx.recv() {
                let out = transform(ctx.request(&req).unwrap());
                ctx.reply(req, &out).unwrap();
                ctx.wait(Duration::ZERO).unwrap();
                break;
            }
            assert!(t.elapsed() < CALL_LIMIT);
        }
        (cpu, waits, ctx.sleeps())
    });
    let sinfo = info_rx.recv().unwrap();
    let got = Arc::new(std::sync::Mutex::new(None));
    let g2 = got.clone();
    let mut ctx = builder()
        .build_on::<T, u64, _>(&cdev, move |_, r: Result<&[u8], CallFailed>| {
            *g2.lock().unwrap() = Some(r.unwrap().to_vec());
        })
        .unwrap();
    let (ep, info) = ctx.create_endpoint().unwrap();
    ctx.connect(ep, &sinfo).unwrap();
    back_tx.send(info).unwrap();
    idle_rx.recv().unwrap();
    ctx.call(ep, b"after idle", 64, 1).unwrap();
    let t = Instant::now();
    while got.lock().unwrap().is_none() {
        ctx.wait(CALL_LIMIT.saturating_sub(t.elapsed())).unwrap();
        assert!(t.elapsed() < CALL_LIMIT, "no answer after idling");
    }
    assert_eq!(
        got.lock().unwrap().as_deref(),
        Some(&transform(b"after idle")[..])
    );
    let (cpu, waits, sleeps) = server.join().unwrap();
    eprintln!("idle {idle:?}: {cpu:?} of CPU, {waits} waits, {sleeps} sleeps");
    let most = 1 + (idle.as_millis() / 100) as u32;
    assert!(
        waits <= most,
        "an idle context's wait returned {waits} times in {idle:?} (at most {most})"
    );
    assert!(sleeps > 0, "an idle context never slept");
    assert!(
        cpu < idle / cpu_share,
        "an idle context used {cpu:?} of CPU in {idle:?} (limit: 1/{cpu_share} of it)"
    );
}
