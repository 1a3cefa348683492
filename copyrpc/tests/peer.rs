//! A malformed peer: bytes written into an endpoint's receive ring by a raw
//! WRITE_IMM. That endpoint closes with a protocol violation; the process and
//! the other endpoints carry on.

mod support;

use copyrpc::encoding::{FlowMetadata, MessageHeader, RESPONSE_FLAG, WRAP_MESSAGE_COUNT};
use copyrpc::{CloseReason, ContextBuilder, EndpointInfo, ENDPOINT_INFO_VERSION};
use mlx5::device::{access, CqAttr, ExecMode, QpCaps, RtrAttr, RtsAttr};
use mlx5::sq::{Payload, SqConfig};
use mlx5::wqe_table::OrderedDense;
use support::*;

fn meta(consumer: u64, grant: u64, count: u32) -> Vec<u8> {
    meta_at(consumer, grant, count, 0)
}
/// Metadata of a batch that says it lies at ring position `pos`.
fn meta_at(consumer: u64, grant: u64, count: u32, pos: u64) -> Vec<u8> {
    let mut b = vec![0u8; 32];
    FlowMetadata::new_checked(&mut b[..])
        .unwrap()
        .set(consumer, grant, count, pos);
    b
}
fn msg(call_id: u32, piggyback: u32, len: u32, body: usize) -> Vec<u8> {
    let mut b = vec![0u8; body];
    MessageHeader::new_checked(&mut b[..12])
        .unwrap()
        .set(call_id, piggyback, len);
    b
}

#[test]
fn garbage_closes_only_that_endpoint() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "random bytes",
            (0..64u32).map(|i| (i * 77 + 13) as u8).collect(),
        ),
        (
            "length beyond the batch",
            [meta(0, 0, 1), msg(1, 2, 10_000, 32)].concat(),
        ),
        (
            "response to no pending call",
            [meta(0, 0, 1), msg(5 | RESPONSE_FLAG, 0, 0, 32)].concat(),
        ),
        (
            "batch size not a multiple of 32",
            [meta(0, 0, 1), msg(1, 2, 0, 32), vec![0; 8]].concat(),
        ),
        (
            "credit grant too large",
            [meta(0, 1 << 40, 1), msg(1, 2, 0, 32)].concat(),
        ),
        (
            "request without credit",
            [meta(0, 0, 1), msg(1, 1_000_000, 0, 32)].concat(),
        ),
        (
            "wrap marker with a body",
            [meta(0, 0, WRAP_MESSAGE_COUNT), vec![0; 32]].concat(),
        ),
        ("empty batch", meta(0, 0, 0)),
        (
            "a previous lap's batch",
            [meta_at(0, 0, 1, 4096), msg(1, 2, 0, 32)].concat(),
        ),
        (
            "more messages than bytes",
            [meta(0, 0, 3), msg(1, 2, 0, 32)].concat(),
        ),
    ];
    let mut w = world(
        "bad",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(4096),
        1,
    );
    let d0 = w.devs.0.clone();
    let pd = d0.alloc_pd().unwrap();
    let cq = d0.create_cq(&CqAttr::default()).unwrap();
    let mut rounds = 0;
    for (name, bytes) in cases {
        // A server endpoint connected to a raw QP that plays the bad peer.
        let (bad, bad_info) = w.server.create_endpoint().unwrap();
        let raw = d0
            .create_qp(&pd, &cq, &cq, None, &QpCaps::default())
            .unwrap();
        let mr = pd
            .alloc_mr(
                4096,
                access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            )
            .unwrap();
        let ci = raw.conn_info();
        let fake = EndpointInfo {
            version: ENDPOINT_INFO_VERSION,
            qpn: ci.qpn,
            lid: ci.lid,
            gid: ci.gid,
            psn: 0,
            ring_addr: mr.addr(),
            ring_rkey: mr.rkey(),
            ring_size: 4096,
            consumer_addr: mr.addr(),
            consumer_rkey: mr.rkey(),
            max_resp_reservation: 1024,
            dc: None,
        };
        w.server.connect(bad, &fake).unwrap();
        raw.to_init().unwrap();
        let remote = mlx5::device::ConnInfo {
            qpn: bad_info.qpn,
            lid: bad_info.lid,
            gid: bad_info.gid,
            psn: 0,
        };
        raw.to_rtr(&RtrAttr {
            remote,
            access: access::REMOTE_WRITE,
            min_rnr_timer: 1,
            max_dest_rd_atomic: 1,
        })
        .unwrap();
        raw.to_rts(&RtsAttr::default()).unwrap();
        let mut sq = raw
            .send_queue::<OrderedDense<()>>(SqConfig::default())
            .unwrap();
        sq.write_imm(
            bad_info.ring_addr,
            bad_info.ring_rkey,
            (bytes.len() / 32) as u32,
            Payload::Inline(&bytes),
        )
        .unwrap()
        .post(());
        sq.ring_doorbell();
        for _ in 0..10 {
            w.server.poll();
        }
        match w.server.closed(bad) {
            Some(CloseReason::Violation(why)) => eprintln!("{name}: closed ({why})"),
            other => panic!("{name}: expected a protocol violation, got {other:?}"),
        }
        // The good pair is untouched.
        let (c, _) = w.pairs[0];
        w.client.call(c, &payload(rounds, 50), 50, rounds).unwrap();
        rounds += 1;
        w.until_responses(rounds as usize, 1000);
        assert!(w.server.closed(w.pairs[0].1).is_none());
    }
    for (t, r) in w.log.borrow().iter() {
        assert_eq!(r.as_ref().unwrap(), &transform(&payload(*t, 50)));
    }
}
