//! Memory regions ([`Mr`]): keys, address, and copies in and out.

use super::seam::backend;
use crate::hw::HwMr;
#[cfg(feature = "sim")]
use crate::sim::device::SimMr;

/// A memory region.
#[derive(Clone)]
pub enum Mr {
    /// Software device.
    #[cfg(feature = "sim")]
    Sim(SimMr),
    /// NIC.
    Hw(HwMr),
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("lkey", &self.lkey())
            .field("addr", &self.addr())
            .field("len", &self.len())
            .field("huge", &self.is_huge())
            .finish()
    }
}

impl Mr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        backend!(self, m => m.lkey())
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        backend!(self, m => m.rkey())
    }
    /// Address in this process (what SGEs and remote addresses use).
    pub fn addr(&self) -> u64 {
        backend!(self, m => m.addr())
    }
    /// Length.
    pub fn len(&self) -> usize {
        backend!(self, m => m.len())
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the region lies in 2 MiB huge pages: one
    /// [`Pd::alloc_mr_huge`](super::Pd::alloc_mr_huge) allocated while the pool had pages to give.
    /// Always false on the software device, and for memory registered with
    /// [`Pd::reg_mr`](super::Pd::reg_mr).
    pub fn is_huge(&self) -> bool {
        backend!(self, Sim(_) => false, Hw(m) => m.is_huge())
    }
    /// Base pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr() as *mut u8
    }
    /// Copies `data` into the region at `off`.
    ///
    /// # Panics
    /// When the range is outside the region.
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len(), "write outside the MR");
        // SAFETY: inside the region; concurrent NIC writes are the caller's
        // protocol, as with any DMA buffer.
        unsafe { std::ptr::copy(data.as_ptr(), self.as_ptr().add(off), data.len()) };
    }
    /// Copies bytes at `off` out of the region.
    ///
    /// # Panics
    /// When the range is outside the region.
    pub fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len(), "read outside the MR");
        // SAFETY: as for write.
        unsafe { std::ptr::copy(self.as_ptr().add(off), out.as_mut_ptr(), out.len()) };
    }
    /// `len` bytes at `off`, copied out.
    pub fn to_vec(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(off, &mut v);
        v
    }
}
