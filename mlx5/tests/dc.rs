//! The Dynamically Connected transport on the software device: a DCI sends
//! to any DCT its WQE names, if the WQE carries that DCT's key; the DCT
//! receives into its SRQ. Each scenario runs with the NIC executing at the
//! doorbell (inline) and with a seeded scheduler executing later (deferred),
//! in a fabric of its own.
//!
//! DCI streams: ordered within a stream, independent across streams; an
//! error confined to its stream until `1 << log_errored` streams errored;
//! a stream reset; the link model's connect latency (a half handshake).
//! None of this has been run against a ConnectX: it is the software
//! device's model of what rdma-core and the PRM describe.

use std::time::{Duration, Instant};

use mlx5::cq::CqRing;
use mlx5::device::{
    access, DcDest, DciStreams, DctAttr, DeviceError, ExecMode, FaultPlan, QpCaps, QpState, RtsAttr,
};
use mlx5::prm::{CqeOpcode, Syndrome};
use mlx5::rq::Srq;
use mlx5::sim::dct::SimDct;
use mlx5::sim::device::{SimContext, SimCq, SimMr, SimQp, DCI_STREAM_CAPS};
use mlx5::sim::fabric::Fabric;
use mlx5::sim::link::Link;
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::wqe_table::{OrderedDense, OrderedRecv, SendTable, Unordered};

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
    a_bad_address_errors_only_its_stream,
    order_holds_within_a_stream_stalled_on_rnr,
    rnr_retries_spent_fail_only_their_stream,
    the_dci_goes_to_err_when_its_errored_streams_reach_the_limit,
    a_reset_stream_runs_again,
    a_dci_without_streams_runs_in_order_and_stops_at_an_error,
    the_first_message_to_a_new_dct_pays_the_connect_latency,
    a_path_cut_one_way_fails_the_stream_either_way,
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

/// The longest a test waits for completions.
const LONGEST: Duration = Duration::from_secs(20);

