//! CQ polling over hand-built CQ memory: owner bit across wraps, the doorbell
//! record, error CQEs, scatter-to-CQE, compressed CQEs in the enhanced and
//! basic layouts, shared-CQ dispatch and MonoCq.

mod support;

use mlx5::cq::{Completion, CompletionSource, Compression, DispatchCq, MonoCq};
use mlx5::prm::{CqeFormat, CqeOpcode, Syndrome};
use support::{HandCq, Rng};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    opcode: u8,
    qpn: u32,
    wc: u16,
    bc: u32,
    imm: u32,
    s_op: u8,
}

fn seen(c: &Completion<'_>) -> Seen {
    Seen {
        opcode: c.opcode_raw(),
        qpn: c.qpn(),
        wc: c.wqe_counter(),
        bc: c.byte_cnt(),
        imm: c.imm(),
        s_op: c.s_wqe_opcode(),
    }
}

fn drain(ring: &mut mlx5::CqRing) -> Vec<Seen> {
    let mut v = Vec::new();
    ring.poll(usize::MAX, |c| v.push(seen(c)));
    v
}

#[test]
fn empty_cq_polls_nothing() {
    let (_hw, mut ring) = HandCq::new(8, 64, Compression::Off);
    assert!(ring.poll_one().is_none());
    assert_eq!(ring.poll(16, |_| panic!("no CQE")), 0);
}

#[test]
fn owner_bit_across_many_wraps() {
    for zip in [Compression::Off, Compression::Enhanced] {
        let (mut hw, mut ring) = HandCq::new(16, 64, zip);
        let mut rng = Rng(1);
        let mut expect_wc: u16 = 0;
        // 50 passes over a 16-entry CQ, in bursts of random size.
        while hw.pi < 16 * 50 {
            let burst = 1 + rng.below(hw.room() as u64) as u32;
            for _ in 0..burst {
                let wc = hw.pi as u16;
                hw.push_req(0x42, wc, 0x08);
            }
            let got = drain(&mut ring);
            assert_eq!(got.len() as u32, burst, "{zip:?}");
            for s in got {
                assert_eq!(s.wc, expect_wc);
                assert_eq!(s.qpn, 0x42);
                assert_eq!(s.opcode, CqeOpcode::Req as u8);
                assert_eq!(s.s_op, 0x08);
                expect_wc = expect_wc.wrapping_add(1);
            }
            // Nothing more, and the doorbell record says how far we consumed.
            assert!(ring.poll_one().is_none());
            assert_eq!(hw.dbrec_ci(), hw.pi & 0xff_ffff);
        }
    }
}

#[test]
fn stale_entries_from_the_previous_pass_are_not_consumed() {
    let (mut hw, mut ring) = HandCq::new(4, 64, Compression::Off);
    for i in 0..4 {
        hw.push_req(1, i, 0);
    }
    assert_eq!(drain(&mut ring).len(), 4);
    // The NIC has not written pass 1 yet: the slots still hold pass-0 CQEs.
    assert!(ring.poll_one().is_none());
    hw.push_req(1, 4, 0);
    assert_eq!(drain(&mut ring)[0].wc, 4);
    assert!(ring.poll_one().is_none());
}

#[test]
fn poll_respects_max_and_updates_dbrec_once_per_batch() {
    let (mut hw, mut ring) = HandCq::new(16, 64, Compression::Off);
    for i in 0..10 {
        hw.push_req(1, i, 0);
    }
    assert_eq!(ring.poll(4, |_| {}), 4);
    assert_eq!(hw.dbrec_ci(), 4);
    assert_eq!(ring.poll(100, |_| {}), 6);
    assert_eq!(hw.dbrec_ci(), 10);
}

#[test]
fn error_cqe_carries_syndrome_and_wqe_counter() {
    let (mut hw, mut ring) = HandCq::new(8, 64, Compression::Off);
    hw.push_err(true, 0x77, 0x1234, Syndrome::RemoteAccess as u8, 0x88);
    hw.push_err(false, 0x78, 3, Syndrome::WrFlush as u8, 0);
    let c = ring.poll_one().unwrap();
    assert!(c.is_error() && c.is_requester());
    assert_eq!(c.opcode(), Some(CqeOpcode::ReqErr));
    assert_eq!(c.syndrome_raw(), Some(Syndrome::RemoteAccess as u8));
    assert_eq!(c.vendor_syndrome(), Some(0x88));
    assert_eq!(c.qpn(), 0x77);
    assert_eq!(c.wqe_counter(), 0x1234);
    let c = ring.poll_one().unwrap();
    assert_eq!(c.opcode(), Some(CqeOpcode::RespErr));
    assert_eq!(c.err_cqe().syndrome(), Some(Syndrome::WrFlush));
}

