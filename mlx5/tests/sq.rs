//! Send queue over hand-built memory: segment bytes for every opcode, inline
//! sizes around every 16-byte boundary, wrap with NOP padding, free space from
//! completions, doorbell record and BlueFlame.

mod support;

use mlx5::cq::Completion;
use mlx5::prm::{ctrl_flags, AtomicSeg, CtrlSeg, DataSeg, InlineSeg, RaddrSeg, WqeOpcode};
use mlx5::sq::{BfMode, Payload, SendQueue, Sge, SqConfig, SqError};
use mlx5::wqe_table::{OrderedDense, OrderedSparse, Unordered};
use support::{req_cqe, HandSq};

fn cfg() -> SqConfig {
    SqConfig {
        signal_interval: 0,
        max_inline: 512,
        bf_mode: BfMode::Auto,
    }
}

/// The bytes of the WQE at `counter` (contiguous: WQEs never straddle the end).
fn wqe_bytes(hw: &HandSq, counter: u16, ds: usize) -> Vec<u8> {
    let i = (counter as usize) & (hw.wqe_cnt as usize - 1);
    hw.buf.as_slice()[i * 64..i * 64 + ds * 16].to_vec()
}

fn complete<T: mlx5::wqe_table::SendTable>(
    sq: &mut SendQueue<T>,
    wc: u16,
) -> Vec<(T::Output, bool)> {
    let b = req_cqe(sq.qpn(), wc);
    let c = Completion::new(&b, &[]);
    let mut v = Vec::new();
    sq.complete(&c, |u, c| v.push((u, c.is_some())));
    v
}

#[test]
fn write_imm_with_one_sge_is_48_bytes() {
    let (hw, mut sq) = HandSq::new::<OrderedDense<u32>>(64, 256, cfg());
    let sge = Sge {
        addr: 0x1122_3344_5566_7788,
        len: 4096,
        lkey: 0xabc,
    };
    let b = sq
        .write_imm(0xdead_beef_0000, 0x4321, 0x0102_0304, Payload::Sges(&[sge]))
        .unwrap();
    assert_eq!(b.ds(), 3);
    let wc = b.signaled().post(1);
    assert_eq!(wc, 0);
    let w = wqe_bytes(&hw, 0, 3);
    let c = CtrlSeg::new_checked(&w[..16]).unwrap();
    assert_eq!(c.opcode(), Some(WqeOpcode::RdmaWriteImm));
    assert_eq!(c.wqe_index(), 0);
    assert_eq!(c.qpn(), 0x1234);
    assert_eq!(c.ds(), 3);
    assert_eq!(c.fm_ce_se(), ctrl_flags::CQ_UPDATE);
    assert_eq!(
        &w[12..16],
        &[1, 2, 3, 4],
        "immediate is big-endian on the wire"
    );
    let r = RaddrSeg::new_checked(&w[16..32]).unwrap();
    assert_eq!((r.raddr(), r.rkey()), (0xdead_beef_0000, 0x4321));
    let d = DataSeg::new_checked(&w[32..48]).unwrap();
    assert_eq!(
        (d.byte_count(), d.lkey(), d.addr()),
        (4096, 0xabc, 0x1122_3344_5566_7788)
    );
    assert_eq!(sq.pi(), 1);
}

