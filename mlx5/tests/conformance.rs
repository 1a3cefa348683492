//! Device conformance suite: RC semantics through the device API and the data
//! path only (no backend internals), so the same tests can run on any backend.
//! On the software device each scenario runs twice, in a fabric of its own: with
//! the NIC executing at the doorbell (inline) and with a seeded scheduler
//! executing later, in its own order (deferred).

use std::time::Duration;

use mlx5::cq::{Compression, CqRing};
use mlx5::device::{
    access, CompletionChannel, Context, Cq, CqAttr, ExecMode, FaultPlan, Mr, Pd, Qp, QpCaps,
    QpState, RtrAttr, RtsAttr,
};
use mlx5::prm::{CqeOpcode, Syndrome};
use mlx5::rq::RecvQueue;
use mlx5::sim::fabric::Fabric;
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::wqe_table::{OrderedDense, OrderedRecv};

/// Where a scenario runs: a software-device fabric of its own (removed at the
/// end), or a real NIC (both ends on it).
struct TestFabric(String, ExecMode, Option<String>);
impl TestFabric {
    fn new(test: &str, mode: ExecMode) -> Self {
        TestFabric(format!("conf-{}-{test}", std::process::id()), mode, None)
    }
    fn hardware(test: &str) -> Self {
        let dev = std::env::var("MLX5_TEST_DEVICE").expect(
            "set MLX5_TEST_DEVICE to an mlx5 device (e.g. mlx5_0) to run the suite on hardware",
        );
        TestFabric(
            format!("conf-{}-{test}-hw", std::process::id()),
            ExecMode::Inline,
            Some(dev),
        )
    }
    fn open(&self, dev: &str) -> Context {
        match &self.2 {
            Some(hw) => Context::open(hw).expect("open the hardware device"),
            None => Context::open_in_mode(&self.0, dev, self.1).expect("open device"),
        }
    }
}

fn deferred() -> ExecMode {
    ExecMode::Deferred {
        seed: 42,
        faults: FaultPlan::default(),
    }
}

/// Each scenario as two tests: `<name>::inline` and `<name>::deferred`.
macro_rules! both_modes {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn inline() {
                super::$name(&super::TestFabric::new(stringify!($name), mlx5::device::ExecMode::Inline));
            }
            #[test]
            fn deferred() {
                super::$name(&super::TestFabric::new(concat!(stringify!($name), "-d"), super::deferred()));
            }
        }
    )*};
}

/// Scenarios that run on a NIC too, with `MLX5_TEST_DEVICE` naming it:
/// `MLX5_TEST_DEVICE=mlx5_0 cargo test -p mlx5 --test conformance -- --ignored`.
/// (CQ overrun, scatter-to-CQE, the compression check and the port-down
/// scenarios use software-device controls and run there only.)
macro_rules! on_hardware {
    ($($name:ident),* $(,)?) => {
        mod hardware {
            $(
                #[test]
                #[ignore = "needs MLX5_TEST_DEVICE naming an mlx5 NIC"]
                fn $name() {
                    super::$name(&super::TestFabric::hardware(stringify!($name)));
                }
            )*
        }
    };
}

on_hardware!(
    qp_state_machine,
    write_imm_ping_pong_every_byte_checked,
    send_recv_and_send_imm_scatter_into_receive_buffers,
    rdma_read_and_atomics,
    one_srq_shared_by_many_qps,
    a_thousand_qps_on_one_cq,
    remote_access_errors_flush_the_rest,
    missing_qp_remote_access_right,
    local_protection_errors,
    send_longer_than_the_receive_buffer,
    rnr_retried_then_exceeded,
    vanished_peer_is_a_transport_retry_error,
    cq_events_one_per_arm_and_none_without,
    cq_event_for_a_cqe_that_landed_before_the_arm,
    cq_events_solicited_only,
    cq_events_an_error_cqe_fires_a_solicited_arm,
    cq_events_never_lost_nor_made_up,
    a_waker_ends_a_wait_and_no_event_is_lost,
);

both_modes!(
    qp_state_machine,
    write_imm_ping_pong_every_byte_checked,
    send_recv_and_send_imm_scatter_into_receive_buffers,
    rdma_read_and_atomics,
    one_srq_shared_by_many_qps,
    a_thousand_qps_on_one_cq,
    remote_access_errors_flush_the_rest,
    missing_qp_remote_access_right,
    local_protection_errors,
    send_longer_than_the_receive_buffer,
    rnr_retried_then_exceeded,
    vanished_peer_is_a_transport_retry_error,
    a_port_down_is_a_transport_retry_error_and_nothing_crosses,
    a_port_down_fails_after_retry_cnt_plus_one_timeouts,
    a_port_back_up_within_the_retry_window_loses_nothing,
    cq_overrun_is_detected_not_overwritten,
    scatter_to_cqe_formats,
    compression_on_and_off_give_the_same_completions,
    cq_events_one_per_arm_and_none_without,
    cq_event_for_a_cqe_that_landed_before_the_arm,
    cq_events_solicited_only,
    cq_events_an_error_cqe_fires_a_solicited_arm,
    cq_events_never_lost_nor_made_up,
    a_waker_ends_a_wait_and_no_event_is_lost,
);
impl Drop for TestFabric {
    fn drop(&mut self) {
        Fabric::remove_if_unused(&self.0);
    }
}

/// A completion as a test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    opcode: u8,
    qpn: u32,
    wc: u16,
    bc: u32,
    imm: u32,
    syndrome: Option<u8>,
    scatter: Vec<u8>,
}

fn rec(c: &mlx5::Completion<'_>) -> Rec {
    Rec {
        opcode: c.opcode_raw(),
        qpn: c.qpn(),
        wc: c.wqe_counter(),
        bc: if c.is_error() { 0 } else { c.byte_cnt() },
        imm: if c.is_error() { 0 } else { c.imm() },
        syndrome: c.syndrome_raw(),
        scatter: c.scatter_data().to_vec(),
    }
}

fn drain(ring: &mut CqRing) -> Vec<Rec> {
    let mut v = Vec::new();
    ring.poll(usize::MAX, |c| v.push(rec(c)));
    v
}

/// Polls until `n` completions arrived (or fails after many empty polls).
fn wait(ring: &mut CqRing, n: usize) -> Vec<Rec> {
    let mut v = Vec::new();
    for _ in 0..200_000 {
        v.extend(drain(ring));
        if v.len() >= n {
            return v;
        }
        std::thread::yield_now();
    }
    panic!("expected {n} completions, got {}: {v:?}", v.len());
}

const MR_LEN: usize = 1 << 16;

/// One end of an RC connection.
struct End {
    ctx: Context,
    pd: Pd,
    mr: Mr,
    qp: Qp,
    sq: SendQueue<OrderedDense<u64>>,
    scq: CqRing,
    rcq: CqRing,
    rq: Option<RecvQueue<OrderedRecv<u64>>>,
    cqs: (Cq, Cq),
    /// The completion channel both CQs are on (event scenarios).
    chan: Option<CompletionChannel>,
}

impl End {
    fn new(ctx: Context, attr: CqAttr) -> End {
        Self::new_with(ctx, attr, false)
    }