/// Polls until `n` completions arrived, driving the NIC (deferred mode and
/// retries) between empty polls.
fn wait(ctx: &SimContext, ring: &mut CqRing, n: usize) -> Vec<Rec> {
    let mut v = Vec::new();
    let deadline = Instant::now() + LONGEST;
    while Instant::now() < deadline {
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
/// Its table is in posting order (`T` = [`OrderedDense`]: a DCI whose
/// completions come in order) or per WQE ([`Unordered`]: streams).
struct Initiator<T = OrderedDense<u64>> {
    ctx: SimContext,
    qp: SimQp,
    sq: SendQueue<T>,
    ring: CqRing,
    mr: SimMr,
    _cq: SimCq,
}

/// A DCI whose streams complete out of order with each other.
type StreamDci = Initiator<Unordered<u64>>;

impl Initiator {
    /// Four streams; the first error stops the DCI.
    fn new(ctx: SimContext, rts: RtsAttr) -> Initiator {
        Initiator::with_streams(
            ctx,
            rts,
            DciStreams {
                log_concurrent: 2,
                log_errored: 0,
            },
        )
    }
}

impl<T: SendTable<Input = u64>> Initiator<T> {
    fn with_streams(ctx: SimContext, rts: RtsAttr, streams: DciStreams) -> Initiator<T> {
        let pd = ctx.alloc_pd();
        let mr = pd.alloc_mr(MR_LEN, access::LOCAL_WRITE).unwrap();
        let cq = ctx.create_cq(&Default::default()).unwrap();
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
        let deadline = Instant::now() + LONGEST;
        while Instant::now() < deadline {
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

impl StreamDci {
    /// Posts a WRITE_IMM of `data` to `t`'s region at `off` on `stream`
    /// (`t` with another key, or another DCT number, when `bad`); returns
    /// its WQE counter.
    fn put(&mut self, t: &Target, stream: u16, off: u64, data: &[u8], bad: Bad) -> u16 {
        let mut d = t.dest(stream);
        match bad {
            Bad::No => {}
            Bad::Key => d.key ^= 1,
            Bad::Dct => d.dct ^= 0x10_0000,
        }
        let imm = (u32::from(stream) << 16) | off as u32;
        self.sq
            .dc(&d)
            .write_imm(t.mr.addr() + off, t.mr.rkey(), imm, Payload::Inline(data))
            .unwrap()
            .post(off)
    }

    /// Polls until nothing more completes for a while (the NIC driven
    /// meanwhile); the completions seen, in order.
    fn settle(&mut self) -> Vec<Rec> {
        let mut v = Vec::new();
        for _ in 0..20 {
            let sq = &mut self.sq;
            self.ring.poll(usize::MAX, |c| {
                sq.complete(c, |_, _| {});
                v.push(rec(c));
            });
            self.ctx.progress();
            std::thread::sleep(Duration::from_micros(100));
        }
        v
    }
}

/// How [`StreamDci::put`] addresses its target.
#[derive(Clone, Copy)]
enum Bad {
    /// Right.
    No,
    /// With another key: no answer.
    Key,
    /// To a DCT that does not exist: no answer.
    Dct,
}

/// The syndrome each WQE counter of `recs` completed with (`None`:
/// success), in the order given.
fn outcome(recs: &[Rec], wcs: &[u16]) -> Vec<Option<u8>> {
    wcs.iter()
        .map(|wc| {
            let r: Vec<_> = recs.iter().filter(|r| r.wc == *wc).collect();
            assert_eq!(r.len(), 1, "WQE {wc} completed once: {recs:?}");
            r[0].syndrome
        })
        .collect()
}

/// Whether the completions of the WQE counters `wcs` come in that order
/// in `recs`.
fn in_order(recs: &[Rec], wcs: &[u16]) -> bool {
    let seen: Vec<u16> = recs
        .iter()
        .map(|r| r.wc)
        .filter(|wc| wcs.contains(wc))
        .collect();
    seen == wcs
}

/// Streams with `1 << log_errored` errored streams stopping the DCI.
fn streams(log_errored: u8) -> DciStreams {
    DciStreams {
        log_concurrent: 2,
        log_errored,
    }
}

const TRE: Option<u8> = Some(Syndrome::TransportRetryExc as u8);
const FLUSH: Option<u8> = Some(Syndrome::WrFlush as u8);
const RNR_EXC: Option<u8> = Some(Syndrome::RnrRetryExc as u8);

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
        i.sq.dc(&t.dest(0))
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
        std::thread::sleep(Duration::from_micros(100));
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

/// A path cut one way between a DCI's device and a DCT's fails the DCI's
/// WQE either way, after its retries, with TRANSPORT_RETRY_EXC_ERR, on its
/// stream alone. Cut towards the DCT, nothing arrives; cut back from it, the
/// DCT received the message, once, although the DCI's WQE failed. Healed
/// within the retries, the WQE completes, the message received once.
fn a_path_cut_one_way_fails_the_stream_either_way(f: &TestFabric) {
    let fab = Fabric::open(&f.0).unwrap();
    // 4.2 ms per try, two retries.
    let rts = RtsAttr {
        timeout: 10,
        retry_cnt: 2,
        ..RtsAttr::default()
    };
    let mut t = Target::new(f.open("sim1"), 0x5eed, access::REMOTE_WRITE);
    t.post_recv(8, 0, 64);
    let streams = DciStreams {
        log_concurrent: 2,
        log_errored: 2,
    };
    let mut d: StreamDci = Initiator::with_streams(f.open("sim0"), rts, streams);
    let failed = Some(Syndrome::TransportRetryExc as u8);
    let received = |t: &mut Target, n: usize| {
        let mut v = Vec::new();
        t.ring.poll(usize::MAX, |c| v.push(rec(c)));
        assert_eq!(v.len(), n, "{v:?}");
        v
    };

    fab.set_path_down(0, 1, true).unwrap();
    let w = d.put(&t, 0, 0, b"lost", Bad::No);
    d.sq.ring_doorbell();
    assert_eq!(outcome(&d.done(1), &[w]), vec![failed]);
    received(&mut t, 0);
    fab.set_path_down(0, 1, false).unwrap();

    fab.set_path_down(1, 0, true).unwrap();
    let w = d.put(&t, 1, 64, b"arrives", Bad::No);
    d.sq.ring_doorbell();
    assert_eq!(outcome(&d.done(1), &[w]), vec![failed]);
    let r = received(&mut t, 1);
    assert_eq!((r[0].bc, r[0].imm), (7, 1 << 16 | 64));
    assert_eq!(t.mr.to_vec(64, 7), b"arrives");

    let w = d.put(&t, 2, 128, b"healed", Bad::No);
    d.sq.ring_doorbell();
    assert_eq!(wait(&t.ctx, &mut t.ring, 1)[0].bc, 6);
    fab.set_path_down(1, 0, false).unwrap();
    assert_eq!(outcome(&d.done(1), &[w]), vec![None]);
    received(&mut t, 0);
    assert_eq!(t.mr.to_vec(128, 6), b"healed");
    assert_eq!(d.qp.state(), QpState::Rts, "two streams errored of four");
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
    let too_many = DciStreams {
        log_concurrent: 2,
        log_errored: DCI_STREAM_CAPS.log_errored + 1,
    };
    let e = c
        .create_dci(&pd, &cq, &QpCaps::default(), too_many)
        .unwrap_err();
    assert!(matches!(e, DeviceError::Invalid(_)), "{e}");
    assert_eq!(DCI_STREAM_CAPS.log_errored, 4);
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

fn a_bad_address_errors_only_its_stream(f: &TestFabric) {
    let mut t = Target::new(f.open("sim1"), 21, access::REMOTE_WRITE);
    t.post_recv(16, 0x8000, 64);
    // Four errored streams stop it: two do not.
    let mut i = StreamDci::with_streams(f.open("sim0"), quick(), streams(2));
    let w = [
        i.put(&t, 0, 0x000, b"lost", Bad::Key),
        i.put(&t, 1, 0x040, b"lost", Bad::Dct),
        i.put(&t, 2, 0x080, b"two", Bad::No),
        i.put(&t, 0, 0x0c0, b"flushed", Bad::No),
        i.put(&t, 3, 0x100, b"three", Bad::No),
        i.put(&t, 1, 0x140, b"flushed", Bad::No),
        i.put(&t, 2, 0x180, b"two again", Bad::No),
    ];
    i.sq.ring_doorbell();
    let r = i.done(7);
    assert_eq!(
        outcome(&r, &w),
        [TRE, TRE, None, FLUSH, None, FLUSH, None],
        "{r:?}"
    );
    // The good streams did not wait for the bad ones' retries.
    assert!(r[..3].iter().all(|c| c.syndrome.is_none()), "{r:?}");
    for s in [[w[0], w[3]], [w[1], w[5]], [w[2], w[6]]] {
        assert!(in_order(&r, &s), "{r:?}");
    }
    assert_eq!(i.qp.state(), QpState::Rts);
    let got = wait(&t.ctx, &mut t.ring, 3);
    let imms: Vec<u32> = got.iter().map(|r| r.imm).collect();
    assert_eq!(
        imms,
        [(2 << 16) | 0x80, (3 << 16) | 0x100, (2 << 16) | 0x180]
    );
    assert_eq!(t.mr.to_vec(0x80, 3), b"two");
    assert_eq!(t.mr.to_vec(0x100, 5), b"three");
    assert_eq!(t.mr.to_vec(0x180, 9), b"two again");
    for off in [0, 0x40, 0xc0, 0x140] {
        assert_eq!(t.mr.to_vec(off, 4), [0; 4], "at {off:#x}");
    }
    // Later, the errored streams still flush and the others still run.
    let w = [
        i.put(&t, 0, 0x200, b"flushed", Bad::No),
        i.put(&t, 3, 0x240, b"later", Bad::No),
    ];
    i.sq.ring_doorbell();
    assert_eq!(outcome(&i.done(2), &w), [FLUSH, None]);
    assert_eq!(t.mr.to_vec(0x240, 5), b"later");
}

fn order_holds_within_a_stream_stalled_on_rnr(f: &TestFabric) {
    let mut empty = Target::new(f.open("sim1"), 31, access::REMOTE_WRITE);
    let mut t = Target::new(f.open("sim2"), 32, access::REMOTE_WRITE);
    t.post_recv(16, 0x8000, 64);
    let mut i = StreamDci::with_streams(f.open("sim0"), RtsAttr::default(), streams(0));
    // Stream 0 starts at the DCT with no receives, and goes on to it and
    // to the other, which streams 1 and 2 reach.
    let mut per: [Vec<u16>; 3] = Default::default();
    for k in 0..12u64 {
        let s = (k % 3) as u16;
        let to = if k % 6 == 0 { &empty } else { &t };
        per[usize::from(s)].push(i.put(to, s, 0x40 * k, &[k as u8 + 1; 8], Bad::No));
    }
    i.sq.ring_doorbell();
    let first = i.settle();
    assert_eq!(first.len(), 8, "streams 1 and 2 only: {first:?}");
    assert!(first.iter().all(|r| r.syndrome.is_none()), "{first:?}");
    assert!(in_order(&first, &per[1]) && in_order(&first, &per[2]));
    let at_t: Vec<u32> = wait(&t.ctx, &mut t.ring, 8).iter().map(|r| r.imm).collect();
    for s in [1u32, 2] {
        let mine: Vec<u32> = at_t.iter().copied().filter(|m| m >> 16 == s).collect();
        let want: Vec<u32> = (0..4).map(|n| (s << 16) | (0x40 * (3 * n + s))).collect();
        assert_eq!(mine, want, "stream {s} arrives in order");
    }
    // Nothing of stream 0 went anywhere while its first WQE waited.
    assert!(at_t.iter().all(|m| m >> 16 != 0), "{at_t:x?}");
    assert_eq!(t.mr.to_vec(0xc0, 8), [0; 8]);
    // Receives come: the stalled stream completes, in order.
    empty.post_recv(2, 0x8000, 64);
    let rest = i.done(4);
    assert!(rest.iter().all(|r| r.syndrome.is_none()), "{rest:?}");
    assert_eq!(rest.iter().map(|r| r.wc).collect::<Vec<_>>(), per[0]);
    let at_e: Vec<u32> = wait(&empty.ctx, &mut empty.ring, 2)
        .iter()
        .map(|r| r.imm)
        .collect();
    assert_eq!(at_e, [0, 0x180]);
    let at_t: Vec<u32> = wait(&t.ctx, &mut t.ring, 2).iter().map(|r| r.imm).collect();
    assert_eq!(at_t, [0xc0, 0x240]);
    assert_eq!(empty.mr.to_vec(0x180, 8), [7; 8]);
    assert_eq!(t.mr.to_vec(0x240, 8), [10; 8]);
    assert_eq!(i.qp.state(), QpState::Rts);
}

fn rnr_retries_spent_fail_only_their_stream(f: &TestFabric) {
    let empty = Target::new(f.open("sim1"), 41, access::REMOTE_WRITE);
    let mut t = Target::new(f.open("sim2"), 42, access::REMOTE_WRITE);
    t.post_recv(8, 0x8000, 64);
    let rts = RtsAttr {
        rnr_retry: 2,
        ..RtsAttr::default()
    };
    let mut i = StreamDci::with_streams(f.open("sim0"), rts, streams(1));
    let w = [
        i.put(&empty, 0, 0x00, b"never", Bad::No),
        i.put(&t, 1, 0x40, b"one", Bad::No),
        i.put(&empty, 0, 0x80, b"flushed", Bad::No),
        i.put(&t, 1, 0xc0, b"one more", Bad::No),
    ];
    i.sq.ring_doorbell();
    let r = i.done(4);
    assert_eq!(outcome(&r, &w), [RNR_EXC, None, FLUSH, None], "{r:?}");
    assert!(r[..2].iter().all(|c| c.syndrome.is_none()), "{r:?}");
    assert_eq!(i.qp.state(), QpState::Rts);
    assert_eq!(wait(&t.ctx, &mut t.ring, 2)[1].imm, (1 << 16) | 0xc0);
}

fn the_dci_goes_to_err_when_its_errored_streams_reach_the_limit(f: &TestFabric) {
    let empty = Target::new(f.open("sim1"), 51, access::REMOTE_WRITE);
    let mut t = Target::new(f.open("sim2"), 52, access::REMOTE_WRITE);
    t.post_recv(8, 0x8000, 64);
    // 1 << 1 errored streams stop it.
    let mut i = StreamDci::with_streams(f.open("sim0"), quick(), streams(1));
    let w = [
        i.put(&t, 0, 0x00, b"lost", Bad::Key),
        i.put(&t, 3, 0x40, b"done", Bad::No),
        // Waits on RNR (forever) when the DCI stops, with one behind it.
        i.put(&empty, 2, 0x80, b"waits", Bad::No),
        i.put(&t, 2, 0xc0, b"behind", Bad::No),
        i.put(&t, 1, 0x100, b"lost", Bad::Dct),
    ];
    i.sq.ring_doorbell();
    let r = i.done(5);
    assert_eq!(outcome(&r, &w), [TRE, None, FLUSH, FLUSH, TRE], "{r:?}");
    assert_eq!(r[0].syndrome, None, "{r:?}");
    assert_eq!(i.qp.state(), QpState::Err);
    assert_eq!(t.mr.to_vec(0x40, 4), b"done");
    assert_eq!(t.mr.to_vec(0xc0, 6), [0; 6]);
}

fn a_reset_stream_runs_again(f: &TestFabric) {
    let mut t = Target::new(f.open("sim1"), 61, access::REMOTE_WRITE);
    t.post_recv(8, 0x8000, 64);
    let mut i = StreamDci::with_streams(f.open("sim0"), quick(), streams(2));
    let w = [
        i.put(&t, 0, 0x00, b"lost", Bad::Key),
        i.put(&t, 0, 0x40, b"flushed", Bad::No),
    ];
    i.sq.ring_doorbell();
    assert_eq!(outcome(&i.done(2), &w), [TRE, FLUSH]);
    // Errored until reset.
    let w = [i.put(&t, 0, 0x80, b"flushed too", Bad::No)];
    i.sq.ring_doorbell();
    assert_eq!(outcome(&i.done(1), &w), [FLUSH]);
    i.qp.reset_dci_stream(0).unwrap();
    let w = [i.put(&t, 0, 0xc0, b"runs again", Bad::No)];
    i.sq.ring_doorbell();
    assert_eq!(outcome(&i.done(1), &w), [None]);
    assert_eq!(wait(&t.ctx, &mut t.ring, 1)[0].imm, 0xc0);
    assert_eq!(t.mr.to_vec(0xc0, 10), b"runs again");
    assert_eq!(t.mr.to_vec(0x40, 7), [0; 7]);
    // Refused: a stream it does not have, an RC QP, a DCI not in RTS.
    let e = i.qp.reset_dci_stream(4).unwrap_err();
    assert!(
        matches!(&e, DeviceError::Invalid(m) if m.contains("stream 4")),
        "{e}"
    );
    let pd = i.ctx.alloc_pd();
    let cq = i.ctx.create_cq(&Default::default()).unwrap();
    let rc = i
        .ctx
        .create_qp(&pd, &cq, &cq, None, &QpCaps::default())
        .unwrap();
    let e = rc.reset_dci_stream(0).unwrap_err();
    assert!(e.to_string().contains("not a DCI"), "{e}");
    let dci = i
        .ctx
        .create_dci(&pd, &cq, &QpCaps::default(), streams(2))
        .unwrap();
    dci.to_init().unwrap();
    let e = dci.reset_dci_stream(0).unwrap_err();
    assert!(matches!(e, DeviceError::BadTransition { .. }), "{e}");
}

fn a_dci_without_streams_runs_in_order_and_stops_at_an_error(f: &TestFabric) {
    let mut empty = Target::new(f.open("sim1"), 71, access::REMOTE_WRITE);
    let mut t = Target::new(f.open("sim2"), 72, access::REMOTE_WRITE);
    t.post_recv(8, 0x8000, 64);
    let none = DciStreams {
        log_concurrent: 0,
        log_errored: 0,
    };
    let mut i = StreamDci::with_streams(f.open("sim0"), quick(), none);
    // Without streams, a WQE's stream id means nothing: all wait behind
    // the first.
    let w = [
        i.put(&empty, 0, 0x00, b"waits", Bad::No),
        i.put(&t, 1, 0x40, b"behind", Bad::No),
    ];
    i.sq.ring_doorbell();
    assert_eq!(i.settle(), []);
    empty.post_recv(1, 0x8000, 64);
    let r = i.done(2);
    assert_eq!(outcome(&r, &w), [None, None]);
    assert!(in_order(&r, &w), "{r:?}");
    // The first error stops the DCI.
    let w = [
        i.put(&t, 2, 0x80, b"lost", Bad::Key),
        i.put(&t, 3, 0xc0, b"flushed", Bad::No),
    ];
    i.sq.ring_doorbell();
    assert_eq!(outcome(&i.done(2), &w), [TRE, FLUSH]);
    assert_eq!(i.qp.state(), QpState::Err);
}

/// Time from the doorbell of one WRITE from `i` to `to` on `stream` to its
/// completion: on the NIC's logical clock (`deferred`), else on the wall
/// clock (an upper bound of the NIC's time).
fn write_time(i: &mut StreamDci, to: &Target, stream: u16, deferred: bool) -> u64 {
    let c0 = i.ctx.sched_stats().clock_ns;
    let t0 = Instant::now();
    i.sq.dc(&to.dest(stream))
        .write(to.mr.addr(), to.mr.rkey(), Payload::Inline(b"x"))
        .unwrap()
        .post(0);
    i.sq.ring_doorbell();
    assert_eq!(i.done(1)[0].syndrome, None);
    if deferred {
        i.ctx.sched_stats().clock_ns - c0
    } else {
        t0.elapsed().as_nanos() as u64
    }
}

fn the_first_message_to_a_new_dct_pays_the_connect_latency(f: &TestFabric) {
    let a = Target::new(f.open("sim1"), 81, access::REMOTE_WRITE);
    let b = Target::new(f.open("sim2"), 82, access::REMOTE_WRITE);
    let deferred = matches!(f.1, ExecMode::Deferred { .. });
    let lat = if deferred { 5_000 } else { 2_000_000 };
    let mut i = StreamDci::with_streams(f.open("sim0"), RtsAttr::default(), streams(0));
    let link = Link {
        gbit_per_s: None,
        latency: Duration::from_nanos(lat),
    };
    i.ctx.fabric().set_link(0, Some(link)).unwrap();
    let first = write_time(&mut i, &a, 0, deferred);
    let second = write_time(&mut i, &a, 0, deferred);
    let other = write_time(&mut i, &b, 0, deferred);
    let back = write_time(&mut i, &a, 0, deferred);
    let fresh = write_time(&mut i, &a, 1, deferred);
    let all = [first, second, other, back, fresh];
    if deferred {
        // The NIC's clock: a connect costs exactly one one-way latency.
        assert_eq!(first - second, lat, "{all:?}");
        assert_eq!([other, back, fresh], [first; 3], "{all:?}");
        assert!(second >= 2 * lat, "{all:?}");
    } else {
        // The wall clock only bounds the NIC's from above: no completion
        // comes before its round trip, plus the connect where one is due.
        for (n, t) in all.iter().enumerate() {
            let want = if n == 1 { 2 * lat } else { 3 * lat };
            assert!(*t >= want, "message {n}: {all:?}");
        }
    }
}
