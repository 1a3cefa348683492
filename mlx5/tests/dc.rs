//! The Dynamically Connected transport on the software device: a DCI sends
//! to any DCT its WQE names, if the WQE carries that DCT's key; the DCT
//! receives into its SRQ. Each scenario runs with the NIC executing at the
//! doorbell (inline) and with a seeded scheduler executing later (deferred),
//! in a fabric of its own.
//!
//! What the software device does not model yet: errors confined to one DCI
//! stream (it reports `max_log_num_errored` 0, so an error stops the whole
//! DCI, as on a ConnectX whose firmware reports the same), and the link
//! model's connect latency.

use mlx5::cq::CqRing;
use mlx5::device::{
    access, DcDest, DciStreams, DctAttr, DeviceError, ExecMode, FaultPlan, QpCaps, QpState, RtsAttr,
};
use mlx5::prm::{CqeOpcode, Syndrome};
use mlx5::rq::Srq;
use mlx5::sim::dct::SimDct;
use mlx5::sim::device::{SimContext, SimCq, SimMr, SimQp, DCI_STREAM_CAPS};
use mlx5::sim::fabric::Fabric;
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::wqe_table::{OrderedDense, OrderedRecv};

/// A fabric of the scenario's own, removed at the end.
struct TestFabric(String, ExecMode);

impl TestFabric {
    fn open(&self, dev: &str) -> SimContext {
        SimContext::open_in_mode(&self.0, dev, self.1).expect("open device")
    }
}

impl Drop for TestFabric {
    fn drop(&mut self) {
        Fabric::remove_if_unused(&self.0);
    }
}

/// Each scenario as two tests: `<name>::inline` and `<name>::deferred`.
macro_rules! both_modes {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn inline() {
                let f = super::TestFabric(
                    format!("dc-{}-{}", std::process::id(), stringify!($name)),
                    mlx5::device::ExecMode::Inline,
                );
                super::$name(&f);
            }
            #[test]
            fn deferred() {
                let f = super::TestFabric(
                    format!("dc-{}-{}-d", std::process::id(), stringify!($name)),
                    mlx5::device::ExecMode::Deferred {
                        seed: 7,
                        faults: mlx5::device::FaultPlan::default(),
                    },
                );
                super::$name(&f);
            }
        }
    )*};
}

both_modes!(
    a_dci_reaches_two_dcts_by_number_and_key,
    a_wrong_key_or_an_unknown_dct_gets_no_answer,
    a_dct_that_refuses_access_serves_the_next_dci,
    an_empty_dct_srq_is_rnr_as_for_rc,
);

const MR_LEN: usize = 1 << 16;

/// A completion as a test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    opcode: u8,
    qpn: u32,
    wc: u16,
    bc: u32,
    imm: u32,
    syndrome: Option<u8>,
}

fn rec(c: &mlx5::Completion<'_>) -> Rec {
    Rec {
        opcode: c.opcode_raw(),
        qpn: c.qpn(),
        wc: c.wqe_counter(),
        bc: if c.is_error() { 0 } else { c.byte_cnt() },
        imm: if c.is_error() { 0 } else { c.imm() },
        syndrome: c.syndrome_raw(),
    }
}

/// Polls until `n` completions arrived, driving the NIC (deferred mode and
/// retries) between empty polls.
fn wait(ctx: &SimContext, ring: &mut CqRing, n: usize) -> Vec<Rec> {
    let mut v = Vec::new();
    for _ in 0..200_000 {
        ring.poll(usize::MAX, |c| v.push(rec(c)));
        if v.len() >= n {
            return v;
        }
        ctx.progress();
        std::thread::yield_now();
    }
    panic!("expected {n} completions, got {}: {v:?}", v.len());
}

/// A DC target with its SRQ, receive CQ and a region it accepts `acc` on.
struct Target {
    ctx: SimContext,
    dct: SimDct,
    srq: Srq<OrderedRecv<u32>>,
    ring: CqRing,
    mr: SimMr,
    _cq: SimCq,
}

