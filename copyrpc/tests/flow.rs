//! Flow control: the invariant and credits under random interleavings with both
//! sides calling each other; the READ fallback; many endpoints.

mod support;

use copyrpc::{CallError, ContextBuilder, RecvHandle};
use mlx5::device::ExecMode;
use support::*;

fn check(w: &World) {
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

/// Property: over random interleavings of call / reply / poll on both sides
/// (each side both a client and a server), stepped in one thread, the invariant
/// holds after every step, credits never go negative (u64 arithmetic would
/// panic in debug builds), and every call is answered exactly once with the
/// right bytes.
#[test]
fn random_interleavings_keep_the_invariant() {
    for seed in 1..=40u64 {
        let ring = [256u64, 1024, 4096][(seed % 3) as usize];
        let mut w = world(
            &format!("prop-{seed}"),
            ExecMode::Inline,
            ContextBuilder::new().ring_size(ring),
            1,
        );
        let (c, s) = w.pairs[0];
        let mut rng = Rng(seed);
        let max_len = (ring / 4 - 44) as usize;
        let (mut c_sent, mut s_sent) = (0u64, 1u64 << 40);
        let (mut c_held, mut s_held): (Vec<RecvHandle>, Vec<RecvHandle>) = (Vec::new(), Vec::new());
        let (mut c_data, mut s_data): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
        let target = 300;
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
            check(&w);
        }
        // Drain: answer everything, keep polling.
        for _ in 0..2000 {
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
            check(&w);
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
}

#[test]
fn read_fallback_refreshes_a_stale_consumer_position() {
    // The server consumes requests but sends nothing (it holds its replies), so
    // no batch carries its consumer position back: the client must READ it.
    let mut w = world(
        "read",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(16384),
        1,
    );
    let (c, _) = w.pairs[0];
    let mut held = Vec::new();
    let mut accepted = 0u64;
    let mut ring_full = 0;
    for _ in 0..10_000 {
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

#[test]
fn a_thousand_endpoints_on_one_context() {
    let b = ContextBuilder::new()
        .ring_size(1024)
        .sq_size(16)
        .cq_size(8192)
        .srq_size(2048);
    let mut w = world("1024", ExecMode::Inline, b, 1024);
    for (k, &(c, _)) in w.pairs.iter().enumerate() {
        for j in 0..2u64 {
            let tag = (k as u64) << 8 | j;
            w.client.call(c, &payload(tag, 40), 40, tag).unwrap();
        }
    }
    w.until_responses(2048, 10_000);
    let log = w.log.borrow();
    let mut seen = std::collections::HashSet::new();
    for (t, r) in log.iter() {
        assert!(seen.insert(*t));
        assert_eq!(r.as_ref().unwrap(), &transform(&payload(*t, 40)));
    }
    for &(c, _) in &w.pairs {
        assert_eq!(w.client.stats(c).responses, 2);
    }
}
