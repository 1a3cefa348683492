//! Completion events on a real RDMA device, through the verbs path: a
//! completion channel (`ibv_create_comp_channel`, `ibv_get_cq_event`,
//! `ibv_ack_cq_events`) and arms with `ibv_req_notify_cq`, on CQs of two RC
//! QPs connected to each other on one device. Runs where `MLX5_TEST_DEVICE`
//! names a device; that is kernel soft-RoCE (`rxe0`) in the qemu guest:
//!
//! ```sh
//! MLX5_TEST_DEVICE=rxe0 cargo test -p mlx5 --test events_rxe -- --ignored --test-threads=1
//! ```
//!
//! The software device runs the same semantics in `tests/conformance.rs`
//! (the `cq_events_*` scenarios) on the direct path.

use std::time::{Duration, Instant};

use mlx5::device::{
    access, CompletionChannel, Context, Cq, CqAttr, Mr, Qp, QpCaps, RtrAttr, RtsAttr,
};
use mlx5::hw::verbs::{ibv_sge, ibv_wc, RdmaOp};
use mlx5::hw::{VerbsCq, VerbsQp};
use mlx5::sq::Sge;

/// How long a test waits for an event that must come (soft-RoCE under qemu's
/// emulation takes about half a millisecond per message).
const EVENT: Duration = Duration::from_secs(10);
/// How long it waits to see that no event comes.
const NO_EVENT: Duration = Duration::from_millis(300);

/// One QP with its CQs on a channel of their own, on the verbs path.
struct End {
    chan: CompletionChannel,
    qp: Qp,
    vqp: VerbsQp,
    scq: VerbsCq,
    rcq: VerbsCq,
    cqs: (Cq, Cq),
}

impl End {
    fn new(ctx: &Context, pd: &mlx5::device::Pd) -> End {
        let chan = ctx.create_comp_channel().unwrap();
        let attr = CqAttr {
            cqe_cnt: 256,
            ..CqAttr::default()
        };
        let scq = ctx.create_cq_on(&attr, &chan).unwrap();
        let rcq = ctx.create_cq_on(&attr, &chan).unwrap();
        let qp = ctx
            .create_qp(
                pd,
                &scq,
                &rcq,
                None,
                &QpCaps {
                    rq_wqe_cnt: 256,
                    ..QpCaps::default()
                },
            )
            .unwrap();
        End {
            vqp: qp.verbs().unwrap(),
            scq: scq.verbs().unwrap(),
            rcq: rcq.verbs().unwrap(),
            cqs: (scq, rcq),
            chan,
            qp,
        }
    }

    /// The next event within `t`: its CQ's number.
    fn event(&self, t: Duration) -> Option<u32> {
        self.chan.wait(t).unwrap().map(|e| e.cqn)
    }

    /// Posts `n` zero-length receives.
    fn post_recvs(&mut self, n: usize) {
        for i in 0..n {
            self.vqp.post_recv(i as u64, &[]).unwrap();
        }
    }
}

/// Polls `cq` once; returns the completions (all must be successful).
fn poll(cq: &mut VerbsCq) -> Vec<ibv_wc> {
    let mut wc = [ibv_wc::default(); 16];
    let n = cq.poll(&mut wc).unwrap();
    wc[..n].to_vec()
}

/// Polls `cq` until `n` completions arrived.
fn poll_n(cq: &mut VerbsCq, n: usize) -> Vec<ibv_wc> {
    let t0 = Instant::now();
    let mut v = Vec::new();
    while v.len() < n {
        v.extend(poll(cq));
        assert!(t0.elapsed() < EVENT, "{} of {n} completions", v.len());
    }
    v
}

fn setup() -> (Context, Mr, End, End) {
    let dev = std::env::var("MLX5_TEST_DEVICE").expect("MLX5_TEST_DEVICE");
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .alloc_mr(
            1 << 16,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )
        .unwrap();
    let a = End::new(&ctx, &pd);
    let b = End::new(&ctx, &pd);
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.qp.connect(
            &RtrAttr::new(y.qp.conn_info(), access::REMOTE_WRITE),
            &RtsAttr {
                // rxe retries forever with 7 (see docs/testing.md).
                retry_cnt: 6,
                ..RtsAttr::default()
            },
        )
        .unwrap();
    }
    (ctx, mr, a, b)
}

/// A WRITE_IMM of 8 bytes from `a` into `mr`, signaled.
fn write_imm(a: &mut End, mr: &Mr, imm: u32) {
    let s = Sge {
        addr: mr.addr(),
        len: 8,
        lkey: mr.lkey(),
    };
    a.vqp
        .post_rdma(
            u64::from(imm),
            RdmaOp::WriteImm(imm),
            s,
            mr.addr() + 1024,
            mr.rkey(),
            true,
        )
        .unwrap();
}

/// A zero-length SEND with immediate from `a` (the peer's receives are
/// zero-length), solicited or not, signaled.
fn send(a: &mut End, solicited: bool, imm: u32) {
    a.vqp
        .post_send_msg(
            u64::from(imm),
            Some(imm),
            &[] as &[ibv_sge],
            true,
            solicited,
        )
        .unwrap();
}