impl Target {
    fn new(ctx: SimContext, key: u64, acc: u32) -> Target {
        let pd = ctx.alloc_pd();
        let mr = pd
            .alloc_mr(
                MR_LEN,
                access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            )
            .unwrap();
        let cq = ctx.create_cq(&Default::default()).unwrap();
        let srq_h = ctx.create_srq(&pd, 64, 1).unwrap();
        let attr = DctAttr {
            key,
            access: acc,
            min_rnr_timer: 1,
        };
        let dct = ctx.create_dct(&pd, &srq_h, &cq, &attr).unwrap();
        Target {
            srq: srq_h.srq().unwrap(),
            ring: cq.ring().unwrap(),
            dct,
            mr,
            _cq: cq,
            ctx,
        }
    }

    /// Where a DCI's WQE names this target, on `stream`.
    fn dest(&self, stream: u16) -> DcDest {
        DcDest {
            dct: self.dct.number(),
            key: self.dct.key(),
            lid: self.ctx.lid(),
            gid: self.ctx.gid(),
            stream,
        }
    }

    fn post_recv(&mut self, n: u32, off: u64, len: u32) {
        let sge = Sge {
            addr: self.mr.addr() + off,
            len,
            lkey: self.mr.lkey(),
        };
        for i in 0..n {
            self.srq.post(&[sge], i).unwrap();
        }
        self.srq.ring_doorbell();
    }
}

/// A DC initiator, in RTS, with its send queue, CQ and a source region.
struct Initiator {
    ctx: SimContext,
    qp: SimQp,
    sq: SendQueue<OrderedDense<u64>>,
    ring: CqRing,
    mr: SimMr,
    _cq: SimCq,
}

impl Initiator {
    fn new(ctx: SimContext, rts: RtsAttr) -> Initiator {
        let pd = ctx.alloc_pd();
        let mr = pd.alloc_mr(MR_LEN, access::LOCAL_WRITE).unwrap();
        let cq = ctx.create_cq(&Default::default()).unwrap();
        let streams = DciStreams {
            log_concurrent: 2,
            log_errored: 0,
        };
        let qp = ctx
            .create_dci(&pd, &cq, &QpCaps::default(), streams)
            .unwrap();
        qp.to_init().unwrap();
        qp.to_rtr_dci().unwrap();
        qp.to_rts(&rts).unwrap();
        let sq = qp
            .send_queue(SqConfig {
                signal_interval: 1,
                ..SqConfig::default()
            })
            .unwrap();
        Initiator {
            ring: cq.ring().unwrap(),
            ctx,
            qp,
            sq,
            mr,
            _cq: cq,
        }
    }

    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + off,
            len,
            lkey: self.mr.lkey(),
        }
    }

    /// Waits for `n` send completions, retiring their WQEs.
    fn done(&mut self, n: usize) -> Vec<Rec> {
        let mut v = Vec::new();
        for _ in 0..200_000 {
            let sq = &mut self.sq;
            self.ring.poll(usize::MAX, |c| {
                sq.complete(c, |_, _| {});
                v.push(rec(c));
            });
            if v.len() >= n {
                return v;
            }
            self.ctx.progress();
            std::thread::yield_now();
        }
        panic!("expected {n} send completions, got {v:?}");
    }
}

/// Short transport tries: an 8 µs ACK timeout, one retry.
fn quick() -> RtsAttr {
    RtsAttr {
        timeout: 1,
        retry_cnt: 1,
        ..RtsAttr::default()
    }
}