    /// With `events`, both CQs are created on one completion channel.
    fn new_with(ctx: Context, attr: CqAttr, events: bool) -> End {
        let chan = events.then(|| ctx.create_comp_channel().unwrap());
        let mk = |attr: &CqAttr| match &chan {
            Some(ch) => ctx.create_cq_on(attr, ch).unwrap(),
            None => ctx.create_cq(attr).unwrap(),
        };
        let pd = ctx.alloc_pd().unwrap();
        let all = access::LOCAL_WRITE
            | access::REMOTE_WRITE
            | access::REMOTE_READ
            | access::REMOTE_ATOMIC;
        let mr = pd.alloc_mr(MR_LEN, all).unwrap();
        let scq = mk(&CqAttr {
            cqe_cnt: 256,
            ..attr
        });
        let rcq = mk(&CqAttr {
            cqe_cnt: 256,
            ..attr
        });
        let qp = ctx
            .create_qp(&pd, &scq, &rcq, None, &QpCaps::default())
            .unwrap();
        let sq = qp
            .send_queue(SqConfig {
                signal_interval: 1,
                ..SqConfig::default()
            })
            .unwrap();
        let rq = Some(qp.recv_queue().unwrap());
        End {
            scq: scq.ring().unwrap(),
            rcq: rcq.ring().unwrap(),
            cqs: (scq, rcq),
            chan,
            ctx,
            pd,
            mr,
            qp,
            sq,
            rq,
        }
    }

    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + off,
            len,
            lkey: self.mr.lkey(),
        }
    }

    fn post_recv(&mut self, n: usize, off: u64, len: u32) {
        let sge = self.sge(off, len);
        let rq = self.rq.as_mut().unwrap();
        for i in 0..n {
            rq.post(&[sge], i as u64).unwrap();
        }
        rq.ring_doorbell();
    }

    /// Waits for `n` send completions, retiring their WQEs from the SQ's table.
    fn send_done(&mut self, n: usize) -> Vec<Rec> {
        let mut v = Vec::new();
        for _ in 0..200_000 {
            let sq = &mut self.sq;
            self.scq.poll(usize::MAX, |c| {
                sq.complete(c, |_, _| {});
                v.push(rec(c));
            });
            if v.len() >= n {
                return v;
            }
            std::thread::yield_now();
        }
        panic!("expected {n} send completions, got {v:?}");
    }

    /// Waits for `n` receive completions, retiring their RQ WQEs.
    fn recv_done(&mut self, n: usize) -> Vec<Rec> {
        let mut v = Vec::new();
        for _ in 0..200_000 {
            let rq = self.rq.as_mut().unwrap();
            self.rcq.poll(usize::MAX, |c| {
                mlx5::cq::CompletionSource::complete(rq, c, |_, _| {});
                v.push(rec(c));
            });
            if v.len() >= n {
                return v;
            }
            std::thread::yield_now();
        }
        panic!("expected {n} receive completions, got {v:?}");
    }
}

fn connect_with(a: &End, b: &End, rts: RtsAttr, access_bits: u32) {
    for (x, y) in [(a, b), (b, a)] {
        x.qp.connect(
            &RtrAttr {
                remote: y.qp.conn_info(),
                access: access_bits,
                min_rnr_timer: 1,
                max_dest_rd_atomic: 4,
            },
            &rts,
        )
        .unwrap();
    }
}

fn connect(a: &End, b: &End) {
    connect_with(
        a,
        b,
        RtsAttr::default(),
        access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
    );
}

fn pair(f: &TestFabric, attr: CqAttr) -> (End, End) {
    let a = End::new(f.open("sim0"), attr);
    let b = End::new(f.open("sim1"), attr);
    connect(&a, &b);
    (a, b)
}

#[test]
fn open_by_name() {
    let f = TestFabric::new("open", ExecMode::Inline);
    assert_eq!(f.open("sim0").name(), "sim0");
    assert_eq!(f.open("sim7").lid(), 8);
    for bad in ["sim8", "sim", "mlx5_0", "sim01", ""] {
        assert!(Context::open_in(&f.0, bad).is_err(), "{bad}");
    }
    assert!(Context::open_in("bad/name", "sim0").is_err());
}

fn qp_state_machine(f: &TestFabric) {
    let a = End::new(f.open("sim0"), CqAttr::default());
    let b = End::new(f.open("sim0"), CqAttr::default());
    assert_eq!(a.qp.state(), QpState::Reset);
    assert!(
        a.qp.to_rts(&RtsAttr::default()).is_err(),
        "RESET -> RTS is not allowed"
    );
    a.qp.to_init().unwrap();
    assert!(a.qp.to_init().is_err());
    let rtr = RtrAttr {
        remote: b.qp.conn_info(),
        access: access::REMOTE_WRITE,
        min_rnr_timer: 1,
        max_dest_rd_atomic: 1,
    };
    a.qp.to_rtr(&rtr).unwrap();
    assert_eq!(a.qp.state(), QpState::Rtr);
    a.qp.to_rts(&RtsAttr::default()).unwrap();
    assert_eq!(a.qp.state(), QpState::Rts);
    a.qp.to_err().unwrap();
    assert_eq!(a.qp.state(), QpState::Err);
    assert!(a.qp.to_rts(&RtsAttr::default()).is_err());
    assert!(
        a.qp.send_queue::<OrderedDense<()>>(SqConfig::default())
            .is_err(),
        "taken once"
    );
}

fn write_imm_ping_pong_every_byte_checked(f: &TestFabric) {
    let (mut a, mut b) = pair(f, CqAttr::default());
    a.post_recv(64, 0, 0);
    b.post_recv(64, 0, 0);
    let (a_rkey, b_rkey) = (a.mr.rkey(), b.mr.rkey());
    let (a_addr, b_addr) = (a.mr.addr(), b.mr.addr());
    for i in 0..1000u32 {
        let len = 1 + (i as usize * 37) % 4000;
        let msg: Vec<u8> = (0..len).map(|k| (k as u32 ^ i) as u8).collect();
        // a -> b
        a.mr.write(8192, &msg);
        let s = a.sge(8192, len as u32);
        a.sq.write_imm(b_addr + 100, b_rkey, i, Payload::Sges(&[s]))
            .unwrap()
            .post(u64::from(i));
        a.sq.ring_doorbell();
        let r = b.recv_done(1);
        assert_eq!(r[0].opcode, CqeOpcode::RespWrImm as u8);
        assert_eq!((r[0].imm, r[0].bc, r[0].qpn), (i, len as u32, b.qp.qpn()));
        assert_eq!(b.mr.to_vec(100, len), msg);
        b.post_recv(1, 0, 0);
        // b -> a, echoing the bytes back
        let s = b.sge(100, len as u32);
        b.sq.write_imm(a_addr + 200, a_rkey, !i, Payload::Sges(&[s]))
            .unwrap()
            .post(0);
        b.sq.ring_doorbell();
        let r = a.recv_done(1);
        assert_eq!((r[0].imm, r[0].bc), (!i, len as u32));
        assert_eq!(a.mr.to_vec(200, len), msg);
        a.post_recv(1, 0, 0);
        let sa = a.send_done(1);
        assert_eq!(sa[0].opcode, CqeOpcode::Req as u8);
        assert_eq!(sa[0].qpn, a.qp.qpn());
        b.send_done(1);
    }
}

