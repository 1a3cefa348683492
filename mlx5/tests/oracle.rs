//! rdma-core oracle tests: the `mlx5::prm` views and constants against what a C
//! compiler makes of rdma-core's `<infiniband/mlx5dv.h>` (`oracle/oracle.c`).
//!
//! Run with `cargo test -p mlx5 --features rdma-core-oracle --test oracle`
//! (needs `libibverbs-dev`).
#![cfg(feature = "rdma-core-oracle")]

use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::ops::Range;

use test_support::Rng;

use mlx5::prm::{
    cq_doorbell_bytes, cqe_res_format, ctrl_flags, op_own, tm_flags, AddressVector, ArmCmd,
    AtomicSeg, CqArm, CqDbRec, CqDoorbell, Cqe64, CqeFormat, CqeOpcode, Ctrl, CtrlSeg, DataSeg,
    DatagramSeg, ErrCqe, InlineSeg, RaddrSeg, Rvh, SrqNextSeg, Syndrome, TmAppOp, TmCmd, TmOpcode,
    TmSeg, Tmh, TmhOpcode, WqeOpcode, CQE_APP_TAG_MATCHING, CQ_ARM_DB, CQ_DB_REQ_NOT,
    CQ_DB_REQ_NOT_SOL, CQ_DOORBELL, EXTENDED_AV, INLINE_SEG, INVALID_LKEY, RCV_DBR, SEND_WQE_BB,
    SEND_WQE_SHIFT, SND_DBR, TMC_SUCCESS,
};

// ---------------------------------------------------------------------------
// The C side
// ---------------------------------------------------------------------------

#[repr(C)]
struct OracleEntry {
    name: *const c_char,
    value: i64,
}

extern "C" {
    fn oracle_table(out: *mut *const OracleEntry) -> usize;
    fn oracle_ctrl_seg(out: *mut u8, a: *const OracleCtrl);
    fn oracle_ctrl_stream(out: *mut u8, stream_id: u16);
    fn oracle_dgram_seg(out: *mut u8, av: *const OracleAv);
    fn oracle_data_seg(out: *mut u8, length: u32, lkey: u32, addr: u64);
    fn oracle_raddr_seg(out: *mut u8, raddr: u64, rkey: u32);
    fn oracle_atomic_seg(out: *mut u8, swap_add: u64, compare: u64);
    fn oracle_inline_seg(out: *mut u8, len: u32);
    fn oracle_srq_next_seg(out: *mut u8, next_wqe_index: u16);
    fn oracle_tmh(out: *mut u8, opcode: u8, app_ctx: u32, tag: u64);
    fn oracle_rvh(out: *mut u8, va: u64, rkey: u32, len: u32);
    fn oracle_tm_seg(out: *mut u8, a: *const OracleTmOp);
    fn oracle_tm_wqe(out: *mut u8, a: *const OracleTmOp) -> u32;
    fn oracle_tm_app_op(app_op: u8) -> u32;
    fn oracle_cqe64_nfields() -> usize;
    fn oracle_cqe64(input: *const u8, out: *mut u64);
    fn oracle_err_cqe_nfields() -> usize;
    fn oracle_err_cqe(input: *const u8, out: *mut u64);
    fn oracle_arm_cq(
        dbrec: *mut u32,
        uar: *mut u8,
        arm_sn: u32,
        cons_index: u32,
        cqn: u32,
        solicited: i32,
    );
}

/// `struct oracle_ctrl` of oracle.c: `mlx5dv_set_ctrl_seg`'s arguments.
#[repr(C)]
struct OracleCtrl {
    qpn: u32,
    /// As the helper stores it: raw (callers hand it big-endian).
    imm: u32,
    pi: u16,
    opcode: u8,
    opmod: u8,
    fm_ce_se: u8,
    ds: u8,
    signature: u8,
}

/// `struct oracle_av` of oracle.c: `mlx5dv_set_dgram_seg`'s arguments.
#[repr(C)]
struct OracleAv {
    key: u64,
    dqp_dct: u32,
    grh_gid_fl: u32,
    rlid: u16,
    ext: u8,
    stat_rate_sl: u8,
    fl_mlid: u8,
    tclass: u8,
    hop_limit: u8,
    rmac: [u8; 6],
    rgid: [u8; 16],
}

/// `struct oracle_tm_op` of oracle.c: one tag-list operation as
/// `ibv_post_srq_ops` takes it, with the list index and the command QP's
/// state.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct OracleTmOp {
    tag: u64,
    mask: u64,
    sge_addr: u64,
    sge_length: u32,
    sge_lkey: u32,
    /// `ibv_ops_wr.tm.unexpected_cnt` (32 bits; the segment keeps 16).
    unexpected_cnt: u32,
    qpn: u32,
    index: u16,
    cur_post: u16,
    /// A `MLX5_TM_OPCODE_*`.
    op: u8,
    signaled: u8,
    sync: u8,
    num_sge: u8,
}

/// Bits of `oracle_tm_app_op`'s answer (the enum in oracle.c).
mod tm_bits {
    pub const NAMES_TAG: u32 = 1 << 0;
    pub const ENDS_TAG: u32 = 1 << 1;
    pub const RNDV_INCOMPLETE: u32 = 1 << 2;
    pub const LIST_OP: u32 = 1 << 3;
    pub const SRQ_WQE: u32 = 1 << 4;
    pub const WC_MATCH: u32 = 1 << 5;
    pub const WC_DATA_VALID: u32 = 1 << 6;
}

#[cfg(mlx5_oracle_x86)]
extern "C" {
    fn oracle_x86_ctrl_seg(out: *mut u8, a: *const OracleCtrl);
}

/// Indices into `oracle_cqe64`'s output (the enum in oracle.c).
mod c64 {
    pub const OWNER: usize = 0;
    pub const SE: usize = 1;
    pub const FORMAT: usize = 2;
    pub const OPCODE: usize = 3;
    pub const OP_OWN: usize = 4;
    pub const SIGNATURE: usize = 5;
    pub const WQE_COUNTER: usize = 6;
    pub const BYTE_CNT: usize = 7;
    pub const IMM_INVAL_PKEY: usize = 8;
    pub const SRQN_UIDX: usize = 9;
    pub const SRQN: usize = 10;
    pub const SOP_DROP_QPN: usize = 11;
    pub const QPN: usize = 12;
    pub const S_WQE_OPCODE: usize = 13;
    pub const TIMESTAMP: usize = 14;
    pub const WQE_ID: usize = 15;
    pub const ML_PATH: usize = 16;
    pub const SLID: usize = 17;
    pub const FLAGS_RQPN: usize = 18;
    pub const HDS_IP_EXT: usize = 19;
    pub const L4_HDR_TYPE_ETC: usize = 20;
    pub const VLAN_INFO: usize = 21;
    pub const APP: usize = 22;
    pub const APP_OP: usize = 23;
    pub const APP_INFO: usize = 24;
    pub const IS_TM: usize = 25;
    pub const TM_SUCCESS: usize = 26;
    pub const TM_SUCCEEDED: usize = 27;
    pub const TM_HW_PHASE_CNT: usize = 28;
    pub const TMH_OPCODE: usize = 29;
    pub const TMH_APP_CTX: usize = 30;
    pub const TMH_TAG: usize = 31;
    pub const N: usize = 32;
}

/// Indices into `oracle_err_cqe`'s output (the enum in oracle.c).
mod cerr {
    pub const SRQN: usize = 0;
    pub const VENDOR_ERR_SYND: usize = 1;
    pub const SYNDROME: usize = 2;
    pub const S_WQE_OPCODE_QPN: usize = 3;
    pub const QPN: usize = 4;
    pub const S_WQE_OPCODE: usize = 5;
    pub const WQE_COUNTER: usize = 6;
    pub const SIGNATURE: usize = 7;
    pub const OP_OWN: usize = 8;
    pub const N: usize = 9;
}

/// The oracle's table of sizes, offsets and enum values.
struct Table(HashMap<String, i64>);

impl Table {
    fn load() -> Self {
        let mut p: *const OracleEntry = std::ptr::null();
        // SAFETY: oracle_table points `p` at a static array of the returned length.
        let n = unsafe { oracle_table(&mut p) };
        assert!(!p.is_null() && n > 0);
        // SAFETY: as above; the names are static NUL-terminated strings.
        let entries = unsafe { std::slice::from_raw_parts(p, n) };
        let map: HashMap<String, i64> = entries
            .iter()
            .map(|e| {
                // SAFETY: the names are static NUL-terminated strings.
                let name = unsafe { CStr::from_ptr(e.name) }
                    .to_str()
                    .unwrap()
                    .to_owned();
                (name, e.value)
            })
            .collect();
        assert_eq!(map.len(), n, "duplicate names in the oracle table");
        Table(map)
    }

    fn get(&self, name: &str) -> i64 {
        *self
            .0
            .get(name)
            .unwrap_or_else(|| panic!("oracle.c has no entry `{name}`"))
    }

    fn usize(&self, name: &str) -> usize {
        usize::try_from(self.get(name)).unwrap()
    }

    fn sizeof(&self, st: &str) -> usize {
        self.usize(&format!("sizeof:{st}"))
    }

    /// The byte range of `st.field` in the C struct.
    fn range(&self, st: &str, field: &str) -> Range<usize> {
        let off = self.usize(&format!("offsetof:{st}.{field}"));
        let size = self.usize(&format!("fieldsize:{st}.{field}"));
        off..off + size
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Random field values, drawn from the workspace's seeded generator.
trait Draw {
    fn u64(&mut self) -> u64;
    fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }
    fn u16(&mut self) -> u16 {
        (self.u64() >> 48) as u16
    }
    fn u8(&mut self) -> u8 {
        (self.u64() >> 56) as u8
    }
    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.u8();
        }
    }
    /// Mostly uniform values, with a share of all-zero and all-one patterns.
    fn edgy_u64(&mut self) -> u64 {
        match self.u64() % 8 {
            0 => 0,
            1 => u64::MAX,
            _ => self.u64(),
        }
    }
}

impl Draw for Rng {
    fn u64(&mut self) -> u64 {
        self.next()
    }
}

const ITERS: usize = 10_000;

/// Writes `value` (every byte nonzero) with a Rust setter into a zeroed buffer
/// of `len` bytes and checks that it lands exactly, big-endian, on the C field
/// `st.field`.
fn assert_lands(t: &Table, st: &str, field: &str, len: usize, value: u64, set: impl Fn(&mut [u8])) {
    let r = t.range(st, field);
    let mut b = vec![0u8; len];
    set(&mut b);
    let mut expect = vec![0u8; len];
    expect[r.clone()].copy_from_slice(&value.to_be_bytes()[8 - r.len()..]);
    assert_eq!(
        b, expect,
        "{st}.{field}: setter wrote outside C bytes {r:?}"
    );
}

/// Checks that a Rust getter reads exactly the C field `st.field`, big-endian:
/// it must return the pattern placed at the field's bytes whatever the other
/// bytes hold, and zero when only the field's bytes are zero.
fn assert_reads(t: &Table, st: &str, field: &str, len: usize, get: impl Fn(&[u8]) -> u64) {
    let r = t.range(st, field);
    let pat = 0x8192_a3b4_c5d6_e7f8u64;
    let want = pat >> (64 - 8 * r.len());
    for bg in [0x00u8, 0xff, 0x5a] {
        let mut b = vec![bg; len];
        b[r.clone()].copy_from_slice(&pat.to_be_bytes()[..r.len()]);
        assert_eq!(
            get(&b),
            want,
            "{st}.{field}: getter did not read C bytes {r:?}"
        );
        b[r.clone()].fill(0);
        assert_eq!(get(&b), 0, "{st}.{field}: getter read bytes outside {r:?}");
    }
}

/// Checks that a Rust whole-segment setter zeroes the C field `st.field`.
fn assert_zeroes(t: &Table, st: &str, field: &str, len: usize, set: impl Fn(&mut [u8])) {
    let r = t.range(st, field);
    let mut b = vec![0xffu8; len];
    set(&mut b);
    assert!(
        b[r.clone()].iter().all(|&x| x == 0),
        "{st}.{field} {r:?} not zeroed: {b:02x?}"
    );
}

// ---------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------

