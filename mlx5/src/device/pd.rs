//! Protection domains ([`Pd`]) and the memory regions allocated or
//! registered on them.

use super::mr::Mr;
#[cfg(feature = "sim")]
use super::seam::mixed;
use super::seam::{backend, backend_parts};
use crate::hw::HwPd;
#[cfg(feature = "sim")]
use crate::sim::device::SimPd;
use crate::types::error::DeviceError;

// Without the `sim` feature the `Sim*` type is never resolved: the
// function that names it is configured out first.
backend_parts!(Pd, SimPd, HwPd);

/// A protection domain.
#[derive(Clone, Debug)]
pub enum Pd {
    /// Software device.
    #[cfg(feature = "sim")]
    Sim(SimPd),
    /// NIC.
    Hw(HwPd),
}

impl Pd {
    /// Allocates `len` zeroed bytes registered with `access` (on the software
    /// device: shared memory any process of the fabric can reach).
    pub fn alloc_mr(&self, len: usize, access: u32) -> Result<Mr, DeviceError> {
        Ok(backend!(self,
            Sim(p) => Mr::Sim(p.alloc_mr(len, access)?),
            Hw(p) => Mr::Hw(p.alloc_mr(len, access, false)?),
        ))
    }

    /// [`alloc_mr`](Self::alloc_mr) in 2 MiB huge pages where the device can
    /// have them, for memory the NIC reaches often (rings): fewer pages mean
    /// fewer translation entries for the NIC (MTT/IOTLB) and fewer TLB misses
    /// for the CPU.
    ///
    /// On a NIC (the mlx5 direct path and the verbs path alike, soft-RoCE
    /// included) the memory is an anonymous `MAP_HUGETLB | MAP_HUGE_2MB`
    /// mapping, `len` rounded up to a multiple of 2 MiB (the region itself is
    /// `len` long), from the 2 MiB pool the operator reserves
    /// (`vm.nr_hugepages`, or
    /// `/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages` where the
    /// default huge page size is another). When the pool has too few free
    /// pages the memory is normal pages, as `alloc_mr` gives: not an error.
    /// [`Mr::is_huge`] tells which it got.
    ///
    /// On the software device, whose memory is a shared-memory file in
    /// `/dev/shm` that every process of the fabric maps, huge pages do not
    /// apply: this allocates as `alloc_mr` does and the region reports
    /// `is_huge() == false`.
    pub fn alloc_mr_huge(&self, len: usize, access: u32) -> Result<Mr, DeviceError> {
        Ok(backend!(self,
            Sim(p) => Mr::Sim(p.alloc_mr(len, access)?),
            Hw(p) => Mr::Hw(p.alloc_mr(len, access, true)?),
        ))
    }

    /// Registers memory of this process.
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay valid until the MR is dropped, and the NIC
    /// may write it whenever its access flags allow.
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: u32) -> Result<Mr, DeviceError> {
        Ok(backend!(self,
            // SAFETY: the caller's guarantee, forwarded unchanged.
            Sim(p) => Mr::Sim(unsafe { p.reg_mr(addr, len, access) }?),
            // SAFETY: as above.
            Hw(p) => Mr::Hw(unsafe { p.reg_mr(addr, len, access) }?),
        ))
    }
}