#[test]
#[allow(clippy::vec_init_then_push)] // the posts must happen in this order
fn every_opcode_writes_its_segments() {
    let (hw, mut sq) = HandSq::new::<OrderedDense<&str>>(64, 256, cfg());
    let s = Sge {
        addr: 0x1000,
        len: 8,
        lkey: 5,
    };
    let mut at = Vec::new();
    at.push((sq.nop().unwrap().post("nop"), WqeOpcode::Nop, 1));
    at.push((
        sq.write(1, 2, Payload::Sges(&[s, s])).unwrap().post("w"),
        WqeOpcode::RdmaWrite,
        4,
    ));
    at.push((
        sq.send(Payload::Sges(&[s])).unwrap().post("s"),
        WqeOpcode::Send,
        2,
    ));
    at.push((
        sq.send_imm(77, Payload::None).unwrap().post("si"),
        WqeOpcode::SendImm,
        1,
    ));
    at.push((
        sq.read(3, 4, &[s]).unwrap().fence().post("r"),
        WqeOpcode::RdmaRead,
        3,
    ));
    at.push((
        sq.atomic_cs(0x40, 6, 10, 20, s).unwrap().post("cs"),
        WqeOpcode::AtomicCs,
        4,
    ));
    at.push((
        sq.atomic_fa(0x48, 6, 3, s).unwrap().post("fa"),
        WqeOpcode::AtomicFa,
        4,
    ));
    for &(wc, op, ds) in &at {
        let w = wqe_bytes(&hw, wc, ds);
        let c = CtrlSeg::new_unchecked(&w[..16]);
        assert_eq!(c.opcode(), Some(op));
        assert_eq!(c.ds() as usize, ds, "{op:?}");
        assert_eq!(c.wqe_index(), wc);
    }
    // Fence flag on the READ; atomic operands.
    let r = wqe_bytes(&hw, at[4].0, 3);
    assert_eq!(
        CtrlSeg::new_unchecked(&r[..16]).fm_ce_se() & ctrl_flags::FENCE,
        ctrl_flags::FENCE
    );
    let cs = wqe_bytes(&hw, at[5].0, 4);
    let a = AtomicSeg::new_unchecked(&cs[32..48]);
    assert_eq!((a.swap_add(), a.compare()), (20, 10));
    let fa = wqe_bytes(&hw, at[6].0, 4);
    assert_eq!(AtomicSeg::new_unchecked(&fa[32..48]).swap_add(), 3);
    assert_eq!(RaddrSeg::new_unchecked(&fa[16..32]).raddr(), 0x48);
    // Each WQE of <= 64 bytes took one BB.
    assert_eq!(sq.pi(), 7);
}

#[test]
fn inline_sizes_around_every_16_byte_boundary() {
    for len in 0..=200usize {
        let (hw, mut sq) = HandSq::new::<OrderedDense<()>>(64, 256, cfg());
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        let b = sq.write(0x10, 1, Payload::Inline(&data)).unwrap();
        let ds = b.ds() as usize;
        assert_eq!(ds, 2 + (4 + len).div_ceil(16), "len {len}");
        b.post(());
        let w = wqe_bytes(&hw, 0, ds);
        let seg = InlineSeg::new_checked(&w[32..]).unwrap();
        assert!(seg.is_inline());
        assert_eq!(seg.len() as usize, len);
        assert_eq!(&w[36..36 + len], &data[..]);
        assert!(
            w[36 + len..].iter().all(|&b| b == 0),
            "padding zeroed, len {len}"
        );
        assert_eq!(sq.pi() as usize, (ds * 16).div_ceil(64));
    }
}

#[test]
fn inline_header_then_sge_body() {
    let (hw, mut sq) = HandSq::new::<OrderedDense<()>>(64, 256, cfg());
    let hdr = [9u8; 20];
    let body = Sge {
        addr: 0x9000,
        len: 1000,
        lkey: 3,
    };
    let b = sq.send(Payload::InlineSges(&hdr, &[body])).unwrap();
    assert_eq!(b.ds(), 1 + 2 + 1);
    b.post(());
    let w = wqe_bytes(&hw, 0, 4);
    assert_eq!(InlineSeg::new_unchecked(&w[16..]).len(), 20);
    assert_eq!(&w[20..40], &hdr);
    let d = DataSeg::new_unchecked(&w[48..64]);
    assert_eq!((d.addr(), d.byte_count(), d.lkey()), (0x9000, 1000, 3));
}

#[test]
fn limits_are_errors() {
    let (_hw, mut sq) = HandSq::new::<OrderedDense<()>>(64, 256, cfg());
    let big = vec![0u8; 513];
    assert!(matches!(
        sq.write(0, 0, Payload::Inline(&big)).err(),
        Some(SqError::InlineTooLarge { got: 513, max: 512 })
    ));
    let sges = vec![
        Sge {
            addr: 0,
            len: 1,
            lkey: 1
        };
        62
    ];
    assert_eq!(
        sq.write(0, 0, Payload::Sges(&sges)).err(),
        Some(SqError::TooLarge(64))
    );
    assert!(sq.write(0, 0, Payload::Sges(&sges[..61])).is_ok());
}

