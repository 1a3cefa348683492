//! The send queue: a power-of-two ring of 64-byte basic blocks (BBs) that the
//! NIC reads WQEs from.
//!
//! Posting goes through a builder that writes the segments in place:
//!
//! ```text
//! sq.write_imm(raddr, rkey, imm, Payload::Sges(&[sge]))?  // ctrl + raddr + data written
//!   .fence()                                              // optional flags
//!   .post(user_data);                                     // ctrl finished, table updated
//! sq.ring_doorbell();                                     // one doorbell for all posted WQEs
//! ```
//!
//! A WQE never straddles the end of the ring: when it would, the queue first
//! fills the rest of the ring with one NOP WQE. Free space is accounted from
//! completions through the queue's [`SendTable`].

mod builder;
mod dc;

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

pub use crate::doorbell::{BfMode, BlueFlame};
pub use builder::WqeBuilder;
pub use dc::DcSends;

use crate::cq::{Completion, CompletionSource};
use crate::doorbell::{store_dbrec, DeviceNotify};
use crate::prm::{
    ctrl_flags, AtomicSeg, Ctrl, CtrlSeg, DataSeg, InlineSeg, RaddrSeg, TmCmd, TmOpcode, WqeOpcode,
    INVALID_LKEY, MAX_WQE_DS, SEND_WQE_BB, SND_DBR, WQE_SEG_UNIT,
};
use crate::wqe_table::SendTable;

/// The data segment of an APPEND without a buffer (rdma-core's
/// `set_data_ptr_seg_end`).
const LIST_END: Sge = Sge {
    addr: 0,
    len: 0,
    lkey: INVALID_LKEY,
};

/// One scatter/gather entry: local address, length, lkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Local virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// The data of a WRITE or SEND.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// No data (a zero-length WRITE_IMM or SEND).
    None,
    /// Gathered from memory by the NIC.
    Sges(&'a [Sge]),
    /// Copied into the WQE.
    Inline(&'a [u8]),
    /// A header copied into the WQE, then a body gathered from memory.
    InlineSges(&'a [u8], &'a [Sge]),
}

/// Data segments the SGEs take: zero-length SGEs are skipped, because a data
/// segment with byte count 0 means 2 GiB to the NIC (rdma-core skips them too).
#[inline(always)]
pub(crate) fn sge_segments(s: &[Sge]) -> usize {
    s.iter().filter(|s| s.len != 0).count()
}

impl Payload<'_> {
    /// 16-byte units this payload takes in the WQE.
    #[inline(always)]
    fn ds(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Sges(s) => sge_segments(s),
            Payload::Inline(d) => InlineSeg::wqe_bytes(d.len()) / WQE_SEG_UNIT,
            Payload::InlineSges(d, s) => {
                InlineSeg::wqe_bytes(d.len()) / WQE_SEG_UNIT + sge_segments(s)
            }
        }
    }
    #[inline(always)]
    fn inline_len(&self) -> usize {
        match self {
            Payload::Inline(d) | Payload::InlineSges(d, _) => d.len(),
            _ => 0,
        }
    }
}

/// Why a WQE could not be posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SqError {
    /// No room until completions free some: retry after polling the CQ.
    #[error("send queue full")]
    Full,
    /// The WQE would exceed the 63 16-byte units a control segment can describe.
    #[error("WQE of {0} 16-byte units exceeds the maximum of 63")]
    TooLarge(usize),
    /// More inline data than the queue was configured for.
    #[error("{got} bytes of inline data exceed the queue's max_inline of {max}")]
    InlineTooLarge {
        /// Bytes asked for.
        got: usize,
        /// The queue's limit.
        max: usize,
    },
}

/// What a backend hands over for one send queue (on hardware, the `sq`,
/// `dbrec` and `bf` parts of `struct mlx5dv_qp`).
#[derive(Debug)]
pub struct SqMemory {
    /// SQ buffer: `wqe_cnt * 64` bytes, 64-byte aligned.
    pub buf: NonNull<u8>,
    /// Number of 64-byte BBs: a power of two, at most 32768.
    pub wqe_cnt: u32,
    /// The QP doorbell record (two big-endian words).
    pub dbrec: NonNull<u8>,
    /// BlueFlame register (8-byte aligned, `2 * bf_half` bytes, or 8 if `bf_half` is 0).
    pub bf_reg: NonNull<u8>,
    /// Size of one BlueFlame half (`bf.size`), 0 when the UAR has no BlueFlame.
    pub bf_half: usize,
    /// QP number.
    pub qpn: u32,
    /// Backend hook (the software device); `None` on hardware.
    pub notify: Option<Arc<dyn DeviceNotify>>,
    /// Keeps the memory alive for as long as the queue exists.
    pub keepalive: Option<Arc<dyn Any + Send + Sync>>,
}