fn a_dci_reaches_two_dcts_by_number_and_key(f: &TestFabric) {
    let mut a = Target::new(f.open("sim1"), 0xa11c_e000_0000_0001, access::REMOTE_WRITE);
    let mut b = Target::new(f.open("sim2"), 0xb0b0_0000_0000_0002, access::REMOTE_READ);
    let mut i = Initiator::new(f.open("sim0"), RtsAttr::default());
    assert_ne!(a.dct.number(), b.dct.number());
    a.post_recv(8, 0x8000, 256);
    b.post_recv(8, 0x8000, 256);
    i.mr.write(0, b"to a, written");
    i.mr.write(64, b"to b, sent");
    b.mr.write(0x100, b"read from b");
    let (to_a, to_b) = (i.sge(0, 13), i.sge(64, 10));
    for k in 0..4u64 {
        let (da, db) = (a.dest(k as u16 % 4), b.dest(1));
        let off = 16 * k;
        i.sq.dc(&da)
            .write_imm(
                a.mr.addr() + off,
                a.mr.rkey(),
                100 + k as u32,
                Payload::Sges(&[to_a]),
            )
            .unwrap()
            .post(k);
        i.sq.dc(&db)
            .send_imm(200 + k as u32, Payload::Sges(&[to_b]))
            .unwrap()
            .post(10 + k);
    }
    // A NOP has no address.
    i.sq.nop().unwrap().post(50);
    let read_sge = i.sge(0x200, 11);
    i.sq.dc(&b.dest(3))
        .read(b.mr.addr() + 0x100, b.mr.rkey(), &[read_sge])
        .unwrap()
        .post(99);
    i.sq.ring_doorbell();
    let sent = i.done(10);
    assert!(sent.iter().all(|r| r.syndrome.is_none()), "{sent:?}");
    // In posting order: the NIC runs a DCI's WQEs in order.
    let wcs: Vec<u16> = sent.iter().map(|r| r.wc).collect();
    let mut sorted = wcs.clone();
    sorted.sort_unstable();
    assert_eq!(wcs, sorted);
    assert_eq!(i.mr.to_vec(0x200, 11), b"read from b");
    let at_a = wait(&a.ctx, &mut a.ring, 4);
    let at_b = wait(&b.ctx, &mut b.ring, 4);
    for (k, r) in at_a.iter().enumerate() {
        assert_eq!(r.opcode, CqeOpcode::RespWrImm as u8);
        assert_eq!((r.qpn, r.imm, r.bc), (a.dct.number(), 100 + k as u32, 13));
        assert_eq!(a.mr.to_vec(16 * k, 13), b"to a, written");
    }
    for (k, r) in at_b.iter().enumerate() {
        assert_eq!(r.opcode, CqeOpcode::RespSendImm as u8);
        assert_eq!((r.qpn, r.imm, r.bc), (b.dct.number(), 200 + k as u32, 10));
    }
    assert_eq!(b.mr.to_vec(0x8000, 10), b"to b, sent");
    assert_eq!(i.qp.state(), QpState::Rts);
}

fn a_wrong_key_or_an_unknown_dct_gets_no_answer(f: &TestFabric) {
    let mut t = Target::new(f.open("sim1"), 7, access::REMOTE_WRITE);
    t.post_recv(4, 0, 64);
    for bad in [
        DcDest {
            key: 8,
            ..t.dest(0)
        },
        DcDest {
            dct: t.dct.number() ^ 0x10_0000,
            ..t.dest(0)
        },
        DcDest {
            lid: t.ctx.lid() + 1,
            ..t.dest(0)
        },
    ] {
        let mut i = Initiator::new(f.open("sim0"), quick());
        i.sq.dc(&bad)
            .write_imm(t.mr.addr(), t.mr.rkey(), 1, Payload::Inline(b"lost"))
            .unwrap()
            .post(1);
        i.sq.dc(&t.dest(1))
            .write(t.mr.addr(), t.mr.rkey(), Payload::Inline(b"flushed"))
            .unwrap()
            .post(2);
        i.sq.ring_doorbell();
        let r = i.done(2);
        assert_eq!(
            r[0].syndrome,
            Some(Syndrome::TransportRetryExc as u8),
            "{bad:?}"
        );
        assert_eq!(r[1].syndrome, Some(Syndrome::WrFlush as u8));
        // With no errored stream allowed, the DCI stops.
        assert_eq!(i.qp.state(), QpState::Err);
    }
    // Nothing reached the target, and it still serves a DCI with its key.
    // The wrong key's two tries (the first and one retry) count as key
    // violations; the unknown DCT's and the other device's never reach it.
    assert_eq!(t.mr.to_vec(0, 7), vec![0; 7]);
    assert_eq!(t.dct.key_violations(), 2);
    reaches(f, &mut t, 5, b"arrived");
}

