//! Communicator pairs on software devices, in fabrics of their own, and
//! helpers to move verified bytes between them.
#![allow(dead_code)]

pub mod bad_peer;
pub mod pipeline;
pub mod transfers;

use std::time::Duration;

use mlx5::device::{Context, ExecMode};
use mpib::{Buffer, Comm, Config, Request, Sizes, Span};

pub use test_support::{unique_name, FabricGuard, Rng};

/// Two communicators joined over `rails` rails: side A on sim0/sim1, side B on
/// sim2/sim3. Fields drop in order: communicators, then devices, then the
/// fabric.
pub struct World {
    pub a: Comm,
    pub b: Comm,
    pub devs: Vec<Context>,
    pub fabric: FabricGuard,
}

pub fn open(fabric: &str, mode: ExecMode, n: usize) -> Vec<Context> {
    (0..n)
        .map(|i| Context::open_in_mode(fabric, &format!("sim{i}"), mode).expect("open device"))
        .collect()
}

pub fn world(tag: &str, mode: ExecMode, rails: usize, cfg: &Config) -> World {
    let name = unique_name("mpib", tag);
    let guard = FabricGuard(name.clone());
    let devs = open(&name, mode, 4);
    let (a, b) = mpib::pair(&devs[..rails], &devs[2..2 + rails], cfg).expect("pair");
    World {
        a,
        b,
        devs,
        fabric: guard,
    }
}

/// Deterministic bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Steps allowed before a loop counts as stuck.
pub const STEPS: usize = 2_000_000;

/// How long a loop bounded by the wall clock may wait on the software device
/// before the test counts as stuck: the device works inside the calls, so a
/// healthy loop finishes in milliseconds and a broken test fails in seconds.
pub const SIM_PATIENCE: Duration = Duration::from_secs(5);

/// Posts a receive on `rx` until it is accepted.
pub fn post_recv(rx: &mut Comm, tx: &mut Comm, bufs: &[Span], tag: u32) -> Request {
    for _ in 0..STEPS {
        if let Some(r) = rx.irecv(bufs, tag).expect("irecv") {
            return r;
        }
        rx.progress();
        tx.progress();
    }
    panic!("irecv never accepted");
}

/// Posts a send on `tx` until the receive's CTS is there.
pub fn post_send(tx: &mut Comm, rx: &mut Comm, bufs: &[Span], tag: u32) -> Request {
    for _ in 0..STEPS {
        if let Some(r) = tx.isend(bufs, tag).expect("isend") {
            return r;
        }
        tx.progress();
        rx.progress();
    }
    panic!("isend never matched a CTS");
}

/// Tests both requests until both are done; returns (sent, received) sizes.
pub fn wait_both(tx: &mut Comm, s: &Request, rx: &mut Comm, r: &Request) -> (Sizes, Sizes) {
    let (mut sent, mut got) = (None, None);
    for _ in 0..STEPS {
        if sent.is_none() {
            sent = tx.test(s).expect("test send");
        }
        if got.is_none() {
            got = rx.test(r).expect("test recv");
        }
        if let (Some(a), Some(b)) = (sent, got) {
            return (a, b);
        }
    }
    panic!("transfer never completed (sent {sent:?}, received {got:?})");
}

/// One transfer of `data[i]` into receive buffers of `posted[i]` bytes each;
/// checks every byte and returns the received sizes.
pub fn transfer(
    tx: &mut Comm,
    rx: &mut Comm,
    data: &[Vec<u8>],
    posted: &[usize],
    tag: u32,
) -> Sizes {
    let src: Vec<Buffer> = data
        .iter()
        .map(|d| {
            let b = tx.alloc_buffer(d.len().max(1)).unwrap();
            b.write(0, d).unwrap();
            b
        })
        .collect();
    let dst: Vec<Buffer> = posted
        .iter()
        .map(|&n| {
            let b = rx.alloc_buffer(n.max(1)).unwrap();
            b.write(0, &vec![0xa5; n.max(1)]).unwrap();
            b
        })
        .collect();
    let sspans: Vec<Span> = src
        .iter()
        .zip(data)
        .map(|(b, d)| b.span(0, d.len() as u64).unwrap())
        .collect();
    let rspans: Vec<Span> = dst
        .iter()
        .zip(posted)
        .map(|(b, &n)| b.span(0, n as u64).unwrap())
        .collect();
    let r = post_recv(rx, tx, &rspans, tag);
    let s = post_send(tx, rx, &sspans, tag);
    let (sent, got) = wait_both(tx, &s, rx, &r);
    assert_eq!(sent.len(), data.len());
    assert_eq!(got.len(), data.len());
    for (i, d) in data.iter().enumerate() {
        assert_eq!(got[i] as usize, d.len(), "buffer {i}: size");
        assert_eq!(sent[i] as usize, d.len(), "buffer {i}: sent size");
        let back = dst[i].to_vec(0, posted[i].max(1)).unwrap();
        assert!(back[..d.len()] == d[..], "buffer {i}: bytes");
        assert!(
            back[d.len()..].iter().all(|&x| x == 0xa5),
            "buffer {i}: nothing written past the transfer"
        );
    }
    got
}
