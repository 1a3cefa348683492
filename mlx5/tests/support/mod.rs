//! Hand-built queue memory for tests: a CQ that a test writes CQEs into the way
//! a NIC would (PRM bytes, owner bit / iteration count per pass), and an SQ
//! whose doorbell record and BlueFlame page are ordinary memory; and a fabric
//! removed when a test ends.
#![allow(dead_code)]

use std::ptr::NonNull;

use mlx5::cq::{Compression, CqMemory, CqRing};
use mlx5::mem::AlignedBuf;
use mlx5::prm::{CqDbRec, Cqe64, CqeOpcode, ErrCqe, MiniCqe, QpDbRec};
use mlx5::sq::{SendQueue, SqConfig, SqMemory};
use mlx5::wqe_table::SendTable;

#[allow(unused_imports)]
pub use test_support::Rng;

/// A tag-matching receiver and a sender (the TM-SRQ tests).
#[cfg(feature = "sim")]
pub mod tm_world;

/// Removes its fabric when dropped, if nothing uses it any more. (The
/// shared crate's guard needs mlx5 with its software device, which mlx5's
/// own builds without it must not get.)
#[cfg(feature = "sim")]
pub struct FabricGuard(pub String);

#[cfg(feature = "sim")]
impl Drop for FabricGuard {
    fn drop(&mut self) {
        mlx5::sim::fabric::Fabric::remove_if_unused(&self.0);
    }
}

/// CQ memory plus the NIC's producer index.
pub struct HandCq {
    pub buf: AlignedBuf,
    pub dbrec: AlignedBuf,
    pub cnt: u32,
    pub size: usize,
    pub zip: Compression,
    /// NIC producer: the CQ index of the next slot it writes.
    pub pi: u32,
}

impl HandCq {
    pub fn new(cnt: u32, size: usize, zip: Compression) -> (Self, CqRing) {
        let buf = AlignedBuf::new(cnt as usize * size);
        let dbrec = AlignedBuf::new(64);
        let mem = CqMemory {
            buf: buf.as_non_null(),
            cqe_cnt: cnt,
            cqe_size: size,
            dbrec: dbrec.as_non_null(),
            cqn: 7,
            notify: None,
            keepalive: None,
            arm: None,
        };
        // SAFETY: buffers outlive the ring within each test (HandCq is dropped last).
        let ring = unsafe { CqRing::new(mem, zip) }.expect("valid CQ");
        (
            Self {
                buf,
                dbrec,
                cnt,
                size,
                zip,
                pi: 0,
            },
            ring,
        )
    }

    /// Consumer index the software wrote to the doorbell record.
    pub fn dbrec_ci(&self) -> u32 {
        CqDbRec::new_unchecked(self.dbrec.as_slice()).ci()
    }

    /// Slots the NIC may still write: CQ overrun would follow otherwise.
    pub fn room(&self) -> u32 {
        let used = (self.pi & 0xff_ffff).wrapping_sub(self.dbrec_ci()) & 0xff_ffff;
        self.cnt - used
    }

    fn slot(&mut self, n: u32) -> &mut [u8] {
        let off = (n & (self.cnt - 1)) as usize * self.size;
        let size = self.size;
        &mut self.buf.as_mut_slice()[off..off + size]
    }

    fn cqe64(&mut self, n: u32) -> &mut [u8] {
        let size = self.size;
        &mut self.slot(n)[size - 64..]
    }

    fn stamp(&mut self, n: u32, op_own_hi: u8) {
        let pass = n / self.cnt;
        let enhanced = self.zip == Compression::Enhanced;
        let c = self.cqe64(n);
        if enhanced {
            c[62] = pass as u8;
        }
        c[63] = op_own_hi | (pass & 1) as u8;
    }

    /// Writes a plain CQE. `body` fills the fields; op_own's high bits
    /// (opcode << 4 | format << 2 | se << 1) come from `op_own_hi`.
    pub fn push(&mut self, op_own_hi: u8, body: impl FnOnce(&mut Cqe64<&mut [u8]>)) -> u32 {
        assert!(self.room() >= 1, "test NIC would overrun the CQ");
        let n = self.pi;
        {
            let c = self.cqe64(n);
            c.fill(0);
            let mut v = Cqe64::new_unchecked(c);
            body(&mut v);
        }
        self.stamp(n, op_own_hi);
        self.pi += 1;
        n
    }

    /// A requester completion.
    pub fn push_req(&mut self, qpn: u32, wqe_counter: u16, wqe_opcode: u8) -> u32 {
        self.push((CqeOpcode::Req as u8) << 4, |c| {
            c.set_sop_drop_qpn((u32::from(wqe_opcode) << 24) | qpn);
            c.set_wqe_counter(wqe_counter);
        })
    }

    /// A responder WRITE_IMM completion.
    pub fn push_resp_imm(&mut self, qpn: u32, wqe_counter: u16, imm: u32, byte_cnt: u32) -> u32 {
        self.push((CqeOpcode::RespWrImm as u8) << 4, |c| {
            c.set_sop_drop_qpn(qpn);
            c.set_wqe_counter(wqe_counter);
            c.set_imm_inval_pkey(imm);
            c.set_byte_cnt(byte_cnt);
            c.set_srqn_uidx(0x55);
        })
    }