#[test]
#[ignore = "needs MLX5_TEST_DEVICE naming an RDMA device"]
fn verbs_events_one_per_arm_none_without_and_solicited_only() {
    let (_ctx, mr, mut a, mut b) = setup();
    b.post_recvs(64);
    let rcqn = b.cqs.1.cqn();
    assert_ne!(
        rcqn,
        a.cqs.1.cqn(),
        "CQs on one device have distinct numbers"
    );
    // Not armed: a completion, no event.
    write_imm(&mut a, &mr, 1);
    assert_eq!(poll_n(&mut b.rcq, 1)[0].imm_data, 1u32.to_be());
    assert_eq!(b.event(NO_EVENT), None, "an event without an arm");
    // Armed: one event for two completions.
    b.rcq.req_notify(false).unwrap();
    assert!(poll(&mut b.rcq).is_empty());
    write_imm(&mut a, &mr, 2);
    write_imm(&mut a, &mr, 3);
    assert_eq!(b.event(EVENT), Some(rcqn));
    assert_eq!(poll_n(&mut b.rcq, 2).len(), 2);
    assert_eq!(b.event(NO_EVENT), None, "two events for one arm");
    // Solicited only: an unsolicited SEND does not fire it, a solicited one
    // does.
    b.rcq.req_notify(true).unwrap();
    send(&mut a, false, 4);
    assert_eq!(poll_n(&mut b.rcq, 1).len(), 1);
    assert_eq!(
        b.event(NO_EVENT),
        None,
        "an unsolicited SEND fired a solicited arm"
    );
    send(&mut a, true, 5);
    assert_eq!(b.event(EVENT), Some(rcqn));
    assert_eq!(poll_n(&mut b.rcq, 1)[0].imm_data, 5u32.to_be());
    // The sender's CQs, never armed: nothing on its channel.
    poll_n(&mut a.scq, 5);
    assert_eq!(a.event(Duration::ZERO), None);
    // Its send CQ armed: the next send completion fires it.
    a.scq.req_notify(false).unwrap();
    write_imm(&mut a, &mr, 6);
    assert_eq!(a.event(EVENT), Some(a.cqs.0.cqn()));
    poll_n(&mut a.scq, 1);
    poll_n(&mut b.rcq, 1);
}

/// The sleeper's loop (poll, arm, poll, wait) against a sender thread that
/// strikes at random moments: every message arrives, and no wait is left
/// without its event.
#[test]
#[ignore = "needs MLX5_TEST_DEVICE naming an RDMA device"]
fn verbs_events_are_not_lost_by_a_sleeper() {
    const N: u32 = 300;
    let (_ctx, mr, mut a, mut b) = setup();
    b.post_recvs(256);
    let sender = std::thread::spawn(move || {
        let mut rng = 0x9e37_79b9_u64;
        for i in 0..N {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng % 3 == 0 {
                std::thread::sleep(Duration::from_micros(rng % 2000));
            }
            write_imm(&mut a, &mr, i);
            if i % 32 == 31 {
                poll_n(&mut a.scq, 32);
            }
        }
        poll_n(&mut a.scq, (N % 32) as usize);
        (a, mr)
    });
    let (mut got, mut waits) = (0u32, 0u32);
    // Takes what one poll finds; how many.
    let take = |b: &mut End, got: &mut u32| {
        let wcs = poll(&mut b.rcq);
        for wc in &wcs {
            assert_eq!(wc.status, 0, "{wc:?}");
            assert_eq!(u32::from_be(wc.imm_data), *got, "in order");
            *got += 1;
        }
        b.post_recvs(wcs.len());
        wcs.len()
    };
    while got < N {
        if take(&mut b, &mut got) > 0 {
            continue;
        }
        b.rcq.req_notify(false).unwrap();
        if take(&mut b, &mut got) > 0 {
            // Landed between the empty poll and the arm: no sleep. The arm
            // may raise an event for it, taken by a later wait.
            continue;
        }
        let ev = b.event(EVENT);
        assert_eq!(
            ev,
            Some(b.cqs.1.cqn()),
            "message {got}: no event within {EVENT:?}"
        );
        waits += 1;
    }
    let _ = sender.join().unwrap();
    eprintln!("{N} messages, {waits} sleeps");
    assert!(waits > 0);
}

/// A waker ends a wait on the device's completion channel from another
/// thread (an eventfd polled beside the channel), or the next wait when it
/// came first; an event raised beside a wake is still handed out.
#[test]
#[ignore = "needs MLX5_TEST_DEVICE naming an RDMA device"]
fn verbs_waker_ends_a_wait_and_keeps_events() {
    let (_ctx, mr, mut a, mut b) = setup();
    b.post_recvs(4);
    let waker = b.chan.waker();
    waker.wake();
    waker.wake();
    let t = Instant::now();
    assert_eq!(b.event(EVENT), None);
    assert!(
        t.elapsed() < EVENT / 2,
        "the pending wake did not end the wait"
    );
    assert_eq!(b.event(Duration::from_millis(30)), None, "wakes piled up");
    let w2 = waker.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        w2.wake();
    });
    let t = Instant::now();
    assert_eq!(b.event(EVENT), None);
    assert!(t.elapsed() < EVENT / 2, "the wake did not end the wait");
    th.join().unwrap();
    b.rcq.req_notify(false).unwrap();
    write_imm(&mut a, &mr, 1);
    poll_n(&mut a.scq, 1);
    waker.wake();
    let got = match b.event(EVENT) {
        Some(c) => Some(c),
        None => b.event(EVENT),
    };
    assert_eq!(got, Some(b.cqs.1.cqn()), "the event beside a wake was lost");
    poll_n(&mut b.rcq, 1);
}
