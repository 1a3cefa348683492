//! Receive queues: a QP's own RQ, and the shared receive queue (SRQ).
//!
//! An RQ WQE is a list of data segments, terminated by one with
//! [`INVALID_LKEY`] when shorter than the queue's maximum. An SRQ WQE starts with
//! an [`SrqNextSeg`] that links it to the next WQE the NIC will use.
//!
//! Ordered SRQs ([`OrderedRecv`]) are *cyclic*:
//! WQE `i` links to `i + 1`, the NIC consumes them in order, and the WQE counter
//! of a compressed responder CQE can be derived from the title's (UCX's cyclic
//! topology). Unordered SRQs (TM-SRQ) keep rdma-core's free list: a completed
//! WQE is linked after the list's tail.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::cq::{Completion, CompletionSource};
use crate::doorbell::{store_dbrec, DeviceNotify};
use crate::prm::{DataSeg, SrqNextSeg, INVALID_LKEY, RCV_DBR};
use crate::sq::Sge;
use crate::wqe_table::{OrderedRecv, RecvTable, UnorderedRecv};

/// Why a receive could not be posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RqError {
    /// No free receive WQE: poll completions first.
    #[error("receive queue full")]
    Full,
    /// More SGEs than the queue's WQEs hold.
    #[error("{got} SGEs exceed the queue's maximum of {max}")]
    TooManySges {
        /// SGEs asked for.
        got: usize,
        /// The queue's limit.
        max: usize,
    },
}

/// An invalid receive queue description.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("receive queue of {wqe_cnt} WQEs with stride {stride} is invalid (powers of two, stride >= 16, count <= 32768)")]
pub struct BadRqShape {
    /// WQE count given.
    pub wqe_cnt: u32,
    /// Stride given.
    pub stride: usize,
}

/// What a backend hands over for one RQ or SRQ.
#[derive(Debug)]
pub struct RqMemory {
    /// Queue buffer: `wqe_cnt * stride` bytes.
    pub buf: NonNull<u8>,
    /// Number of WQEs, a power of two.
    pub wqe_cnt: u32,
    /// Bytes per WQE, a power of two, at least 16 (RQ) or 32 (SRQ).
    pub stride: usize,
    /// Doorbell record: the QP's (receive counter in word 0) or the SRQ's.
    pub dbrec: NonNull<u8>,
    /// QPN (RQ) or SRQN (SRQ), for the backend hook.
    pub qn: u32,
    /// Backend hook (the software device); `None` on hardware.
    pub notify: Option<Arc<dyn DeviceNotify>>,
    /// Keeps the memory alive for as long as the queue exists.
    pub keepalive: Option<Arc<dyn Any + Send + Sync>>,
}

#[inline(always)]
fn check_sges(sges: &[Sge], max: usize) -> Result<(), RqError> {
    if sges.len() > max {
        return Err(RqError::TooManySges {
            got: sges.len(),
            max,
        });
    }
    Ok(())
}

#[derive(Debug)]
struct Ring {
    buf: NonNull<u8>,
    mask: u16,
    stride: usize,
    dbrec: NonNull<u8>,
    qn: u32,
    notify: Option<Arc<dyn DeviceNotify>>,
    _keepalive: Option<Arc<dyn Any + Send + Sync>>,
}

impl Ring {
    fn new(mem: RqMemory, min_stride: usize) -> Result<Self, BadRqShape> {
        if !mem.wqe_cnt.is_power_of_two()
            || mem.wqe_cnt > 32768
            || !mem.stride.is_power_of_two()
            || mem.stride < min_stride
        {
            return Err(BadRqShape {
                wqe_cnt: mem.wqe_cnt,
                stride: mem.stride,
            });
        }
        Ok(Self {
            buf: mem.buf,
            mask: (mem.wqe_cnt - 1) as u16,
            stride: mem.stride,
            dbrec: mem.dbrec,
            qn: mem.qn,
            notify: mem.notify,
            _keepalive: mem.keepalive,
        })
    }
    #[inline(always)]
    fn wqe(&mut self, idx: u16) -> &mut [u8] {
        // SAFETY: (idx & mask) * stride is inside the buffer (constructor
        // contract); a WQE being posted is owned by software.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.buf
                    .as_ptr()
                    .add(usize::from(idx & self.mask) * self.stride),
                self.stride,
            )
        }
    }
    #[inline(always)]
    /// Writes the non-empty SGEs (a zero byte count would mean 2 GiB to the
    /// NIC; rdma-core skips them too) and the terminator when there is room.
    fn write_sges(seg: &mut [u8], sges: &[Sge], max: usize) {
        let mut i = 0;
        for s in sges.iter().filter(|s| s.len != 0) {
            DataSeg::new_unchecked(&mut seg[i * 16..i * 16 + 16]).set(s.len, s.lkey, s.addr);
            i += 1;
        }
        if i < max {
            DataSeg::new_unchecked(&mut seg[i * 16..i * 16 + 16]).set(0, INVALID_LKEY, 0);
        }
    }
    #[inline(always)]
    fn ring(&mut self, word: usize, counter: u16) {
        crate::barrier::to_device();
        // SAFETY: the doorbell record is valid for the queue's life.
        unsafe { store_dbrec(self.dbrec, word, u32::from(counter)) };
        if let Some(n) = &self.notify {
            n.rq_doorbell(self.qn);
        }
    }
}

