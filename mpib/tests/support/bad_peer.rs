//! The bad-peer tests' bodies, written once against a provider of devices and
//! run on the software device (`tests/bad_peer.rs`) and on soft-RoCE
//! (`tests/rxe.rs`).
//!
//! A raw peer (QPs connected to a communicator by hand) writes garbage
//! immediates, completion records and CTS entries. Each case closes that
//! communicator with its named error; nothing panics, the victim's requests
//! fail instead of completing, and a second communicator on the same devices
//! keeps transferring. The raw peer waits for each of its writes to complete
//! (so the victim has it before it polls) and loops are bounded by the wall
//! clock, as a NIC that runs on its own needs; on the software device both
//! hold at once.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use mlx5::device::{access, ConnInfo, Context, Mr, QpCaps, RtrAttr, RtsAttr};
use mlx5::sq::Sge;
use mlx5::wr::{CqId, Domain, QpId, SendOp, SendWr, WcStatus};
use mpib::cts::{CtsBuffer, CtsEntry, ENTRY_LEN};
use mpib::imm::{Imm, SIZE_Q_SENTINEL};
use mpib::record::{Record, RECORD_LEN};
use mpib::{
    CloseReason, Comm, CommInfo, Config, CtsError, Error, PendingComm, PolicyKind, ProtocolError,
    QpInfo, RailInfo, Request, COMM_INFO_VERSION,
};

use super::{pattern, transfer};

/// Where the cases run.
pub trait Devices {
    /// Contexts for two sides of two rails each (a victim and its raw peer,
    /// or the two ends of a pair): on the software device four devices of one
    /// fabric, on rxe fresh contexts on the rails' devices.
    fn sides(&self) -> (Vec<Context>, Vec<Context>);
    /// How long a loop may wait for the device before the test counts as
    /// stuck (it only matters when something is broken).
    fn patience(&self) -> Duration;
}

/// The bad peer: per rail a CTS QP and one data QP, raw.
pub struct Fake {
    rails: Vec<FakeRail>,
    victim: CommInfo,
    patience: Duration,
}

struct FakeRail {
    dom: Domain,
    cq: CqId,
    cts: QpId,
    data: QpId,
    /// What the victim writes here (its CTS entries, records) and the bytes
    /// this peer sends from.
    mem: Mr,
}

pub const CFG: Config = Config {
    qps_per_rail: 1,
    depth: 8,
    granularity: 128,
    policy: PolicyKind::Static(0.5),
    srq_low: None,
    srq_high: None,
    send_requests: None,
    // The fake peer offers no eager QP: the CTS path, whatever this says.
    eager_max: 0,
};

/// A victim communicator on `vdevs` connected to a raw peer on `fdevs`.
pub fn victim(vdevs: &[Context], fdevs: &[Context], patience: Duration) -> (Comm, Fake) {
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
            eager_qp: None,
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
        eager_max: 0,
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
            // Send from the PSN the victim was told (rxe checks PSNs).
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
            patience,
        },
    )
}