fn send_recv_and_send_imm_scatter_into_receive_buffers(f: &TestFabric) {
    let (mut a, mut b) = pair(f, CqAttr::default());
    b.post_recv(2, 1024, 512);
    let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    a.sq.send(Payload::Inline(&data[..200])).unwrap().post(1);
    a.mr.write(0, &data);
    let s = a.sge(0, 300);
    a.sq.send_imm(0xfeed, Payload::Sges(&[s])).unwrap().post(2);
    a.sq.ring_doorbell();
    let r = wait(&mut b.rcq, 2);
    assert_eq!(
        (r[0].opcode, r[0].bc, r[0].wc),
        (CqeOpcode::RespSend as u8, 200, 0)
    );
    assert_eq!(
        (r[1].opcode, r[1].bc, r[1].imm, r[1].wc),
        (CqeOpcode::RespSendImm as u8, 300, 0xfeed, 1)
    );
    // Both receives used the same buffer (the test posted two WQEs at 1024).
    assert_eq!(b.mr.to_vec(1024, 300), data);
    assert_eq!(a.send_done(2).len(), 2);
}

fn rdma_read_and_atomics(f: &TestFabric) {
    let (mut a, b) = pair(f, CqAttr::default());
    let remote: Vec<u8> = (0..1000u32).map(|i| (i * 3 + 1) as u8).collect();
    b.mr.write(4096, &remote);
    let dst = [a.sge(0, 600), a.sge(2000, 400)];
    a.sq.read(b.mr.addr() + 4096, b.mr.rkey(), &dst)
        .unwrap()
        .post(1);
    // Atomics: the target is big-endian in memory, and so is the result.
    b.mr.write(64, &100u64.to_be_bytes());
    a.sq.atomic_fa(b.mr.addr() + 64, b.mr.rkey(), 5, a.sge(3000, 8))
        .unwrap()
        .post(2);
    a.sq.atomic_cs(b.mr.addr() + 64, b.mr.rkey(), 105, 7, a.sge(3008, 8))
        .unwrap()
        .post(3);
    a.sq.atomic_cs(b.mr.addr() + 64, b.mr.rkey(), 105, 9, a.sge(3016, 8))
        .unwrap()
        .post(4);
    a.sq.ring_doorbell();
    let r = a.send_done(4);
    assert!(r.iter().all(|c| c.opcode == CqeOpcode::Req as u8), "{r:?}");
    assert_eq!(r[0].bc, 1000);
    assert_eq!(a.mr.to_vec(0, 600), &remote[..600]);
    assert_eq!(a.mr.to_vec(2000, 400), &remote[600..]);
    let be = |off| u64::from_be_bytes(a.mr.to_vec(off, 8).try_into().unwrap());
    assert_eq!(be(3000), 100, "fetch-add returns the old value");
    assert_eq!(be(3008), 105, "CAS returns the old value (swapped)");
    assert_eq!(be(3016), 7, "CAS that failed returns the current value");
    assert_eq!(
        u64::from_be_bytes(b.mr.to_vec(64, 8).try_into().unwrap()),
        7
    );
}

