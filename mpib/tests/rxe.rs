//! mpib on real RDMA devices through the verbs data path: kernel soft-RoCE in
//! the qemu guest of `scripts/rxe/run-tests.sh`, which runs these with
//! `MPIB_TEST_DEVICE=rxe0 MPIB_TEST_DEVICE2=rxe1 --ignored` (two virtio NICs,
//! one rxe device on each).
//!
//! Rail 0 is `MPIB_TEST_DEVICE`, rail 1 `MPIB_TEST_DEVICE2` or, without it,
//! a second context opened on the first device. Both communicators live in
//! this process (`mpib::pair`), each opening its own context per rail, and
//! each rail connects a device to itself (RoCE loopback; one Linux kernel
//! does not carry RoCE between two of its own rxe devices).
//!
//! The bodies are the software-device tests' (`transfer.rs`, `pipeline.rs`,
//! `bad_peer.rs`) with the same assertions; what differs is timing: the NIC
//! runs on its own, so loops are bounded by the wall clock, the raw bad peer
//! waits for each of its writes to complete (so the victim has it before it
//! polls), and "no RNR" is read from rxe's own port counters. Counts are
//! small: the guest's traffic is emulated.

mod support;

use std::time::{Duration, Instant};

use mlx5::device::{access, ConnInfo, Context, Mr, QpCaps, RtrAttr, RtsAttr};
use mlx5::sq::Sge;
use mlx5::wr::{CqId, DataPath, Domain, QpId, SendOp, SendWr, WcStatus};
use mpib::cts::{CtsBuffer, CtsEntry, ENTRY_LEN};
use mpib::imm::{Imm, SIZE_Q_SENTINEL};
use mpib::record::{Record, RECORD_LEN};
use mpib::{
    Buffer, CloseReason, Comm, CommInfo, Config, CtsError, Error, PendingComm, PolicyKind,
    ProtocolError, QpInfo, RailInfo, Request, COMM_INFO_VERSION,
};
use support::transfers;
use support::*;

const WHY: &str = "needs an RDMA device: MPIB_TEST_DEVICE=rxe0 (and MPIB_TEST_DEVICE2=rxe1) \
                   in the rxe guest (bash scripts/rxe/run-tests.sh)";

/// How long a loop may wait for the NIC before the test counts as stuck.
const PATIENCE: Duration = Duration::from_secs(30);

/// Opens `name`, which must take the verbs data path.
fn open_verbs(name: &str) -> Context {
    let dev = Context::open(name).unwrap_or_else(|e| panic!("open {name}: {e}"));
    assert_eq!(
        DataPath::of(&dev),
        DataPath::Verbs,
        "{name} is not mlx5: the verbs data path"
    );
    dev
}

/// The device names of rail 0 and rail 1.
fn rail_names() -> [String; 2] {
    let d0 = std::env::var("MPIB_TEST_DEVICE").expect(WHY);
    let d1 = std::env::var("MPIB_TEST_DEVICE2").unwrap_or_else(|_| d0.clone());
    [d0, d1]
}

/// One context per rail for one side: on `names[r]`.
fn side(names: &[String], rails: usize) -> Vec<Context> {
    names[..rails].iter().map(|n| open_verbs(n)).collect()
}

/// Two communicators over `rails` rails.
struct Rx {
    a: Comm,
    b: Comm,
}

fn world_on(names: &[String; 2], rails: usize, cfg: &Config) -> Rx {
    let da = side(names, rails);
    let db = side(names, rails);
    let (a, b) = mpib::pair(&da, &db, cfg).expect("pair");
    assert_eq!(a.nrails(), rails);
    Rx { a, b }
}

fn world(rails: usize, cfg: &Config) -> Rx {
    world_on(&rail_names(), rails, cfg)
}

fn cfg(policy: PolicyKind) -> Config {
    Config {
        policy,
        ..Config::default()
    }
}