/// Send queue settings.
#[derive(Debug, Clone, Copy)]
pub struct SqConfig {
    /// Request a CQE at least every this many WQEs (0: only when asked). Also
    /// forced when unsignaled WQEs would hold half the ring.
    pub signal_interval: u16,
    /// Largest inline payload accepted (the QP's `max_inline_data`).
    pub max_inline: usize,
    /// How doorbells use the BlueFlame register.
    pub bf_mode: BfMode,
}

impl Default for SqConfig {
    fn default() -> Self {
        Self {
            signal_interval: 64,
            max_inline: 256,
            bf_mode: BfMode::Auto,
        }
    }
}

/// An invalid send queue description.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("SQ WQE count {0} is not a power of two between 1 and 32768")]
pub struct BadWqeCount(pub u32);

/// A send queue with WQE table `T`.
pub struct SendQueue<T> {
    buf: NonNull<u8>,
    mask: u16,
    wqe_cnt: u16,
    pi: u16,
    qpn: u32,
    table: T,
    dbrec: NonNull<u8>,
    bf: BlueFlame,
    bf_mode: BfMode,
    /// WQEs posted since the last doorbell.
    pending: u16,
    /// Counter and size (BBs) of the last posted WQE.
    last_start: u16,
    last_bbs: u16,
    unsignaled: u16,
    unsignaled_bbs: u16,
    signal_interval: u16,
    max_inline: usize,
    notify: Option<Arc<dyn DeviceNotify>>,
    _keepalive: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: the queue owns its view of SQ memory; the NIC reads it only after
// the doorbell record says so.
unsafe impl<T: Send> Send for SendQueue<T> {}

impl<T> std::fmt::Debug for SendQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendQueue")
            .field("qpn", &self.qpn)
            .field("wqe_cnt", &self.wqe_cnt)
            .field("pi", &self.pi)
            .field("pending", &self.pending)
            .finish()
    }
}

impl<T: SendTable> SendQueue<T> {
    /// Takes over SQ memory.
    ///
    /// # Safety
    /// `mem.buf` must be valid for `wqe_cnt * 64` bytes, `mem.dbrec` for 8 bytes
    /// and `mem.bf_reg` for `2 * bf_half` bytes (8 if `bf_half` is 0), all
    /// suitably aligned, for the life of the queue (or of `mem.keepalive`); no
    /// other producer may use this SQ.
    pub unsafe fn new(mem: SqMemory, cfg: SqConfig) -> Result<Self, BadWqeCount> {
        if !mem.wqe_cnt.is_power_of_two() || mem.wqe_cnt > 32768 {
            return Err(BadWqeCount(mem.wqe_cnt));
        }
        let wqe_cnt = mem.wqe_cnt as u16;
        // SAFETY: forwarded from the caller.
        let bf = unsafe { BlueFlame::new(mem.bf_reg, mem.bf_half) };
        Ok(Self {
            buf: mem.buf,
            mask: wqe_cnt - 1,
            wqe_cnt,
            pi: 0,
            qpn: mem.qpn,
            table: T::with_capacity(wqe_cnt),
            dbrec: mem.dbrec,
            bf,
            bf_mode: cfg.bf_mode,
            pending: 0,
            last_start: 0,
            last_bbs: 0,
            unsignaled: 0,
            unsignaled_bbs: 0,
            signal_interval: cfg.signal_interval,
            max_inline: cfg.max_inline,
            notify: mem.notify,
            _keepalive: mem.keepalive,
        })
    }

    /// QP number.
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Producer counter (BBs posted, mod 2^16).
    #[inline(always)]
    pub fn pi(&self) -> u16 {
        self.pi
    }

    /// Ring size in BBs.
    #[inline(always)]
    pub fn wqe_cnt(&self) -> u16 {
        self.wqe_cnt
    }

    /// BBs free for posting (ordered tables: exact).
    #[inline(always)]
    pub fn free_bbs(&self) -> u16 {
        self.wqe_cnt - self.table.outstanding()
    }