#[test]
fn struct_sizes_match_len() {
    let t = Table::load();
    assert_eq!(CtrlSeg::<&[u8]>::LEN, t.sizeof("mlx5_wqe_ctrl_seg"));
    assert_eq!(RaddrSeg::<&[u8]>::LEN, t.sizeof("mlx5_wqe_raddr_seg"));
    assert_eq!(DataSeg::<&[u8]>::LEN, t.sizeof("mlx5_wqe_data_seg"));
    assert_eq!(InlineSeg::<&[u8]>::LEN, t.sizeof("mlx5_wqe_inl_data_seg"));
    assert_eq!(AtomicSeg::<&[u8]>::LEN, t.sizeof("mlx5_wqe_atomic_seg"));
    assert_eq!(SrqNextSeg::<&[u8]>::LEN, t.sizeof("mlx5_wqe_srq_next_seg"));
    assert_eq!(Cqe64::<&[u8]>::LEN, t.sizeof("mlx5_cqe64"));
    assert_eq!(ErrCqe::<&[u8]>::LEN, t.sizeof("mlx5_err_cqe"));
    assert_eq!(DatagramSeg::<&[u8]>::LEN, t.sizeof("mlx5_wqe_av"));
    assert_eq!(DatagramSeg::<&[u8]>::LEN, t.sizeof("mlx5_wqe_datagram_seg"));
    assert_eq!(Tmh::<&[u8]>::LEN, t.sizeof("ibv_tmh"));
    assert_eq!(Rvh::<&[u8]>::LEN, t.sizeof("ibv_rvh"));
    assert_eq!(TmSeg::<&[u8]>::LEN, t.sizeof("mlx5_wqe_tm_seg"));
}

// ---------------------------------------------------------------------------
// Offsets
// ---------------------------------------------------------------------------

#[test]
fn ctrl_seg_offsets() {
    let t = Table::load();
    let st = "mlx5_wqe_ctrl_seg";
    let n = CtrlSeg::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> CtrlSeg<&mut [u8]> {
        CtrlSeg::new_unchecked(b)
    }
    let r = |b: &[u8]| CtrlSeg::new_unchecked(b.to_vec());
    // Setters.
    assert_lands(&t, st, "opmod_idx_opcode", n, 0x8192_a3b4, |b| {
        w(b).set_opmod_idx_opcode(0x81, 0x92a3, 0xb4)
    });
    assert_lands(&t, st, "qpn_ds", n, 0x8192_a3b4, |b| {
        w(b).set_qpn_ds(0x81_92a3, 0xb4)
    });
    assert_lands(&t, st, "signature", n, 0xa5, |b| w(b).set_signature(0xa5));
    assert_lands(&t, st, "fm_ce_se", n, 0xa5, |b| w(b).set_fm_ce_se(0xa5));
    assert_lands(&t, st, "imm", n, 0x8192_a3b4, |b| w(b).set_imm(0x8192_a3b4));
    assert_lands(&t, st, "opmod_idx_opcode", n, 0x8192_a3b4, |b| {
        w(b).set_all(ctrl((0x92a3, 0xb4, 0x81, 0, 0, 0, 0, 0)))
    });
    assert_lands(&t, st, "qpn_ds", n, 0x8192_a3b4, |b| {
        w(b).set_all(ctrl((0, 0, 0, 0x81_92a3, 0, 0xb4, 0, 0)))
    });
    assert_lands(&t, st, "signature", n, 0xa5, |b| {
        w(b).set_all(ctrl((0, 0, 0, 0, 0, 0, 0xa5, 0)))
    });
    assert_lands(&t, st, "fm_ce_se", n, 0xa5, |b| {
        w(b).set_all(ctrl((0, 0, 0, 0, 0xa5, 0, 0, 0)))
    });
    assert_lands(&t, st, "imm", n, 0x8192_a3b4, |b| {
        w(b).set_all(ctrl((0, 0, 0, 0, 0, 0, 0, 0x8192_a3b4)))
    });
    assert_zeroes(&t, st, "dci_stream_channel_id", n, |b| {
        w(b).set_all(ctrl((
            0xffff,
            0xff,
            0xff,
            0xff_ffff,
            0xff,
            0xff,
            0xff,
            0xffff_ffff,
        )))
    });
    // Getters.
    assert_reads(&t, st, "opmod_idx_opcode", n, |b| {
        let c = r(b);
        (u64::from(c.opmod()) << 24) | (u64::from(c.wqe_index()) << 8) | u64::from(c.opcode_raw())
    });
    assert_reads(&t, st, "qpn_ds", n, |b| {
        let c = r(b);
        (u64::from(c.qpn()) << 8) | u64::from(c.ds())
    });
    assert_reads(&t, st, "signature", n, |b| r(b).signature().into());
    assert_reads(&t, st, "dci_stream_channel_id", n, |b| {
        r(b).dci_stream_channel_id().into()
    });
    assert_reads(&t, st, "fm_ce_se", n, |b| r(b).fm_ce_se().into());
    assert_reads(&t, st, "imm", n, |b| r(b).imm().into());
}

#[test]
fn data_seg_offsets() {
    let t = Table::load();
    let st = "mlx5_wqe_data_seg";
    let n = DataSeg::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> DataSeg<&mut [u8]> {
        DataSeg::new_unchecked(b)
    }
    let r = |b: &[u8]| DataSeg::new_unchecked(b.to_vec());
    assert_lands(&t, st, "byte_count", n, 0x8192_a3b4, |b| {
        w(b).set(0x8192_a3b4, 0, 0)
    });
    assert_lands(&t, st, "lkey", n, 0x8192_a3b4, |b| {
        w(b).set(0, 0x8192_a3b4, 0)
    });
    let a = 0x8192_a3b4_c5d6_e7f8;
    assert_lands(&t, st, "addr", n, a, |b| w(b).set(0, 0, a));
    assert_reads(&t, st, "byte_count", n, |b| r(b).byte_count().into());
    assert_reads(&t, st, "lkey", n, |b| r(b).lkey().into());
    assert_reads(&t, st, "addr", n, |b| r(b).addr());
}

#[test]
fn raddr_seg_offsets() {
    let t = Table::load();
    let st = "mlx5_wqe_raddr_seg";
    let n = RaddrSeg::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> RaddrSeg<&mut [u8]> {
        RaddrSeg::new_unchecked(b)
    }
    let r = |b: &[u8]| RaddrSeg::new_unchecked(b.to_vec());
    let a = 0x8192_a3b4_c5d6_e7f8;
    assert_lands(&t, st, "raddr", n, a, |b| w(b).set(a, 0));
    assert_lands(&t, st, "rkey", n, 0x8192_a3b4, |b| w(b).set(0, 0x8192_a3b4));
    assert_zeroes(&t, st, "reserved", n, |b| w(b).set(u64::MAX, u32::MAX));
    assert_reads(&t, st, "raddr", n, |b| r(b).raddr());
    assert_reads(&t, st, "rkey", n, |b| r(b).rkey().into());
}

#[test]
fn datagram_seg_offsets() {
    let t = Table::load();
    let st = "mlx5_wqe_av";
    let n = DatagramSeg::<&[u8]>::LEN;
    fn w(b: &mut [u8], av: AddressVector) {
        DatagramSeg::new_unchecked(b).set(&av)
    }
    let r = |b: &[u8]| DatagramSeg::new_unchecked(b.to_vec());
    let av = AddressVector::default;
    let key = 0x8192_a3b4_c5d6_e7f8;
    assert_lands(&t, st, "key.dc_key", n, key, |b| {
        w(b, AddressVector { key, ..av() })
    });
    // A Q_Key is the key's high half.
    assert_eq!(t.range(st, "key.qkey.qkey"), 0..4);
    assert_eq!(t.range(st, "key.qkey.reserved"), 4..8);
    // The extended flag is bit 31 of dqp_dct, over a 24-bit number.
    assert_eq!(i64::from(EXTENDED_AV), t.get("MLX5_EXTENDED_UD_AV"));
    let (dqp_dct, extended) = (0x01_a2b3, true);
    assert_lands(&t, st, "dqp_dct", n, 0x8001_a2b3, |b| {
        w(
            b,
            AddressVector {
                dqp_dct,
                extended,
                ..av()
            },
        )
    });
    let one = |field: &str, v: u8, set: fn(&mut AddressVector, u8)| {
        assert_lands(&t, st, field, n, v.into(), |b| {
            let mut a = av();
            set(&mut a, v);
            w(b, a)
        });
    };
    one("stat_rate_sl", 0x81, |a, v| a.stat_rate_sl = v);
    one("fl_mlid", 0x82, |a, v| a.fl_mlid = v);
    one("tclass", 0x83, |a, v| a.tclass = v);
    one("hop_limit", 0x84, |a, v| a.hop_limit = v);
    assert_lands(&t, st, "rlid", n, 0x8192, |b| {
        w(
            b,
            AddressVector {
                rlid: 0x8192,
                ..av()
            },
        )
    });
    let fl: u32 = 0x8192_a3b4;
    assert_lands(&t, st, "grh_gid_fl", n, fl.into(), |b| {
        w(
            b,
            AddressVector {
                grh_gid_fl: fl,
                ..av()
            },
        )
    });
    // The byte arrays land whole, in order.
    let (rmac, rgid) = ([0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6], [0xe7; 16]);
    let mut b = vec![0u8; n];
    w(&mut b, AddressVector { rmac, rgid, ..av() });
    assert_eq!(b[t.range(st, "rmac")], rmac);
    assert_eq!(b[t.range(st, "rgid")], rgid);
    assert_eq!(b.iter().filter(|&&x| x != 0).count(), 6 + 16, "{b:02x?}");
    assert_zeroes(&t, st, "reserved0", n, |b| {
        w(
            b,
            AddressVector {
                key: u64::MAX,
                rlid: u16::MAX,
                rmac: [0xff; 6],
                ..av()
            },
        )
    });
    assert_reads(&t, st, "key.dc_key", n, |b| r(b).key());
    assert_reads(&t, st, "rlid", n, |b| r(b).rlid().into());
    assert_reads(&t, st, "grh_gid_fl", n, |b| r(b).grh_gid_fl().into());
    let d = t.range(st, "dqp_dct");
    let mut b = vec![0u8; n];
    b[d.clone()].copy_from_slice(&[0x80, 0x12, 0x34, 0x56]);
    assert_eq!((r(&b).dqp_dct(), r(&b).extended()), (0x12_3456, true));
    b[d].copy_from_slice(&[0x7f, 0xab, 0xcd, 0xef]);
    assert_eq!((r(&b).dqp_dct(), r(&b).extended()), (0xab_cdef, false));
}

#[test]
fn atomic_seg_offsets() {
    let t = Table::load();
    let st = "mlx5_wqe_atomic_seg";
    let n = AtomicSeg::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> AtomicSeg<&mut [u8]> {
        AtomicSeg::new_unchecked(b)
    }
    let r = |b: &[u8]| AtomicSeg::new_unchecked(b.to_vec());
    let a = 0x8192_a3b4_c5d6_e7f8;
    assert_lands(&t, st, "swap_add", n, a, |b| w(b).set(a, 0));
    assert_lands(&t, st, "compare", n, a, |b| w(b).set(0, a));
    assert_reads(&t, st, "swap_add", n, |b| r(b).swap_add());
    assert_reads(&t, st, "compare", n, |b| r(b).compare());
}

#[test]
fn inline_seg_offsets() {
    let t = Table::load();
    let st = "mlx5_wqe_inl_data_seg";
    let n = InlineSeg::<&[u8]>::LEN;
    // The header sets INLINE_SEG (bit 31) on top of the length.
    assert_lands(&t, st, "byte_count", n, 0x8192_a3b4, |b| {
        InlineSeg::new_unchecked(b).set_len(0x0192_a3b4)
    });
    assert_reads(&t, st, "byte_count", n, |b| {
        let s = InlineSeg::new_unchecked(b);
        u64::from(s.len()) | if s.is_inline() { 0x8000_0000 } else { 0 }
    });
}

