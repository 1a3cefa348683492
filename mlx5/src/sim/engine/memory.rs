//! Memory as the device reaches it: keys resolved to pointers with their
//! checks (PD, device, access, bounds, shared or not), scatter/gather lists,
//! and the copies between them.

use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

use super::super::fabric::Fabric;
use super::super::registry::{slot_of, MrEntry, QpEntry, LIVE, MAX_MRS, NO_SEG};

/// Largest message the simulated port carries (as `max_msg_sz` on ConnectX).
pub(super) const MAX_MSG: u64 = 1 << 30;
/// Vendor syndrome the simulator puts in error CQEs caused by a memory region
/// of ordinary (non-shared) memory that another process tried to reach.
pub(super) const VENDOR_NOT_SHARED: u8 = 0xe1;

pub(super) struct Sg {
    pub(super) ptr: *mut u8,
    pub(super) len: u64,
}

/// Most entries of a scatter/gather list.
const MAX_SG: usize = 64;

/// Local scatter/gather list resolved to pointers (at most [`MAX_SG`] entries).
/// The array is left uninitialized: two lists per WQE, zeroed, cost the
/// simulated NIC ~75 instructions of `memset` per WQE (callgrind).
pub(super) struct SgList {
    items: [MaybeUninit<Sg>; MAX_SG],
    pub(super) n: usize,
    pub(super) total: u64,
}

impl SgList {
    pub(super) fn new() -> Self {
        Self {
            items: [const { MaybeUninit::uninit() }; MAX_SG],
            n: 0,
            total: 0,
        }
    }
    pub(super) fn push(&mut self, ptr: *mut u8, len: u64) -> bool {
        if self.n == MAX_SG {
            return false;
        }
        self.items[self.n].write(Sg { ptr, len });
        self.n += 1;
        self.total += len;
        true
    }
    /// Entry `i` (panics past the entries pushed).
    pub(super) fn get(&self, i: usize) -> &Sg {
        assert!(i < self.n, "scatter/gather entry {i} of {}", self.n);
        // SAFETY: entries below `n` were written by `push`.
        unsafe { self.items[i].assume_init_ref() }
    }
    /// The list's bytes from offset `off` on (empty past its end).
    pub(super) fn skip(&self, mut off: u64) -> SgList {
        let mut out = SgList::new();
        for i in 0..self.n {
            let s = self.get(i);
            if off >= s.len {
                off -= s.len;
                continue;
            }
            out.push(s.ptr.wrapping_add(off as usize), s.len - off);
            off = 0;
        }
        out
    }
}

/// Largest write whose cache lines the device demotes after writing them.
const DEMOTE_MAX: usize = 256;

/// Moves what the device just wrote towards the shared cache, as DDIO places
/// DMA writes, so that a poller on another core finds the lines there instead of
/// snooping them out of this one. Only for short writes: `cldemote` costs about
/// 18 ns a line on the machine this was measured on (a 4 KiB copy: 135 ns, its
/// 64 demotes: 1 µs), while the lines a receiver waits on are a message's first few; a long
/// payload the receiver streams in behind the hardware prefetcher.
#[inline(always)]
pub(super) fn demote_written(p: *const u8, len: usize) {
    if len <= DEMOTE_MAX {
        crate::barrier::demote_range(p, len);
    }
}

/// Copies `len` bytes from a gather list into a scatter list.
///
/// # Safety
/// Every entry must point to memory valid for its length; ranges may belong to
/// other processes' shared segments, never overlapping Rust references.
pub(super) unsafe fn sg_copy(src: &SgList, dst: &SgList, len: u64) {
    let (mut si, mut so, mut di, mut doff) = (0usize, 0u64, 0usize, 0u64);
    let mut left = len;
    while left > 0 && si < src.n && di < dst.n {
        let s = src.get(si);
        let d = dst.get(di);
        let n = (s.len - so).min(d.len - doff).min(left);
        // SAFETY: within both entries (caller contract).
        unsafe { std::ptr::copy(s.ptr.add(so as usize), d.ptr.add(doff as usize), n as usize) };
        demote_written(d.ptr.wrapping_add(doff as usize), n as usize);
        so += n;
        doff += n;
        left -= n;
        if so == s.len {
            si += 1;
            so = 0;
        }
        if doff == d.len {
            di += 1;
            doff = 0;
        }
    }
}

/// Resolves `[addr, addr+len)` under `key` for a user of PD `pd` on device
/// `dev` needing `need` access. Returns a pointer valid in this process.
pub(super) fn resolve(
    fab: &Fabric,
    key: u32,
    pd: u32,
    dev: u32,
    addr: u64,
    len: u64,
    need: u32,
) -> Result<*mut u8, u8> {
    let e: &MrEntry = &fab.reg().mrs[slot_of(key >> 8, MAX_MRS)];
    if e.state.load(Ordering::Acquire) != LIVE
        || e.key.load(Ordering::Relaxed) != key
        || e.pd.load(Ordering::Relaxed) != pd
        || e.dev.load(Ordering::Relaxed) != dev
        || e.access.load(Ordering::Relaxed) & need != need
    {
        return Err(0);
    }
    let va = e.va.load(Ordering::Relaxed);
    let mlen = e.len.load(Ordering::Relaxed);
    let end = addr.checked_add(len).ok_or(0u8)?;
    if addr < va || end > va + mlen {
        return Err(0);
    }
    let seg = e.seg.load(Ordering::Relaxed);
    if seg == NO_SEG {
        if e.owner.load(Ordering::Relaxed) != fab.token() {
            return Err(VENDOR_NOT_SHARED);
        }
        return Ok(addr as *mut u8);
    }
    fab.seg_ptr(seg, e.off.load(Ordering::Relaxed) + (addr - va), len)
        .map(|p| p.as_ptr())
        .ok_or(0)
}

/// Resolves `[addr, addr+len)` under `rkey` in the responder QP `r`'s PD and
/// device, needing the remote access `need`.
#[inline]
pub(super) fn resolve_remote(
    fab: &Fabric,
    r: &QpEntry,
    rkey: u32,
    addr: u64,
    len: u64,
    need: u32,
) -> Result<*mut u8, u8> {
    let pd = r.pd.load(Ordering::Relaxed);
    let dev = r.dev.load(Ordering::Relaxed);
    resolve(fab, rkey, pd, dev, addr, len, need)
}