#[test]
fn wrap_pads_with_a_nop_and_no_wqe_straddles_the_end() {
    // 16 BBs; 3-BB WQEs (ds = 2 + 8 SGEs = 10): 5 fit, the 6th would straddle.
    let (hw, mut sq) = HandSq::new::<OrderedDense<u32>>(16, 256, cfg());
    let sges = [Sge {
        addr: 0,
        len: 1,
        lkey: 1,
    }; 8];
    let mut counters = Vec::new();
    for i in 0..5 {
        counters.push(sq.write(0, 0, Payload::Sges(&sges)).unwrap().post(i));
    }
    assert_eq!(sq.pi(), 15);
    // Full: only 1 BB left until completions free some.
    assert_eq!(
        sq.write(0, 0, Payload::Sges(&sges)).err(),
        Some(SqError::Full)
    );
    // Complete the first two (signaled at counter 3 retires 0 and 3).
    let done = complete(&mut sq, 3);
    assert_eq!(done, vec![(0, false), (1, true)]);
    let wc = sq.write(0, 0, Payload::Sges(&sges)).unwrap().post(5);
    assert_eq!(wc, 16, "the WQE starts at the ring's beginning");
    let nop = CtrlSeg::new_unchecked(hw.bb(15));
    assert_eq!(nop.opcode(), Some(WqeOpcode::Nop));
    assert_eq!(nop.wqe_index(), 15);
    assert_eq!(nop.ds(), 4, "the NOP covers the one BB up to the end");
    // Retiring through the NOP hands out the real WQEs only.
    let done = complete(&mut sq, 16);
    assert_eq!(done, vec![(2, false), (3, false), (4, false), (5, true)]);
    assert_eq!(sq.free_bbs(), 16);
}