fn one_srq_shared_by_many_qps(f: &TestFabric) {
    let sctx = f.open("sim0");
    let cctx = f.open("sim1");
    let spd = sctx.alloc_pd().unwrap();
    let smr = spd
        .alloc_mr(MR_LEN, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let srq_h = sctx.create_srq(&spd, 64, 1).unwrap();
    let mut srq = srq_h.srq::<OrderedRecv<u32>>().unwrap();
    let s_rcq = sctx.create_cq(&CqAttr::default()).unwrap();
    let s_scq = sctx.create_cq(&CqAttr::default()).unwrap();
    let mut ring = s_rcq.ring().unwrap();
    let c_cq = cctx.create_cq(&CqAttr::default()).unwrap();
    let cpd = cctx.alloc_pd().unwrap();
    let mut clients = Vec::new();
    for _ in 0..8 {
        let sq_ = sctx
            .create_qp(&spd, &s_scq, &s_rcq, Some(&srq_h), &QpCaps::default())
            .unwrap();
        let cq_ = cctx
            .create_qp(&cpd, &c_cq, &c_cq, None, &QpCaps::default())
            .unwrap();
        for (x, y, acc) in [(&sq_, &cq_, access::REMOTE_WRITE), (&cq_, &sq_, 0)] {
            x.connect(&RtrAttr::new(y.conn_info(), acc), &RtsAttr::default())
                .unwrap();
        }
        let sqq = cq_
            .send_queue::<OrderedDense<()>>(SqConfig::default())
            .unwrap();
        clients.push((sq_, cq_, sqq));
    }
    for i in 0..64u32 {
        srq.post(&[], 1000 + i).unwrap();
    }
    srq.ring_doorbell();
    for round in 0..4u32 {
        for (k, (_, _, sqq)) in clients.iter_mut().enumerate() {
            sqq.write_imm(
                smr.addr() + 8 * k as u64,
                smr.rkey(),
                round * 100 + k as u32,
                Payload::Inline(&[k as u8; 8]),
            )
            .unwrap()
            .post(());
            sqq.ring_doorbell();
        }
    }
    let got = wait(&mut ring, 32);
    let mut entries = Vec::new();
    for r in &got {
        assert_eq!(r.opcode, CqeOpcode::RespWrImm as u8);
        let k = (r.imm % 100) as usize;
        assert_eq!(r.qpn, clients[k].0.qpn(), "CQE names the receiving QP");
        entries.push(srq.take_index(r.wc).unwrap());
    }
    entries.sort();
    assert_eq!(
        entries,
        (1000..1032).collect::<Vec<_>>(),
        "each SRQ WQE used once"
    );
    for k in 0..8 {
        assert_eq!(smr.to_vec(8 * k, 8), vec![k as u8; 8]);
    }
}

fn a_thousand_qps_on_one_cq(f: &TestFabric) {
    let a = f.open("sim0");
    let b = f.open("sim1");
    let (apd, bpd) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let bmr = bpd
        .alloc_mr(1024 * 8, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let attr = CqAttr {
        cqe_cnt: 4096,
        ..CqAttr::default()
    };
    let acq = a.create_cq(&attr).unwrap();
    let bcq = b.create_cq(&attr).unwrap();
    let srq_h = b.create_srq(&bpd, 2048, 1).unwrap();
    let mut srq = srq_h.srq::<OrderedRecv<()>>().unwrap();
    for _ in 0..1024 {
        srq.post(&[], ()).unwrap();
    }
    srq.ring_doorbell();
    let mut cq = mlx5::DispatchCq::new(bcq.ring().unwrap());
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for i in 0..1024u32 {
        let x = a
            .create_qp(
                &apd,
                &acq,
                &acq,
                None,
                &QpCaps {
                    sq_wqe_cnt: 4,
                    rq_wqe_cnt: 1,
                    ..QpCaps::default()
                },
            )
            .unwrap();
        let y = b
            .create_qp(
                &bpd,
                &bcq,
                &bcq,
                Some(&srq_h),
                &QpCaps {
                    sq_wqe_cnt: 4,
                    ..QpCaps::default()
                },
            )
            .unwrap();
        for (p, q, acc) in [(&x, &y, 0), (&y, &x, access::REMOTE_WRITE)] {
            p.connect(&RtrAttr::new(q.conn_info(), acc), &RtsAttr::default())
                .unwrap();
        }
        cq.register(y.qpn(), (i, 0u32));
        senders.push((
            x.send_queue::<OrderedDense<()>>(SqConfig::default())
                .unwrap(),
            x,
        ));
        receivers.push(y);
    }
    for (i, (sq, _)) in senders.iter_mut().enumerate() {
        sq.write_imm(
            bmr.addr() + 8 * i as u64,
            bmr.rkey(),
            i as u32,
            Payload::Inline(&(i as u64).to_le_bytes()),
        )
        .unwrap()
        .post(());
        sq.ring_doorbell();
    }
    let mut n = 0;
    while n < 1024 {
        n += cq.poll(usize::MAX, |e, c| {
            assert_eq!(c.imm(), e.0, "dispatched to the right QP");
            e.1 += 1;
        });
    }
    for (i, r) in receivers.iter().enumerate() {
        assert_eq!(cq.get_mut(r.qpn()).unwrap().1, 1);
        assert_eq!(bmr.to_vec(8 * i, 8), (i as u64).to_le_bytes());
    }
    assert_eq!(cq.unknown_completions(), 0);
}

fn expect_error(r: &Rec, syndrome: Syndrome) {
    assert_eq!(r.opcode, CqeOpcode::ReqErr as u8, "{r:?}");
    assert_eq!(r.syndrome, Some(syndrome as u8), "{r:?}");
}

fn remote_access_errors_flush_the_rest(f: &TestFabric) {
    // Bad rkey, out of bounds, missing access, another PD's region.
    type Target = Box<dyn Fn(&End, &End) -> (u64, u32)>;
    let cases: Vec<(&str, Target)> = vec![
        (
            "bad rkey",
            Box::new(|_, b| (b.mr.addr(), b.mr.rkey() ^ 0x5500)),
        ),
        (
            "out of bounds",
            Box::new(|_, b| (b.mr.addr() + MR_LEN as u64 - 4, b.mr.rkey())),
        ),
        (
            "below the region",
            Box::new(|_, b| (b.mr.addr() - 8, b.mr.rkey())),
        ),
        (
            "read-only region",
            Box::new(|_, b| {
                let mr = b.pd.alloc_mr(64, access::REMOTE_READ).unwrap();
                let k = (mr.addr(), mr.rkey());
                std::mem::forget(mr);
                k
            }),
        ),
        (
            "another PD",
            Box::new(|_, b| {
                let pd = b.ctx.alloc_pd().unwrap();
                let mr = pd.alloc_mr(64, access::REMOTE_WRITE).unwrap();
                let k = (mr.addr(), mr.rkey());
                std::mem::forget(mr);
                k
            }),
        ),
    ];
    for (name, target) in cases {
        let (mut a, mut b) = pair(f, CqAttr::default());
        b.post_recv(4, 0, 0);
        let (raddr, rkey) = target(&a, &b);
        let s = a.sge(0, 16);
        a.sq.write(raddr, rkey, Payload::Sges(&[s]))
            .unwrap()
            .post(1);
        a.sq.write(b.mr.addr(), b.mr.rkey(), Payload::Sges(&[s]))
            .unwrap()
            .post(2);
        a.sq.send(Payload::Inline(b"x")).unwrap().post(3);
        a.sq.ring_doorbell();
        let r = a.send_done(3);
        expect_error(&r[0], Syndrome::RemoteAccess);
        expect_error(&r[1], Syndrome::WrFlush);
        expect_error(&r[2], Syndrome::WrFlush);
        assert_eq!((r[0].wc, r[1].wc, r[2].wc), (0, 1, 2), "{name}");
        assert_eq!(a.qp.state(), QpState::Err, "{name}");
        // The responder QP went to error as well; its posted receives are flushed.
        assert_eq!(b.qp.state(), QpState::Err, "{name}");
        let rr = wait(&mut b.rcq, 4);
        assert!(
            rr.iter()
                .all(|c| c.opcode == CqeOpcode::RespErr as u8 && c.syndrome == Some(5)),
            "{name}: {rr:?}"
        );
        // Posting after the error: flushed at the doorbell.
        a.sq.nop().unwrap().post(4);
        a.sq.ring_doorbell();
        expect_error(&a.send_done(1)[0], Syndrome::WrFlush);
        // Nothing reached b's memory.
        assert_eq!(b.mr.to_vec(0, 16), vec![0; 16], "{name}");
    }
}

fn missing_qp_remote_access_right(f: &TestFabric) {
    let mut a = End::new(f.open("sim0"), CqAttr::default());
    let b = End::new(f.open("sim1"), CqAttr::default());
    connect_with(&a, &b, RtsAttr::default(), access::REMOTE_WRITE);
    let s = a.sge(0, 8);
    a.sq.read(b.mr.addr(), b.mr.rkey(), &[s]).unwrap().post(1);
    a.sq.ring_doorbell();
    expect_error(&a.send_done(1)[0], Syndrome::RemoteAccess);
}

fn local_protection_errors(f: &TestFabric) {
    let (mut a, b) = pair(f, CqAttr::default());
    let bad = Sge {
        addr: a.mr.addr(),
        len: 8,
        lkey: a.mr.lkey() ^ 0x100,
    };
    a.sq.write(b.mr.addr(), b.mr.rkey(), Payload::Sges(&[bad]))
        .unwrap()
        .post(1);
    a.sq.ring_doorbell();
    expect_error(&a.send_done(1)[0], Syndrome::LocalProt);
    assert_eq!(a.qp.state(), QpState::Err);
    // The responder is not affected by a local error.
    assert_eq!(b.qp.state(), QpState::Rts);

    let (mut a, b) = pair(f, CqAttr::default());
    // READ into a region without LOCAL_WRITE.
    let ro = a.pd.alloc_mr(64, access::REMOTE_READ).unwrap();
    let s = Sge {
        addr: ro.addr(),
        len: 8,
        lkey: ro.lkey(),
    };
    a.sq.read(b.mr.addr(), b.mr.rkey(), &[s]).unwrap().post(1);
    a.sq.ring_doorbell();
    expect_error(&a.send_done(1)[0], Syndrome::LocalProt);
}

fn send_longer_than_the_receive_buffer(f: &TestFabric) {
    let (mut a, mut b) = pair(f, CqAttr::default());
    b.post_recv(1, 0, 16);
    a.sq.send(Payload::Inline(&[1; 17])).unwrap().post(1);
    a.sq.ring_doorbell();
    expect_error(&a.send_done(1)[0], Syndrome::RemoteInvalReq);
    let r = wait(&mut b.rcq, 1);
    assert_eq!(
        (r[0].opcode, r[0].syndrome),
        (CqeOpcode::RespErr as u8, Some(Syndrome::LocalLength as u8))
    );
}

fn rnr_retried_then_exceeded(f: &TestFabric) {
    // rnr_retry = 7: waits forever; succeeds once a receive is posted.
    let (mut a, mut b) = pair(f, CqAttr::default());
    a.sq.send(Payload::Inline(b"hello")).unwrap().post(1);
    a.sq.ring_doorbell();
    assert!(drain(&mut a.scq).is_empty(), "stalled on RNR");
    std::thread::sleep(std::time::Duration::from_millis(2));
    assert!(drain(&mut a.scq).is_empty(), "still stalled");
    b.post_recv(1, 0, 64);
    let r = a.send_done(1);
    assert_eq!(r[0].opcode, CqeOpcode::Req as u8);
    assert_eq!(wait(&mut b.rcq, 1)[0].bc, 5);
    assert_eq!(b.mr.to_vec(0, 5), b"hello");

    // rnr_retry = 2: fails with RNR_RETRY_EXC_ERR after the retries.
    let a = End::new(f.open("sim0"), CqAttr::default());
    let b = End::new(f.open("sim1"), CqAttr::default());
    let rts = RtsAttr {
        rnr_retry: 2,
        ..RtsAttr::default()
    };
    connect_with(&a, &b, rts, access::REMOTE_WRITE);
    let mut a = a;
    a.sq.write_imm(b.mr.addr(), b.mr.rkey(), 1, Payload::None)
        .unwrap()
        .post(1);
    a.sq.ring_doorbell();
    let r = a.send_done(1);
    expect_error(&r[0], Syndrome::RnrRetryExc);
    assert_eq!(a.qp.state(), QpState::Err);
}

fn vanished_peer_is_a_transport_retry_error(f: &TestFabric) {
    let a = End::new(f.open("sim0"), CqAttr::default());
    let b = End::new(f.open("sim1"), CqAttr::default());
    // 8 µs ACK timeout, 3 retries.
    connect_with(
        &a,
        &b,
        RtsAttr {
            timeout: 1,
            retry_cnt: 3,
            ..RtsAttr::default()
        },
        access::REMOTE_WRITE,
    );
    let mut a = a;
    drop(b);
    a.sq.write(0, 0, Payload::Inline(b"lost")).unwrap().post(1);
    a.sq.ring_doorbell();
    let r = a.send_done(1);
    expect_error(&r[0], Syndrome::TransportRetryExc);
}

/// Takes device `dev`'s port down or up (a software-device control: these
/// scenarios run on the software device only).
fn set_port(f: &TestFabric, dev: u32, down: bool) {
    let fab = Fabric::open(&f.0).unwrap();
    fab.set_port_down(dev, down).unwrap();
    assert_eq!(fab.port_down(dev), down);
}

/// Two connected ends on sim0 (requester) and sim1, with `rts`.
fn pair_with(f: &TestFabric, rts: RtsAttr) -> (End, End) {
    let a = End::new(f.open("sim0"), CqAttr::default());
    let b = End::new(f.open("sim1"), CqAttr::default());
    let all = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    connect_with(&a, &b, rts, all);
    (a, b)
}

/// With the responder's port down, or the requester's, a connected RC QP's
/// WQE gets no acknowledgement: after its retries it completes with
/// TRANSPORT_RETRY_EXC_ERR, the QP is in ERR and later WQEs are flushed. The
/// responder sees nothing — memory, receive queue, CQ, QP state — nor does
/// the requester's memory (a READ). Up again, the port carries a fresh pair;
/// the failed QP stays in ERR.
fn a_port_down_is_a_transport_retry_error_and_nothing_crosses(f: &TestFabric) {
    // 8 µs ACK timeout, 3 retries.
    let rts = RtsAttr {
        timeout: 1,
        retry_cnt: 3,
        ..RtsAttr::default()
    };
    #[derive(Debug, Clone, Copy)]
    enum Head {
        Write,
        Send,
        Read,
    }
    for (down, dev, head) in [
        ("responder", 1, Head::Write),
        ("requester", 0, Head::Send),
        ("responder", 1, Head::Read),
        ("requester", 0, Head::Write),
    ] {
        let what = format!("{down}'s port down, {head:?} first");
        let (mut a, mut b) = pair_with(f, rts);
        b.post_recv(4, 0, 256);
        a.mr.write(0, &[0x5a; 64]);
        // The requester's READ target: it must stay as it is.
        a.mr.write(4096, &[0xee; 64]);
        set_port(f, dev, true);
        let (s, into) = (a.sge(0, 64), a.sge(4096, 64));
        let (raddr, rkey) = (b.mr.addr() + 1024, b.mr.rkey());
        match head {
            Head::Write => a.sq.write(raddr, rkey, Payload::Sges(&[s])),
            Head::Send => a.sq.send(Payload::Sges(&[s])),
            Head::Read => a.sq.read(raddr, rkey, &[into]),
        }
        .unwrap()
        .post(1);
        a.sq.write_imm(raddr, rkey, 7, Payload::Inline(b"imm"))
            .unwrap()
            .post(2);
        a.sq.send(Payload::Inline(b"hello")).unwrap().post(3);
        a.sq.ring_doorbell();
        let r = a.send_done(3);
        expect_error(&r[0], Syndrome::TransportRetryExc);
        expect_error(&r[1], Syndrome::WrFlush);
        expect_error(&r[2], Syndrome::WrFlush);
        assert_eq!((r[0].wc, r[1].wc, r[2].wc), (0, 1, 2), "{what}");
        assert_eq!(a.qp.state(), QpState::Err, "{what}");
        // Later WQEs are flushed at the doorbell.
        a.sq.send(Payload::Inline(b"late")).unwrap().post(4);
        a.sq.ring_doorbell();
        expect_error(&a.send_done(1)[0], Syndrome::WrFlush);
        // Nothing crossed: the responder's memory is untouched, it has no
        // completion, its QP is as it was, and no receive was consumed (its
        // move to ERR flushes all four, in order).
        assert!(
            b.mr.to_vec(0, MR_LEN).iter().all(|&x| x == 0),
            "{what}: responder memory"
        );
        assert_eq!(a.mr.to_vec(4096, 64), vec![0xee; 64], "{what}: READ target");
        assert!(drain(&mut b.rcq).is_empty(), "{what}: receive CQ");
        assert_eq!(b.qp.state(), QpState::Rts, "{what}");
        b.qp.to_err().unwrap();
        let rr = wait(&mut b.rcq, 4);
        assert_eq!(
            rr.iter()
                .map(|c| (c.opcode, c.syndrome, c.wc))
                .collect::<Vec<_>>(),
            (0..4)
                .map(|i| (CqeOpcode::RespErr as u8, Some(Syndrome::WrFlush as u8), i))
                .collect::<Vec<_>>(),
            "{what}: every receive still posted"
        );

        // Up again: a fresh pair works; the failed QP stays in ERR.
        set_port(f, dev, false);
        assert_eq!(a.qp.state(), QpState::Err, "{what}");
        let (mut c, mut d) = pair_with(f, rts);
        d.post_recv(1, 0, 64);
        c.mr.write(0, b"after");
        let s = c.sge(0, 5);
        c.sq.write(d.mr.addr() + 512, d.mr.rkey(), Payload::Sges(&[s]))
            .unwrap()
            .post(1);
        c.sq.send(Payload::Sges(&[s])).unwrap().post(2);
        c.sq.ring_doorbell();
        let r = c.send_done(2);
        assert!(
            r.iter().all(|c| c.opcode == CqeOpcode::Req as u8),
            "{what}: {r:?}"
        );
        assert_eq!(d.recv_done(1)[0].bc, 5);
        assert_eq!(d.mr.to_vec(512, 5), b"after");
        assert_eq!(d.mr.to_vec(0, 5), b"after");
    }
}

/// The NIC's clock in ns: the wall clock since `t0` inline, the scheduler's
/// logical clock deferred.
fn nic_ns(f: &TestFabric, ctx: &Context, t0: std::time::Instant) -> u64 {
    match f.1 {
        ExecMode::Inline => t0.elapsed().as_nanos() as u64,
        ExecMode::Deferred { .. } => ctx.sched_stats().clock_ns,
    }
}

/// The error comes when the last try's ACK timer expires: `retry_cnt` + 1
/// local ACK timeouts (4.096 µs × 2^timeout each) after the first try, on the
/// NIC's clock.
fn a_port_down_fails_after_retry_cnt_plus_one_timeouts(f: &TestFabric) {
    // 4.19 ms per try; the first try and two retries: 12.6 ms.
    let rts = RtsAttr {
        timeout: 10,
        retry_cnt: 2,
        ..RtsAttr::default()
    };
    let per_try = u64::from(mlx5::device::ack_timeout_us(10)) * 1000;
    let (mut a, b) = pair_with(f, rts);
    set_port(f, 1, true);
    let t0 = std::time::Instant::now();
    let start = nic_ns(f, &a.ctx, t0);
    a.sq.write(b.mr.addr(), b.mr.rkey(), Payload::Inline(b"lost"))
        .unwrap()
        .post(1);
    a.sq.ring_doorbell();
    let mut r = Vec::new();
    while r.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no completion");
        r = drain(&mut a.scq);
    }
    let took = nic_ns(f, &a.ctx, t0) - start;
    expect_error(&r[0], Syndrome::TransportRetryExc);
    assert!(
        took >= 3 * per_try,
        "failed after {took} ns, before 3 timeouts of {per_try} ns"
    );
    if let ExecMode::Deferred { .. } = f.1 {
        // Logical time: nothing else delays it.
        assert!(took < 4 * per_try, "failed after {took} ns");
    }
    assert!(b.mr.to_vec(0, 4).iter().all(|&x| x == 0));
    set_port(f, 1, false);
}

/// A port that comes back before the retries run out loses nothing: the next
/// retry goes through, and every byte and completion arrives once.
fn a_port_back_up_within_the_retry_window_loses_nothing(f: &TestFabric) {
    // 16.8 ms per try, 7 retries: 134 ms before the error would come.
    let rts = RtsAttr {
        timeout: 12,
        retry_cnt: 7,
        ..RtsAttr::default()
    };
    let (mut a, mut b) = pair_with(f, rts);
    b.post_recv(2, 0, 64);
    set_port(f, 1, true);
    a.sq.write_imm(
        b.mr.addr() + 1024,
        b.mr.rkey(),
        9,
        Payload::Inline(b"first"),
    )
    .unwrap()
    .post(1);
    a.sq.send(Payload::Inline(b"second")).unwrap().post(2);
    a.sq.ring_doorbell();
    // A few idle polls (well inside the first timeout): nothing moves.
    for _ in 0..100 {
        assert!(drain(&mut a.scq).is_empty(), "completed while down");
    }
    assert!(drain(&mut b.rcq).is_empty());
    assert!(b.mr.to_vec(1024, 5).iter().all(|&x| x == 0));
    set_port(f, 1, false);
    let r = a.send_done(2);
    assert!(r.iter().all(|c| c.opcode == CqeOpcode::Req as u8), "{r:?}");
    let rr = b.recv_done(2);
    assert_eq!(
        rr.iter().map(|c| (c.opcode, c.bc)).collect::<Vec<_>>(),
        vec![
            (CqeOpcode::RespWrImm as u8, 5),
            (CqeOpcode::RespSend as u8, 6)
        ]
    );
    assert_eq!(rr[0].imm, 9);
    assert_eq!(b.mr.to_vec(1024, 5), b"first");
    // The WRITE_IMM took the first receive, the SEND the second (both at 0).
    assert_eq!(b.mr.to_vec(0, 6), b"second");
    assert_eq!(a.qp.state(), QpState::Rts);
}

fn cq_overrun_is_detected_not_overwritten(f: &TestFabric) {
    let ctx = f.open("sim0");
    let pd = ctx.alloc_pd().unwrap();
    let small = ctx
        .create_cq(&CqAttr {
            cqe_cnt: 4,
            ..CqAttr::default()
        })
        .unwrap();
    let other = ctx.create_cq(&CqAttr::default()).unwrap();
    let a = ctx
        .create_qp(&pd, &small, &other, None, &QpCaps::default())
        .unwrap();
    let b = ctx
        .create_qp(&pd, &other, &other, None, &QpCaps::default())
        .unwrap();
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.connect(&RtrAttr::new(y.conn_info(), 0), &RtsAttr::default())
            .unwrap();
    }
    let mut sq = a
        .send_queue::<OrderedDense<u32>>(SqConfig {
            signal_interval: 1,
            ..SqConfig::default()
        })
        .unwrap();
    let mut ring = small.ring().unwrap();
    for i in 0..6 {
        sq.nop().unwrap().post(i);
    }
    sq.ring_doorbell();
    ctx.progress();
    assert!(small.overrun(), "the NIC saw the CQ full");
    // The four CQEs that fit are intact and in order; nothing was overwritten.
    let r = drain(&mut ring);
    assert_eq!(r.iter().map(|c| c.wc).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert_eq!(a.state(), QpState::Err);
}

fn scatter_to_cqe_formats(f: &TestFabric) {
    for (size, cap) in [(64usize, 32usize), (128, 64)] {
        let attr = CqAttr {
            cqe_size: size,
            scatter_to_cqe: true,
            ..CqAttr::default()
        };
        let (mut a, mut b) = pair(f, attr);
        b.post_recv(1, 0, 256);
        b.post_recv(1, 512, 256);
        let msg: Vec<u8> = (0..cap as u8).collect();
        a.sq.send(Payload::Inline(&msg)).unwrap().post(1);
        a.sq.send(Payload::Inline(&[7; 100])).unwrap().post(2);
        a.sq.ring_doorbell();
        let r = wait(&mut b.rcq, 2);
        assert_eq!(
            r[0].scatter, msg,
            "small message in the CQE ({size} B CQEs)"
        );
        assert_eq!(b.mr.to_vec(0, cap), vec![0; cap], "not in the buffer");
        assert!(r[1].scatter.is_empty());
        assert_eq!(b.mr.to_vec(512, 100), vec![7; 100]);
    }
}

/// The same workload's completions, as the data path reports them.
fn workload(f: &TestFabric, zip: Compression) -> (Vec<Rec>, Vec<Rec>, u64) {
    let attr = CqAttr {
        compression: zip,
        ..CqAttr::default()
    };
    let (mut a, mut b) = pair(f, attr);
    b.post_recv(200, 0, 0);
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    for burst in 0..20u32 {
        for k in 0..(burst % 9 + 1) {
            let s = a.sge(0, 64 + k);
            a.sq.write_imm(
                b.mr.addr(),
                b.mr.rkey(),
                burst * 100 + k,
                Payload::Sges(&[s]),
            )
            .unwrap()
            .post(0);
        }
        a.sq.ring_doorbell();
        sends.extend(drain(&mut a.scq));
        recvs.extend(drain(&mut b.rcq));
    }
    a.ctx.progress();
    sends.extend(drain(&mut a.scq));
    recvs.extend(drain(&mut b.rcq));
    // Mini CQEs carry no immediate: compare the rest.
    for r in recvs.iter_mut() {
        r.imm = 0;
    }
    for r in sends.iter_mut() {
        r.qpn = 0;
    }
    for r in recvs.iter_mut() {
        r.qpn = 0;
    }
    (sends, recvs, a.scq.expanded() + b.rcq.expanded())
}

fn compression_on_and_off_give_the_same_completions(f: &TestFabric) {
    let off = workload(f, Compression::Off);
    let total: u32 = (0..20u32).map(|b| b % 9 + 1).sum();
    assert_eq!(off.0.len(), total as usize);
    assert_eq!(off.1.len(), total as usize);
    assert_eq!(off.2, 0);
    for zip in [Compression::Enhanced, Compression::Basic] {
        let z = workload(f, zip);
        assert!(
            z.2 > total as u64 / 2,
            "{zip:?}: only {} of {} completions came compressed",
            z.2,
            2 * total
        );
        assert_eq!((z.0, z.1), (off.0.clone(), off.1.clone()), "{zip:?}");
    }
}

// ---------------------------------------------------------------------------
// Completion events: arm a CQ, sleep on its channel
// ---------------------------------------------------------------------------

/// How long a test waits for an event that must come.
const EVENT: Duration = Duration::from_secs(10);
/// How long a test waits to see that no event comes.
const NO_EVENT: Duration = Duration::from_millis(30);

/// Two connected ends whose CQs are on a completion channel of their own.
fn event_pair(f: &TestFabric) -> (End, End) {
    let a = End::new_with(f.open("sim0"), CqAttr::default(), true);
    let b = End::new_with(f.open("sim1"), CqAttr::default(), true);
    connect(&a, &b);
    (a, b)
}

impl End {
    fn chan(&self) -> &CompletionChannel {
        self.chan.as_ref().unwrap()
    }

    /// The next event of this end's channel within `t`: the CQ's number.
    fn event(&self, t: Duration) -> Option<u32> {
        self.chan().wait(t).unwrap().map(|e| e.cqn)
    }

    /// Posts `n` WRITE_IMMs (8 bytes each) to `to`, `solicited` or not, and
    /// rings the doorbell once.
    fn write_imms(&mut self, to: &End, n: u32, solicited: bool) {
        for i in 0..n {
            let s = self.sge(0, 8);
            let b = self
                .sq
                .write_imm(to.mr.addr() + 64, to.mr.rkey(), i, Payload::Sges(&[s]))
                .unwrap();
            let b = if solicited { b.solicited() } else { b };
            b.post(u64::from(i));
        }
        self.sq.ring_doorbell();
    }

    /// Takes every receive completion there is (one poll), retiring the
    /// receive WQEs.
    fn recv_poll(&mut self) -> usize {
        let rq = self.rq.as_mut().unwrap();
        self.rcq.poll(usize::MAX, |c| {
            mlx5::cq::CompletionSource::complete(rq, c, |_, _| {});
        })
    }

    /// Retires every send completion there is.
    fn reap_sends(&mut self) -> usize {
        let sq = &mut self.sq;
        self.scq.poll(usize::MAX, |c| {
            sq.complete(c, |_, _| {});
        })
    }
}

/// A waker ends a wait from another thread, or the next wait when it came
/// first; wakes do not pile up, and an event raised around a wake is still
/// handed out.
fn a_waker_ends_a_wait_and_no_event_is_lost(f: &TestFabric) {
    let (mut a, mut b) = event_pair(f);
    b.post_recv(16, 0, 0);
    let rcqn = b.cqs.1.cqn();
    let waker = b.chan().waker();
    // A wake before the wait ends it at once; two wakes end one wait.
    waker.wake();
    waker.wake();
    let t = std::time::Instant::now();
    assert_eq!(b.event(EVENT), None);
    assert!(
        t.elapsed() < EVENT / 2,
        "the pending wake did not end the wait"
    );
    assert_eq!(b.event(NO_EVENT), None, "wakes piled up");
    // A wake from another thread ends a wait under way.
    let w2 = waker.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        w2.wake();
    });
    let t = std::time::Instant::now();
    assert_eq!(b.event(EVENT), None);
    assert!(t.elapsed() < EVENT / 2, "the wake did not end the wait");
    th.join().unwrap();
    // An event and a wake together: the event is handed out, by this wait
    // or the next, never dropped.
    b.rcq.arm(false).unwrap();
    a.write_imms(&b, 1, false);
    b.ctx.progress();
    waker.wake();
    let first = b.event(EVENT);
    let got = match first {
        Some(c) => Some(c),
        None => b.event(EVENT),
    };
    assert_eq!(got, Some(rcqn), "the event raised beside a wake was lost");
    assert_eq!(b.recv_done(1).len(), 1);
    a.reap_sends();
}

