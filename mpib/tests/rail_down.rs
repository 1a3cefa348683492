//! One rail of two goes down under traffic — its port, on the software
//! device: a pulled cable, a failed switch port. The communicators close: the
//! side whose work requests exhaust their retries with a transport error on
//! that rail, the other (if it did not find out the same way) through the
//! liveness channel. Every request ends — whole, if it completed before the
//! rail went down, or failed — without a hang, a panic, or bytes in another
//! request's buffer. A new communicator on the surviving rail alone then
//! moves data, and once the port is up again a two-rail one does.

mod support;

use std::time::{Duration, Instant};

use mlx5::device::ExecMode;
use mlx5::sim::fabric::Fabric;
use mlx5::wr::WcStatus;
use mpib::{Buffer, CloseReason, Comm, Config, Error, PolicyKind, Request, Sizes};
use support::*;

/// Transfers the stream would move.
const COUNT: usize = 48;
/// Receives posted ahead of the completed ones.
const WINDOW: usize = 4;
/// Bytes per transfer (split between the rails).
const LEN: usize = 64 * 1024;
/// The port goes down once this many sends were posted.
const DOWN_AFTER: usize = 10;
/// What receive buffers hold before anything lands.
const FILL: u8 = 0xa5;
/// B's rail-1 device (side A is on sim0/sim1, side B on sim2/sim3).
const DOWN_DEV: u32 = 3;
/// How long the stream may take: the failing rail's work requests give up
/// after 7 ACK timeouts of 67 ms.
const PATIENCE: Duration = Duration::from_secs(20);

/// How a request ended.
type Outcome = Result<Sizes, String>;

/// One side's requests: posted, and how they ended.
struct Side {
    reqs: Vec<Option<Request>>,
    ends: Vec<Option<Outcome>>,
}

impl Side {
    fn new() -> Side {
        Side {
            reqs: (0..COUNT).map(|_| None).collect(),
            ends: (0..COUNT).map(|_| None).collect(),
        }
    }

    /// Tests every posted request that has not ended.
    fn test_all(&mut self, c: &mut Comm) {
        for (req, end) in self.reqs.iter().zip(&mut self.ends) {
            let Some(r) = req else { continue };
            if end.is_some() {
                continue;
            }
            match c.test(r) {
                Ok(None) => {}
                Ok(Some(s)) => *end = Some(Ok(s)),
                Err(e) => *end = Some(Err(checked_close(c, e))),
            }
        }
    }

    fn posted(&self) -> usize {
        self.reqs.iter().filter(|r| r.is_some()).count()
    }

    fn ended(&self) -> usize {
        self.ends.iter().filter(|e| e.is_some()).count()
    }
}

/// A request's error must be the communicator's close, and the close a
/// transport error on rail 1 (the one that went down) or the peer's.
fn checked_close(c: &Comm, e: Error) -> String {
    let why = c.closed().expect("an error without a close").clone();
    assert!(
        matches!(&e, Error::Closed(r) if *r == why),
        "the error {e:?} is not the close {why:?}"
    );
    assert!(
        is_rail_1_retries(&why) || why == CloseReason::PeerGone,
        "closed for {why:?}"
    );
    e.to_string()
}

fn is_rail_1_retries(why: &CloseReason) -> bool {
    matches!(
        why,
        CloseReason::Transport {
            rail: 1,
            status: WcStatus::RetryExcErr,
            ..
        }
    )
}

/// Posts what the stream allows on both sides, once; takes the port down
/// (noting when in `down_at`) before the send that `DOWN_AFTER` names.
fn post(
    a: &mut Comm,
    b: &mut Comm,
    (tx, rx): (&mut Side, &mut Side),
    (src, dst): (&[Buffer], &[Buffer]),
    (fabric, down_at): (&str, &mut Option<Instant>),
) {
    let k = rx.posted();
    if k < COUNT && k < rx.ended() + WINDOW && b.closed().is_none() {
        match b.irecv(&[dst[k].all()], k as u32) {
            Ok(Some(r)) => rx.reqs[k] = Some(r),
            Ok(None) => {}
            Err(e) => {
                checked_close(b, e);
            }
        }
    }
    let k = tx.posted();
    if k < rx.posted() && a.closed().is_none() {
        if k == DOWN_AFTER && down_at.is_none() {
            // Through a handle on the fabric, as another process would.
            Fabric::open(fabric)
                .unwrap()
                .set_port_down(DOWN_DEV, true)
                .unwrap();
            *down_at = Some(Instant::now());
        }
        match a.isend(&[src[k].all()], k as u32) {
            Ok(Some(r)) => tx.reqs[k] = Some(r),
            Ok(None) => {}
            Err(e) => {
                checked_close(a, e);
            }
        }
    }
}