#[test]
fn scatter_to_cqe_32_and_64() {
    // Format 1: data in the first 32 bytes of a 64-byte CQE.
    let (mut hw, mut ring) = HandCq::new(8, 64, Compression::Off);
    hw.push(((CqeOpcode::RespSend as u8) << 4) | 0x04, |c| {
        c.set_byte_cnt(20);
        for (i, b) in c.inline32_mut().iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
    });
    let c = ring.poll_one().unwrap();
    assert_eq!(c.format(), CqeFormat::Inline32);
    assert_eq!(c.scatter_data(), &(1..=20).collect::<Vec<u8>>()[..]);

    // Format 2: 128-byte CQEs, data in the first half of the entry.
    let (mut hw, mut ring) = HandCq::new(8, 128, Compression::Off);
    hw.push(((CqeOpcode::RespSend as u8) << 4) | 0x08, |c| {
        c.set_byte_cnt(50)
    });
    hw.push((CqeOpcode::RespSend as u8) << 4, |c| c.set_byte_cnt(7));
    let entry0 = &mut hw.buf.as_mut_slice()[..64];
    for (i, b) in entry0.iter_mut().enumerate() {
        *b = 200 - i as u8;
    }
    let c = ring.poll_one().unwrap();
    assert_eq!(c.format(), CqeFormat::Inline64);
    assert_eq!(c.byte_cnt(), 50);
    assert_eq!(
        c.scatter_data(),
        &(0..50).map(|i| 200 - i as u8).collect::<Vec<u8>>()[..]
    );
    let c = ring.poll_one().unwrap();
    assert_eq!(c.format(), CqeFormat::Plain);
    assert!(c.scatter_data().is_empty());
}

#[test]
fn enhanced_blocks_of_1_to_7_requester() {
    for n in 1..=7u16 {
        let (mut hw, mut ring) = HandCq::new(64, 64, Compression::Enhanced);
        hw.push_req(0x99, 100, 0x0a);
        let minis: Vec<_> = (0..n)
            .map(|i| (200 + i * 3, 0x09u8, 1000 + u32::from(i)))
            .collect();
        hw.push_enhanced_block(&minis);
        hw.push_req(0x99, 500, 0x10);
        let got = drain(&mut ring);
        assert_eq!(got.len(), n as usize + 2, "block of {n}");
        assert_eq!(got[0].wc, 100);
        for (i, s) in got[1..=n as usize].iter().enumerate() {
            assert_eq!(s.wc, minis[i].0);
            assert_eq!(s.s_op, 0x09);
            assert_eq!(s.bc, minis[i].2);
            assert_eq!(s.qpn, 0x99, "QPN comes from the title");
            assert_eq!(s.opcode, 0);
        }
        assert_eq!(got[n as usize + 1].wc, 500);
        assert_eq!(hw.dbrec_ci(), hw.pi);
    }
}

#[test]
fn enhanced_consecutive_blocks_share_the_title_responder() {
    let (mut hw, mut ring) = HandCq::new(64, 64, Compression::Enhanced);
    hw.push_resp_imm(0x31, 10, 0xabcd, 64);
    hw.push_enhanced_block(&[(0, 0, 32), (0, 0, 96), (0, 0, 128)]);
    hw.push_enhanced_block(&[(0, 0, 160), (0, 0, 192)]);
    hw.push_enhanced_block(&[(0, 0, 224)]);
    hw.push_resp_imm(0x31, 17, 0x1111, 8);
    hw.push_enhanced_block(&[(0, 0, 9)]);
    let got = drain(&mut ring);
    let wcs: Vec<u16> = got.iter().map(|s| s.wc).collect();
    assert_eq!(wcs, vec![10, 11, 12, 13, 14, 15, 16, 17, 18]);
    let bcs: Vec<u32> = got.iter().map(|s| s.bc).collect();
    assert_eq!(bcs, vec![64, 32, 96, 128, 160, 192, 224, 8, 9]);
    assert!(got
        .iter()
        .all(|s| s.opcode == CqeOpcode::RespWrImm as u8 && s.qpn == 0x31));
    // Mini CQEs have no immediate: expanded completions repeat the title's.
    assert_eq!(got[1].imm, 0xabcd);
    assert_eq!(got[8].imm, 0x1111);
}