#[test]
fn srq_next_seg_offsets() {
    let t = Table::load();
    let st = "mlx5_wqe_srq_next_seg";
    let n = SrqNextSeg::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> SrqNextSeg<&mut [u8]> {
        SrqNextSeg::new_unchecked(b)
    }
    let r = |b: &[u8]| SrqNextSeg::new_unchecked(b.to_vec());
    assert_lands(&t, st, "next_wqe_index", n, 0xa3b4, |b| w(b).set(0xa3b4));
    for f in ["rsvd0", "signature", "rsvd1"] {
        assert_zeroes(&t, st, f, n, |b| w(b).set(0xffff));
    }
    assert_reads(&t, st, "next_wqe_index", n, |b| {
        r(b).next_wqe_index().into()
    });
    assert_reads(&t, st, "signature", n, |b| r(b).signature().into());
}

#[test]
fn cqe64_offsets() {
    let t = Table::load();
    let st = "mlx5_cqe64";
    let n = Cqe64::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> Cqe64<&mut [u8]> {
        Cqe64::new_unchecked(b)
    }
    let r = |b: &[u8]| Cqe64::new_unchecked(b.to_vec());
    let (v8, v16, v32, v64) = (0xa5u8, 0xa3b4u16, 0x8192_a3b4u32, 0x8192_a3b4_c5d6_e7f8u64);
    // Setters.
    assert_lands(&t, st, "wqe_id", n, v16.into(), |b| w(b).set_wqe_id(v16));
    assert_lands(&t, st, "slid", n, v16.into(), |b| w(b).set_slid(v16));
    assert_lands(&t, st, "flags_rqpn", n, v32.into(), |b| {
        w(b).set_flags_rqpn(v32)
    });
    assert_lands(&t, st, "srqn_uidx", n, v32.into(), |b| {
        w(b).set_srqn_uidx(v32)
    });
    assert_lands(&t, st, "imm_inval_pkey", n, v32.into(), |b| {
        w(b).set_imm_inval_pkey(v32)
    });
    assert_lands(&t, st, "byte_cnt", n, v32.into(), |b| {
        w(b).set_byte_cnt(v32)
    });
    assert_lands(&t, st, "timestamp", n, v64, |b| w(b).set_timestamp(v64));
    assert_lands(&t, st, "sop_drop_qpn", n, v32.into(), |b| {
        w(b).set_sop_drop_qpn(v32)
    });
    assert_lands(&t, st, "wqe_counter", n, v16.into(), |b| {
        w(b).set_wqe_counter(v16)
    });
    assert_lands(&t, st, "signature", n, v8.into(), |b| {
        w(b).set_signature(v8)
    });
    assert_lands(&t, st, "op_own", n, v8.into(), |b| w(b).set_op_own(v8));
    // Getters.
    assert_reads(&t, st, "wqe_id", n, |b| r(b).wqe_id().into());
    assert_reads(&t, st, "ml_path", n, |b| r(b).ml_path().into());
    assert_reads(&t, st, "slid", n, |b| r(b).slid().into());
    assert_reads(&t, st, "flags_rqpn", n, |b| r(b).flags_rqpn().into());
    assert_reads(&t, st, "hds_ip_ext", n, |b| r(b).hds_ip_ext().into());
    assert_reads(&t, st, "l4_hdr_type_etc", n, |b| {
        r(b).l4_hdr_type_etc().into()
    });
    assert_reads(&t, st, "vlan_info", n, |b| r(b).vlan_info().into());
    assert_reads(&t, st, "srqn_uidx", n, |b| r(b).srqn_uidx().into());
    assert_reads(&t, st, "imm_inval_pkey", n, |b| {
        r(b).imm_inval_pkey().into()
    });
    assert_reads(&t, st, "app", n, |b| r(b).app().into());
    assert_reads(&t, st, "app_op", n, |b| r(b).app_op().into());
    assert_reads(&t, st, "app_info", n, |b| r(b).app_info().into());
    assert_reads(&t, st, "byte_cnt", n, |b| r(b).byte_cnt().into());
    assert_reads(&t, st, "timestamp", n, |b| r(b).timestamp());
    assert_reads(&t, st, "sop_drop_qpn", n, |b| r(b).sop_drop_qpn().into());
    assert_reads(&t, st, "wqe_counter", n, |b| r(b).wqe_counter().into());
    assert_reads(&t, st, "signature", n, |b| r(b).signature().into());
    assert_reads(&t, st, "op_own", n, |b| r(b).op_own().into());
    // The byte-offset constants.
    assert_eq!(
        Cqe64::<&[u8]>::SIGNATURE_OFFSET,
        t.range(st, "signature").start
    );
    assert_eq!(Cqe64::<&[u8]>::OP_OWN_OFFSET, t.range(st, "op_own").start);
    // Scatter-to-CQE data (format 1) fills the union in front of srqn_uidx.
    let mut b = [0u8; 64];
    w(&mut b).inline32_mut().fill(0xff);
    assert_eq!(
        b.iter().rposition(|&x| x != 0),
        Some(t.range(st, "srqn_uidx").start - 1)
    );
    assert_eq!(r(&b).inline32().len(), t.range(st, "srqn_uidx").start);
}

#[test]
fn err_cqe_offsets() {
    let t = Table::load();
    let st = "mlx5_err_cqe";
    let n = ErrCqe::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> ErrCqe<&mut [u8]> {
        ErrCqe::new_unchecked(b)
    }
    let r = |b: &[u8]| ErrCqe::new_unchecked(b.to_vec());
    let (v8, v16, v32) = (0xa5u8, 0xa3b4u16, 0x8192_a3b4u32);
    // Setters.
    assert_lands(&t, st, "srqn", n, v32.into(), |b| w(b).set_srqn(v32));
    assert_lands(&t, st, "vendor_err_synd", n, v8.into(), |b| {
        w(b).set_vendor_err_synd(v8)
    });
    assert_lands(&t, st, "syndrome", n, v8.into(), |b| w(b).set_syndrome(v8));
    assert_lands(&t, st, "s_wqe_opcode_qpn", n, v32.into(), |b| {
        w(b).set_s_wqe_opcode_qpn(0x81, 0x92_a3b4)
    });
    assert_lands(&t, st, "wqe_counter", n, v16.into(), |b| {
        w(b).set_wqe_counter(v16)
    });
    assert_lands(&t, st, "signature", n, v8.into(), |b| {
        w(b).set_signature(v8)
    });
    assert_lands(&t, st, "op_own", n, v8.into(), |b| w(b).set_op_own(v8));
    // Getters.
    assert_reads(&t, st, "srqn", n, |b| r(b).srqn().into());
    assert_reads(&t, st, "vendor_err_synd", n, |b| {
        r(b).vendor_err_synd().into()
    });
    assert_reads(&t, st, "syndrome", n, |b| r(b).syndrome_raw().into());
    assert_reads(&t, st, "s_wqe_opcode_qpn", n, |b| {
        r(b).s_wqe_opcode_qpn().into()
    });
    assert_reads(&t, st, "wqe_counter", n, |b| r(b).wqe_counter().into());
    assert_reads(&t, st, "signature", n, |b| r(b).signature().into());
    assert_reads(&t, st, "op_own", n, |b| r(b).op_own().into());
    // The error CQE shares its tail with the normal CQE.
    for f in ["wqe_counter", "signature", "op_own"] {
        assert_eq!(t.range(st, f), t.range("mlx5_cqe64", f), "{f}");
    }
}

// ---------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------

/// Checks a Rust enum against the header: every variant in `pairs` equals its C
/// value, and `pairs` covers `all` exactly (so a new variant needs an oracle name).
fn check_enum<E: Copy + PartialEq + std::fmt::Debug + Into<u8>>(
    t: &Table,
    all: &[E],
    pairs: &[(E, &str)],
) {
    for &(v, name) in pairs {
        assert_eq!(i64::from(v.into()), t.get(name), "{v:?} vs {name}");
    }
    assert_eq!(all.len(), pairs.len(), "ALL and the oracle list differ");
    for v in all {
        assert!(
            pairs.iter().any(|(p, _)| p == v),
            "{v:?} has no oracle name"
        );
    }
}

#[test]
fn wqe_opcodes_match() {
    use WqeOpcode::*;
    check_enum(
        &Table::load(),
        WqeOpcode::ALL,
        &[
            (Nop, "MLX5_OPCODE_NOP"),
            (SendInval, "MLX5_OPCODE_SEND_INVAL"),
            (RdmaWrite, "MLX5_OPCODE_RDMA_WRITE"),
            (RdmaWriteImm, "MLX5_OPCODE_RDMA_WRITE_IMM"),
            (Send, "MLX5_OPCODE_SEND"),
            (SendImm, "MLX5_OPCODE_SEND_IMM"),
            (RdmaRead, "MLX5_OPCODE_RDMA_READ"),
            (AtomicCs, "MLX5_OPCODE_ATOMIC_CS"),
            (AtomicFa, "MLX5_OPCODE_ATOMIC_FA"),
            (AtomicMaskedCs, "MLX5_OPCODE_ATOMIC_MASKED_CS"),
            (AtomicMaskedFa, "MLX5_OPCODE_ATOMIC_MASKED_FA"),
            (LocalInval, "MLX5_OPCODE_LOCAL_INVAL"),
            (TagMatching, "MLX5_OPCODE_TAG_MATCHING"),
        ],
    );
}

#[test]
fn cqe_opcodes_match() {
    use CqeOpcode::*;
    check_enum(
        &Table::load(),
        CqeOpcode::ALL,
        &[
            (Req, "MLX5_CQE_REQ"),
            (RespWrImm, "MLX5_CQE_RESP_WR_IMM"),
            (RespSend, "MLX5_CQE_RESP_SEND"),
            (RespSendImm, "MLX5_CQE_RESP_SEND_IMM"),
            (RespSendInv, "MLX5_CQE_RESP_SEND_INV"),
            (ResizeCq, "MLX5_CQE_RESIZE_CQ"),
            (NoPacket, "MLX5_CQE_NO_PACKET"),
            (SigErr, "MLX5_CQE_SIG_ERR"),
            (ReqErr, "MLX5_CQE_REQ_ERR"),
            (RespErr, "MLX5_CQE_RESP_ERR"),
            (Invalid, "MLX5_CQE_INVALID"),
        ],
    );
}

#[test]
fn syndromes_match() {
    use Syndrome::*;
    check_enum(
        &Table::load(),
        Syndrome::ALL,
        &[
            (LocalLength, "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR"),
            (LocalQpOp, "MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR"),
            (LocalProt, "MLX5_CQE_SYNDROME_LOCAL_PROT_ERR"),
            (WrFlush, "MLX5_CQE_SYNDROME_WR_FLUSH_ERR"),
            (MwBind, "MLX5_CQE_SYNDROME_MW_BIND_ERR"),
            (BadResp, "MLX5_CQE_SYNDROME_BAD_RESP_ERR"),
            (LocalAccess, "MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR"),
            (RemoteInvalReq, "MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR"),
            (RemoteAccess, "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR"),
            (RemoteOp, "MLX5_CQE_SYNDROME_REMOTE_OP_ERR"),
            (
                TransportRetryExc,
                "MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR",
            ),
            (RnrRetryExc, "MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR"),
            (RemoteAborted, "MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR"),
        ],
    );
}