/// A new DCI's WRITE_IMM of `data` reaches `t`'s region start and its SRQ
/// with `imm`.
fn reaches(f: &TestFabric, t: &mut Target, imm: u32, data: &[u8]) {
    let mut i = Initiator::new(f.open("sim0"), quick());
    i.sq.dc(&t.dest(0))
        .write_imm(t.mr.addr(), t.mr.rkey(), imm, Payload::Inline(data))
        .unwrap()
        .post(1);
    i.sq.ring_doorbell();
    assert_eq!(i.done(1)[0].syndrome, None);
    assert_eq!(wait(&t.ctx, &mut t.ring, 1)[0].imm, imm);
    assert_eq!(t.mr.to_vec(0, data.len()), data);
}

fn a_dct_that_refuses_access_serves_the_next_dci(f: &TestFabric) {
    // The DCT accepts WRITEs only.
    let mut t = Target::new(f.open("sim1"), 9, access::REMOTE_WRITE);
    t.post_recv(4, 0x100, 64);
    let mut i = Initiator::new(f.open("sim0"), quick());
    let into = i.sge(0, 8);
    i.sq.dc(&t.dest(0))
        .read(t.mr.addr(), t.mr.rkey(), &[into])
        .unwrap()
        .post(1);
    i.sq.ring_doorbell();
    assert_eq!(i.done(1)[0].syndrome, Some(Syndrome::RemoteAccess as u8));
    assert_eq!(i.qp.state(), QpState::Err);
    // The DCT, which serves every DCI, stays ready.
    reaches(f, &mut t, 3, b"still up");
}

fn an_empty_dct_srq_is_rnr_as_for_rc(f: &TestFabric) {
    let mut t = Target::new(f.open("sim1"), 11, access::REMOTE_WRITE);
    let mut i = Initiator::new(f.open("sim0"), RtsAttr::default());
    i.sq.dc(&t.dest(0))
        .send(Payload::Inline(b"waits"))
        .unwrap()
        .post(1);
    i.sq.ring_doorbell();
    for _ in 0..50 {
        i.ctx.progress();
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    let mut none = Vec::new();
    i.ring.poll(usize::MAX, |c| none.push(rec(c)));
    assert!(none.is_empty(), "stalled on RNR: {none:?}");
    t.post_recv(1, 0, 64);
    assert_eq!(i.done(1)[0].syndrome, None);
    assert_eq!(wait(&t.ctx, &mut t.ring, 1)[0].bc, 5);
    assert_eq!(t.mr.to_vec(0, 5), b"waits");

    // rnr_retry 2: fails once the retries are spent.
    let mut j = Initiator::new(
        f.open("sim0"),
        RtsAttr {
            rnr_retry: 2,
            ..RtsAttr::default()
        },
    );
    j.sq.dc(&t.dest(0))
        .send(Payload::Inline(b"never"))
        .unwrap()
        .post(1);
    j.sq.ring_doorbell();
    assert_eq!(j.done(1)[0].syndrome, Some(Syndrome::RnrRetryExc as u8));
}

#[test]
fn dcis_and_dcts_are_checked_where_they_are_made() {
    let f = TestFabric(format!("dc-{}-made", std::process::id()), ExecMode::Inline);
    let c = f.open("sim0");
    let pd = c.alloc_pd();
    let cq = c.create_cq(&Default::default()).unwrap();
    let too_many = DciStreams {
        log_concurrent: DCI_STREAM_CAPS.log_concurrent + 1,
        log_errored: 0,
    };
    let e = c
        .create_dci(&pd, &cq, &QpCaps::default(), too_many)
        .unwrap_err();
    assert!(matches!(e, DeviceError::Invalid(_)), "{e}");
    let dci = c
        .create_dci(&pd, &cq, &QpCaps::default(), DciStreams::default())
        .unwrap();
    let rc = c
        .create_qp(&pd, &cq, &cq, None, &QpCaps::default())
        .unwrap();
    dci.to_init().unwrap();
    rc.to_init().unwrap();
    // A DCI connects to no one; an RC QP must.
    let e = dci
        .to_rtr(&mlx5::device::RtrAttr::new(rc.conn_info(), 0))
        .unwrap_err();
    assert!(e.to_string().contains("DCI"), "{e}");
    assert!(rc.to_rtr_dci().is_err());
    dci.to_rtr_dci().unwrap();
    assert_eq!(dci.state(), QpState::Rtr);
    let _ = FaultPlan::default();
}