#[test]
fn enhanced_block_spanning_the_cq_end_and_later_passes() {
    let cnt = 16u32;
    let (mut hw, mut ring) = HandCq::new(cnt, 64, Compression::Enhanced);
    let mut rng = Rng(7);
    let mut expect: Vec<u16> = Vec::new();
    let mut got: Vec<u16> = Vec::new();
    let mut wc: u16 = 0;
    // Many passes of random plain CQEs and blocks; blocks regularly start near
    // the end of the CQ and run over it.
    for _ in 0..400 {
        if hw.room() < 8 {
            got.extend(drain(&mut ring).iter().map(|s| s.wc));
        }
        if rng.below(3) == 0 {
            hw.push_req(5, wc, 0x08);
            expect.push(wc);
            wc = wc.wrapping_add(1);
        } else {
            let n = 1 + rng.below(7) as u16;
            let minis: Vec<_> = (0..n).map(|i| (wc.wrapping_add(i), 0x08, 0)).collect();
            // An enhanced block needs a title before it.
            if expect.is_empty() {
                continue;
            }
            hw.push_enhanced_block(&minis);
            expect.extend(minis.iter().map(|m| m.0));
            wc = wc.wrapping_add(n);
        }
        if rng.below(4) == 0 {
            got.extend(drain(&mut ring).iter().map(|s| s.wc));
        }
    }
    got.extend(drain(&mut ring).iter().map(|s| s.wc));
    assert!(hw.pi > cnt * 20, "ran over many passes");
    assert_eq!(got, expect);
    assert!(ring.poll_one().is_none());
}

#[test]
fn basic_layout_sessions_of_every_size_across_wraps() {
    let cnt = 32u32;
    let (mut hw, mut ring) = HandCq::new(cnt, 64, Compression::Basic);
    let mut wc: u16 = 0;
    for round in 0..60u32 {
        let n = 2 + (round % 30) as u16;
        hw.push_req(0x10, wc, 0x08);
        let req_minis: Vec<_> = (0..n)
            .map(|i| (wc.wrapping_add(1 + i), 0x08u8, u32::from(i)))
            .collect();
        hw.push_basic_session(CqeOpcode::Req, &req_minis, |t| t.set_sop_drop_qpn(0x10));
        let got = drain(&mut ring);
        assert_eq!(got.len(), n as usize + 1, "round {round}");
        for (i, s) in got[1..].iter().enumerate() {
            assert_eq!(s.wc, req_minis[i].0);
            assert_eq!(s.bc, req_minis[i].2);
            assert_eq!(s.qpn, 0x10);
            assert_eq!(s.s_op, 0x08);
        }
        wc = wc.wrapping_add(n + 1);
        // Responder session: WQE counters count up from the title's.
        let resp: Vec<_> = (0..n).map(|i| (0u16, 0u8, 100 + u32::from(i))).collect();
        hw.push_basic_session(CqeOpcode::RespSend, &resp, |t| {
            t.set_sop_drop_qpn(0x20);
            t.set_wqe_counter(1000);
        });
        let got = drain(&mut ring);
        assert_eq!(got.len(), n as usize);
        for (i, s) in got.iter().enumerate() {
            assert_eq!(s.wc, 1000 + i as u16);
            assert_eq!(s.bc, 100 + i as u32);
            assert_eq!(s.opcode, CqeOpcode::RespSend as u8);
            assert_eq!(s.qpn, 0x20);
        }
        assert!(ring.poll_one().is_none(), "skipped slots must not look new");
    }
    assert!(hw.pi > cnt * 30);
}

#[test]
fn shared_cq_dispatches_by_qpn() {
    let (mut hw, ring) = HandCq::new(64, 64, Compression::Off);
    let mut cq: DispatchCq<Vec<u16>> = DispatchCq::new(ring);
    for q in [5u32, 0x12_3456, 0xff_fffe] {
        cq.register(q, Vec::new());
    }
    let mut rng = Rng(3);
    let qpns = [5u32, 0x12_3456, 0xff_fffe, 77];
    let mut expect: std::collections::HashMap<u32, Vec<u16>> = Default::default();
    for i in 0..50u16 {
        let q = qpns[rng.below(4) as usize];
        hw.push_req(q, i, 0);
        expect.entry(q).or_default().push(i);
    }
    assert_eq!(cq.poll(usize::MAX, |v, c| v.push(c.wqe_counter())), 50);
    for q in [5u32, 0x12_3456, 0xff_fffe] {
        assert_eq!(cq.get_mut(q).unwrap(), expect.get(&q).unwrap_or(&vec![]));
    }
    assert_eq!(
        cq.unknown_completions(),
        expect.get(&77).map_or(0, |v| v.len() as u64)
    );
}

/// A completion source that retires the WQE counter itself.
struct Counters(Vec<u16>);
impl CompletionSource for Counters {
    type Entry = u16;
    fn complete<F: FnMut(u16, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        mut f: F,
    ) -> usize {
        self.0.push(c.wqe_counter());
        f(c.wqe_counter(), Some(c));
        1
    }
}

