//! The Dynamically Connected transport on an mlx5 NIC, through the device
//! API: a DCT and a DCI on the NIC `MLX5_TEST_DEVICE` names, a WRITE with
//! immediate and a READ from the DCI to the DCT (data and CQEs checked); and,
//! with the `rdma-core-oracle` feature, our DC WQE bytes against rdma-core's
//! own writer (`mlx5dv_wr_set_dc_addr_stream`).
//!
//! Ignored without a ConnectX, and **never run on one yet**: no machine this
//! project runs on has one. Run with
//! `MLX5_TEST_DEVICE=mlx5_0 cargo test -p mlx5 --features rdma-core-oracle --test hw_dc -- --ignored`.

use mlx5::cq::CqRing;
use mlx5::device::{
    access, Context, CqAttr, DcDest, DciStreams, DctAttr, Mr, QpCaps, QpState, RtsAttr,
};
use mlx5::prm::CqeOpcode;
use mlx5::rq::Srq;
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::wqe_table::{OrderedDense, OrderedRecv};

/// The NIC under test: `MLX5_TEST_DEVICE`, which must be an mlx5 device.
fn nic() -> Context {
    let dev = std::env::var("MLX5_TEST_DEVICE")
        .expect("set MLX5_TEST_DEVICE to an mlx5 NIC (e.g. mlx5_0)");
    let ctx = Context::open(&dev).unwrap();
    match &ctx {
        Context::Hw(h) => assert!(h.is_mlx5(), "{dev} is not an mlx5 device: DC needs one"),
        Context::Sim(_) => panic!("{dev} is the software device, not a NIC"),
    }
    ctx
}

/// Polls until `n` completions arrived.
fn wait(ring: &mut CqRing, n: usize) -> Vec<(u8, u32, u32, u32, Option<u8>)> {
    let mut v = Vec::new();
    for _ in 0..2_000_000 {
        ring.poll(usize::MAX, |c| {
            let ok = !c.is_error();
            v.push((
                c.opcode_raw(),
                c.qpn(),
                if ok { c.byte_cnt() } else { 0 },
                if ok { c.imm() } else { 0 },
                c.syndrome_raw(),
            ));
        });
        if v.len() >= n {
            return v;
        }
        std::thread::yield_now();
    }
    panic!("expected {n} completions, got {v:?}");
}

#[test]
#[ignore = "needs MLX5_TEST_DEVICE naming an mlx5 NIC"]
fn write_imm_and_read_from_a_dci_to_a_dct() {
    let ctx = nic();
    let pd = ctx.alloc_pd().unwrap();
    let all = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    let (tmr, imr): (Mr, Mr) = (
        pd.alloc_mr(1 << 16, all).unwrap(),
        pd.alloc_mr(1 << 16, all).unwrap(),
    );
    let cq_attr = CqAttr {
        cqe_cnt: 256,
        ..CqAttr::default()
    };
    // The target: DCT on an SRQ, its receive completions on tcq.
    let tcq = ctx.create_cq(&cq_attr).unwrap();
    let srq_h = ctx.create_srq(&pd, 64, 1).unwrap();
    let key = 0x5eed_0000_dc00_0001;
    let dct_attr = DctAttr {
        key,
        access: access::REMOTE_WRITE | access::REMOTE_READ,
        min_rnr_timer: 12,
    };
    let dct = ctx.create_dct(&pd, &srq_h, &tcq, &dct_attr).unwrap();
    assert_eq!(dct.key(), key);
    let mut srq: Srq<OrderedRecv<u32>> = srq_h.srq().unwrap();
    let mut tring = tcq.ring().unwrap();
    // A WRITE_IMM consumes a receive WQE (zero-length is enough).
    let rsge = Sge {
        addr: tmr.addr() + 0x8000,
        len: 64,
        lkey: tmr.lkey(),
    };
    srq.post(&[rsge], 7).unwrap();
    srq.ring_doorbell();

    // The initiator: a DCI, streams within the device's caps.
    let caps = ctx.dci_stream_caps().unwrap();
    let icq = ctx.create_cq(&cq_attr).unwrap();
    let streams = DciStreams {
        log_concurrent: caps.log_concurrent.min(2),
        log_errored: 0,
    };
    let dci = ctx
        .create_dci(&pd, &icq, &QpCaps::default(), streams)
        .unwrap();
    dci.ready_dci(&RtsAttr::default()).unwrap();
    assert_eq!(dci.state(), QpState::Rts, "as the device reports it");
    let mut sq: SendQueue<OrderedDense<u64>> = dci
        .send_queue(SqConfig {
            signal_interval: 1,
            ..SqConfig::default()
        })
        .unwrap();
    let mut iring = icq.ring().unwrap();

    let dest = DcDest {
        dct: dct.number(),
        key,
        lid: ctx.lid(),
        gid: ctx.gid(),
        stream: u16::from(streams.log_concurrent > 0),
    };
    let route = ctx.dc_route(&pd, dest.lid, dest.gid).unwrap();
    imr.write(0, b"over DC, written with an immediate");
    tmr.write(0x100, b"read back over DC");
    let src = Sge {
        addr: imr.addr(),
        len: 34,
        lkey: imr.lkey(),
    };
    sq.dc_via(&route, &dest)
        .write_imm(tmr.addr(), tmr.rkey(), 0xabcd_0123, Payload::Sges(&[src]))
        .unwrap()
        .post(1);
    let dst = Sge {
        addr: imr.addr() + 0x200,
        len: 17,
        lkey: imr.lkey(),
    };
    sq.dc_via(&route, &dest)
        .read(tmr.addr() + 0x100, tmr.rkey(), &[dst])
        .unwrap()
        .post(2);
    sq.ring_doorbell();

    let sent = wait(&mut iring, 2);
    for r in &sent {
        assert_eq!(
            (r.0, r.1, r.4),
            (CqeOpcode::Req as u8, dci.qpn(), None),
            "{sent:?}"
        );
    }
    assert_eq!(
        sent[1].2, 17,
        "a READ's requester CQE counts the bytes read"
    );
    let got = wait(&mut tring, 1);
    assert_eq!(
        got[0],
        (
            CqeOpcode::RespWrImm as u8,
            dct.number(),
            34,
            0xabcd_0123,
            None
        )
    );
    assert_eq!(tmr.to_vec(0, 34), b"over DC, written with an immediate");
    assert_eq!(imr.to_vec(0x200, 17), b"read back over DC");
}