/// A QP's receive queue. Completions arrive in posting order; as in rdma-core,
/// the entry retired is the queue's tail, not the CQE's WQE counter.
#[derive(Debug)]
pub struct RecvQueue<T = OrderedRecv<u64>> {
    ring: Ring,
    table: T,
    head: u16,
    tail: u16,
    posted: u16,
    max_sge: usize,
}

// SAFETY: the queue owns its view of RQ memory.
unsafe impl<T: Send> Send for RecvQueue<T> {}

impl<T: RecvTable> RecvQueue<T> {
    /// Takes over RQ memory.
    ///
    /// # Safety
    /// `mem.buf` must be valid for `wqe_cnt * stride` bytes and `mem.dbrec` for 4
    /// bytes (aligned), for the life of the queue (or of `mem.keepalive`).
    pub unsafe fn new(mem: RqMemory) -> Result<Self, BadRqShape> {
        let ring = Ring::new(mem, 16)?;
        let cnt = ring.mask + 1;
        let max_sge = ring.stride / 16;
        Ok(Self {
            ring,
            table: T::with_capacity(cnt),
            head: 0,
            tail: 0,
            posted: 0,
            max_sge,
        })
    }

    /// Posts a receive of `sges` with `entry`; announced by [`ring_doorbell`](Self::ring_doorbell).
    #[inline]
    pub fn post(&mut self, sges: &[Sge], entry: T::Entry) -> Result<u16, RqError> {
        check_sges(sges, self.max_sge)?;
        let idx = self.head;
        if !self.table.is_free(idx) {
            return Err(RqError::Full);
        }
        let max = self.max_sge;
        Ring::write_sges(self.ring.wqe(idx), sges, max);
        self.table.insert(idx, entry);
        self.head = idx.wrapping_add(1);
        self.posted += 1;
        Ok(idx)
    }

    /// Writes the receive counter to the QP doorbell record.
    #[inline]
    pub fn ring_doorbell(&mut self) {
        if self.posted != 0 {
            self.posted = 0;
            self.ring.ring(RCV_DBR, self.head);
        }
    }

    /// Receive WQEs posted and not completed.
    pub fn outstanding(&self) -> u16 {
        self.table.outstanding()
    }

    /// The table.
    pub fn table(&self) -> &T {
        &self.table
    }
}

impl<T: RecvTable> CompletionSource for RecvQueue<T> {
    type Entry = T::Entry;
    #[inline(always)]
    fn complete<F: FnMut(T::Entry, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        mut f: F,
    ) -> usize {
        match self.table.take(self.tail) {
            Some(e) => {
                self.tail = self.tail.wrapping_add(1);
                f(e, Some(c));
                1
            }
            None => 0,
        }
    }
}