#[test]
fn flag_and_misc_constants_match() {
    let t = Table::load();
    let eq = |rust: i64, name: &str| assert_eq!(rust, t.get(name), "{name}");

    eq(ctrl_flags::CQ_UPDATE.into(), "MLX5_WQE_CTRL_CQ_UPDATE");
    eq(ctrl_flags::SOLICITED.into(), "MLX5_WQE_CTRL_SOLICITED");
    eq(ctrl_flags::FENCE.into(), "MLX5_WQE_CTRL_FENCE");
    eq(
        ctrl_flags::INITIATOR_SMALL_FENCE.into(),
        "MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE",
    );

    eq(op_own::OWNER_MASK.into(), "MLX5_CQE_OWNER_MASK");
    eq(op_own::INLINE_SCATTER_32.into(), "MLX5_INLINE_SCATTER_32");
    eq(op_own::INLINE_SCATTER_64.into(), "MLX5_INLINE_SCATTER_64");
    // CqeFormat is the format field (bits 2-3) that INLINE_SCATTER_* sit in.
    eq(
        i64::from(CqeFormat::Inline32 as u8) << 2,
        "MLX5_INLINE_SCATTER_32",
    );
    eq(
        i64::from(CqeFormat::Inline64 as u8) << 2,
        "MLX5_INLINE_SCATTER_64",
    );
    // INITIAL: opcode INVALID, owner set.
    eq(i64::from(op_own::INITIAL >> 4), "MLX5_CQE_INVALID");
    eq(
        i64::from(op_own::INITIAL & op_own::OWNER_MASK),
        "MLX5_CQE_OWNER_MASK",
    );

    eq(cqe_res_format::HASH.into(), "MLX5DV_CQE_RES_FORMAT_HASH");
    eq(cqe_res_format::CSUM.into(), "MLX5DV_CQE_RES_FORMAT_CSUM");
    eq(
        cqe_res_format::CSUM_STRIDX.into(),
        "MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX",
    );

    eq(INLINE_SEG.into(), "MLX5_INLINE_SEG");
    eq(INVALID_LKEY.into(), "MLX5_INVALID_LKEY");
    eq(SEND_WQE_BB as i64, "MLX5_SEND_WQE_BB");
    eq(SEND_WQE_SHIFT.into(), "MLX5_SEND_WQE_SHIFT");
    assert_eq!(1usize << SEND_WQE_SHIFT, SEND_WQE_BB);
    eq(RCV_DBR as i64, "MLX5_RCV_DBR");
    eq(SND_DBR as i64, "MLX5_SND_DBR");
    eq(CQ_DOORBELL as i64, "MLX5_CQ_DOORBELL");
    eq(CQ_DB_REQ_NOT_SOL.into(), "MLX5_CQ_DB_REQ_NOT_SOL");
    eq(CQ_DB_REQ_NOT.into(), "MLX5_CQ_DB_REQ_NOT");
}

#[test]
fn op_own_masks_match_cqe_getters() {
    // SE_MASK / FORMAT_MASK have no header constant: check them against
    // mlx5dv_get_cqe_se / _format, one op_own value at a time.
    for v in 0..=255u8 {
        let mut b = [0u8; 64];
        b[63] = v;
        let mut c = [0u64; c64::N];
        // SAFETY: reads 64 bytes of `b`, writes `c64::N` words of `c`.
        unsafe { oracle_cqe64(b.as_ptr(), c.as_mut_ptr()) };
        assert_eq!(u64::from(v & op_own::OWNER_MASK), c[c64::OWNER], "{v:#x}");
        assert_eq!(u64::from(v & op_own::SE_MASK), c[c64::SE] << 1, "{v:#x}");
        assert_eq!(
            u64::from(v & op_own::FORMAT_MASK),
            c[c64::FORMAT] << 2,
            "{v:#x}"
        );
    }
}

// ---------------------------------------------------------------------------
// Random field values: Rust setters vs the header's writers
// ---------------------------------------------------------------------------

/// One random control-segment input: (pi, opcode, opmod, qpn, fm_ce_se, ds,
/// signature, imm as a host value).
type CtrlArgs = (u16, u8, u8, u32, u8, u8, u8, u32);

fn random_ctrl(rng: &mut Rng) -> CtrlArgs {
    let opcodes = WqeOpcode::ALL;
    let opcode = if rng.u8() < 128 {
        opcodes[rng.u64() as usize % opcodes.len()].into()
    } else {
        rng.u8()
    };
    // qpn: usually 24 bits, sometimes with garbage above (both sides shift it out).
    let qpn = if rng.u8() < 200 {
        rng.u32() & 0x00ff_ffff
    } else {
        rng.u32()
    };
    (
        rng.edgy_u64() as u16,
        opcode,
        rng.u8(),
        qpn,
        rng.u8(),
        rng.u8(),
        rng.u8(),
        rng.edgy_u64() as u32,
    )
}

/// A control segment's fields from `mlx5dv_set_ctrl_seg`'s arguments.
fn ctrl(a: CtrlArgs) -> Ctrl {
    let (wqe_index, opcode, opmod, qpn, fm_ce_se, ds, signature, imm) = a;
    Ctrl {
        wqe_index,
        opcode,
        opmod,
        qpn,
        fm_ce_se,
        ds,
        signature,
        imm,
    }
}

fn rust_ctrl(garbage: &mut Rng, a: CtrlArgs) -> [u8; 16] {
    let mut b = [0u8; 16];
    garbage.fill(&mut b); // set_all must write every byte
    CtrlSeg::new_unchecked(&mut b[..]).set_all(ctrl(a));
    b
}

#[test]
fn ctrl_seg_random_vs_mlx5dv_set_ctrl_seg() {
    let mut rng = Rng(0x0c7a_15e6);
    let mut garbage = Rng(0x9a7b_a6e0);
    for i in 0..ITERS {
        let a = random_ctrl(&mut rng);
        let (pi, opcode, opmod, qpn, fm_ce_se, ds, signature, imm) = a;
        let rust = rust_ctrl(&mut garbage, a);
        // The helper does not write dci_stream_channel_id: start from zero.
        let mut c = [0u8; 16];
        // The helper stores imm raw: hand it the big-endian form.
        let args = OracleCtrl {
            qpn,
            imm: imm.to_be(),
            pi,
            opcode,
            opmod,
            fm_ce_se,
            ds,
            signature,
        };
        // SAFETY: the C helper writes the 16-byte segment into `c`.
        unsafe { oracle_ctrl_seg(c.as_mut_ptr(), &args) };
        assert_eq!(rust, c, "iteration {i}: {a:x?}");
        // And the getters read back what was set.
        let s = CtrlSeg::new_checked(&rust[..]).unwrap();
        assert_eq!(
            (
                s.wqe_index(),
                s.opcode_raw(),
                s.opmod(),
                s.qpn(),
                s.fm_ce_se(),
                s.ds(),
                s.signature(),
                s.imm()
            ),
            (
                pi,
                opcode,
                opmod,
                qpn & 0x00ff_ffff,
                fm_ce_se,
                ds,
                signature,
                imm
            ),
            "iteration {i}"
        );
    }
}

#[cfg(mlx5_oracle_x86)]
#[test]
fn ctrl_seg_random_vs_mlx5dv_x86_set_ctrl_seg() {
    if !std::arch::is_x86_feature_detected!("ssse3") {
        eprintln!("skipped: CPU lacks SSSE3, needed by mlx5dv_x86_set_ctrl_seg");
        return;
    }
    let mut rng = Rng(0x05e3_c7a1);
    let mut garbage = Rng(0x4a3b_2c1d);
    for i in 0..ITERS {
        let a = random_ctrl(&mut rng);
        let (pi, opcode, opmod, qpn, fm_ce_se, ds, signature, imm) = a;
        let rust = rust_ctrl(&mut garbage, a);
        let mut c = [0u8; 16];
        garbage.fill(&mut c); // the SSE variant writes all 16 bytes
                              // SAFETY: the CPU has SSSE3 (checked above).
        let args = OracleCtrl {
            qpn,
            imm: imm.to_be(),
            pi,
            opcode,
            opmod,
            fm_ce_se,
            ds,
            signature,
        };
        // SAFETY: the CPU has SSSE3 (checked above); the helper writes 16 bytes.
        unsafe { oracle_x86_ctrl_seg(c.as_mut_ptr(), &args) };
        assert_eq!(rust, c, "iteration {i}: {a:x?}");
    }
}

#[test]
fn data_seg_random_vs_mlx5dv_set_data_seg() {
    let mut rng = Rng(0x0da7_a5e6);
    for i in 0..ITERS {
        let (len, lkey, addr) = (rng.edgy_u64() as u32, rng.edgy_u64() as u32, rng.edgy_u64());
        let (mut r, mut c) = ([0u8; 16], [0u8; 16]);
        rng.fill(&mut r);
        rng.fill(&mut c);
        DataSeg::new_unchecked(&mut r[..]).set(len, lkey, addr);
        // SAFETY: the C helper writes only the segment into `c`, which is large enough.
        unsafe { oracle_data_seg(c.as_mut_ptr(), len, lkey, addr) };
        assert_eq!(
            r, c,
            "iteration {i}: len {len:#x} lkey {lkey:#x} addr {addr:#x}"
        );
        let s = DataSeg::new_checked(&r[..]).unwrap();
        assert_eq!((s.byte_count(), s.lkey(), s.addr()), (len, lkey, addr));
    }
}

#[test]
fn datagram_seg_random_vs_mlx5dv_set_dgram_seg() {
    let t = Table::load();
    let reserved = t.range("mlx5_wqe_av", "reserved0");
    let mut rng = Rng(0xd6a5_e600);
    for i in 0..ITERS {
        let mut av = AddressVector {
            key: rng.edgy_u64(),
            // The helper takes a 24-bit number and the flag apart.
            dqp_dct: rng.u32() & 0x00ff_ffff,
            extended: rng.u8() & 1 == 1,
            stat_rate_sl: rng.u8(),
            fl_mlid: rng.u8(),
            rlid: rng.u16(),
            tclass: rng.u8(),
            hop_limit: rng.u8(),
            grh_gid_fl: rng.edgy_u64() as u32,
            ..AddressVector::default()
        };
        rng.fill(&mut av.rmac);
        rng.fill(&mut av.rgid);
        let c_av = OracleAv {
            key: av.key,
            dqp_dct: av.dqp_dct,
            grh_gid_fl: av.grh_gid_fl,
            rlid: av.rlid,
            ext: av.extended.into(),
            stat_rate_sl: av.stat_rate_sl,
            fl_mlid: av.fl_mlid,
            tclass: av.tclass,
            hop_limit: av.hop_limit,
            rmac: av.rmac,
            rgid: av.rgid,
        };
        // The same garbage under both.
        let mut r = [0u8; 48];
        rng.fill(&mut r);
        let mut c = r;
        DatagramSeg::new_unchecked(&mut r[..]).set(&av);
        // SAFETY: the C helper writes only the 48-byte segment into `c`, and
        // reads `c_av`, which lives across the call.
        unsafe { oracle_dgram_seg(c.as_mut_ptr(), &c_av) };
        // The helper leaves the reserved word as it was; ours zeroes it.
        assert!(r[reserved.clone()].iter().all(|&x| x == 0));
        c[reserved.clone()].fill(0);
        assert_eq!(r, c, "iteration {i}: {av:x?}");
        assert_eq!(DatagramSeg::new_checked(&r[..]).unwrap().get(), av);
    }
}

#[test]
fn ctrl_stream_id_random_vs_c_struct() {
    let mut rng = Rng(0x0d5c_1d00);
    for i in 0..ITERS {
        let id = rng.u16();
        let mut r = [0u8; 16];
        rng.fill(&mut r);
        let mut c = r;
        CtrlSeg::new_unchecked(&mut r[..]).set_dci_stream_channel_id(id);
        // SAFETY: the C helper writes only the 16-byte segment into `c`.
        unsafe { oracle_ctrl_stream(c.as_mut_ptr(), id) };
        assert_eq!(r, c, "iteration {i}: stream {id:#x}");
        assert_eq!(
            CtrlSeg::new_checked(&r[..])
                .unwrap()
                .dci_stream_channel_id(),
            id
        );
    }
}

#[test]
fn raddr_seg_random_vs_c_struct() {
    let mut rng = Rng(0x04ad_d5e6);
    for i in 0..ITERS {
        let (raddr, rkey) = (rng.edgy_u64(), rng.edgy_u64() as u32);
        let (mut r, mut c) = ([0u8; 16], [0u8; 16]);
        rng.fill(&mut r);
        rng.fill(&mut c);
        RaddrSeg::new_unchecked(&mut r[..]).set(raddr, rkey);
        // SAFETY: the C helper writes only the segment into `c`, which is large enough.
        unsafe { oracle_raddr_seg(c.as_mut_ptr(), raddr, rkey) };
        assert_eq!(r, c, "iteration {i}: raddr {raddr:#x} rkey {rkey:#x}");
        let s = RaddrSeg::new_checked(&r[..]).unwrap();
        assert_eq!((s.raddr(), s.rkey()), (raddr, rkey));
    }
}

