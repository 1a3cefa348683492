//! copyrpc over DC, what RC has no counterpart for: one DC target receives
//! for every endpoint of a context, so a completion's immediate must name
//! its endpoint exactly; the two transports do not mix; and an endpoint
//! whose peer dies costs its neighbours nothing.

mod support;

use copyrpc::encoding::{FlowMetadata, MessageHeader};
use copyrpc::transport::{Dc, Mlx5};
use copyrpc::{CallFailed, ContextBuilder, EndpointInfo, SetupError};
use mlx5::cq::Compression;
use mlx5::device::{CqAttr, DcDest, DciStreams, ExecMode, QpCaps, RtsAttr};
use mlx5::sq::{Payload, SqConfig};
use mlx5::wqe_table::OrderedDense;
use support::*;

/// A well-formed batch at ring position 0: one request of `len` bytes.
fn batch(len: u32) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    FlowMetadata::new_checked(&mut b[..32])
        .unwrap()
        .set(0, 0, 1, 0);
    MessageHeader::new_checked(&mut b[32..44])
        .unwrap()
        .set(1, 2, len);
    b
}

/// WRITE_IMMs `bytes` with immediate `imm` into the receive ring `to`
/// describes, through a DCI of `w`'s client device that belongs to no
/// context: a peer that knows the DC key and the ring, not the immediate.
fn spoof(w: &World<Dc>, to: &EndpointInfo, imm: u32, bytes: &[u8]) {
    let d0 = &w.devs.0;
    let pd = d0.alloc_pd().unwrap();
    let cq = d0.create_cq(&CqAttr::default()).unwrap();
    // The ring before any completion: taking it sets the CQ up afresh.
    let mut ring = cq.ring().unwrap();
    let dci = d0
        .create_dci(
            &pd,
            &cq,
            &QpCaps {
                max_inline: 256,
                ..QpCaps::default()
            },
            DciStreams::default(),
        )
        .unwrap();
    dci.ready_dci(&RtsAttr::default()).unwrap();
    let mut sq = dci
        .send_queue::<OrderedDense<()>>(SqConfig {
            signal_interval: 1,
            max_inline: 256,
            ..SqConfig::default()
        })
        .unwrap();
    let dest = DcDest {
        dct: to.qpn,
        key: to.dc.expect("a DC endpoint").key,
        lid: to.lid,
        gid: to.gid,
        stream: 0,
    };
    let mr = pd
        .alloc_mr(4096, mlx5::device::access::LOCAL_WRITE)
        .unwrap();
    mr.write(0, bytes);
    let sge = mlx5::sq::Sge {
        addr: mr.addr(),
        len: bytes.len() as u32,
        lkey: mr.lkey(),
    };
    sq.dc(&dest)
        .write_imm(to.ring_addr, to.ring_rkey, imm, Payload::Sges(&[sge]))
        .unwrap()
        .signaled()
        .post(());
    sq.ring_doorbell();
    let mut done = 0;
    for _ in 0..1000 {
        ring.poll(8, |c| {
            assert!(
                !c.is_error(),
                "the spoofed write itself lands: {:?}",
                c.syndrome_raw()
            );
            done += 1;
        });
        d0.progress();
        if done > 0 {
            return;
        }
    }
    panic!("the spoofed write did not complete: DCI {:?}", dci.state());
}

#[test]
fn an_immediate_that_names_no_endpoint_exactly_is_dropped_and_counted() {
    let mut w = world_t::<Dc>(
        "dc-stray",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(4096),
        0,
    );
    let (c, ci) = w.client.create_endpoint().unwrap();
    let (s, si) = w.server.create_endpoint().unwrap();
    w.client.connect(c, &si).unwrap();
    w.server.connect(s, &ci).unwrap();
    w.pairs.push((c, s));
    let imm = si.dc.unwrap().imm;
    // The endpoint's slot with another nonce, and a slot no endpoint holds:
    // a valid request sits in the ring both times, and is never taken.
    spoof(&w, &si, imm ^ 0x8000_0000, &batch(0));
    spoof(&w, &si, (imm & !0xff) | 0x77, &batch(0));
    for _ in 0..10 {
        w.step();
    }
    assert_eq!(w.server.stray_completions(), 2);
    assert!(w.server.recv().is_none(), "no request came of it");
    assert!(w.server.closed(s).is_none());
    // The pair's own traffic overwrites the spoofed bytes and runs on.
    echo_run(&mut w, 300, |i| (i as usize * 13) % 500);
    assert!(w.log.borrow().iter().all(|(_, r)| r.is_ok()));
}

#[test]
fn rc_and_dc_endpoints_do_not_connect() {
    let fabric = format!("rpc-{}-dc-mix", std::process::id());
    let d0 = mlx5::device::Context::open_in_mode(&fabric, "sim0", ExecMode::Inline).unwrap();
    let d1 = mlx5::device::Context::open_in_mode(&fabric, "sim1", ExecMode::Inline).unwrap();
    let b = ContextBuilder::new().ring_size(4096);
    let mut rc = b
        .build_on::<Mlx5, u64, _>(&d0, |_, _: Result<&[u8], CallFailed>| {})
        .unwrap();
    let mut dc = b
        .build_on::<Dc, u64, _>(&d1, |_, _: Result<&[u8], CallFailed>| {})
        .unwrap();
    let (r, ri) = rc.create_endpoint().unwrap();
    let (d, di) = dc.create_endpoint().unwrap();
    assert!(ri.dc.is_none() && di.dc.is_some());
    for e in [
        rc.connect(r, &di).unwrap_err(),
        dc.connect(d, &ri).unwrap_err(),
    ] {
        let m = e.to_string();
        assert!(m.contains("on DC") && m.contains("on RC"), "{m}");
    }
    drop((rc, dc));
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
}