/// One event per arm, however many CQEs follow it; none without an arm.
fn cq_events_one_per_arm_and_none_without(f: &TestFabric) {
    let (mut a, mut b) = event_pair(f);
    b.post_recv(200, 0, 0);
    let rcqn = b.cqs.1.cqn();
    // Not armed: completions, and no event.
    a.write_imms(&b, 2, false);
    assert_eq!(b.recv_done(2).len(), 2);
    assert_eq!(b.event(NO_EVENT), None, "an event without an arm");
    // Armed with nothing arriving: no event either.
    b.rcq.arm(false).unwrap();
    assert_eq!(b.event(NO_EVENT), None, "an event without a CQE");
    // Three CQEs after one arm: one event.
    a.write_imms(&b, 3, false);
    assert_eq!(b.event(EVENT), Some(rcqn));
    assert_eq!(b.event(NO_EVENT), None, "two events for one arm");
    assert_eq!(b.recv_done(3).len(), 3);
    // More CQEs without a new arm: nothing.
    a.write_imms(&b, 2, false);
    assert_eq!(b.recv_done(2).len(), 2);
    assert_eq!(b.event(NO_EVENT), None, "an event after the arm was used");
    // Arm, event, arm, event: each arm once.
    for round in 0..20 {
        b.rcq.arm(false).unwrap();
        a.write_imms(&b, 1 + round % 3, false);
        assert_eq!(b.event(EVENT), Some(rcqn), "round {round}");
        assert_eq!(
            b.recv_done(1 + round as usize % 3).len(),
            1 + round as usize % 3
        );
        assert_eq!(b.event(Duration::ZERO), None, "round {round}");
        a.reap_sends();
    }
    // Arming twice before the event still gives one event.
    b.rcq.arm(false).unwrap();
    b.rcq.arm(false).unwrap();
    a.write_imms(&b, 1, false);
    assert_eq!(b.event(EVENT), Some(rcqn));
    assert_eq!(b.event(NO_EVENT), None);
    b.recv_done(1);
    // The sender's CQs, never armed, raised nothing on its channel.
    a.reap_sends();
    assert_eq!(a.event(Duration::ZERO), None);
}