impl Fake {
    /// Posts one signaled work request and waits for its completion: the
    /// victim's device has then placed the bytes and the immediate, so the
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
                t.elapsed() < self.patience,
                "the bad peer's {op:?} never completed"
            );
            f.dom.poll_cq(f.cq, 16, &mut wcs).unwrap();
        }
        assert_eq!(wcs[0].status, WcStatus::Success, "the bad peer's {op:?}");
    }

    /// A zero-length WRITE_WITH_IMM on rail `r`'s data QP.
    pub fn imm(&mut self, r: usize, slot: u8, mask: u8, size_q: u32) {
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
    pub fn record(&mut self, r: usize, slot: u8, sizes: &[u32]) {
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
    pub fn cts(&mut self, r: usize, slot: u8, bytes: &[u8; ENTRY_LEN]) {
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
    pub fn send(&mut self, r: usize) {
        self.post(r, false, SendOp::Send, None, (0, 0));
    }
}

/// Polls the victim until it closes; returns why.
fn closes(c: &mut Comm, patience: Duration) -> CloseReason {
    let t = Instant::now();
    while t.elapsed() < patience {
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

/// Two communicators over two rails, joined with a liveness channel.
fn good_pair(d: &impl Devices) -> (Comm, Comm) {
    let (da, db) = d.sides();
    let (a, b) = mpib::pair(&da, &db, &Config::default()).expect("pair");
    assert_eq!(a.nrails(), 2);
    (a, b)
}

type Case = (
    &'static str,
    fn(&mut Comm, &mut Fake) -> Vec<Request>,
    ProtocolError,
);

/// Garbage immediates and completion records: each closes its victim with
/// its protocol error while a good pair on the same devices keeps working.
pub fn garbage_immediates_and_records(d: &impl Devices) {
    let (mut ga, mut gb) = good_pair(d);

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
                // rail 0's completes the slot at its next poll, rail 1's
                // lands in the same poll, after it.
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
        let (vdevs, fdevs) = d.sides();
        let (mut v, mut f) = victim(&vdevs, &fdevs, d.patience());
        let reqs = act(&mut v, &mut f);
        let why = closes(&mut v, d.patience());
        assert_eq!(why, CloseReason::Protocol(want), "{name}");
        eprintln!("{name}: closed ({why})");
        // The victim's receives fail rather than complete (except one that
        // completed before the violation: that one is still reported).
        for r in &reqs {
            match v.test(r) {
                Err(Error::Closed(CloseReason::Protocol(_))) => {}
                Ok(Some(s)) if name.starts_with("late") => assert_eq!(&*s, &[128]),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(v.irecv(&[v.alloc_buffer(8).unwrap().all()], 1).is_err());
        good_pair_still_works(&mut ga, &mut gb, k as u64);
    }
    assert!(ga.closed().is_none() && gb.closed().is_none());
}

/// Malformed CTS entries: each closes its victim's send with its CTS error
/// while a good pair on the same devices keeps working.
pub fn malformed_cts_entries(d: &impl Devices) {
    let (mut ga, mut gb) = good_pair(d);

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
        let (vdevs, fdevs) = d.sides();
        let (mut v, mut f) = victim(&vdevs, &fdevs, d.patience());
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
        good_pair_still_works(&mut ga, &mut gb, k as u64);
    }
    assert!(ga.closed().is_none() && gb.closed().is_none());
}

/// A communicator that closes tells its peer through the liveness channel:
/// the peer's pending receive fails with `PeerGone`.
pub fn dropped_peer_closes_the_other_side(d: &impl Devices) {
    let (mut a, mut b) = good_pair(d);
    transfer(&mut a, &mut b, &[pattern(1, 1000)], &[1000], 1);
    let buf = a.alloc_buffer(64).unwrap();
    let r = a.irecv(&[buf.all()], 2).unwrap().unwrap();
    b.close();
    assert_eq!(b.closed(), Some(&CloseReason::Local));
    let t = Instant::now();
    let why = loop {
        match a.test(&r) {
            Ok(None) => assert!(t.elapsed() < d.patience(), "not closed"),
            Ok(Some(s)) => panic!("completed with {s:?}"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(why, Error::Closed(CloseReason::PeerGone)),
        "{why:?}"
    );
}

/// A peer that vanishes from a pair set up without a liveness channel: the
/// survivor's next CTS write exhausts its retries, a transport error on
/// rail 0.
pub fn vanished_peer_without_liveness_channel(d: &impl Devices) {
    // Set up without a liveness channel (as over MPI): only the QPs can tell.
    let (da, db) = d.sides();
    let a = PendingComm::new(&da, &CFG).unwrap();
    let b = PendingComm::new(&db, &CFG).unwrap();
    let (ia, ib) = (a.info().clone(), b.info().clone());
    let mut a = a.connect(&ib).unwrap();
    let mut b = b.connect(&ia).unwrap();
    transfer(&mut a, &mut b, &[pattern(1, 3000)], &[3000], 1);
    drop(b);
    let buf = a.alloc_buffer(64).unwrap();
    let t = Instant::now();
    // `a`'s first receive: slot 0's CTS goes on rail 0 to a QP that no
    // longer exists; nothing answers (rxe drops the packets), and the
    // retries run out.
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