#[test]
fn atomic_seg_random_vs_c_struct() {
    let mut rng = Rng(0x0a70_311c);
    for i in 0..ITERS {
        let (swap_add, compare) = (rng.edgy_u64(), rng.edgy_u64());
        let (mut r, mut c) = ([0u8; 16], [0u8; 16]);
        rng.fill(&mut r);
        rng.fill(&mut c);
        AtomicSeg::new_unchecked(&mut r[..]).set(swap_add, compare);
        // SAFETY: the C helper writes only the segment into `c`, which is large enough.
        unsafe { oracle_atomic_seg(c.as_mut_ptr(), swap_add, compare) };
        assert_eq!(
            r, c,
            "iteration {i}: swap_add {swap_add:#x} compare {compare:#x}"
        );
        let s = AtomicSeg::new_checked(&r[..]).unwrap();
        assert_eq!((s.swap_add(), s.compare()), (swap_add, compare));
    }
}

#[test]
fn inline_seg_random_vs_c_struct() {
    let mut rng = Rng(0x0001_411e);
    for i in 0..ITERS {
        // Usually a plausible length; sometimes any u32 (bit 31 is ORed either way).
        let len = if rng.u8() < 192 {
            rng.u32() & 0x3ff
        } else {
            rng.u32()
        };
        let (mut r, mut c) = ([0u8; 4], [0u8; 4]);
        rng.fill(&mut r);
        rng.fill(&mut c);
        InlineSeg::new_unchecked(&mut r[..]).set_len(len);
        // SAFETY: the C helper writes only the segment into `c`, which is large enough.
        unsafe { oracle_inline_seg(c.as_mut_ptr(), len) };
        assert_eq!(r, c, "iteration {i}: len {len:#x}");
        let s = InlineSeg::new_checked(&r[..]).unwrap();
        assert!(s.is_inline());
        assert_eq!(s.len(), len & !INLINE_SEG);
    }
}

#[test]
fn srq_next_seg_random_vs_c_struct() {
    let mut rng = Rng(0x054a_4e47);
    for i in 0..ITERS {
        let next = rng.edgy_u64() as u16;
        let (mut r, mut c) = ([0u8; 16], [0u8; 16]);
        rng.fill(&mut r);
        rng.fill(&mut c);
        SrqNextSeg::new_unchecked(&mut r[..]).set(next);
        // SAFETY: the C helper writes only the segment into `c`, which is large enough.
        unsafe { oracle_srq_next_seg(c.as_mut_ptr(), next) };
        assert_eq!(r, c, "iteration {i}: next {next:#x}");
        assert_eq!(
            SrqNextSeg::new_checked(&r[..]).unwrap().next_wqe_index(),
            next
        );
    }
}

// ---------------------------------------------------------------------------
// Random CQEs: Rust getters vs the header's getters and struct members
// ---------------------------------------------------------------------------

fn c_cqe64(b: &[u8; 64]) -> [u64; c64::N] {
    let mut out = [0u64; c64::N];
    // SAFETY: reads 64 bytes of `b`, writes `c64::N` words of `out`.
    unsafe { oracle_cqe64(b.as_ptr(), out.as_mut_ptr()) };
    out
}

fn c_err_cqe(b: &[u8; 64]) -> [u64; cerr::N] {
    let mut out = [0u64; cerr::N];
    // SAFETY: reads 64 bytes of `b`, writes `cerr::N` words of `out`.
    unsafe { oracle_err_cqe(b.as_ptr(), out.as_mut_ptr()) };
    out
}

fn rust_cqe64(b: &[u8; 64]) -> [u64; c64::N] {
    let c = Cqe64::new_checked(&b[..]).unwrap();
    let mut o = [0u64; c64::N];
    o[c64::OWNER] = c.owner().into();
    o[c64::SE] = c.se().into();
    o[c64::FORMAT] = c.format_raw().into();
    o[c64::OPCODE] = c.opcode_raw().into();
    o[c64::OP_OWN] = c.op_own().into();
    o[c64::SIGNATURE] = c.signature().into();
    o[c64::WQE_COUNTER] = c.wqe_counter().into();
    o[c64::BYTE_CNT] = c.byte_cnt().into();
    o[c64::IMM_INVAL_PKEY] = c.imm_inval_pkey().into();
    o[c64::SRQN_UIDX] = c.srqn_uidx().into();
    o[c64::SRQN] = c.srqn().into();
    o[c64::SOP_DROP_QPN] = c.sop_drop_qpn().into();
    o[c64::QPN] = c.qpn().into();
    o[c64::S_WQE_OPCODE] = c.s_wqe_opcode().into();
    o[c64::TIMESTAMP] = c.timestamp();
    o[c64::WQE_ID] = c.wqe_id().into();
    o[c64::ML_PATH] = c.ml_path().into();
    o[c64::SLID] = c.slid().into();
    o[c64::FLAGS_RQPN] = c.flags_rqpn().into();
    o[c64::HDS_IP_EXT] = c.hds_ip_ext().into();
    o[c64::L4_HDR_TYPE_ETC] = c.l4_hdr_type_etc().into();
    o[c64::VLAN_INFO] = c.vlan_info().into();
    o[c64::APP] = c.app().into();
    o[c64::APP_OP] = c.app_op().into();
    o[c64::APP_INFO] = c.app_info().into();
    o[c64::IS_TM] = c.is_tag_matching().into();
    o[c64::TM_SUCCESS] = c.tm_success().into();
    o[c64::TM_SUCCEEDED] = c.tm_succeeded().into();
    o[c64::TM_HW_PHASE_CNT] = c.tm_hw_phase_cnt().into();
    o[c64::TMH_OPCODE] = c.tmh().opcode_raw().into();
    o[c64::TMH_APP_CTX] = c.tmh().app_ctx().into();
    o[c64::TMH_TAG] = c.tmh().tag();
    o
}

fn rust_err_cqe(b: &[u8; 64]) -> [u64; cerr::N] {
    let e = ErrCqe::new_checked(&b[..]).unwrap();
    let mut o = [0u64; cerr::N];
    o[cerr::SRQN] = e.srqn().into();
    o[cerr::VENDOR_ERR_SYND] = e.vendor_err_synd().into();
    o[cerr::SYNDROME] = e.syndrome_raw().into();
    o[cerr::S_WQE_OPCODE_QPN] = e.s_wqe_opcode_qpn().into();
    o[cerr::QPN] = e.qpn().into();
    o[cerr::S_WQE_OPCODE] = e.s_wqe_opcode().into();
    o[cerr::WQE_COUNTER] = e.wqe_counter().into();
    o[cerr::SIGNATURE] = e.signature().into();
    o[cerr::OP_OWN] = e.op_own().into();
    o
}

#[test]
fn cqe_output_layouts_agree() {
    // SAFETY: a pure C function without arguments.
    assert_eq!(unsafe { oracle_cqe64_nfields() }, c64::N);
    // SAFETY: as above.
    assert_eq!(unsafe { oracle_err_cqe_nfields() }, cerr::N);
}

#[test]
fn cqe64_random_getters_vs_mlx5dv() {
    let mut rng = Rng(0xc9e6_4000);
    for i in 0..ITERS {
        let mut b = [0u8; 64];
        rng.fill(&mut b);
        let (r, c) = (rust_cqe64(&b), c_cqe64(&b));
        assert_eq!(r, c, "iteration {i}: cqe {b:02x?}");
        // The typed getters agree with the raw ones.
        let v = Cqe64::new_checked(&b[..]).unwrap();
        assert_eq!(u64::from(v.format() as u8), c[c64::FORMAT]);
        if let Some(o) = v.opcode() {
            assert_eq!(u64::from(u8::from(o)), c[c64::OPCODE]);
        }
    }
}

#[test]
fn cqe64_random_setters_vs_mlx5dv() {
    let mut rng = Rng(0x05e7_c9e6);
    for i in 0..ITERS {
        let mut b = [0u8; 64];
        rng.fill(&mut b);
        let (wqe_id, slid, wqe_counter) = (rng.u16(), rng.u16(), rng.u16());
        let (flags_rqpn, srqn_uidx, imm, byte_cnt, sop) =
            (rng.u32(), rng.u32(), rng.u32(), rng.u32(), rng.u32());
        let (ts, sig, oo) = (rng.u64(), rng.u8(), rng.u8());
        let mut v = Cqe64::new_unchecked(&mut b[..]);
        v.set_wqe_id(wqe_id);
        v.set_slid(slid);
        v.set_flags_rqpn(flags_rqpn);
        v.set_srqn_uidx(srqn_uidx);
        v.set_imm_inval_pkey(imm);
        v.set_byte_cnt(byte_cnt);
        v.set_timestamp(ts);
        v.set_sop_drop_qpn(sop);
        v.set_wqe_counter(wqe_counter);
        v.set_signature(sig);
        v.set_op_own(oo);
        let c = c_cqe64(&b);
        let got = [
            c[c64::WQE_ID],
            c[c64::SLID],
            c[c64::FLAGS_RQPN],
            c[c64::SRQN_UIDX],
            c[c64::IMM_INVAL_PKEY],
            c[c64::BYTE_CNT],
            c[c64::TIMESTAMP],
            c[c64::SOP_DROP_QPN],
            c[c64::WQE_COUNTER],
            c[c64::SIGNATURE],
            c[c64::OP_OWN],
        ];
        let want = [
            wqe_id.into(),
            slid.into(),
            flags_rqpn.into(),
            srqn_uidx.into(),
            imm.into(),
            byte_cnt.into(),
            ts,
            sop.into(),
            wqe_counter.into(),
            sig.into(),
            oo.into(),
        ];
        assert_eq!(got, want, "iteration {i}");
    }
}

#[test]
fn err_cqe_random_getters_vs_c_struct() {
    let t = Table::load();
    let syndrome_at = t.range("mlx5_err_cqe", "syndrome").start;
    let op_own_at = t.range("mlx5_err_cqe", "op_own").start;
    let err_opcodes = [t.get("MLX5_CQE_REQ_ERR"), t.get("MLX5_CQE_RESP_ERR")];
    let mut rng = Rng(0x0e44_c9e6);
    for i in 0..ITERS {
        let mut b = [0u8; 64];
        rng.fill(&mut b);
        // Half the time an actual error CQE with a known syndrome.
        if rng.u8() < 128 {
            let syn = Syndrome::ALL[rng.u64() as usize % Syndrome::ALL.len()];
            b[syndrome_at] = syn.into();
            let op = err_opcodes[usize::from(rng.u8() & 1)] as u8;
            b[op_own_at] = (b[op_own_at] & 0x0f) | (op << 4);
        }
        let (r, c) = (rust_err_cqe(&b), c_err_cqe(&b));
        assert_eq!(r, c, "iteration {i}: cqe {b:02x?}");
        if let Some(s) = ErrCqe::new_checked(&b[..]).unwrap().syndrome() {
            assert_eq!(u64::from(u8::from(s)), c[cerr::SYNDROME]);
        }
        // CqeOpcode::is_error picks exactly the header's two error opcodes.
        let c_op = c_cqe64(&b)[c64::OPCODE] as i64;
        let op = Cqe64::new_checked(&b[..]).unwrap().opcode();
        assert_eq!(
            op.is_some_and(CqeOpcode::is_error),
            err_opcodes.contains(&c_op),
            "{c_op}"
        );
    }
}

#[test]
fn err_cqe_random_setters_vs_c_struct() {
    let mut rng = Rng(0x005e_7e44);
    for i in 0..ITERS {
        let mut b = [0u8; 64];
        rng.fill(&mut b);
        let (srqn, vendor, syn, opcode, qpn) = (rng.u32(), rng.u8(), rng.u8(), rng.u8(), rng.u32());
        let (wqe_counter, sig, oo) = (rng.u16(), rng.u8(), rng.u8());
        let mut e = ErrCqe::new_unchecked(&mut b[..]);
        e.set_srqn(srqn);
        e.set_vendor_err_synd(vendor);
        e.set_syndrome(syn);
        e.set_s_wqe_opcode_qpn(opcode, qpn);
        e.set_wqe_counter(wqe_counter);
        e.set_signature(sig);
        e.set_op_own(oo);
        let c = c_err_cqe(&b);
        let want = [
            srqn.into(),
            vendor.into(),
            syn.into(),
            (u64::from(opcode) << 24) | u64::from(qpn & 0x00ff_ffff),
            (qpn & 0x00ff_ffff).into(),
            opcode.into(),
            wqe_counter.into(),
            sig.into(),
            oo.into(),
        ];
        assert_eq!(c, want, "iteration {i}");
    }
}