/// Our DC WQE (a signaled RDMA WRITE of one SGE, over the route an address
/// handle gives) against the one rdma-core's own writer puts in the same
/// DCI's send queue at the same index: the same 96 bytes (control segment,
/// address vector, remote address, data segment).
#[cfg(feature = "rdma-core-oracle")]
#[test]
#[ignore = "needs MLX5_TEST_DEVICE naming an mlx5 NIC"]
fn our_dc_wqe_is_rdma_cores() {
    let ctx = nic();
    let Context::Hw(hctx) = &ctx else {
        unreachable!("nic() checked it")
    };
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let (mlx5::device::Pd::Hw(hpd), mlx5::device::Cq::Hw(hcq)) = (&pd, &cq) else {
        unreachable!("objects of a NIC")
    };
    let caps = hctx.dci_stream_caps().unwrap();
    let streams = DciStreams {
        log_concurrent: caps.log_concurrent.min(2),
        log_errored: 0,
    };
    let dci = hpd
        .create_dci_wr_api(hcq, &QpCaps::default(), streams)
        .unwrap();
    dci.to_init(0).unwrap();
    dci.to_rtr_dci(hctx).unwrap();
    dci.to_rts(&RtsAttr::default()).unwrap();
    let mut sq: SendQueue<OrderedDense<u64>> = dci
        .send_queue(SqConfig {
            signal_interval: 1,
            ..SqConfig::default()
        })
        .unwrap();
    let dest = DcDest {
        dct: 0x00ab_cdef,
        key: 0x0102_0304_0506_0708,
        lid: ctx.lid(),
        gid: ctx.gid(),
        stream: u16::from(streams.log_concurrent > 0),
    };
    let sge = Sge {
        addr: mr.addr() + 64,
        len: 100,
        lkey: mr.lkey(),
    };
    let remote = (0x1122_3344_5566_7788, 0x4321);
    let wqe = |sq: &SendQueue<OrderedDense<u64>>| [sq.bb(0).to_vec(), sq.bb(1).to_vec()].concat();
    let theirs = dci
        .with_rdma_core_dc_write(hctx, &dest, remote, &sge, || wqe(&sq))
        .unwrap();
    let route = ctx.dc_route(&pd, dest.lid, dest.gid).unwrap();
    let b = sq
        .dc_via(&route, &dest)
        .write(remote.0, remote.1, Payload::Sges(&[sge]))
        .unwrap();
    assert_eq!(b.ds(), 6);
    b.signaled().post(1);
    let ours = wqe(&sq);
    let hex = |w: &[u8]| {
        w.chunks(16)
            .map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        ours[..96],
        theirs[..96],
        "ours:\n{}\nrdma-core's:\n{}",
        hex(&ours[..96]),
        hex(&theirs[..96])
    );
    // Never rung: the WQE is dropped with the queue.
}