#[test]
fn wrap_over_many_passes_with_random_sizes() {
    let (hw, mut sq) = HandSq::new::<OrderedSparse<u16>>(32, 256, cfg());
    let mut rng = support::Rng(11);
    let mut outstanding = std::collections::VecDeque::new();
    let mut posted = 0u32;
    while posted < 5000 {
        let nsge = rng.below(14) as usize;
        let sges = vec![
            Sge {
                addr: 1,
                len: 1,
                lkey: 1
            };
            nsge
        ];
        match sq.write(0, 0, Payload::Sges(&sges)) {
            Ok(b) => {
                let ds = b.ds() as usize;
                let sig = rng.below(4) == 0;
                let wc = b.post(sig.then_some(posted as u16));
                let idx = wc as usize % 32;
                assert!(idx * 64 + ds * 16 <= 32 * 64, "WQE straddles the end");
                let ctrl = CtrlSeg::new_unchecked(hw.bb(wc));
                assert_eq!(ctrl.ds() as usize, ds);
                // Signaled on request, or by the half-ring rule (no data then).
                if ctrl.fm_ce_se() & ctrl_flags::CQ_UPDATE != 0 {
                    outstanding.push_back((wc, sig.then_some(posted as u16)));
                } else {
                    assert!(!sig);
                }
                posted += 1;
            }
            Err(SqError::Full) => {
                let (wc, tag) = outstanding
                    .pop_front()
                    .expect("a full ring always has a signaled WQE outstanding");
                let got = complete(&mut sq, wc);
                assert_eq!(got, tag.map(|t| (t, true)).into_iter().collect::<Vec<_>>());
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        sq.pi() > 1000,
        "wrapped the 16-bit counter space many times over"
    );
}

#[test]
fn signal_interval_and_half_ring_rule() {
    let c = SqConfig {
        signal_interval: 4,
        ..cfg()
    };
    let (hw, mut sq) = HandSq::new::<OrderedDense<u32>>(64, 256, c);
    for i in 0..8 {
        sq.nop().unwrap().post(i);
    }
    let signaled: Vec<bool> = (0..8u16)
        .map(|i| CtrlSeg::new_unchecked(hw.bb(i)).fm_ce_se() & ctrl_flags::CQ_UPDATE != 0)
        .collect();
    assert_eq!(
        signaled,
        [false, false, false, true, false, false, false, true]
    );

    // Interval 0 (never by count): still signaled before unsignaled WQEs hold half the ring.
    let (hw, mut sq) = HandSq::new::<OrderedDense<u32>>(16, 256, cfg());
    for i in 0..8 {
        sq.nop().unwrap().post(i);
    }
    let first_signal = (0..8u16)
        .find(|&i| CtrlSeg::new_unchecked(hw.bb(i)).fm_ce_se() & ctrl_flags::CQ_UPDATE != 0);
    assert_eq!(first_signal, Some(7));
}

#[test]
fn doorbell_record_and_blueflame_copy_of_a_lone_small_wqe() {
    let (hw, mut sq) = HandSq::new::<OrderedDense<()>>(64, 256, cfg());
    sq.ring_doorbell();
    assert_eq!(hw.send_dbr(), 0, "nothing pending, nothing rung");
    let s = [Sge {
        addr: 7,
        len: 7,
        lkey: 7,
    }];
    sq.write_imm(1, 2, 3, Payload::Sges(&s)).unwrap().post(());
    assert_eq!(hw.send_dbr(), 0, "posting alone does not ring");
    sq.ring_doorbell();
    assert_eq!(hw.send_dbr(), 1);
    // The whole 64-byte BB went to the first half.
    assert_eq!(&hw.bf_bytes()[..64], hw.bb(0));
    assert_eq!(sq.blueflame().offset(), 256, "halves alternate");

    // A 5-BB WQE (> 256 bytes) takes the 8-byte doorbell in the second half.
    let big = vec![1u8; 300];
    let wc = sq.send(Payload::Inline(&big)).unwrap().post(());
    sq.ring_doorbell();
    assert_eq!(hw.send_dbr(), 1 + 5);
    assert_eq!(&hw.bf_bytes()[256..264], &hw.bb(wc)[..8]);
    assert!(
        hw.bf_bytes()[264..320].iter().all(|&b| b == 0),
        "only 8 bytes written"
    );
    assert_eq!(sq.blueflame().offset(), 0);
}

#[test]
fn batch_rings_once_with_the_last_control_segment() {
    let (hw, mut sq) = HandSq::new::<OrderedDense<u32>>(64, 256, cfg());
    let last;
    {
        let mut b = sq.batch();
        for i in 0..5 {
            b.send(Payload::None).unwrap().post(i);
        }
        assert_eq!(hw.send_dbr(), 0);
        last = b.pi() - 1;
    }
    assert_eq!(hw.send_dbr(), 5);
    assert_eq!(
        &hw.bf_bytes()[..8],
        &hw.bb(last)[..8],
        "8-byte doorbell with the last WQE's ctrl"
    );
    assert!(hw.bf_bytes()[8..64].iter().all(|&b| b == 0));
    assert_eq!(sq.pending(), 0);
}

#[test]
fn doorbell_only_mode_never_copies() {
    let c = SqConfig {
        bf_mode: BfMode::DoorbellOnly,
        ..cfg()
    };
    let (hw, mut sq) = HandSq::new::<OrderedDense<()>>(64, 256, c);
    sq.nop().unwrap().post(());
    sq.ring_doorbell();
    assert_eq!(&hw.bf_bytes()[..8], &hw.bb(0)[..8]);
    assert!(hw.bf_bytes()[8..64].iter().all(|&b| b == 0));
}

#[test]
fn unordered_queue_signals_everything_and_frees_per_wqe() {
    let (hw, mut sq) = HandSq::new::<Unordered<u32>>(8, 256, cfg());
    let mut wcs = Vec::new();
    for i in 0..8 {
        let wc = sq.send(Payload::None).unwrap().post(i);
        assert_ne!(
            CtrlSeg::new_unchecked(hw.bb(wc)).fm_ce_se() & ctrl_flags::CQ_UPDATE,
            0
        );
        wcs.push(wc);
    }
    assert_eq!(sq.send(Payload::None).err(), Some(SqError::Full));
    let t3 = sq.table().ticket(wcs[3]);
    assert!(sq.table().is_pending(t3));
    // Out of order: completing WQE 3 does not free the slot at the producer.
    assert_eq!(complete(&mut sq, wcs[3]), vec![(3, true)]);
    assert!(!sq.table().is_pending(t3));
    assert_eq!(sq.send(Payload::None).err(), Some(SqError::Full));
    assert_eq!(
        complete(&mut sq, wcs[3]),
        vec![],
        "a repeated CQE retires nothing"
    );
    assert_eq!(complete(&mut sq, wcs[0]), vec![(0, true)]);
    let wc = sq.send(Payload::None).unwrap().post(100);
    assert_eq!(wc, 8);
    let t = sq.table().ticket(wc);
    assert_ne!(t.gen, sq.table().ticket(wcs[0]).gen.wrapping_sub(1));
    assert!(sq.table().is_pending(t));
}

#[test]
fn zero_length_sges_are_skipped() {
    // A data segment with byte count 0 means 2 GiB to the NIC.
    let (hw, mut sq) = HandSq::new::<OrderedDense<()>>(64, 256, cfg());
    let z = Sge {
        addr: 1,
        len: 0,
        lkey: 1,
    };
    let s = Sge {
        addr: 2,
        len: 5,
        lkey: 2,
    };
    let b = sq.write(0, 0, Payload::Sges(&[z, s, z])).unwrap();
    assert_eq!(b.ds(), 3);
    b.post(());
    let w = wqe_bytes(&hw, 0, 3);
    assert_eq!(DataSeg::new_unchecked(&w[32..48]).addr(), 2);
    let b = sq.write_imm(0, 0, 1, Payload::Sges(&[z])).unwrap();
    assert_eq!(b.ds(), 2, "a zero-length WRITE_IMM has no data segment");
    b.post(());
}

/// A DCI's WQE over a route (a NIC's AH address vector: MAC, GRH fields and
/// all) carries that route with the destination's DCT number and key; over
/// the LID/GID route it is byte for byte what `dc` writes.
#[test]
fn a_dc_route_is_copied_whole_with_the_dct_and_key() {
    use mlx5::device::DcDest;
    use mlx5::prm::{AddressVector, DatagramSeg};
    let dest = DcDest {
        dct: 0x12_3456,
        key: 0x0102_0304_0506_0708,
        lid: 7,
        gid: [0xfe; 16],
        stream: 2,
    };
    let sge = Sge {
        addr: 0x1000,
        len: 64,
        lkey: 0xabc,
    };
    let post = |via: Option<&AddressVector>| {
        let (hw, mut sq) = HandSq::new::<OrderedDense<u32>>(64, 256, cfg());
        let d = match via {
            Some(r) => sq.dc_via(r, &dest),
            None => sq.dc(&dest),
        };
        let b = d.write(0x2000, 0x55, Payload::Sges(&[sge])).unwrap();
        assert_eq!(b.ds(), 6);
        b.signaled().post(1);
        wqe_bytes(&hw, 0, 6)
    };
    let plain = post(None);
    assert_eq!(
        plain,
        post(Some(&AddressVector::lid_gid_route(dest.lid, dest.gid)))
    );
    let route = AddressVector {
        key: 0xffff,
        dqp_dct: 0x77,
        extended: true,
        stat_rate_sl: 0x03,
        fl_mlid: 0x80,
        rlid: 0,
        rmac: [0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5],
        tclass: 0x20,
        hop_limit: 64,
        grh_gid_fl: 0x0300_0000,
        rgid: [0x11; 16],
    };
    let w = post(Some(&route));
    let got = DatagramSeg::new_checked(&w[16..64]).unwrap().get();
    assert_eq!(
        got,
        AddressVector {
            key: dest.key,
            dqp_dct: dest.dct,
            ..route
        }
    );
    // Everything but the address vector is as `dc` wrote it.
    assert_eq!((&w[..16], &w[64..]), (&plain[..16], &plain[64..]));
}
