//! Doorbells: the doorbell record (a big-endian counter in host memory that the
//! NIC reads) and the BlueFlame register (write-combining MMIO that takes either
//! the first 8 bytes of a control segment, or a whole small WQE so the NIC need
//! not fetch it by DMA).
//!
//! The BlueFlame copy writes through raw pointers with 8-byte stores and works
//! on any memory, so the software device can hand out an ordinary page as the
//! register. What a backend does beyond the memory writes (nothing, on
//! hardware: the MMIO write *is* the doorbell) is the [`DeviceNotify`] hook.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::barrier;
use crate::prm::SEND_WQE_BB;

/// The part of a doorbell that is not a memory write: what the software device
/// does when software rings, or polls an empty CQ. Hardware backends pass no
/// hook, and the data path then pays one predictable branch.
pub trait DeviceNotify: Send + Sync + std::fmt::Debug {
    /// The send doorbell of QP `qpn` was rung.
    fn sq_doorbell(&self, qpn: u32);
    /// New receive WQEs were posted to the RQ or SRQ numbered `qn`.
    fn rq_doorbell(&self, qn: u32);
    /// CQ `cqn` was polled and had nothing: a chance for the device to progress.
    fn cq_idle(&self, cqn: u32);
    /// CQ `cqn` was armed: its doorbell record's arm word and the UAR's CQ
    /// doorbell have been written (see [`CqRing::arm`](crate::cq::CqRing::arm)).
    /// The default does nothing.
    fn cq_arm(&self, cqn: u32) {
        let _ = cqn;
    }
    /// A word the device keeps nonzero while [`cq_idle`](Self::cq_idle) may
    /// have work to do; software reads it first, so an empty poll costs one
    /// load while the device has nothing pending. `None`: call `cq_idle` on
    /// every empty poll.
    fn idle_work(&self) -> Option<Arc<AtomicU32>> {
        None
    }
}

/// Stores a 32-bit value big-endian into a doorbell-record word with release
/// ordering (a plain store on x86-64).
///
/// # Safety
/// `rec` must point to a live, 4-byte-aligned doorbell record with at least
/// `word + 1` words.
#[inline(always)]
pub(crate) unsafe fn store_dbrec(rec: NonNull<u8>, word: usize, value: u32) {
    // SAFETY: the caller guarantees the word is in bounds and aligned;
    // AtomicU32 has the layout of u32, and the NIC only reads it.
    let w = unsafe { &*(rec.as_ptr().add(word * 4) as *const AtomicU32) };
    w.store(value.to_be(), Ordering::Release);
}

/// Reads a big-endian doorbell-record word (the device side of [`store_dbrec`]).
///
/// # Safety
/// As for [`store_dbrec`].
#[cfg(feature = "sim")]
#[inline(always)]
pub(crate) unsafe fn load_dbrec(rec: NonNull<u8>, word: usize) -> u32 {
    // SAFETY: as for store_dbrec.
    let w = unsafe { &*(rec.as_ptr().add(word * 4) as *const AtomicU32) };
    u32::from_be(w.load(Ordering::Acquire))
}

/// How a send queue rings the BlueFlame register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BfMode {
    /// Copy a lone WQE that fits half the register; otherwise write 8 bytes
    /// (rdma-core with `MLX5_POST_SEND_PREFER_BF`, UCX).
    Auto,
    /// Always write only the first 8 bytes of the last control segment.
    DoorbellOnly,
}

/// One BlueFlame register: two halves used alternately so that consecutive
/// doorbells never merge in a write-combining buffer.
#[derive(Debug)]
pub struct BlueFlame {
    reg: NonNull<u8>,
    half: usize,
    offset: usize,
}

// SAFETY: the register is owned by one queue; the pointer is only written
// through `&mut self`.
unsafe impl Send for BlueFlame {}

impl BlueFlame {
    /// Wraps a register.
    ///
    /// # Safety
    /// `reg` must be 8-byte aligned and writable for `2 * half` bytes (at least 8
    /// when `half` is 0: a UAR without BlueFlame takes only 8-byte doorbells) for
    /// the life of the value; `half` must be 0 or a multiple of 64.
    pub(crate) unsafe fn new(reg: NonNull<u8>, half: usize) -> Self {
        Self {
            reg,
            half,
            offset: 0,
        }
    }

    /// Bytes one half can take (`bf.size` of `struct mlx5dv_qp`).
    #[inline(always)]
    pub(crate) fn half_size(&self) -> usize {
        self.half
    }

    /// Offset of the half the next doorbell uses.
    #[inline(always)]
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Writes the first 8 bytes of a control segment to the register, then flushes
    /// write combining and toggles the half.
    ///
    /// # Safety
    /// `ctrl` must be readable for 8 bytes and 8-byte aligned.
    #[inline(always)]
    pub(crate) unsafe fn ring_db(&mut self, ctrl: *const u8) {
        barrier::wc_start();
        // SAFETY: `ctrl` is readable (caller); the register half is writable and
        // aligned (constructor contract).
        unsafe {
            let v = core::ptr::read(ctrl as *const u64);
            core::ptr::write_volatile(self.reg.as_ptr().add(self.offset) as *mut u64, v);
        }
        barrier::flush_wc();
        self.offset ^= self.half;
    }

    /// Copies `bbs` whole 64-byte basic blocks starting at `wqe` into the
    /// register with 8-byte stores, then flushes write combining and toggles the
    /// half.
    ///
    /// # Safety
    /// `wqe` must be readable for `bbs * 64` bytes and 8-byte aligned, and
    /// `bbs * 64 <= half_size()`.
    #[inline(always)]
    pub(crate) unsafe fn ring_bf(&mut self, wqe: *const u8, bbs: usize) {
        debug_assert!(bbs * SEND_WQE_BB <= self.half);
        barrier::wc_start();
        let words = bbs * SEND_WQE_BB / 8;
        // SAFETY: source readable for bbs*64 bytes and destination half writable
        // for at least as many (caller contract); both 8-byte aligned.
        unsafe {
            let src = wqe as *const u64;
            let dst = self.reg.as_ptr().add(self.offset) as *mut u64;
            for i in 0..words {
                core::ptr::write_volatile(dst.add(i), core::ptr::read(src.add(i)));
            }
        }
        barrier::flush_wc();
        self.offset ^= self.half;
    }
}
