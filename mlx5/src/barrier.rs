//! Barriers between the CPU and a DMA device, named as in rdma-core's
//! `util/udma_barrier.h`, for x86-64 and aarch64.
//!
//! Each function is also a compiler barrier and, for the software device that
//! reads queue memory from another thread or process, the matching
//! [`core::sync::atomic::fence`], so the same code is correct under the Rust
//! memory model and on a PCIe device.

use core::sync::atomic::{compiler_fence, fence, Ordering};

/// Makes writes to queue memory visible to the device before a following
/// doorbell write (`udma_to_device_barrier`). x86-64: stores are ordered, so a
/// compiler barrier; aarch64: `dmb oshst`.
#[inline(always)]
pub(crate) fn to_device() {
    fence(Ordering::Release);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it touches no memory and no registers.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
}

/// After seeing a device-written valid bit (a CQE's owner bit), makes the rest of
/// the device's writes visible to later reads (`udma_from_device_barrier`).
/// x86-64: loads are not reordered with older loads, so a compiler barrier, as
/// Linux's `dma_rmb()` and UCX do (rdma-core uses `lfence`); aarch64: `dmb oshld`.
#[inline(always)]
pub(crate) fn from_device() {
    fence(Ordering::Acquire);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it touches no memory and no registers.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
}

/// Flushes write-combining buffers after a write to the BlueFlame register and
/// orders it before later MMIO writes (`mmio_flush_writes`): `sfence` on x86-64,
/// `dsb st` on aarch64.
#[inline(always)]
pub fn flush_wc() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` orders stores; it touches no memory and no registers.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it touches no memory and no registers.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    compiler_fence(Ordering::SeqCst);
}

/// Orders earlier writes (the doorbell record) before a write to
/// write-combining memory (`mmio_wc_start`, which rdma-core defines as
/// [`flush_wc`]: WC stores may pass earlier WB stores on x86-64).
#[inline(always)]
pub(crate) fn wc_start() {
    fence(Ordering::Release);
    flush_wc();
}

/// Hints the CPU to bring the cache line at `p` in for reading.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `prfm` never faults, whatever the address.
    unsafe {
        core::arch::asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

/// Moves the cache line at `p` from this core's caches towards the last-level
/// cache (`cldemote`; a no-op on CPUs without it, and on other
/// architectures). The software device does this with what it writes as a
/// NIC's DMA does with DDIO: the reader then finds the line in the shared
/// cache instead of snooping it out of the writer's core.
#[cfg(feature = "sim")]
#[inline(always)]
pub(crate) fn demote(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cldemote` is a hint: it does not change memory, raises no fault
    // for any address, and executes as a NOP where not supported.
    unsafe {
        core::arch::asm!("cldemote [{0}]", in(reg) p, options(nostack, readonly, preserves_flags));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`demote`] for every cache line of `len` bytes at `p`.
#[cfg(feature = "sim")]
#[inline(always)]
pub(crate) fn demote_range(p: *const u8, len: usize) {
    let end = (p as usize).wrapping_add(len);
    let mut l = (p as usize) & !63;
    while l < end {
        demote(l as *const u8);
        l += 64;
    }
}