// ---------------------------------------------------------------------------
// Whole WQEs built by the send queue vs the same WQE assembled with rdma-core's
// helpers
// ---------------------------------------------------------------------------

#[test]
fn send_queue_wqes_match_rdma_core_helpers() {
    use mlx5::mem::AlignedBuf;
    use mlx5::sq::BfMode;
    use mlx5::sq::{Payload, SendQueue, Sge, SqConfig, SqMemory};
    use mlx5::wqe_table::OrderedSparse;

    let buf = AlignedBuf::new(256 * 64);
    let db = AlignedBuf::new(64);
    let bf = AlignedBuf::new(4096);
    let mut rng = Rng(0x5eed_0f0a_1100);
    let qpn = rng.u32() & 0xff_ffff;
    let mem = SqMemory {
        buf: buf.as_non_null(),
        wqe_cnt: 256,
        dbrec: db.as_non_null(),
        bf_reg: bf.as_non_null(),
        bf_half: 256,
        qpn,
        notify: None,
        keepalive: None,
    };
    let cfg = SqConfig {
        signal_interval: 0,
        max_inline: 256,
        bf_mode: BfMode::Auto,
    };
    // SAFETY: the buffers outlive the queue.
    let mut sq: SendQueue<OrderedSparse<()>> = unsafe { SendQueue::new(mem, cfg) }.unwrap();
    let mut last_wc = 0u16;
    for _ in 0..10_000 {
        let raddr = rng.u64();
        let rkey = rng.u32();
        let imm = rng.u32();
        let nsge = 1 + (rng.u8() % 3) as usize;
        let sges: Vec<Sge> = (0..nsge)
            .map(|_| Sge {
                addr: rng.u64(),
                len: rng.u32(),
                lkey: rng.u32(),
            })
            .collect();
        let kind = rng.u8() % 4;
        let signaled = rng.u8() & 1 == 1;
        let (opcode, b) = match kind {
            0 => (0x09u8, sq.write_imm(raddr, rkey, imm, Payload::Sges(&sges))),
            1 => (0x10, sq.read(raddr, rkey, &sges)),
            2 => (
                0x11,
                sq.atomic_cs(raddr, rkey, imm.into(), rkey.into(), sges[0]),
            ),
            _ => (0x12, sq.atomic_fa(raddr, rkey, imm.into(), sges[0])),
        };
        let b = match b {
            Ok(b) => b,
            Err(_) => {
                // Full: a completion for the newest WQE retires everything.
                let mut c = [0u8; 64];
                Cqe64::new_unchecked(&mut c[..]).set_wqe_counter(last_wc);
                sq.complete(&mlx5::Completion::new(&c, &[]), |_, _| {});
                continue;
            }
        };
        let b = if signaled { b.signaled() } else { b };
        let ds = b.ds();
        let wc = b.post(None);
        last_wc = wc;
        let got = &sq.bb(wc)[..];
        // The same WQE from rdma-core's helpers.
        let mut want = vec![0u8; usize::from(ds) * 16];
        let fm_ce_se = if signaled { ctrl_flags::CQ_UPDATE } else { 0 };
        let imm_raw = if opcode == 0x09 { imm.to_be() } else { 0 };
        let ctrl = OracleCtrl {
            qpn,
            imm: imm_raw,
            pi: wc,
            opcode,
            opmod: 0,
            fm_ce_se,
            ds,
            signature: 0,
        };
        // SAFETY: each helper writes exactly one 16-byte segment into `want`.
        unsafe {
            oracle_ctrl_seg(want.as_mut_ptr(), &ctrl);
            oracle_raddr_seg(want.as_mut_ptr().add(16), raddr, rkey);
            let mut off = 32;
            if opcode == 0x11 {
                oracle_atomic_seg(want.as_mut_ptr().add(off), rkey.into(), imm.into());
                off += 16;
            } else if opcode == 0x12 {
                oracle_atomic_seg(want.as_mut_ptr().add(off), imm.into(), 0);
                off += 16;
            }
            let used = if opcode >= 0x11 {
                &sges[..1]
            } else {
                &sges[..]
            };
            for s in used {
                oracle_data_seg(want.as_mut_ptr().add(off), s.len, s.lkey, s.addr);
                off += 16;
            }
            assert_eq!(off, want.len());
        }
        // WQEs of up to 4 segments fit one BB; larger ones continue contiguously.
        let n = want.len();
        let got: Vec<u8> = if n <= 64 {
            got[..n].to_vec()
        } else {
            [got, &sq.bb(wc.wrapping_add(1))[..n - 64]].concat()
        };
        assert_eq!(got, want, "opcode {opcode:#x}, ds {ds}");
    }
}

// ---------------------------------------------------------------------------
// CQ arm: the doorbell-record word and the UAR doorbell of mlx5_arm_cq
// ---------------------------------------------------------------------------

/// What rdma-core's `mlx5_arm_cq` writes for arm sequence number `sn`,
/// consumer index `ci`, CQ `cqn`: the doorbell record (8 bytes, only the arm
/// word written) and the first 64 bytes of the UAR page.
fn c_arm(sn: u32, ci: u32, cqn: u32, solicited: bool) -> ([u8; 8], [u8; 64]) {
    let mut dbrec = [0u32; 2];
    let mut uar = [0u8; 64];
    // SAFETY: two doorbell-record words and a 64-byte page (the C side writes
    // 8 bytes at MLX5_CQ_DOORBELL = 0x20).
    unsafe {
        oracle_arm_cq(
            dbrec.as_mut_ptr(),
            uar.as_mut_ptr(),
            sn,
            ci,
            cqn,
            i32::from(solicited),
        )
    };
    let mut rec = [0u8; 8];
    rec[..4].copy_from_slice(&dbrec[0].to_ne_bytes());
    rec[4..].copy_from_slice(&dbrec[1].to_ne_bytes());
    (rec, uar)
}

#[test]
fn cq_arm_word_and_uar_doorbell_match_mlx5_arm_cq() {
    let mut rng = Rng(0x000a_73c0_ffee);
    for i in 0..20_000u32 {
        // Every sn (including values past 2 bits), both commands, CIs and CQNs
        // across their full ranges and beyond (masked to 24 bits by both).
        let sn = if i < 16 { i } else { rng.u32() };
        let ci = match i % 4 {
            0 => rng.u32(),
            1 => rng.u32() & 0xff_ffff,
            2 => 0xff_ffff,
            _ => 0,
        };
        let cqn = if i % 3 == 0 {
            rng.u32()
        } else {
            rng.u32() & 0xff_ffff
        };
        let sol = rng.u8() & 1 == 1;
        let (rec, uar) = c_arm(sn, ci, cqn, sol);
        let word = CqArm::new(sn, ArmCmd::of(sol), ci);
        // The doorbell record: the arm word at CQ_ARM_DB, the CI word untouched.
        let mut ours = [0u8; 8];
        CqDbRec::new_unchecked(&mut ours[..]).set_arm_word(word);
        assert_eq!(ours, rec, "doorbell record, sn {sn} ci {ci:#x} sol {sol}");
        assert_eq!(
            CqDbRec::new_unchecked(&rec[..]).arm_word(),
            word,
            "read back"
        );
        assert_eq!(
            &rec[CQ_ARM_DB * 4..CQ_ARM_DB * 4 + 4],
            &word.raw().to_be_bytes()
        );
        // The UAR: the 8 doorbell bytes at CQ_DOORBELL, nothing else.
        let mut page = [0u8; 64];
        page[CQ_DOORBELL..CQ_DOORBELL + 8].copy_from_slice(&cq_doorbell_bytes(word, cqn));
        assert_eq!(
            page, uar,
            "UAR page, sn {sn} ci {ci:#x} cqn {cqn:#x} sol {sol}"
        );
        let db = CqDoorbell::new_unchecked(&uar[CQ_DOORBELL..CQ_DOORBELL + 8]);
        assert_eq!((db.arm(), db.cqn()), (word, cqn));
        assert_eq!(word.sn(), sn & 3);
        assert_eq!(word.ci(), ci & 0xff_ffff);
        assert_eq!(word.cmd(), Some(ArmCmd::of(sol)));
        assert_eq!(
            word.raw() & CqArm::CMD_MASK,
            if sol {
                CQ_DB_REQ_NOT_SOL
            } else {
                CQ_DB_REQ_NOT
            }
        );
    }
}

#[test]
fn cq_ring_arm_writes_what_mlx5_arm_cq_writes() {
    use mlx5::cq::{Compression, CqArmMemory, CqMemory, CqRing};
    use mlx5::mem::AlignedBuf;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    const CNT: u32 = 256;
    let mut rng = Rng(0x0a7e_d0b1_1100);
    for _ in 0..500 {
        let mut buf = AlignedBuf::new(CNT as usize * 64);
        let db = AlignedBuf::new(64);
        let uar = AlignedBuf::new(4096);
        // Events taken so far on the CQ's channel: the arm sequence number.
        let events = Arc::new(AtomicU32::new(rng.u32()));
        let cqn = rng.u32() & 0xff_ffff;
        let mem = CqMemory {
            buf: buf.as_non_null(),
            cqe_cnt: CNT,
            cqe_size: 64,
            dbrec: db.as_non_null(),
            cqn,
            notify: None,
            keepalive: None,
            arm: Some(CqArmMemory {
                uar: uar.as_non_null(),
                events: events.clone(),
            }),
        };
        // SAFETY: the buffers outlive the ring (dropped at the end of the loop
        // body, after it).
        let mut ring = unsafe { CqRing::new(mem, Compression::Off) }.unwrap();
        // Consume `n` requester CQEs of the first pass, so the arm carries
        // that consumer index.
        let n = rng.u32() % CNT;
        for i in 0..n as usize {
            buf.as_mut_slice()[i * 64 + 63] = 0; // REQ, owner 0
        }
        assert_eq!(ring.poll(usize::MAX, |_| {}), n as usize);
        let sol = rng.u8() & 1 == 1;
        ring.arm(sol).unwrap();
        let (rec, page) = c_arm(events.load(Ordering::Relaxed), n, cqn, sol);
        assert_eq!(
            &db.as_slice()[4..8],
            &rec[4..8],
            "arm word, ci {n} sol {sol}"
        );
        assert_eq!(&uar.as_slice()[..64], &page[..], "UAR, ci {n} sol {sol}");
        // Another event taken: the next arm has the next sequence number.
        events.fetch_add(1, Ordering::Relaxed);
        ring.arm(sol).unwrap();
        let (rec, page) = c_arm(events.load(Ordering::Relaxed), n, cqn, sol);
        assert_eq!(&db.as_slice()[4..8], &rec[4..8]);
        assert_eq!(&uar.as_slice()[..64], &page[..]);
        drop(ring);
    }
}

// ---------------------------------------------------------------------------
// Tag matching: the wire headers, the command QP's WQE, the CQE's TM fields
// ---------------------------------------------------------------------------

#[test]
fn tmh_offsets() {
    let t = Table::load();
    let st = "ibv_tmh";
    let n = Tmh::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> Tmh<&mut [u8]> {
        Tmh::new_unchecked(b)
    }
    let r = |b: &[u8]| Tmh::new_unchecked(b.to_vec());
    let (v32, v64) = (0x8192_a3b4u32, 0x8192_a3b4_c5d6_e7f8u64);
    let eager = u8::from(TmhOpcode::Eager);
    // Setters, one field at a time and through the whole-header writer.
    assert_lands(&t, st, "opcode", n, eager.into(), |b| {
        w(b).set_opcode(TmhOpcode::Eager)
    });
    assert_lands(&t, st, "app_ctx", n, v32.into(), |b| w(b).set_app_ctx(v32));
    assert_lands(&t, st, "tag", n, v64, |b| w(b).set_tag(v64));
    assert_lands(&t, st, "opcode", n, eager.into(), |b| {
        w(b).set(TmhOpcode::Eager, 0, 0)
    });
    assert_lands(&t, st, "app_ctx", n, v32.into(), |b| {
        w(b).set(TmhOpcode::NoTag, v32, 0)
    });
    assert_lands(&t, st, "tag", n, v64, |b| {
        w(b).set(TmhOpcode::NoTag, 0, v64)
    });
    assert_zeroes(&t, st, "reserved", n, |b| {
        w(b).set(TmhOpcode::Eager, u32::MAX, u64::MAX)
    });
    // Getters.
    assert_reads(&t, st, "opcode", n, |b| r(b).opcode_raw().into());
    assert_reads(&t, st, "app_ctx", n, |b| r(b).app_ctx().into());
    assert_reads(&t, st, "tag", n, |b| r(b).tag());
}