    /// WQEs posted since the last doorbell.
    #[inline(always)]
    pub fn pending(&self) -> u16 {
        self.pending
    }

    /// The WQE table.
    pub fn table(&self) -> &T {
        &self.table
    }

    /// The BlueFlame register state.
    pub fn blueflame(&self) -> &BlueFlame {
        &self.bf
    }

    #[inline(always)]
    fn bb_ptr(&self, counter: u16) -> *mut u8 {
        // SAFETY: (counter & mask) * 64 is inside the ring.
        unsafe {
            self.buf
                .as_ptr()
                .add(usize::from(counter & self.mask) * SEND_WQE_BB)
        }
    }

    /// The bytes of BB `counter` (for tests and the software device).
    pub fn bb(&self, counter: u16) -> &[u8; 64] {
        // SAFETY: one BB inside the ring.
        unsafe { &*(self.bb_ptr(counter) as *const [u8; 64]) }
    }

    /// Reserves `ds` 16-byte units, padding the ring's end with a NOP when the
    /// WQE would straddle it, and returns the builder with nothing written.
    #[inline(always)]
    fn begin(
        &mut self,
        opcode: WqeOpcode,
        ds: usize,
        inline_len: usize,
    ) -> Result<WqeBuilder<'_, T>, SqError> {
        if ds > MAX_WQE_DS {
            return Err(SqError::TooLarge(ds));
        }
        if inline_len > self.max_inline {
            return Err(SqError::InlineTooLarge {
                got: inline_len,
                max: self.max_inline,
            });
        }
        let bbs = ds.div_ceil(4) as u16;
        let to_end = self.wqe_cnt - (self.pi & self.mask);
        if bbs > to_end {
            if !self.table.has_room(self.pi, to_end + bbs) {
                return Err(SqError::Full);
            }
            self.pad_nop(to_end);
        } else if !self.table.has_room(self.pi, bbs) {
            return Err(SqError::Full);
        }
        Ok(WqeBuilder::new(self, opcode, ds as u8, bbs))
    }

    /// Fills `bbs` BBs up to the ring's end with one NOP WQE.
    #[cold]
    fn pad_nop(&mut self, bbs: u16) {
        let start = self.pi;
        let p = self.bb_ptr(start);
        let signaled = T::ALWAYS_SIGNALED;
        // SAFETY: the reserved BBs start at p and are owned by software.
        let ctrl = unsafe { &mut *(p as *mut [u8; 16]) };
        CtrlSeg::new_unchecked(ctrl).set_all(Ctrl {
            wqe_index: start,
            opcode: WqeOpcode::Nop as u8,
            qpn: self.qpn,
            fm_ce_se: if signaled { ctrl_flags::CQ_UPDATE } else { 0 },
            ds: (bbs * 4) as u8,
            ..Ctrl::default()
        });
        let end = start.wrapping_add(bbs);
        self.table.record(start, end, None, signaled);
        self.note_posted(start, bbs, signaled);
    }

    #[inline(always)]
    fn note_posted(&mut self, start: u16, bbs: u16, signaled: bool) {
        self.pi = start.wrapping_add(bbs);
        self.pending += 1;
        self.last_start = start;
        self.last_bbs = bbs;
        if signaled {
            self.unsignaled = 0;
            self.unsignaled_bbs = 0;
        } else {
            self.unsignaled += 1;
            self.unsignaled_bbs += bbs;
        }
    }

    /// Whether the next WQE, of `bbs` BBs, must be signaled by the interval rule
    /// or because unsignaled WQEs would otherwise hold half the ring.
    #[inline(always)]
    fn interval_says_signal(&self, bbs: u16) -> bool {
        (self.signal_interval != 0 && self.unsignaled + 1 >= self.signal_interval)
            || self.unsignaled_bbs + bbs >= self.wqe_cnt / 2
    }

    /// A NOP WQE (useful to request a completion, or as padding).
    #[inline(always)]
    pub fn nop(&mut self) -> Result<WqeBuilder<'_, T>, SqError> {
        self.begin(WqeOpcode::Nop, 1, 0)
    }

    /// A tag-matching command for a TM-SRQ's command QP (opcode
    /// `TAG_MATCHING`, a [`TmSeg`](crate::prm::TmSeg), and for an APPEND
    /// the data segment of `buf`, or the end-of-list segment when `buf` is
    /// `None`). The command asks for its CQE with
    /// [`tm_flags::CQE_REQ`](crate::prm::tm_flags::CQE_REQ) in `cmd`, which
    /// alone decides whether the WQE is signaled:
    /// [`signaled`](WqeBuilder::signaled) and the signal interval do not
    /// apply, and the control segment's `fm_ce_se` stays zero, as rdma-core
    /// writes it.
    #[inline]
    pub fn tm_command(
        &mut self,
        cmd: &TmCmd,
        buf: Option<&Sge>,
    ) -> Result<WqeBuilder<'_, T>, SqError> {
        let append = cmd.opcode == TmOpcode::Append;
        let mut b = self.begin(WqeOpcode::TagMatching, if append { 4 } else { 3 }, 0)?;
        b.put_tm(cmd, append.then_some(buf.copied().unwrap_or(LIST_END)));
        Ok(b)
    }

    /// RDMA WRITE of `data` to `raddr` under `rkey`.
    #[inline(always)]
    pub fn write(
        &mut self,
        raddr: u64,
        rkey: u32,
        data: Payload<'_>,
    ) -> Result<WqeBuilder<'_, T>, SqError> {
        let mut b = self.begin(WqeOpcode::RdmaWrite, 2 + data.ds(), data.inline_len())?;
        b.put_raddr(raddr, rkey);
        b.put_payload(&data);
        Ok(b)
    }

    /// RDMA WRITE with immediate: consumes a receive WQE at the peer, whose CQE
    /// carries `imm`.
    #[inline(always)]
    pub fn write_imm(
        &mut self,
        raddr: u64,
        rkey: u32,
        imm: u32,
        data: Payload<'_>,
    ) -> Result<WqeBuilder<'_, T>, SqError> {
        let mut b = self.begin(WqeOpcode::RdmaWriteImm, 2 + data.ds(), data.inline_len())?;
        b.set_imm(imm);
        b.put_raddr(raddr, rkey);
        b.put_payload(&data);
        Ok(b)
    }

    /// SEND of `data` into the peer's next receive WQE.
    #[inline(always)]
    pub fn send(&mut self, data: Payload<'_>) -> Result<WqeBuilder<'_, T>, SqError> {
        let mut b = self.begin(WqeOpcode::Send, 1 + data.ds(), data.inline_len())?;
        b.put_payload(&data);
        Ok(b)
    }

    /// SEND with immediate.
    #[inline(always)]
    pub fn send_imm(&mut self, imm: u32, data: Payload<'_>) -> Result<WqeBuilder<'_, T>, SqError> {
        let mut b = self.begin(WqeOpcode::SendImm, 1 + data.ds(), data.inline_len())?;
        b.set_imm(imm);
        b.put_payload(&data);
        Ok(b)
    }

    /// RDMA READ from `raddr` under `rkey` into the local `sges`.
    #[inline(always)]
    pub fn read(
        &mut self,
        raddr: u64,
        rkey: u32,
        sges: &[Sge],
    ) -> Result<WqeBuilder<'_, T>, SqError> {
        let mut b = self.begin(WqeOpcode::RdmaRead, 2 + sge_segments(sges), 0)?;
        b.put_raddr(raddr, rkey);
        b.put_payload(&Payload::Sges(sges));
        Ok(b)
    }

    /// 64-bit compare-and-swap at `raddr`; the old value lands in `result` (8 bytes).
    #[inline(always)]
    pub fn atomic_cs(
        &mut self,
        raddr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
        result: Sge,
    ) -> Result<WqeBuilder<'_, T>, SqError> {
        let mut b = self.begin(WqeOpcode::AtomicCs, 4, 0)?;
        b.put_raddr(raddr, rkey);
        b.put_atomic(swap, compare);
        b.put_payload(&Payload::Sges(&[result]));
        Ok(b)
    }

    /// 64-bit fetch-and-add at `raddr`; the old value lands in `result` (8 bytes).
    #[inline(always)]
    pub fn atomic_fa(
        &mut self,
        raddr: u64,
        rkey: u32,
        add: u64,
        result: Sge,
    ) -> Result<WqeBuilder<'_, T>, SqError> {
        let mut b = self.begin(WqeOpcode::AtomicFa, 4, 0)?;
        b.put_raddr(raddr, rkey);
        b.put_atomic(add, 0);
        b.put_payload(&Payload::Sges(&[result]));
        Ok(b)
    }

    /// Rings the doorbell for every WQE posted since the last one: barrier,
    /// doorbell record, then the BlueFlame register — the whole WQE when exactly
    /// one was posted and it fits half the register, else the first 8 bytes of
    /// the last WQE's control segment (rdma-core's sequence). Does nothing when
    /// nothing is pending.
    #[inline]
    pub fn ring_doorbell(&mut self) {
        if self.pending == 0 {
            return;
        }
        crate::barrier::to_device();
        // SAFETY: the doorbell record is valid for the queue's life.
        unsafe { store_dbrec(self.dbrec, SND_DBR, u32::from(self.pi)) };
        let last = self.bb_ptr(self.last_start);
        let whole = usize::from(self.last_bbs) * SEND_WQE_BB;
        // SAFETY: `last` is the last posted WQE, `last_bbs` BBs long and inside
        // the ring (WQEs never straddle its end); 64-byte aligned.
        unsafe {
            if self.pending == 1 && self.bf_mode == BfMode::Auto && whole <= self.bf.half_size() {
                self.bf.ring_bf(last, usize::from(self.last_bbs));
            } else {
                self.bf.ring_db(last);
            }
        }
        self.pending = 0;
        if let Some(n) = &self.notify {
            n.sq_doorbell(self.qpn);
        }
    }

    /// Starts a batch: WQEs posted through it are announced with one doorbell
    /// when it is dropped or [`finish`](Batch::finish)ed.
    pub fn batch(&mut self) -> Batch<'_, T> {
        Batch { sq: self }
    }

    /// Retires what completion `c` completes, handing entries to `f`.
    #[inline]
    pub fn complete<F: FnMut(T::Output, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        f: F,
    ) -> usize {
        self.table.retire(c, f)
    }
}