/// How an SRQ picks the WQE to post next; chosen by its table type.
pub trait SrqTopology: RecvTable {
    /// True: cyclic (WQE i links to i+1, consumed in order). False: rdma-core's
    /// free list.
    const CYCLIC: bool;
}
impl<U> SrqTopology for OrderedRecv<U> {
    const CYCLIC: bool = true;
}
impl<U> SrqTopology for UnorderedRecv<U> {
    const CYCLIC: bool = false;
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq<T = OrderedRecv<u64>> {
    ring: Ring,
    table: T,
    /// Cyclic: next index to post. Free list: head of the free list.
    head: u16,
    /// Free list: its tail (never posted).
    tail: u16,
    /// WQEs posted, the counter the doorbell record carries.
    counter: u16,
    posted: u16,
    max_sge: usize,
}

// SAFETY: the queue owns its view of SRQ memory.
unsafe impl<T: Send> Send for Srq<T> {}

impl<T: SrqTopology> Srq<T> {
    /// Takes over SRQ memory and links its WQEs (`i -> i + 1`, cyclically).
    ///
    /// # Safety
    /// As for [`RecvQueue::new`]; the NIC must not yet use the SRQ.
    pub unsafe fn new(mem: RqMemory) -> Result<Self, BadRqShape> {
        let mut ring = Ring::new(mem, 32)?;
        let cnt = ring.mask + 1;
        let mask = ring.mask;
        for i in 0..cnt {
            SrqNextSeg::new_unchecked(&mut ring.wqe(i)[..SrqNextSeg::<()>::LEN])
                .set(i.wrapping_add(1) & mask);
        }
        let max_sge = ring.stride / 16 - 1;
        Ok(Self {
            ring,
            table: T::with_capacity(cnt),
            head: 0,
            tail: cnt - 1,
            counter: 0,
            posted: 0,
            max_sge,
        })
    }

    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        self.ring.qn
    }

    /// Largest number of SGEs per receive.
    pub fn max_sge(&self) -> usize {
        self.max_sge
    }

    /// Posts a receive of `sges` (may be empty: a zero-length receive) with
    /// `entry`; announced by [`ring_doorbell`](Self::ring_doorbell). Returns the
    /// WQE index that completions will name.
    #[inline]
    pub fn post(&mut self, sges: &[Sge], entry: T::Entry) -> Result<u16, RqError> {
        check_sges(sges, self.max_sge)?;
        let idx = if T::CYCLIC {
            let idx = self.head & self.ring.mask;
            if !self.table.is_free(idx) {
                return Err(RqError::Full);
            }
            self.head = self.head.wrapping_add(1);
            idx
        } else {
            let idx = self.head;
            if idx == self.tail {
                return Err(RqError::Full);
            }
            self.head = SrqNextSeg::new_unchecked(&self.ring.wqe(idx)[..SrqNextSeg::<()>::LEN])
                .next_wqe_index()
                & self.ring.mask;
            idx
        };
        let max = self.max_sge;
        Ring::write_sges(&mut self.ring.wqe(idx)[SrqNextSeg::<()>::LEN..], sges, max);
        self.table.insert(idx, entry);
        self.counter = self.counter.wrapping_add(1);
        self.posted += 1;
        Ok(idx)
    }

    /// Writes the WQE counter to the SRQ doorbell record.
    #[inline]
    pub fn ring_doorbell(&mut self) {
        if self.posted != 0 {
            self.posted = 0;
            self.ring.ring(0, self.counter);
        }
    }

    /// Receive WQEs posted and not completed.
    pub fn outstanding(&self) -> u16 {
        self.table.outstanding()
    }

    /// The table.
    pub fn table(&self) -> &T {
        &self.table
    }

    /// Retires the receive WQE that completion `c` names.
    #[inline]
    pub fn take(&mut self, c: &Completion<'_>) -> Option<T::Entry> {
        self.take_index(c.wqe_counter())
    }

    /// Retires receive WQE `wqe_counter` (a CQE's WQE counter).
    #[inline]
    pub fn take_index(&mut self, wqe_counter: u16) -> Option<T::Entry> {
        let idx = wqe_counter & self.ring.mask;
        let e = self.table.take(idx)?;
        if !T::CYCLIC {
            // rdma-core mlx5_free_srq_wqe: link the freed WQE after the tail.
            let tail = self.tail;
            SrqNextSeg::new_unchecked(&mut self.ring.wqe(tail)[..SrqNextSeg::<()>::LEN]).set(idx);
            self.tail = idx;
        }
        Some(e)
    }
}

impl<T: SrqTopology> CompletionSource for Srq<T> {
    type Entry = T::Entry;
    #[inline(always)]
    fn complete<F: FnMut(T::Entry, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        mut f: F,
    ) -> usize {
        match self.take(c) {
            Some(e) => {
                f(e, Some(c));
                1
            }
            None => 0,
        }
    }
}