/// The race of every sleeper: a CQE lands between the last empty poll and the
/// arm. The arm carries the consumer index, so it fires at once; the poll
/// after the arm finds the CQE.
fn cq_event_for_a_cqe_that_landed_before_the_arm(f: &TestFabric) {
    let (mut a, mut b) = event_pair(f);
    b.post_recv(64, 0, 0);
    let rcqn = b.cqs.1.cqn();
    for round in 0..10 {
        // 1. Poll: empty.
        assert_eq!(b.recv_poll(), 0);
        // The CQE lands (deferred mode: the NIC runs the WRITE_IMM now).
        a.write_imms(&b, 1, false);
        b.ctx.progress();
        // 2. Arm: the CQ already holds a CQE past the arm's consumer index.
        b.rcq.arm(false).unwrap();
        assert_eq!(
            b.event(Duration::ZERO),
            Some(rcqn),
            "round {round}: the arm did not fire at once"
        );
        // 3. Poll again: the CQE that raced the arm.
        assert_eq!(b.recv_poll(), 1, "round {round}");
        b.post_recv(1, 0, 0);
        a.reap_sends();
    }
    // A CQE consumed before the arm does not fire it.
    a.write_imms(&b, 1, false);
    assert_eq!(b.recv_done(1).len(), 1);
    b.rcq.arm(false).unwrap();
    assert_eq!(b.event(NO_EVENT), None);
    a.write_imms(&b, 1, false);
    assert_eq!(b.event(EVENT), Some(rcqn));
    b.recv_done(1);
    // Solicited-only: an unconsumed unsolicited CQE does not fire it, an
    // unconsumed solicited one does.
    a.write_imms(&b, 1, false);
    b.ctx.progress();
    b.rcq.arm(true).unwrap();
    assert_eq!(
        b.event(NO_EVENT),
        None,
        "an unsolicited CQE fired a solicited arm"
    );
    a.write_imms(&b, 1, true);
    b.ctx.progress();
    assert_eq!(b.event(EVENT), Some(rcqn));
    assert_eq!(b.recv_poll(), 2);
    a.write_imms(&b, 1, true);
    b.ctx.progress();
    b.rcq.arm(true).unwrap();
    assert_eq!(
        b.event(Duration::ZERO),
        Some(rcqn),
        "a pending solicited CQE"
    );
    assert_eq!(b.recv_poll(), 1);
}