impl<T: SendTable> CompletionSource for SendQueue<T> {
    type Entry = T::Output;
    #[inline(always)]
    fn complete<F: FnMut(T::Output, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        f: F,
    ) -> usize {
        self.table.retire(c, f)
    }
}

/// Several WQEs, one doorbell (see [`SendQueue::batch`]).
#[derive(Debug)]
pub struct Batch<'a, T: SendTable> {
    sq: &'a mut SendQueue<T>,
}

impl<T: SendTable> Batch<'_, T> {
    /// Rings the doorbell now.
    pub fn finish(self) {}
}

impl<T: SendTable> std::ops::Deref for Batch<'_, T> {
    type Target = SendQueue<T>;
    fn deref(&self) -> &SendQueue<T> {
        self.sq
    }
}

impl<T: SendTable> std::ops::DerefMut for Batch<'_, T> {
    fn deref_mut(&mut self) -> &mut SendQueue<T> {
        self.sq
    }
}

impl<T: SendTable> Drop for Batch<'_, T> {
    fn drop(&mut self) {
        self.sq.ring_doorbell();
    }
}

// Segment writers used by the builder.
impl<T> SendQueue<T> {
    /// The 16-byte segment at byte offset `off` of the WQE at `start`.
    #[inline(always)]
    fn seg16(&mut self, start: u16, off: usize) -> &mut [u8; 16] {
        // SAFETY: as for `seg`; 16 bytes inside the reserved WQE.
        unsafe {
            &mut *(self
                .buf
                .as_ptr()
                .add(usize::from(start & self.mask) * SEND_WQE_BB + off)
                as *mut [u8; 16])
        }
    }

    /// A mutable view of `len` bytes at byte offset `off` of the WQE at `start`.
    #[inline(always)]
    fn seg(&mut self, start: u16, off: usize, len: usize) -> &mut [u8] {
        // SAFETY: the builder only asks for bytes inside the WQE it reserved,
        // which lies inside the ring and is owned by software until the doorbell.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.buf
                    .as_ptr()
                    .add(usize::from(start & self.mask) * SEND_WQE_BB + off),
                len,
            )
        }
    }
}

#[inline(always)]
pub(crate) fn write_data_seg(b: &mut [u8; 16], s: &Sge) {
    DataSeg::new_unchecked(b).set(s.len, s.lkey, s.addr);
}
#[inline(always)]
pub(crate) fn write_raddr_seg(b: &mut [u8; 16], raddr: u64, rkey: u32) {
    RaddrSeg::new_unchecked(b).set(raddr, rkey);
}
#[inline(always)]
pub(crate) fn write_atomic_seg(b: &mut [u8; 16], swap_add: u64, compare: u64) {
    AtomicSeg::new_unchecked(b).set(swap_add, compare);
}