#[test]
fn dc_refuses_compressed_receive_cqes() {
    let fabric = format!("rpc-{}-dc-zip", std::process::id());
    let d = mlx5::device::Context::open_in_mode(&fabric, "sim0", ExecMode::Inline).unwrap();
    let b = ContextBuilder::new().compression(Compression::Enhanced);
    match b.build_on::<Dc, u64, _>(&d, |_, _: Result<&[u8], CallFailed>| {}) {
        Err(SetupError::Invalid(m)) => assert!(m.contains("compression"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a DC context with compressed CQEs"),
    }
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
}

/// A peer that goes away under load (its endpoint removed: its ring's key
/// no longer works) closes the endpoint that writes to it, and no other:
/// the other endpoints, busy on the same DCIs, lose no call.
#[test]
fn a_dead_peer_costs_only_its_own_endpoint() {
    let n = 12;
    let mut w = world_t::<Dc>(
        "dc-dead",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(8192),
        n,
    );
    let (c0, s0) = w.pairs[0];
    let mut tag = 0u64;
    let mut removed = false;
    for round in 0..200 {
        for &(c, _) in &w.pairs {
            if w.client.closed(c).is_none() {
                let _ = w.client.call(c, &payload(tag, 64), 64, tag);
                tag += 1;
            }
        }
        if round == 20 {
            assert!(w.server.remove(s0));
            removed = true;
        }
        w.step();
    }
    assert!(removed);
    for _ in 0..2000 {
        w.step();
    }
    assert!(
        w.client.closed(c0).is_some(),
        "the dead peer's endpoint closed"
    );
    for &(c, _) in &w.pairs[1..] {
        assert!(
            w.client.closed(c).is_none(),
            "{c:?} closed with its neighbour"
        );
    }
    // Every call of the other endpoints came back, intact.
    let log = w.log.borrow();
    let failed = log.iter().filter(|(_, r)| r.is_err()).count();
    let c0_calls = w.client.stats(c0).calls as usize;
    assert!(
        failed <= c0_calls,
        "{failed} failures, endpoint 0 made {c0_calls} calls"
    );
    for (t, r) in log.iter() {
        if let Ok(d) = r {
            assert_eq!(d, &transform(&payload(*t, 64)));
        }
    }
    let total: u64 = w.pairs[1..]
        .iter()
        .map(|&(c, _)| w.client.stats(c).responses)
        .sum();
    let calls: u64 = w.pairs[1..]
        .iter()
        .map(|&(c, _)| w.client.stats(c).calls)
        .sum();
    assert_eq!(total, calls, "the others' calls all answered");
    // The errored stream was reset, and its DCI kept serving the others.
    let pool = w.client.transport();
    assert!(pool.streams_reset() >= 1);
    assert_eq!(pool.dcis_replaced(), 0);
}

/// On a device that keeps no errored stream apart (`log_errored` 0), a
/// dead peer's error stops its DCI: the DCI is replaced once none of its
/// lanes is lent, and the endpoints go on through the new one.
#[test]
fn a_dci_stopped_by_an_error_is_replaced() {
    let b = ContextBuilder::new()
        .ring_size(8192)
        .dci_streams(DciStreams {
            log_concurrent: 1,
            log_errored: 0,
        });
    let mut w = world_t::<Dc>("dc-replace", ExecMode::Inline, b, 3);
    let (c0, s0) = w.pairs[0];
    // One call each way first, so that every endpoint is set up.
    echo_run(&mut w, 20, |_| 16);
    assert!(w.server.remove(s0));
    let _ = w.client.call(c0, &payload(1000, 16), 16, 1000);
    for _ in 0..2000 {
        w.step();
        if w.client.closed(c0).is_some() && w.client.transport().dcis_replaced() > 0 {
            break;
        }
    }
    assert!(
        w.client.closed(c0).is_some(),
        "the dead peer's endpoint closed"
    );
    assert!(
        w.client.transport().dcis_replaced() >= 1,
        "the stopped DCI was replaced"
    );
    assert_eq!(w.client.transport().streams_reset(), 0);
    // The surviving endpoints carry calls on, over whatever DCI they get.
    let mut tag = 2000;
    for &(c, _) in &w.pairs[1..] {
        if w.client.closed(c).is_none() {
            w.client.call(c, &payload(tag, 32), 32, tag).unwrap();
            tag += 1;
        }
    }
    let want = w.log.borrow().len() + (tag - 2000) as usize;
    w.until_responses(want, 10_000);
    assert!(w
        .log
        .borrow()
        .iter()
        .filter(|(t, _)| *t >= 2000)
        .all(|(_, r)| r.is_ok()));
}