/// A solicited-only arm ignores unsolicited CQEs and fires on the first CQE
/// of a solicited SEND or WRITE_IMM, whose CQE has the solicited bit.
fn cq_events_solicited_only(f: &TestFabric) {
    let (mut a, mut b) = event_pair(f);
    b.post_recv(64, 1024, 64);
    let rcqn = b.cqs.1.cqn();
    b.rcq.arm(true).unwrap();
    a.write_imms(&b, 3, false);
    assert_eq!(b.recv_done(3).len(), 3);
    assert_eq!(
        b.event(NO_EVENT),
        None,
        "unsolicited CQEs fired a solicited arm"
    );
    // A solicited SEND.
    a.sq.send(Payload::Inline(b"wake up"))
        .unwrap()
        .solicited()
        .post(9);
    a.sq.ring_doorbell();
    assert_eq!(b.event(EVENT), Some(rcqn));
    let mut se = Vec::new();
    for _ in 0..200_000 {
        b.rcq
            .poll(usize::MAX, |c| se.push((c.opcode_raw(), c.cqe().se())));
        if !se.is_empty() {
            break;
        }
    }
    assert_eq!(se, vec![(CqeOpcode::RespSend as u8, 1)]);
    assert_eq!(b.event(NO_EVENT), None);
    // A solicited WRITE_IMM after unsolicited ones, under one arm: one event.
    b.rcq.arm(true).unwrap();
    a.write_imms(&b, 2, false);
    a.write_imms(&b, 1, true);
    assert_eq!(b.event(EVENT), Some(rcqn));
    let r = b.recv_done(3);
    assert_eq!(r.len(), 3);
    assert_eq!(b.event(NO_EVENT), None);
    // An arm for any CQE fires on an unsolicited one.
    b.rcq.arm(false).unwrap();
    a.write_imms(&b, 1, false);
    assert_eq!(b.event(EVENT), Some(rcqn));
    b.recv_done(1);
}