/// rxe's port counter `name` of device `dev` (sysfs `hw_counters`).
fn port_counter(dev: &str, name: &str) -> u64 {
    let p = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters/{name}");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// RNR NAKs sent and received so far on every device of the rails.
fn rnr_counts() -> Vec<(String, u64, u64)> {
    let mut names = rail_names().to_vec();
    names.dedup();
    names
        .into_iter()
        .map(|d| {
            let sent = port_counter(&d, "send_rnr_err");
            let got = port_counter(&d, "rcvd_rnr_err");
            (d, sent, got)
        })
        .collect()
}

// ------------------------------------------------------------- transfers

// The bodies are transfer.rs's (tests/support/transfers.rs).

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn every_split_delivers_every_byte() {
    let mut w = world(2, &Config::default());
    transfers::every_split(&mut w.a, &mut w.b, &[1, 64, 100, 4096, 65_536, 1_000_003]);
    for r in 0..2 {
        assert!(w.a.stats().signals[r] > 0 && w.b.stats().signals[r] > 0);
    }
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn zero_byte_transfers_signal_on_rail_0() {
    for frac in [0.0, 0.5, 1.0] {
        let mut w = world(2, &cfg(PolicyKind::Static(frac)));
        transfers::zero_bytes_on_rail_0(&mut w.a, &mut w.b);
    }
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn grouped_receives_return_each_size_exactly() {
    let mut w = world(2, &cfg(PolicyKind::Static(0.5)));
    transfers::grouped_sizes_exact(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn fast_path_is_one_wr_per_active_rail() {
    let mut w = world(2, &cfg(PolicyKind::Static(0.5)));
    transfers::fast_path_one_wr_per_rail(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn beyond_size_q_takes_the_record_path() {
    // Granularity 1: size_q covers sizes below 4 MiB only.
    let c = Config {
        granularity: 1,
        policy: PolicyKind::Static(0.5),
        ..Config::default()
    };
    let mut w = world(2, &c);
    transfers::beyond_size_q(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn one_rail() {
    let mut w = world(1, &Config::default());
    transfers::one_rail(&mut w.a, &mut w.b, 100);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn cts_alternates_devices_and_signals_by_parity() {
    let mut w = world(2, &Config::default());
    transfers::cts_by_parity(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn data_qps_round_robin_one_per_request() {
    let c = Config {
        qps_per_rail: 3,
        depth: 16,
        ..Config::default()
    };
    let mut w = world(2, &c);
    transfers::round_robin_whole_requests(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn two_rails_on_one_device() {
    // Whatever MPIB_TEST_DEVICE2 says: both rails on MPIB_TEST_DEVICE, each
    // rail its own context (PD, CQs, SRQ, QPs) on the one device.
    let d0 = rail_names()[0].clone();
    let mut w = world_on(&[d0.clone(), d0], 2, &Config::default());
    assert_eq!(w.a.device(0).unwrap().name(), w.a.device(1).unwrap().name());
    transfers::every_split(&mut w.a, &mut w.b, &[100, 4096, 100_000]);
    transfers::grouped_sizes_exact(&mut w.a, &mut w.b);
    let s = w.a.stats();
    assert!(s.signals[0] > 0 && s.signals[1] > 0, "{s:?}");
}

// -------------------------------------------------------------- pipeline

const WINDOW: usize = 16;
const MAX_LEN: usize = 16 * 1024;

struct Flight {
    send: Option<Request>,
    recv: Request,
    k: u64,
    lens: Vec<usize>,
    sent: bool,
    got: bool,
}

/// pipeline.rs's sizes: 1 to 3 buffers (some 0, some multiples of 128, some
/// filling their buffer).
fn lens_of(rng: &mut Rng) -> Vec<usize> {
    let n = 1 + rng.below(3) as usize;
    (0..n)
        .map(|_| match rng.below(6) {
            0 => 0,
            1 => 128 * (1 + rng.below(42) as usize),
            2 => MAX_LEN / 3,
            _ => rng.below(MAX_LEN as u64 / 3) as usize,
        })
        .collect()
}

/// pipeline.rs's run: `count` transfers from `w.a` to `w.b` with up to
/// `window` in flight, every byte and size checked.
fn pipeline(w: &mut Rx, seed: u64, count: u64, window: usize) {
    let mut rng = Rng(seed);
    let bufs = |c: &Comm| -> Vec<Vec<Buffer>> {
        (0..window)
            .map(|_| {
                (0..3)
                    .map(|_| c.alloc_buffer(MAX_LEN / 3).unwrap())
                    .collect()
            })
            .collect()
    };
    let (src, dst) = (bufs(&w.a), bufs(&w.b));
    let mut flights: Vec<Option<Flight>> = (0..window).map(|_| None).collect();
    let (mut next, mut done) = (0u64, 0u64);
    let mut last = (Instant::now(), 0u64);
    while done < count {
        if done != last.1 {
            last = (Instant::now(), done);
        }
        assert!(
            last.0.elapsed() < PATIENCE,
            "seed {seed}: stuck at {done} of {count}"
        );
        for (i, f) in flights.iter_mut().enumerate() {
            if f.is_some() || next >= count {
                continue;
            }
            let lens = lens_of(&mut rng);
            let rspans: Vec<_> = dst[i].iter().take(lens.len()).map(|b| b.all()).collect();
            for b in &dst[i] {
                b.write(0, &vec![0xee; MAX_LEN / 3]).unwrap();
            }
            let Some(recv) = w.b.irecv(&rspans, next as u32).unwrap() else {
                break;
            };
            for (j, &l) in lens.iter().enumerate() {
                src[i][j]
                    .write(0, &pattern(next * 8 + j as u64, l))
                    .unwrap();
            }
            *f = Some(Flight {
                send: None,
                recv,
                k: next,
                lens,
                sent: false,
                got: false,
            });
            next += 1;
        }
        // Sends go out in the order the receives were posted.
        let mut order: Vec<usize> = (0..window).filter(|&i| flights[i].is_some()).collect();
        order.sort_by_key(|&i| flights[i].as_ref().map(|f| f.k));
        for i in order {
            let f = flights[i].as_mut().unwrap();
            if f.send.is_some() {
                continue;
            }
            let spans: Vec<_> = f
                .lens
                .iter()
                .enumerate()
                .map(|(j, &l)| src[i][j].span(0, l as u64).unwrap())
                .collect();
            match w.a.isend(&spans, f.k as u32).unwrap() {
                Some(r) => f.send = Some(r),
                None => break,
            }
        }
        for (i, slot) in flights.iter_mut().enumerate() {
            let Some(f) = slot else { continue };
            if let (Some(s), false) = (&f.send, f.sent) {
                if let Some(sz) =
                    w.a.test(s)
                        .unwrap_or_else(|e| panic!("seed {seed}: send {}: {e}", f.k))
                {
                    assert_eq!(sz.len(), f.lens.len());
                    f.sent = true;
                }
            }
            if !f.got {
                if let Some(sz) =
                    w.b.test(&f.recv)
                        .unwrap_or_else(|e| panic!("seed {seed}: recv {}: {e}", f.k))
                {
                    let want: Vec<u32> = f.lens.iter().map(|&l| l as u32).collect();
                    assert_eq!(&*sz, &want[..], "seed {seed}: transfer {} sizes", f.k);
                    for (j, &l) in f.lens.iter().enumerate() {
                        let got = dst[i][j].to_vec(0, MAX_LEN / 3).unwrap();
                        assert!(
                            got[..l] == pattern(f.k * 8 + j as u64, l)[..],
                            "seed {seed}: transfer {} buffer {j}: bytes",
                            f.k
                        );
                        assert!(
                            got[l..].iter().all(|&x| x == 0xee),
                            "seed {seed}: transfer {} buffer {j}: written past its size",
                            f.k
                        );
                    }
                    f.got = true;
                }
            }
            if f.sent && f.got {
                *slot = None;
                done += 1;
            }
        }
    }
    assert_eq!(
        w.a.stats().sends,
        count,
        "seed {seed}: each transfer sent once"
    );
    assert_eq!(w.b.stats().recvs, count);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn pipelined_transfers_never_meet_an_empty_srq() {
    let c = Config {
        policy: PolicyKind::Adaptive,
        depth: 32,
        qps_per_rail: 2,
        ..Config::default()
    };
    let mut w = world(2, &c);
    let before = rnr_counts();
    let count = 600;
    let t = Instant::now();
    pipeline(&mut w, 7, count, WINDOW);
    eprintln!(
        "{count} pipelined transfers in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    // rxe counts every RNR NAK it sends (a WRITE_WITH_IMM found its SRQ
    // empty) and receives, per device.
    assert_eq!(rnr_counts(), before, "RNR NAKs (device, sent, received)");
    let (a, b) = (w.a.stats(), w.b.stats());
    eprintln!(
        "signals per rail {:?}, fast path {}, record path {}, fewest receives left {:?}",
        a.signals, a.fast_path, a.record_path, b.srq_min_outstanding
    );
    for r in 0..2 {
        assert_eq!(
            b.srq_consumed[r], a.signals[r],
            "rail {r}: one receive per immediate"
        );
        assert!(b.srq_min_outstanding[r] > 0, "rail {r}: SRQ ran dry");
        assert!(
            b.srq_posted[r] >= b.srq_consumed[r] + 32,
            "rail {r}: low mark kept"
        );
        assert!(a.signals[r] > count / 10, "rail {r} carried traffic: {a:?}");
    }
    assert!(a.fast_path > 50 && a.record_path > 50, "{a:?}");
    assert_eq!(b.cts_signaled, b.cts);
}

// -------------------------------------------------------------- bad peer

/// bad_peer.rs's raw peer: per rail a CTS QP and one data QP.
struct Fake {
    rails: Vec<FakeRail>,
    victim: CommInfo,
}

struct FakeRail {
    dom: Domain,
    cq: CqId,
    cts: QpId,
    data: QpId,
    mem: Mr,
}

const CFG: Config = Config {
    qps_per_rail: 1,
    depth: 8,
    granularity: 128,
    policy: PolicyKind::Static(0.5),
    srq_low: None,
    srq_high: None,
    send_requests: None,
};

/// A victim communicator on `vdevs` connected to a raw peer on `fdevs`.
fn victim(vdevs: &[Context], fdevs: &[Context]) -> (Comm, Fake) {
    let p = PendingComm::new(vdevs, &CFG).unwrap();
    let vinfo = p.info().clone();
    let mut rails = Vec::new();
    let mut infos = Vec::new();
    for d in fdevs {
        let mut dom = Domain::new(d).unwrap();
        let cq = dom.create_cq(1024).unwrap();
        let caps = QpCaps {
            rq_wqe_cnt: 64,
            ..QpCaps::default()
        };
        let cts = dom.create_qp(cq, cq, None, &caps).unwrap();
        let data = dom.create_qp(cq, cq, None, &caps).unwrap();
        let mem = dom
            .pd()
            .alloc_mr(1 << 16, access::LOCAL_WRITE | access::REMOTE_WRITE)
            .unwrap();
        let qi = |q: QpId| {
            let c = dom.qp(q).conn_info();
            QpInfo {
                qpn: c.qpn,
                psn: c.psn,
            }
        };
        let c = dom.qp(cts).conn_info();
        infos.push(RailInfo {
            lid: c.lid,
            gid: c.gid,
            cts_qp: qi(cts),
            data_qps: vec![qi(data)],
            fifo_addr: mem.addr(),
            fifo_rkey: mem.rkey(),
            records_addr: mem.addr() + 8 * ENTRY_LEN as u64,
            records_rkey: mem.rkey(),
        });
        rails.push(FakeRail {
            dom,
            cq,
            cts,
            data,
            mem,
        });
    }
    let finfo = CommInfo {
        version: COMM_INFO_VERSION,
        depth: 8,
        granularity: 128,
        rails: infos,
    };
    let comm = p.connect(&finfo).unwrap();
    for (f, v) in rails.iter().zip(&vinfo.rails) {
        for (q, peer) in [(f.cts, v.cts_qp), (f.data, v.data_qps[0])] {
            let remote = ConnInfo {
                qpn: peer.qpn,
                lid: v.lid,
                gid: v.gid,
                psn: peer.psn,
            };
            let rts = RtsAttr {
                sq_psn: f.dom.qp(q).conn_info().psn,
                ..RtsAttr::default()
            };
            f.dom
                .qp(q)
                .connect(&RtrAttr::new(remote, access::REMOTE_WRITE), &rts)
                .unwrap();
        }
    }
    (
        comm,
        Fake {
            rails,
            victim: vinfo,
        },
    )
}

impl Fake {
    /// Posts one signaled work request and waits for its completion: the
    /// victim's NIC has then placed the bytes and the immediate, so the
    /// victim sees them at its next poll, in posting order.
    fn post(
        &mut self,
        r: usize,
        qp_cts: bool,
        op: SendOp,
        sge: Option<(usize, u32)>,
        remote: (u64, u32),
    ) {
        let f = &mut self.rails[r];
        let sges = sge.map(|(off, len)| Sge {
            addr: f.mem.addr() + off as u64,
            len,
            lkey: f.mem.lkey(),
        });
        let qp = if qp_cts { f.cts } else { f.data };
        f.dom
            .post_send(
                qp,
                &SendWr {
                    wr_id: 1,
                    op,
                    sges: sges.as_slice(),
                    remote,
                    signaled: true,
                    fence: false,
                },
            )
            .unwrap();
        let t = Instant::now();
        let mut wcs = Vec::new();
        while wcs.is_empty() {
            assert!(
                t.elapsed() < PATIENCE,
                "the bad peer's {op:?} never completed"
            );
            f.dom.poll_cq(f.cq, 16, &mut wcs).unwrap();
        }
        assert_eq!(wcs[0].status, WcStatus::Success, "the bad peer's {op:?}");
    }

    /// A zero-length WRITE_WITH_IMM on rail `r`'s data QP.
    fn imm(&mut self, r: usize, slot: u8, mask: u8, size_q: u32) {
        let v = &self.victim.rails[r];
        let imm = Imm { slot, mask, size_q }.encode();
        self.post(
            r,
            false,
            SendOp::WriteImm(imm),
            None,
            (v.records_addr, v.records_rkey),
        );
    }

    /// A completion record for `slot`, as the leader rail `r` writes it.
    fn record(&mut self, r: usize, slot: u8, sizes: &[u32]) {
        let mut b = [0u8; RECORD_LEN];
        Record::new_checked(&mut b[..]).unwrap().set(sizes);
        self.rails[r].mem.write(32_768, &b);
        let v = &self.victim.rails[r];
        let at = v.records_addr + u64::from(slot) * RECORD_LEN as u64;
        self.post(
            r,
            false,
            SendOp::Write,
            Some((32_768, RECORD_LEN as u32)),
            (at, v.records_rkey),
        );
    }

    /// Raw bytes into the victim's FIFO slot `slot` on rail `r`.
    fn cts(&mut self, r: usize, slot: u8, bytes: &[u8; ENTRY_LEN]) {
        self.rails[r].mem.write(40_000, bytes);
        let v = &self.victim.rails[r];
        let at = v.fifo_addr + u64::from(slot) * ENTRY_LEN as u64;
        self.post(
            r,
            true,
            SendOp::Write,
            Some((40_000, ENTRY_LEN as u32)),
            (at, v.fifo_rkey),
        );
    }

    /// A zero-length SEND.
    fn send(&mut self, r: usize) {
        self.post(r, false, SendOp::Send, None, (0, 0));
    }
}

/// Polls the victim until it closes; returns why.
fn closes(c: &mut Comm) -> CloseReason {
    let t = Instant::now();
    while t.elapsed() < PATIENCE {
        c.progress();
        if let Some(r) = c.closed() {
            return r.clone();
        }
    }
    panic!("the victim never closed");
}

/// The good pair moves one verified transfer each way.
fn good_pair_still_works(a: &mut Comm, b: &mut Comm, k: u64) {
    transfer(a, b, &[pattern(k, 5000)], &[8192], k as u32);
    transfer(
        b,
        a,
        &[pattern(k + 1000, 300), pattern(k + 2000, 7)],
        &[300, 64],
        1,
    );
}

type Case = (
    &'static str,
    fn(&mut Comm, &mut Fake) -> Vec<Request>,
    ProtocolError,
);

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn garbage_immediates_and_records_close_only_that_communicator() {
    let names = rail_names();
    let mut g = world_on(&names, 2, &Config::default());

    fn recv(c: &mut Comm, sizes: &[u64]) -> Request {
        let bufs: Vec<_> = sizes
            .iter()
            .map(|&n| c.alloc_buffer(n as usize).unwrap())
            .collect();
        let spans: Vec<_> = bufs.iter().map(|b| b.all()).collect();
        c.irecv(&spans, 1).unwrap().unwrap()
    }
    let imm = |slot, mask, size_q| Imm { slot, mask, size_q }.encode();
    let cases: Vec<Case> = vec![
        (
            "immediate for a slot with no receive",
            |_, f| {
                f.imm(0, 3, 1, 0);
                vec![]
            },
            ProtocolError::UnknownSlot { slot: 3 },
        ),
        (
            "slot beyond the FIFO",
            |_, f| {
                f.imm(0, 200, 1, 0);
                vec![]
            },
            ProtocolError::UnknownSlot { slot: 200 },
        ),
        (
            "mask 0",
            |c, f| {
                let r = recv(c, &[256]);
                f.imm(0, 0, 0, 0);
                vec![r]
            },
            ProtocolError::BadMask {
                mask: 0,
                rail: 0,
                rails: 3,
            },
        ),
        (
            "mask without the rail it arrived on",
            |c, f| {
                let r = recv(c, &[256]);
                f.imm(0, 0, 0b10, 0);
                vec![r]
            },
            ProtocolError::BadMask {
                mask: 2,
                rail: 0,
                rails: 3,
            },
        ),
        (
            "duplicate immediate",
            |c, f| {
                let r = recv(c, &[256]);
                f.imm(0, 0, 0b11, 1);
                f.imm(0, 0, 0b11, 1);
                vec![r]
            },
            ProtocolError::DuplicateImmediate { slot: 0, rail: 0 },
        ),
        (
            "rails disagree on the size",
            |c, f| {
                let r = recv(c, &[256]);
                f.imm(0, 0, 0b11, 1);
                f.imm(1, 0, 0b11, 2);
                vec![r]
            },
            ProtocolError::Inconsistent {
                slot: 0,
                first: imm(0, 3, 1),
                got: imm(0, 3, 2),
            },
        ),
        (
            "rails disagree on the mask",
            |c, f| {
                let r = recv(c, &[256]);
                f.imm(1, 0, 0b11, 1);
                c.progress(); // the victim learns mask 0b11 from rail 1
                f.imm(0, 0, 0b01, 1);
                vec![r]
            },
            ProtocolError::Inconsistent {
                slot: 0,
                first: imm(0, 3, 1),
                got: imm(0, 1, 1),
            },
        ),
        (
            "size beyond the buffer",
            |c, f| {
                let r = recv(c, &[256]);
                f.imm(0, 0, 1, 3);
                vec![r]
            },
            ProtocolError::SizeBeyondBuffer {
                slot: 0,
                index: 0,
                size: 384,
                posted: 256,
            },
        ),
        (
            "size in the immediate for a grouped receive",
            |c, f| {
                let r = recv(c, &[256, 256]);
                f.imm(0, 0, 1, 1);
                vec![r]
            },
            ProtocolError::SizeInImmediate { slot: 0, nreqs: 2 },
        ),
        (
            "record size beyond its buffer",
            |c, f| {
                let r = recv(c, &[100, 100]);
                f.record(1, 0, &[50, 5000]);
                f.imm(1, 0, 0b10, SIZE_Q_SENTINEL);
                vec![r]
            },
            ProtocolError::SizeBeyondBuffer {
                slot: 0,
                index: 1,
                size: 5000,
                posted: 100,
            },
        ),
        (
            "late immediate for a completed slot",
            |c, f| {
                let r = recv(c, &[256]);
                f.imm(0, 0, 1, 1);
                // Both immediates are in the victim's CQs before it polls:
                // rail 0's completes the slot, rail 1's comes after it.
                f.imm(1, 0, 0b10, 1);
                vec![r]
            },
            ProtocolError::LateImmediate { slot: 0 },
        ),
        (
            "a SEND",
            |c, f| {
                let r = recv(c, &[256]);
                f.send(0);
                vec![r]
            },
            ProtocolError::UnexpectedCompletion { rail: 0 },
        ),
    ];
    for (k, (name, act, want)) in cases.into_iter().enumerate() {
        let (mut v, mut f) = victim(&side(&names, 2), &side(&names, 2));
        let reqs = act(&mut v, &mut f);
        let why = closes(&mut v);
        assert_eq!(why, CloseReason::Protocol(want), "{name}");
        eprintln!("{name}: closed ({why})");
        for r in &reqs {
            match v.test(r) {
                Err(Error::Closed(CloseReason::Protocol(_))) => {}
                Ok(Some(s)) if name.starts_with("late") => assert_eq!(&*s, &[128]),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(v.irecv(&[v.alloc_buffer(8).unwrap().all()], 1).is_err());
        good_pair_still_works(&mut g.a, &mut g.b, k as u64);
    }
    assert!(g.a.closed().is_none() && g.b.closed().is_none());
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn malformed_cts_entries_close_only_that_communicator() {
    let names = rail_names();
    let mut g = world_on(&names, 2, &Config::default());

    let buf = |n: u32| CtsBuffer {
        addr: 0x10_0000,
        size: n,
        rkeys: [1, 2],
    };
    let entry = |seq: u64, slot: u8, tag: u32, bufs: &[CtsBuffer]| {
        let mut b = [0u8; ENTRY_LEN];
        CtsEntry::new_checked(&mut b[..])
            .unwrap()
            .set(seq, slot, tag, bufs);
        b
    };
    let mut random = [0u8; ENTRY_LEN];
    let mut x = 0x1234_5678u64;
    for c in random.chunks_mut(8) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        c.copy_from_slice(&x.to_le_bytes());
    }
    let nreqs = |n: u8| {
        let mut b = entry(1, 0, 5, &[buf(100)]);
        CtsEntry::new_checked(&mut b[..]).unwrap().set_nreqs(n);
        b
    };
    let mut torn = entry(1, 0, 5, &[buf(100)]);
    torn[208..216].copy_from_slice(&77u64.to_le_bytes());
    let cases: Vec<(&str, [u8; ENTRY_LEN], CtsError)> = vec![
        ("no buffers", nreqs(0), CtsError::Nreqs(0)),
        ("nine buffers", nreqs(9), CtsError::Nreqs(9)),
        (
            "another slot",
            entry(1, 3, 5, &[buf(100)]),
            CtsError::Slot {
                expected: 0,
                got: 3,
            },
        ),
        (
            "tag mismatch",
            entry(1, 0, 6, &[buf(100)]),
            CtsError::Tag {
                expected: 5,
                got: 6,
            },
        ),
        (
            "buffer count mismatch",
            entry(1, 0, 5, &[buf(100), buf(100)]),
            CtsError::Count { posted: 2, sent: 1 },
        ),
        (
            "receive smaller than the send",
            entry(1, 0, 5, &[buf(99)]),
            CtsError::TooSmall {
                index: 0,
                sent: 100,
                posted: 99,
            },
        ),
        (
            "range wraps",
            entry(
                1,
                0,
                5,
                &[CtsBuffer {
                    addr: u64::MAX - 10,
                    ..buf(100)
                }],
            ),
            CtsError::Range { index: 0 },
        ),
        (
            "wrong sequence",
            entry(9, 0, 5, &[buf(100)]),
            CtsError::Sequence {
                expected: 1,
                head: 9,
                tail: 9,
            },
        ),
        (
            "tail disagrees with head",
            torn,
            CtsError::Sequence {
                expected: 1,
                head: 1,
                tail: 77,
            },
        ),
        (
            "random bytes",
            random,
            CtsError::Sequence {
                expected: 1,
                head: u64::from_le_bytes(random[..8].try_into().unwrap()),
                tail: u64::from_le_bytes(random[208..216].try_into().unwrap()),
            },
        ),
    ];
    for (k, (name, bytes, want)) in cases.into_iter().enumerate() {
        let (mut v, mut f) = victim(&side(&names, 2), &side(&names, 2));
        let src = v.alloc_buffer(100).unwrap();
        // Nothing there yet: the send waits.
        assert!(v.isend(&[src.all()], 5).unwrap().is_none(), "{name}");
        f.cts(0, 0, &bytes);
        match v.isend(&[src.all()], 5) {
            Err(Error::Closed(CloseReason::Protocol(ProtocolError::Cts(c)))) => {
                assert_eq!(c, want, "{name}");
                eprintln!("{name}: closed ({c})");
            }
            other => panic!("{name}: expected a CTS error, got {other:?}"),
        }
        assert!(v.isend(&[src.all()], 5).is_err(), "{name}: stays closed");
        assert_eq!(v.stats().sends, 0, "{name}: nothing was sent");
        good_pair_still_works(&mut g.a, &mut g.b, k as u64);
    }
    assert!(g.a.closed().is_none() && g.b.closed().is_none());
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn dropped_peer_closes_the_other_side() {
    let mut w = world(2, &Config::default());
    transfer(&mut w.a, &mut w.b, &[pattern(1, 1000)], &[1000], 1);
    let buf = w.a.alloc_buffer(64).unwrap();
    let r = w.a.irecv(&[buf.all()], 2).unwrap().unwrap();
    w.b.close();
    assert_eq!(w.b.closed(), Some(&CloseReason::Local));
    let t = Instant::now();
    let why = loop {
        match w.a.test(&r) {
            Ok(None) => assert!(t.elapsed() < PATIENCE, "not closed"),
            Ok(Some(s)) => panic!("completed with {s:?}"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(why, Error::Closed(CloseReason::PeerGone)),
        "{why:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn vanished_peer_without_liveness_channel_is_a_transport_error() {
    // Set up without a liveness channel (as over MPI): only the QPs can tell.
    let names = rail_names();
    let a = PendingComm::new(&side(&names, 2), &CFG).unwrap();
    let b = PendingComm::new(&side(&names, 2), &CFG).unwrap();
    let (ia, ib) = (a.info().clone(), b.info().clone());
    let mut a = a.connect(&ib).unwrap();
    let mut b = b.connect(&ia).unwrap();
    transfer(&mut a, &mut b, &[pattern(1, 3000)], &[3000], 1);
    drop(b);
    let buf = a.alloc_buffer(64).unwrap();
    let t = Instant::now();
    // `a`'s first receive: slot 0's CTS goes on rail 0 to a QP that no
    // longer exists; rxe drops the packets, and the retries run out.
    let r = a.irecv(&[buf.all()], 2).unwrap().unwrap();
    let e = loop {
        match a.test(&r) {
            Ok(None) => assert!(t.elapsed().as_secs() < 20, "no error after 20 s"),
            Ok(Some(s)) => panic!("completed with {s:?}"),
            Err(e) => break e,
        }
    };
    eprintln!("closed after {:.2} s: {e}", t.elapsed().as_secs_f64());
    assert!(
        matches!(
            e,
            Error::Closed(CloseReason::Transport {
                rail: 0,
                status: WcStatus::RetryExcErr,
                ..
            })
        ),
        "{e}"
    );
}