#[test]
fn rvh_offsets() {
    let t = Table::load();
    let st = "ibv_rvh";
    let n = Rvh::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> Rvh<&mut [u8]> {
        Rvh::new_unchecked(b)
    }
    let r = |b: &[u8]| Rvh::new_unchecked(b.to_vec());
    let (v32, v64) = (0x8192_a3b4u32, 0x8192_a3b4_c5d6_e7f8u64);
    assert_lands(&t, st, "va", n, v64, |b| w(b).set(v64, 0, 0));
    assert_lands(&t, st, "rkey", n, v32.into(), |b| w(b).set(0, v32, 0));
    assert_lands(&t, st, "len", n, v32.into(), |b| w(b).set(0, 0, v32));
    assert_reads(&t, st, "va", n, |b| r(b).va());
    assert_reads(&t, st, "rkey", n, |b| r(b).rkey().into());
    assert_reads(&t, st, "len", n, |b| r(b).len().into());
}

#[test]
fn tm_seg_offsets() {
    let t = Table::load();
    let st = "mlx5_wqe_tm_seg";
    let n = TmSeg::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> TmSeg<&mut [u8]> {
        TmSeg::new_unchecked(b)
    }
    let r = |b: &[u8]| TmSeg::new_unchecked(b.to_vec());
    let (v8, v16, v64) = (0xa5u8, 0xa3b4u16, 0x8192_a3b4_c5d6_e7f8u64);
    // The command sits in the opcode byte's high nibble (set_tm_seg: op << 4).
    let remove = u64::from(u8::from(TmOpcode::Remove)) << 4;
    // Setters, one field at a time.
    assert_lands(&t, st, "opcode", n, remove, |b| {
        w(b).set_opcode(TmOpcode::Remove)
    });
    assert_lands(&t, st, "flags", n, v8.into(), |b| w(b).set_flags(v8));
    assert_lands(&t, st, "index", n, v16.into(), |b| w(b).set_index(v16));
    assert_lands(&t, st, "sw_cnt", n, v16.into(), |b| w(b).set_sw_cnt(v16));
    assert_lands(&t, st, "append_tag", n, v64, |b| w(b).set_append_tag(v64));
    assert_lands(&t, st, "append_mask", n, v64, |b| w(b).set_append_mask(v64));
    // The whole-segment writer, one field at a time.
    let cmd = |opcode, flags, index, sw_cnt, append_tag, append_mask| TmCmd {
        opcode,
        flags,
        index,
        sw_cnt,
        append_tag,
        append_mask,
    };
    let nop = TmOpcode::Nop;
    assert_lands(&t, st, "opcode", n, remove, |b| {
        w(b).set(&cmd(TmOpcode::Remove, 0, 0, 0, 0, 0))
    });
    assert_lands(&t, st, "flags", n, v8.into(), |b| {
        w(b).set(&cmd(nop, v8, 0, 0, 0, 0))
    });
    assert_lands(&t, st, "index", n, v16.into(), |b| {
        w(b).set(&cmd(nop, 0, v16, 0, 0, 0))
    });
    assert_lands(&t, st, "sw_cnt", n, v16.into(), |b| {
        w(b).set(&cmd(nop, 0, 0, v16, 0, 0))
    });
    assert_lands(&t, st, "append_tag", n, v64, |b| {
        w(b).set(&cmd(nop, 0, 0, 0, v64, 0))
    });
    assert_lands(&t, st, "append_mask", n, v64, |b| {
        w(b).set(&cmd(nop, 0, 0, 0, 0, v64))
    });
    for f in ["rsvd0", "rsvd1"] {
        assert_zeroes(&t, st, f, n, |b| {
            w(b).set(&cmd(
                TmOpcode::Append,
                0xff,
                0xffff,
                0xffff,
                u64::MAX,
                u64::MAX,
            ))
        });
    }
    // Getters.
    assert_reads(&t, st, "opcode", n, |b| r(b).opcode_raw().into());
    assert_reads(&t, st, "flags", n, |b| r(b).flags().into());
    assert_reads(&t, st, "index", n, |b| r(b).index().into());
    assert_reads(&t, st, "sw_cnt", n, |b| r(b).sw_cnt().into());
    assert_reads(&t, st, "append_tag", n, |b| r(b).append_tag());
    assert_reads(&t, st, "append_mask", n, |b| r(b).append_mask());
}

#[test]
fn cqe64_tm_offsets() {
    let t = Table::load();
    let st = "mlx5_cqe64";
    let n = Cqe64::<&[u8]>::LEN;
    fn w(b: &mut [u8]) -> Cqe64<&mut [u8]> {
        Cqe64::new_unchecked(b)
    }
    let r = |b: &[u8]| Cqe64::new_unchecked(b.to_vec());
    let (v8, v16, v32, v64) = (0xa5u8, 0xa3b4u16, 0x8192_a3b4u32, 0x8192_a3b4_c5d6_e7f8u64);
    // The TMH a match scatters into the CQE is the union's `tmh`, a whole
    // struct ibv_tmh at the same offsets.
    assert_eq!(t.range(st, "tmh").len(), t.sizeof("ibv_tmh"));
    for f in ["opcode", "reserved", "app_ctx", "tag"] {
        let (cqe, tmh) = (t.range(st, &format!("tmh.{f}")), t.range("ibv_tmh", f));
        assert_eq!(cqe.start - t.range(st, "tmh").start, tmh.start, "{f}");
        assert_eq!(cqe.len(), tmh.len(), "{f}");
    }
    // The union's forms end before srqn_uidx.
    assert!(t.range(st, "tmh").end <= t.range(st, "srqn_uidx").start);
    assert!(t.range(st, "tm_cqe").end <= t.range(st, "srqn_uidx").start);
    assert_eq!(t.range(st, "tm_cqe").len(), t.sizeof("mlx5_tm_cqe"));
    for f in ["success", "hw_phase_cnt", "rsvd0"] {
        let (cqe, tm) = (
            t.range(st, &format!("tm_cqe.{f}")),
            t.range("mlx5_tm_cqe", f),
        );
        assert_eq!(cqe.start - t.range(st, "tm_cqe").start, tm.start, "{f}");
        assert_eq!(cqe.len(), tm.len(), "{f}");
    }
    // Setters.
    assert_lands(&t, st, "app", n, v8.into(), |b| w(b).set_app(v8));
    assert_lands(&t, st, "app_op", n, v8.into(), |b| w(b).set_app_op(v8));
    assert_lands(&t, st, "app_info", n, v16.into(), |b| {
        w(b).set_app_info(v16)
    });
    assert_lands(&t, st, "tm_cqe.success", n, v32.into(), |b| {
        w(b).set_tm_success(v32)
    });
    assert_lands(&t, st, "tm_cqe.hw_phase_cnt", n, v16.into(), |b| {
        w(b).set_tm_hw_phase_cnt(v16)
    });
    let rndv = u8::from(TmhOpcode::Rndv);
    assert_lands(&t, st, "tmh.opcode", n, rndv.into(), |b| {
        w(b).tmh_mut().set_opcode(TmhOpcode::Rndv)
    });
    assert_lands(&t, st, "tmh.app_ctx", n, v32.into(), |b| {
        w(b).tmh_mut().set_app_ctx(v32)
    });
    assert_lands(&t, st, "tmh.tag", n, v64, |b| w(b).tmh_mut().set_tag(v64));
    // set_tm_op writes app and app_op, nothing else.
    let mut b = [0u8; 64];
    w(&mut b).set_tm_op(TmAppOp::MsgCompletionCanceled);
    let mut want = [0u8; 64];
    want[t.range(st, "app")][0] = t.get("provider:MLX5_CQE_APP_TAG_MATCHING") as u8;
    want[t.range(st, "app_op")][0] =
        t.get("provider:MLX5_CQE_APP_OP_TM_MSG_COMPLETION_CANCELED") as u8;
    assert_eq!(b, want);
    // Getters.
    assert_reads(&t, st, "tm_cqe.success", n, |b| r(b).tm_success().into());
    assert_reads(&t, st, "tm_cqe.hw_phase_cnt", n, |b| {
        r(b).tm_hw_phase_cnt().into()
    });
    assert_reads(&t, st, "tmh.opcode", n, |b| r(b).tmh().opcode_raw().into());
    assert_reads(&t, st, "tmh.app_ctx", n, |b| r(b).tmh().app_ctx().into());
    assert_reads(&t, st, "tmh.tag", n, |b| r(b).tmh().tag());
}

#[test]
fn tmh_random_vs_c_struct() {
    let mut rng = Rng(0x0007_3a4e);
    for i in 0..ITERS {
        // Mostly the four operations, sometimes any byte (the view writes
        // only the typed ones; the getter reads any).
        let known = rng.u8() < 224;
        let op = TmhOpcode::ALL[rng.u64() as usize % TmhOpcode::ALL.len()];
        let raw = if known { u8::from(op) } else { rng.u8() };
        let (app_ctx, tag) = (rng.edgy_u64() as u32, rng.edgy_u64());
        let (mut r, mut c) = ([0u8; 16], [0u8; 16]);
        rng.fill(&mut r);
        rng.fill(&mut c);
        Tmh::new_unchecked(&mut r[..]).set(op, app_ctx, tag);
        // SAFETY: the C helper writes only the 16-byte header into `c`.
        unsafe { oracle_tmh(c.as_mut_ptr(), op.into(), app_ctx, tag) };
        assert_eq!(r, c, "iteration {i}: {op:?} {app_ctx:#x} {tag:#x}");
        // And what the C struct holds, the getters read.
        // SAFETY: as above.
        unsafe { oracle_tmh(c.as_mut_ptr(), raw, app_ctx, tag) };
        let h = Tmh::new_checked(&c[..]).unwrap();
        assert_eq!((h.opcode_raw(), h.app_ctx(), h.tag()), (raw, app_ctx, tag));
        assert_eq!(h.opcode(), TmhOpcode::from_u8(raw));
        assert_eq!(h.opcode().is_some(), raw <= 3, "{raw}");
    }
}

#[test]
fn rvh_random_vs_c_struct() {
    let mut rng = Rng(0x0004_7a4e);
    for i in 0..ITERS {
        let (va, rkey, len) = (rng.edgy_u64(), rng.edgy_u64() as u32, rng.edgy_u64() as u32);
        let (mut r, mut c) = ([0u8; 16], [0u8; 16]);
        rng.fill(&mut r);
        rng.fill(&mut c);
        Rvh::new_unchecked(&mut r[..]).set(va, rkey, len);
        // SAFETY: the C helper writes only the 16-byte header into `c`.
        unsafe { oracle_rvh(c.as_mut_ptr(), va, rkey, len) };
        assert_eq!(r, c, "iteration {i}: {va:#x} {rkey:#x} {len:#x}");
        let h = Rvh::new_checked(&r[..]).unwrap();
        assert_eq!((h.va(), h.rkey(), h.len()), (va, rkey, len));
        assert_eq!(h.is_empty(), len == 0);
    }
}