    /// An error CQE.
    pub fn push_err(
        &mut self,
        req: bool,
        qpn: u32,
        wqe_counter: u16,
        syndrome: u8,
        vendor: u8,
    ) -> u32 {
        assert!(self.room() >= 1);
        let n = self.pi;
        {
            let c = self.cqe64(n);
            c.fill(0);
            let mut e = ErrCqe::new_unchecked(c);
            e.set_syndrome(syndrome);
            e.set_vendor_err_synd(vendor);
            e.set_s_wqe_opcode_qpn(9, qpn);
            e.set_wqe_counter(wqe_counter);
        }
        let op = if req {
            CqeOpcode::ReqErr
        } else {
            CqeOpcode::RespErr
        };
        self.stamp(n, (op as u8) << 4);
        self.pi += 1;
        n
    }

    /// Enhanced layout: one compressed slot of `minis.len()` (1..=7) mini CQEs,
    /// each (wqe_counter, s_wqe_opcode, byte_cnt) in requester form or
    /// (_, _, byte_cnt) in responder form. Takes that many CQ indices.
    pub fn push_enhanced_block(&mut self, minis: &[(u16, u8, u32)]) {
        let n = minis.len() as u32;
        assert!((1..=7).contains(&n));
        assert!(self.room() >= n, "test NIC would overrun the CQ");
        let at = self.pi;
        {
            let c = self.cqe64(at);
            c.fill(0);
            for (i, &(wc, op, bc)) in minis.iter().enumerate() {
                MiniCqe::new_unchecked(&mut c[i * 8..i * 8 + 8]).set_requester(wc, op, bc);
            }
        }
        self.stamp(at, (((n - 1) as u8) << 4) | 0x0c);
        self.pi += n;
    }

    /// Basic layout: a title CQE (format 3, byte_cnt = session size) filled by
    /// `title`, then mini arrays at title+1 and every 8th slot after.
    pub fn push_basic_session(
        &mut self,
        opcode: CqeOpcode,
        minis: &[(u16, u8, u32)],
        title: impl FnOnce(&mut Cqe64<&mut [u8]>),
    ) {
        let n = minis.len() as u32;
        assert!(n >= 2);
        assert!(self.room() >= n, "test NIC would overrun the CQ");
        let at = self.pi;
        // Mini arrays first (the NIC writes the title last).
        let groups = minis.chunks(8).enumerate();
        for (g, chunk) in groups {
            let slot = if g == 0 { at + 1 } else { at + 8 * g as u32 };
            let c = self.cqe64(slot);
            c.fill(0);
            for (i, &(wc, op, bc)) in chunk.iter().enumerate() {
                MiniCqe::new_unchecked(&mut c[i * 8..i * 8 + 8]).set_requester(wc, op, bc);
            }
        }
        {
            let c = self.cqe64(at);
            c.fill(0);
            let mut v = Cqe64::new_unchecked(c);
            title(&mut v);
            v.set_byte_cnt(n);
        }
        self.stamp(at, ((opcode as u8) << 4) | 0x0c);
        self.pi += n;
    }
}

/// SQ memory, doorbell record and a BlueFlame page of ordinary memory.
pub struct HandSq {
    pub buf: AlignedBuf,
    pub dbrec: AlignedBuf,
    pub bf: AlignedBuf,
    pub wqe_cnt: u32,
    pub bf_half: usize,
}

impl HandSq {
    pub fn new<T: SendTable>(wqe_cnt: u32, bf_half: usize, cfg: SqConfig) -> (Self, SendQueue<T>) {
        let buf = AlignedBuf::new(wqe_cnt as usize * 64);
        let dbrec = AlignedBuf::new(64);
        let bf = AlignedBuf::new(4096);
        let mem = SqMemory {
            buf: buf.as_non_null(),
            wqe_cnt,
            dbrec: dbrec.as_non_null(),
            bf_reg: bf.as_non_null(),
            bf_half,
            qpn: 0x1234,
            notify: None,
            keepalive: None,
        };
        // SAFETY: the buffers outlive the queue within each test.
        let sq = unsafe { SendQueue::new(mem, cfg) }.expect("valid SQ");
        (
            Self {
                buf,
                dbrec,
                bf,
                wqe_cnt,
                bf_half,
            },
            sq,
        )
    }

    pub fn send_dbr(&self) -> u32 {
        QpDbRec::new_unchecked(self.dbrec.as_slice()).send_counter()
    }

    pub fn bb(&self, counter: u16) -> &[u8] {
        let i = (counter as usize) & (self.wqe_cnt as usize - 1);
        &self.buf.as_slice()[i * 64..i * 64 + 64]
    }

    pub fn bf_bytes(&self) -> &[u8] {
        self.bf.as_slice()
    }
}

/// A 64-byte fake requester completion for a given WQE counter (for feeding
/// tables directly).
pub fn req_cqe(qpn: u32, wqe_counter: u16) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut b[..]);
    c.set_sop_drop_qpn(qpn);
    c.set_wqe_counter(wqe_counter);
    c.set_op_own(0);
    b
}

pub fn nn(p: *mut u8) -> NonNull<u8> {
    NonNull::new(p).unwrap()
}
