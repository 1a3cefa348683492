//! Memory regions: the caller's memory registered, or memory allocated for
//! them (in huge pages when asked).

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use super::nonnull;
use super::pd::{HwPd, PdInner};
use crate::hw::ffi::*;
use crate::hw::loader::{errno, HwError};

/// Where an MR's memory came from.
enum Backing {
    /// The caller's memory.
    Borrowed,
    /// `mmap`ed by us, `len` bytes from `ptr` (in 2 MiB huge pages when
    /// `huge`), unmapped on drop.
    Mapped {
        ptr: NonNull<u8>,
        len: usize,
        huge: bool,
    },
}

struct MrInner {
    pd: Arc<PdInner>,
    mr: NonNull<ibv_mr>,
    backing: Backing,
}
// SAFETY: as for PdInner.
unsafe impl Send for MrInner {}
// SAFETY: as above.
unsafe impl Sync for MrInner {}
impl Drop for MrInner {
    fn drop(&mut self) {
        // SAFETY: registered by reg_mr.
        unsafe { (self.pd.c.v.dereg_mr)(self.mr.as_ptr()) };
        if let Backing::Mapped { ptr, len, .. } = self.backing {
            // SAFETY: mapped by alloc_mr with this length (for a huge
            // mapping, a multiple of its page size, as munmap wants).
            unsafe { libc::munmap(ptr.as_ptr() as *mut c_void, len) };
        }
    }
}

/// A memory region on hardware.
#[derive(Clone)]
pub struct HwMr {
    m: Arc<MrInner>,
}

impl HwMr {
    fn raw(&self) -> &ibv_mr {
        // SAFETY: a live MR.
        unsafe { self.m.mr.as_ref() }
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }
    /// Address.
    pub fn addr(&self) -> u64 {
        self.raw().addr as u64
    }
    /// Length.
    pub fn len(&self) -> usize {
        self.raw().length
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the region lies in 2 MiB huge pages: allocated by
    /// [`HwPd::alloc_mr`] with `huge` while the reservation had pages to
    /// give. False for registered memory of the caller's, whatever backs it.
    pub fn is_huge(&self) -> bool {
        matches!(self.m.backing, Backing::Mapped { huge: true, .. })
    }
}

/// Huge page size [`HwPd::alloc_mr`] asks for.
const HUGE_PAGE: usize = 2 << 20;

impl HwPd {
    /// Registers `[addr, addr+len)`.
    ///
    /// # Safety
    /// The memory must stay valid until the MR is dropped.
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: u32) -> Result<HwMr, HwError> {
        let p = &self.p;
        // SAFETY: caller's contract for the memory; a live PD.
        let mr = nonnull("ibv_reg_mr", unsafe {
            (p.c.v.reg_mr)(p.pd.as_ptr(), addr as *mut c_void, len, access as c_int)
        })?;
        Ok(HwMr {
            m: Arc::new(MrInner {
                pd: p.clone(),
                mr,
                backing: Backing::Borrowed,
            }),
        })
    }

    /// Allocates `len` zeroed bytes and registers them. With `huge`, in 2 MiB
    /// huge pages (`MAP_HUGETLB | MAP_HUGE_2MB`, the mapping rounded up to a
    /// multiple of 2 MiB) from the pool `vm.nr_hugepages` reserves; when the
    /// pool cannot supply them, in normal pages, as without `huge`.
    /// [`HwMr::is_huge`] tells which.
    pub fn alloc_mr(&self, len: usize, access: u32, huge: bool) -> Result<HwMr, HwError> {
        let map = |flags: c_int, len: usize| {
            // SAFETY: an anonymous private mapping; the kernel picks the address.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
                    -1,
                    0,
                )
            };
            (p != libc::MAP_FAILED).then_some((p as *mut u8, len))
        };
        // A hugetlb mapping reserves its pages in the pool when it is made
        // (ENOMEM when the pool has too few free), so the fallback happens
        // here, never as a SIGBUS at first touch.
        let huge_map = if huge {
            map(
                libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
                len.max(1).next_multiple_of(HUGE_PAGE),
            )
        } else {
            None
        };
        let got_huge = huge_map.is_some();
        let (p, mlen) = huge_map
            .or_else(|| map(0, len.max(1).next_multiple_of(4096)))
            .ok_or(HwError::Verb {
                verb: "mmap",
                errno: errno(),
            })?;
        // SAFETY: freshly mapped memory, unmapped only after dereg (MrInner::drop).
        let mr = unsafe { self.reg_mr(p, len, access) };
        match mr {
            Ok(mut m) => {
                let inner = Arc::get_mut(&mut m.m).expect("fresh MR is unshared");
                inner.backing = Backing::Mapped {
                    ptr: NonNull::new(p).expect("mmap returned non-null"),
                    len: mlen,
                    huge: got_huge,
                };
                Ok(m)
            }
            Err(e) => {
                // SAFETY: mapped above, not registered.
                unsafe { libc::munmap(p as *mut c_void, mlen) };
                Err(e)
            }
        }
    }
}

debug_handle!(HwMr { m.mr });