/// A random tag-list operation, for C and for Rust.
fn random_tm_op(rng: &mut Rng) -> (OracleTmOp, TmCmd) {
    let op = TmOpcode::ALL[rng.u64() as usize % TmOpcode::ALL.len()];
    let (signaled, sync) = (rng.u8() & 1 == 1, rng.u8() & 1 == 1);
    // The verbs field is 32 bits wide; the segment keeps the low 16.
    let unexpected_cnt = if rng.u8() < 200 {
        u32::from(rng.edgy_u64() as u16)
    } else {
        rng.u32()
    };
    let (index, tag, mask) = (rng.edgy_u64() as u16, rng.edgy_u64(), rng.edgy_u64());
    let c = OracleTmOp {
        tag,
        mask,
        sge_addr: rng.edgy_u64(),
        sge_length: if rng.u8() < 32 { 0 } else { rng.u32() },
        sge_lkey: rng.u32(),
        unexpected_cnt,
        qpn: if rng.u8() < 200 {
            rng.u32() & 0x00ff_ffff
        } else {
            rng.u32()
        },
        index,
        cur_post: rng.edgy_u64() as u16,
        op: op.into(),
        signaled: signaled.into(),
        sync: sync.into(),
        num_sge: if rng.u8() < 32 { 0 } else { 1 },
    };
    let mut cmd = match op {
        TmOpcode::Append => TmCmd::append(index, tag, mask),
        TmOpcode::Remove => TmCmd::remove(index),
        TmOpcode::Nop => TmCmd::nop(),
    };
    if signaled {
        cmd = cmd.signaled();
    }
    if sync {
        cmd = cmd.sync(unexpected_cnt as u16);
    }
    (c, cmd)
}

#[test]
fn tm_seg_random_vs_set_tm_seg() {
    let mut rng = Rng(0x0075_e6a0);
    for i in 0..ITERS {
        let (c_op, cmd) = random_tm_op(&mut rng);
        // Ours writes every byte (over garbage); set_tm_seg leaves what the
        // command does not use as it was (zero here, as TmCmd's
        // constructors leave it).
        let mut r = [0u8; 32];
        rng.fill(&mut r);
        TmSeg::new_unchecked(&mut r[..]).set(&cmd);
        let mut c = [0u8; 32];
        // SAFETY: the C helper writes only the 32-byte segment into `c`, and
        // reads `c_op`, which lives across the call.
        unsafe { oracle_tm_seg(c.as_mut_ptr(), &c_op) };
        assert_eq!(r, c, "iteration {i}: {c_op:x?}");
        // Over the same garbage, set_tm_seg's bytes are ours.
        let mut g = [0u8; 32];
        rng.fill(&mut g);
        let mut c = g;
        // SAFETY: as above.
        unsafe { oracle_tm_seg(c.as_mut_ptr(), &c_op) };
        for (k, (&cb, &gb)) in c.iter().zip(&g).enumerate() {
            if cb != gb {
                assert_eq!(r[k], cb, "iteration {i}: byte {k}");
            }
        }
        let s = TmSeg::new_checked(&r[..]).unwrap();
        assert_eq!(s.get(), Some(cmd));
        assert_eq!(
            s.flags() & tm_flags::CQE_REQ != 0,
            c_op.signaled == 1,
            "iteration {i}"
        );
    }
}

#[test]
fn tm_command_wqes_match_mlx5_post_srq_ops() {
    let mut rng = Rng(0x0c3d_0a90);
    for i in 0..ITERS {
        let (c_op, cmd) = random_tm_op(&mut rng);
        let mut c = [0u8; 64];
        rng.fill(&mut c);
        // SAFETY: the C helper writes at most the 64-byte basic block `c`, and
        // reads `c_op`, which lives across the call.
        let c_ds = unsafe { oracle_tm_wqe(c.as_mut_ptr(), &c_op) };
        // The same WQE from our segments: control, TM, and for an append
        // the buffer (the end-of-list data segment for an empty one).
        let append = cmd.opcode == TmOpcode::Append;
        let ds: u8 = if append { 4 } else { 3 };
        let mut r = [0u8; 64];
        rng.fill(&mut r);
        CtrlSeg::new_unchecked(&mut r[..16]).set_all(Ctrl {
            wqe_index: c_op.cur_post,
            opcode: WqeOpcode::TagMatching.into(),
            qpn: c_op.qpn,
            ds,
            ..Ctrl::default()
        });
        TmSeg::new_unchecked(&mut r[16..48]).set(&cmd);
        if append {
            let d = &mut DataSeg::new_unchecked(&mut r[48..]);
            if c_op.num_sge > 0 && c_op.sge_length > 0 {
                d.set(c_op.sge_length, c_op.sge_lkey, c_op.sge_addr);
            } else {
                d.set(0, INVALID_LKEY, 0);
            }
        }
        assert_eq!(c_ds, u32::from(ds), "iteration {i}: {c_op:x?}");
        let n = usize::from(ds) * 16;
        // set_tm_seg leaves unused bytes as they were: compare those zeroed.
        let (mut rz, mut cz) = (r, c);
        let mut blank = [0u8; 32];
        TmSeg::new_unchecked(&mut blank[..]).set(&cmd);
        for k in 0..32 {
            if blank[k] == 0 {
                rz[16 + k] = 0;
                cz[16 + k] = 0;
            }
        }
        assert_eq!(rz[..n], cz[..n], "iteration {i}: {c_op:x?}");
        // Outside the TM segment, every byte is what rdma-core writes.
        assert_eq!(r[..16], c[..16], "iteration {i}: control");
        assert_eq!(r[48..n], c[48..n], "iteration {i}: data");
        let ctrl = CtrlSeg::new_checked(&r[..16]).unwrap();
        assert_eq!(ctrl.opcode(), Some(WqeOpcode::TagMatching));
        assert_eq!(
            ctrl.fm_ce_se(),
            0,
            "a command asks for its CQE in its TM flags"
        );
    }
}

#[test]
fn cqe64_tm_random_getters_vs_rdma_core() {
    let t = Table::load();
    let app_at = t.range("mlx5_cqe64", "app").start;
    let app_op_at = t.range("mlx5_cqe64", "app_op").start;
    let mut rng = Rng(0x0c9e_6a7e);
    for i in 0..ITERS {
        let mut b = [0u8; 64];
        rng.fill(&mut b);
        // Mostly tag-matching CQEs, with an operation this crate knows.
        if rng.u8() < 192 {
            b[app_at] = CQE_APP_TAG_MATCHING;
            if rng.u8() < 224 {
                b[app_op_at] = TmAppOp::ALL[rng.u64() as usize % TmAppOp::ALL.len()].into();
            }
        }
        let (r, c) = (rust_cqe64(&b), c_cqe64(&b));
        assert_eq!(r, c, "iteration {i}: cqe {b:02x?}");
        let v = Cqe64::new_checked(&b[..]).unwrap();
        match v.tm_op() {
            Some(op) => {
                assert_eq!(c[c64::IS_TM], 1);
                assert_eq!(u64::from(u8::from(op)), c[c64::APP_OP]);
            }
            None => assert!(c[c64::IS_TM] == 0 || TmAppOp::from_u8(b[app_op_at]).is_none()),
        }
    }
}

#[test]
fn cqe64_tm_random_setters_vs_rdma_core() {
    let mut rng = Rng(0x05e7_6a7e);
    for i in 0..ITERS {
        let mut b = [0u8; 64];
        rng.fill(&mut b);
        let op = TmAppOp::ALL[rng.u64() as usize % TmAppOp::ALL.len()];
        let app_info = rng.edgy_u64() as u16;
        let mut v = Cqe64::new_unchecked(&mut b[..]);
        v.set_tm_op(op);
        v.set_app_info(app_info);
        // The union holds one form or the other.
        if op.is_list_op() {
            let (success, phase) = (rng.edgy_u64() as u32, rng.edgy_u64() as u16);
            v.set_tm_success(success);
            v.set_tm_hw_phase_cnt(phase);
            let c = c_cqe64(&b);
            assert_eq!(
                [
                    c[c64::TM_SUCCESS],
                    c[c64::TM_HW_PHASE_CNT],
                    c[c64::TM_SUCCEEDED]
                ],
                [
                    success.into(),
                    phase.into(),
                    u64::from(success & TMC_SUCCESS != 0)
                ],
                "iteration {i}"
            );
        } else {
            let tmh_op = TmhOpcode::ALL[rng.u64() as usize % TmhOpcode::ALL.len()];
            let (app_ctx, tag) = (rng.edgy_u64() as u32, rng.edgy_u64());
            v.tmh_mut().set(tmh_op, app_ctx, tag);
            let c = c_cqe64(&b);
            assert_eq!(
                [c[c64::TMH_OPCODE], c[c64::TMH_APP_CTX], c[c64::TMH_TAG]],
                [u8::from(tmh_op).into(), app_ctx.into(), tag],
                "iteration {i}"
            );
        }
        let c = c_cqe64(&b);
        assert_eq!(
            [c[c64::IS_TM], c[c64::APP_OP], c[c64::APP_INFO]],
            [1, u8::from(op).into(), app_info.into()],
            "iteration {i}"
        );
    }
}

#[test]
fn tm_constants_match() {
    let t = Table::load();
    check_enum(
        &t,
        TmhOpcode::ALL,
        &[
            (TmhOpcode::NoTag, "IBV_TMH_NO_TAG"),
            (TmhOpcode::Rndv, "IBV_TMH_RNDV"),
            (TmhOpcode::Fin, "IBV_TMH_FIN"),
            (TmhOpcode::Eager, "IBV_TMH_EAGER"),
        ],
    );
    // libmlx5's own (copied into oracle.c from rdma-core's providers/mlx5).
    check_enum(
        &t,
        TmOpcode::ALL,
        &[
            (TmOpcode::Nop, "provider:MLX5_TM_OPCODE_NOP"),
            (TmOpcode::Append, "provider:MLX5_TM_OPCODE_APPEND"),
            (TmOpcode::Remove, "provider:MLX5_TM_OPCODE_REMOVE"),
        ],
    );
    use TmAppOp::*;
    check_enum(
        &t,
        TmAppOp::ALL,
        &[
            (Consumed, "provider:MLX5_CQE_APP_OP_TM_CONSUMED"),
            (Expected, "provider:MLX5_CQE_APP_OP_TM_EXPECTED"),
            (Unexpected, "provider:MLX5_CQE_APP_OP_TM_UNEXPECTED"),
            (NoTag, "provider:MLX5_CQE_APP_OP_TM_NO_TAG"),
            (Append, "provider:MLX5_CQE_APP_OP_TM_APPEND"),
            (Remove, "provider:MLX5_CQE_APP_OP_TM_REMOVE"),
            (Noop, "provider:MLX5_CQE_APP_OP_TM_NOOP"),
            (
                ConsumedSwRndv,
                "provider:MLX5_CQE_APP_OP_TM_CONSUMED_SW_RDNV",
            ),
            (ConsumedMsg, "provider:MLX5_CQE_APP_OP_TM_CONSUMED_MSG"),
            (
                ConsumedMsgSwRndv,
                "provider:MLX5_CQE_APP_OP_TM_CONSUMED_MSG_SW_RDNV",
            ),
            (
                MsgCompletionCanceled,
                "provider:MLX5_CQE_APP_OP_TM_MSG_COMPLETION_CANCELED",
            ),
        ],
    );
    let eq = |rust: i64, name: &str| assert_eq!(rust, t.get(name), "{name}");
    eq(TMC_SUCCESS.into(), "MLX5_TMC_SUCCESS");
    eq(tm_flags::SW_CNT.into(), "provider:MLX5_SRQ_FLAG_TM_SW_CNT");
    eq(
        tm_flags::CQE_REQ.into(),
        "provider:MLX5_SRQ_FLAG_TM_CQE_REQ",
    );
    eq(
        CQE_APP_TAG_MATCHING.into(),
        "provider:MLX5_CQE_APP_TAG_MATCHING",
    );
}

#[test]
fn tm_app_op_meanings_match_libmlx5() {
    use tm_bits::*;
    for v in 0..=255u8 {
        // SAFETY: a pure C function of its argument.
        let c = unsafe { oracle_tm_app_op(v) };
        let Some(op) = TmAppOp::from_u8(v) else {
            assert_eq!(c, 0, "libmlx5 handles app_op {v:#x}, which TmAppOp lacks");
            continue;
        };
        let bit = |b: bool, m: u32| if b { m } else { 0 };
        let ours = bit(op.names_tag(), NAMES_TAG)
            | bit(op.ends_tag(), ENDS_TAG)
            | bit(op.is_rndv_incomplete(), RNDV_INCOMPLETE)
            | bit(op.is_list_op(), LIST_OP)
            | bit(op.uses_srq_wqe(), SRQ_WQE)
            | bit(op.is_match(), WC_MATCH)
            | bit(op.is_data_valid(), WC_DATA_VALID);
        assert_eq!(ours, c, "{op:?}: ours {ours:#09b}, libmlx5 {c:#09b}");
    }
}