#[test]
fn a_rail_that_goes_down_closes_the_communicator_and_the_other_rail_carries_on() {
    let cfg = Config {
        policy: PolicyKind::Static(0.5),
        ..Config::default()
    };
    let mut w = world("raildown", ExecMode::Inline, 2, &cfg);
    let fabric = w.fabric.0.clone();
    let src: Vec<Buffer> = (0..COUNT)
        .map(|k| {
            let b = w.a.alloc_buffer(LEN).unwrap();
            b.write(0, &pattern(k as u64, LEN)).unwrap();
            b
        })
        .collect();
    let dst: Vec<Buffer> = (0..COUNT)
        .map(|_| {
            let b = w.b.alloc_buffer(LEN).unwrap();
            b.write(0, &[FILL; LEN]).unwrap();
            b
        })
        .collect();
    let (mut tx, mut rx) = (Side::new(), Side::new());
    let t0 = Instant::now();
    let mut down_at = None;
    // Until both sides closed and every posted request ended.
    while !(w.a.closed().is_some()
        && w.b.closed().is_some()
        && tx.ended() == tx.posted()
        && rx.ended() == rx.posted())
    {
        assert!(
            t0.elapsed() < PATIENCE,
            "stuck: sent {}/{}, received {}/{}, closed {:?} / {:?}",
            tx.ended(),
            tx.posted(),
            rx.ended(),
            rx.posted(),
            w.a.closed(),
            w.b.closed()
        );
        post(
            &mut w.a,
            &mut w.b,
            (&mut tx, &mut rx),
            (&src, &dst),
            (&fabric, &mut down_at),
        );
        tx.test_all(&mut w.a);
        rx.test_all(&mut w.b);
    }
    let down_at = down_at.expect("the stream reached the point where the port goes down");
    eprintln!(
        "closed {:.2} s after the port went down: A {}, B {}",
        down_at.elapsed().as_secs_f64(),
        w.a.closed().unwrap(),
        w.b.closed().unwrap()
    );
    assert!(
        is_rail_1_retries(w.a.closed().unwrap()) || is_rail_1_retries(w.b.closed().unwrap()),
        "some side saw rail 1's retries run out"
    );

    // What was posted before the port went down arrived whole; nothing
    // posted after it completed (its rail-1 half could not cross).
    for (k, ((sent, got), buf)) in tx.ends.iter().zip(&rx.ends).zip(&dst).enumerate() {
        let want = pattern(k as u64, LEN);
        let have = buf.to_vec(0, LEN).unwrap();
        if k < DOWN_AFTER {
            for (what, end) in [("send", sent), ("receive", got)] {
                assert!(
                    matches!(end, Some(Ok(s)) if **s == [LEN as u32]),
                    "{what} {k}: {end:?}"
                );
            }
            assert!(have == want, "receive {k}: bytes");
        } else {
            assert!(!matches!(sent, Some(Ok(_))), "send {k} completed: {sent:?}");
            assert!(
                !matches!(got, Some(Ok(_))),
                "receive {k} completed: {got:?}"
            );
        }
        // Every receive buffer holds its own transfer's bytes or none:
        // nothing from another request.
        let foreign = have
            .iter()
            .zip(&want)
            .position(|(&x, &y)| x != y && x != FILL);
        assert_eq!(foreign, None, "receive {k}: a byte of another request");
    }
    assert!(
        tx.posted() > DOWN_AFTER,
        "a send was posted after the port went down"
    );
    drop(w.a.isend(&[src[0].all()], 0).expect_err("A stays closed"));
    drop(w.b.irecv(&[dst[0].all()], 0).expect_err("B stays closed"));

    // The surviving rail alone (sim0 <-> sim2) moves data, both ways.
    let one = Config::default();
    let (mut a1, mut b1) = mpib::pair(&w.devs[..1], &w.devs[2..3], &one).expect("pair on rail 0");
    for (k, len) in [1usize, 4096, 100_000, 1 << 20].into_iter().enumerate() {
        transfer(
            &mut a1,
            &mut b1,
            &[pattern(1000 + k as u64, len)],
            &[len],
            k as u32,
        );
        transfer(
            &mut b1,
            &mut a1,
            &[pattern(2000 + k as u64, len)],
            &[len],
            k as u32,
        );
    }
    assert_eq!(a1.nrails(), 1);
    assert!(a1.closed().is_none() && b1.closed().is_none());

    // Up again: a new two-rail communicator uses both rails.
    Fabric::open(&fabric)
        .unwrap()
        .set_port_down(DOWN_DEV, false)
        .unwrap();
    let (mut a2, mut b2) =
        mpib::pair(&w.devs[..2], &w.devs[2..], &cfg).expect("pair on both rails");
    transfer(&mut a2, &mut b2, &[pattern(3000, LEN)], &[LEN], 1);
    let s = a2.stats();
    assert!(s.rail_bytes[0] > 0 && s.rail_bytes[1] > 0, "{s:?}");
}