#[test]
fn mono_cq_inlines_source_and_callback() {
    let (mut hw, ring) = HandCq::new(16, 64, Compression::Enhanced);
    let mut sum = 0u64;
    {
        let mut cq = MonoCq::new(
            ring,
            Counters(Vec::new()),
            |e: u16, c: Option<&Completion<'_>>| {
                assert!(c.is_some());
                sum += u64::from(e);
            },
        );
        hw.push_resp_imm(1, 1, 0, 0);
        hw.push_enhanced_block(&[(0, 0, 0), (0, 0, 0)]);
        assert_eq!(cq.poll(10), 3);
        assert_eq!(cq.source().0, vec![1, 2, 3]);
        assert_eq!(cq.poll(10), 0);
    }
    assert_eq!(sum, 6);
}

#[test]
fn mono_cq_polled_with_a_callback_given_per_poll() {
    // The owner's state lives beside the CQ: each poll lends it to `f`,
    // which retires from the source itself; the doorbell record is written
    // once per poll, after the batch.
    let (mut hw, ring) = HandCq::new(16, 64, Compression::Enhanced);
    let mut cq = MonoCq::new(ring, Counters(Vec::new()), ());
    let mut seen = Vec::new();
    hw.push_resp_imm(1, 1, 0, 0);
    hw.push_enhanced_block(&[(0, 0, 0), (0, 0, 0)]);
    let n = cq.poll_with(2, |src, c| {
        src.0.push(c.wqe_counter());
        seen.push(c.wqe_counter());
    });
    assert_eq!(n, 2, "at most `max`");
    assert_eq!(hw.dbrec_ci(), 2);
    assert_eq!(cq.poll_with(10, |_, c| seen.push(c.wqe_counter())), 1);
    assert_eq!(seen, vec![1, 2, 3]);
    assert_eq!(cq.source().0, vec![1, 2]);
    assert_eq!(hw.dbrec_ci(), 3);
    assert_eq!(cq.poll_with(10, |_, _| panic!("no CQE")), 0);
}

#[test]
fn enhanced_skipped_slots_never_alias_a_later_pass() {
    // In a 4-entry CQ each pass is a plain CQE in slot 0 and a block of 3 in
    // slot 1, so the NIC never writes slots 2 and 3. After `last` such passes,
    // a pass of plain CQEs makes software look at slot 2 before the NIC wrote
    // it: its iteration-count byte must not equal that pass, for any pass
    // number (0xff, the initial value, included).
    for last in [1u32, 100, 200, 238, 254, 255, 256, 300] {
        let (mut hw, mut ring) = HandCq::new(4, 64, Compression::Enhanced);
        for pass in 0..last {
            hw.push_req(1, pass as u16, 0);
            hw.push_enhanced_block(&[(1, 0, 0), (2, 0, 0), (3, 0, 0)]);
            assert_eq!(drain(&mut ring).len(), 4);
        }
        hw.push_req(1, 0, 0);
        hw.push_req(1, 1, 0);
        assert_eq!(drain(&mut ring).len(), 2);
        assert!(
            ring.poll_one().is_none(),
            "pass {last}: a slot the NIC skipped was taken as a new CQE"
        );
    }
}

#[test]
fn enhanced_block_that_spans_the_cq_end() {
    // 16 entries: 13 plain CQEs, then a block of 7 in slot 13 standing for CQ
    // indices 13..20 — i.e. slots 13, 14, 15 of this pass and 0..3 of the next.
    let (mut hw, mut ring) = HandCq::new(16, 64, Compression::Enhanced);
    for i in 0..13 {
        hw.push_req(2, i, 0);
    }
    assert_eq!(drain(&mut ring).len(), 13);
    let minis: Vec<_> = (13..20u16).map(|wc| (wc, 0x08, 0)).collect();
    hw.push_enhanced_block(&minis);
    hw.push_req(2, 20, 0); // slot 4 of the next pass
    let got: Vec<u16> = drain(&mut ring).iter().map(|s| s.wc).collect();
    assert_eq!(got, (13..=20).collect::<Vec<_>>());
    assert_eq!(hw.dbrec_ci(), 21);
    assert!(ring.poll_one().is_none());
    // The next pass continues normally from slot 5.
    for wc in 21..40 {
        hw.push_req(2, wc, 0);
        assert_eq!(drain(&mut ring)[0].wc, wc);
    }
}

#[test]
fn a_cq_without_a_completion_channel_cannot_be_armed() {
    let (_hw, ring) = HandCq::new(16, 64, Compression::Off);
    assert!(!ring.armable());
    let mut cq = MonoCq::new(
        ring,
        Counters(Vec::new()),
        |_: u16, _: Option<&Completion<'_>>| {},
    );
    assert_eq!(cq.arm(false), Err(mlx5::cq::CqError::NoChannel(7)));
    assert_eq!(
        cq.arm(true).unwrap_err().to_string(),
        "CQ 0x7 has no completion channel: create it on one to arm it"
    );
}