/// An error CQE fires a solicited-only arm (on the requester's send CQ, whose
/// successful CQEs do not).
fn cq_events_an_error_cqe_fires_a_solicited_arm(f: &TestFabric) {
    let (mut a, mut b) = event_pair(f);
    b.post_recv(8, 0, 0);
    let scqn = a.cqs.0.cqn();
    a.scq.arm(true).unwrap();
    // A successful signaled WRITE: a requester CQE, not solicited.
    let s = a.sge(0, 16);
    a.sq.write(b.mr.addr(), b.mr.rkey(), Payload::Sges(&[s]))
        .unwrap()
        .post(1);
    a.sq.ring_doorbell();
    assert_eq!(a.send_done(1).len(), 1);
    assert_eq!(
        a.event(NO_EVENT),
        None,
        "a successful CQE fired a solicited arm"
    );
    // A WRITE with a bad rkey: a remote access error CQE.
    a.sq.write(b.mr.addr(), b.mr.rkey() ^ 0x5500, Payload::Sges(&[s]))
        .unwrap()
        .post(2);
    a.sq.ring_doorbell();
    assert_eq!(a.event(EVENT), Some(scqn));
    let r = a.send_done(1);
    assert_eq!(r[0].syndrome, Some(Syndrome::RemoteAccess as u8), "{r:?}");
    assert_eq!(a.event(NO_EVENT), None);
    // Nothing was armed on the responder: no event there.
    assert_eq!(b.event(Duration::ZERO), None);
}

/// A seeded mix of sends, progress and the sleeper's loop (poll, arm, poll,
/// wait), with a model of what the channel must say at every wait. An arm
/// fires at the first CQE past its consumer index, so a CQE the sleeper takes
/// while armed means one event is waiting (a spurious wake-up for the loop);
/// a message outstanding while armed means one will come; otherwise none may.
fn cq_events_never_lost_nor_made_up(f: &TestFabric) {
    let (mut a, mut b) = event_pair(f);
    let rcqn = b.cqs.1.cqn();
    b.post_recv(256, 0, 0);
    let mut rng = 0x5eed_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let (mut sent, mut got) = (0u64, 0u64);
    // An arm made and not yet known to have fired.
    let mut armed = false;
    // Events raised and not yet taken.
    let mut raised = 0u32;
    // One poll of the sleeper, with what it tells the model.
    let take = |b: &mut End, got: &mut u64, armed: &mut bool, raised: &mut u32| {
        let n = b.recv_poll();
        if n > 0 {
            *got += n as u64;
            b.post_recv(n, 0, 0);
            if std::mem::take(armed) {
                *raised += 1;
            }
        }
        n
    };
    for round in 0..400 {
        a.reap_sends();
        // The sender, maybe.
        if next(3) == 0 {
            let n = next(3) as u32 + 1;
            a.write_imms(&b, n, false);
            sent += u64::from(n);
            if next(2) == 0 {
                b.ctx.progress();
            }
        }
        // The sleeper: poll until empty, arm, poll again.
        while take(&mut b, &mut got, &mut armed, &mut raised) > 0 {}
        b.rcq.arm(false).unwrap();
        armed = true;
        // The race window: the sender may strike between arm and poll.
        if next(4) == 0 {
            a.write_imms(&b, 1, false);
            sent += 1;
            b.ctx.progress();
        }
        if take(&mut b, &mut got, &mut armed, &mut raised) > 0 {
            continue;
        }
        // Wait: the model says whether an event must come.
        if raised > 0 {
            assert_eq!(b.event(Duration::ZERO), Some(rcqn), "round {round}: lost");
            raised -= 1;
            continue;
        }
        if sent > got {
            let ev = b.event(EVENT);
            assert_eq!(
                ev,
                Some(rcqn),
                "round {round}: lost (sent {sent}, got {got})"
            );
        } else {
            assert_eq!(b.event(Duration::ZERO), None, "round {round}: made up");
            a.write_imms(&b, 1, false);
            sent += 1;
            assert_eq!(b.event(EVENT), Some(rcqn), "round {round}: lost");
        }
        armed = false;
        // Exactly one per arm: nothing more until the next arm.
        assert_eq!(
            b.event(Duration::ZERO),
            None,
            "round {round}: two for one arm"
        );
    }
    while got < sent {
        got += b.recv_done(1).len() as u64;
    }
    assert_eq!(got, sent);
}
