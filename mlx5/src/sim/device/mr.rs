//! Memory regions: device memory any process of the fabric reaches, or
//! this process's memory registered.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::pd::SimPd;
use crate::sim::fabric::pool::Range;
use crate::sim::fabric::{Fabric, FabricError};
use crate::sim::registry::{self, LIVE, NO_SEG};
use crate::types::error::DeviceError;

impl SimPd {
    fn register(
        &self,
        mem: Option<Arc<Range>>,
        va: u64,
        off: u64,
        len: u64,
        access: u32,
    ) -> Result<SimMr, DeviceError> {
        let fab = &self.ctx.d.fab;
        let r = fab.reg();
        let slot = r
            .claim_mr()
            .ok_or_else(|| DeviceError::Fabric(FabricError::Full(fab.name().into(), "MR")))?;
        let key = ((slot as u32) << 8) | (r.next_gen() % 255 + 1);
        let e = &r.mrs[slot];
        e.key.store(key, Ordering::Relaxed);
        e.owner.store(fab.token(), Ordering::Relaxed);
        e.dev.store(self.ctx.d.dev, Ordering::Relaxed);
        e.pd.store(self.pdn, Ordering::Relaxed);
        e.access.store(access, Ordering::Relaxed);
        e.seg
            .store(mem.as_ref().map_or(NO_SEG, |m| m.slot()), Ordering::Relaxed);
        e.off.store(off, Ordering::Relaxed);
        e.va.store(va, Ordering::Relaxed);
        e.len.store(len, Ordering::Relaxed);
        e.state.store(LIVE, Ordering::Release);
        Ok(SimMr {
            inner: Arc::new(MrInner {
                fab: fab.clone(),
                slot,
                key,
                addr: va,
                len: len as usize,
                _mem: mem,
            }),
        })
    }

    /// Allocates `len` zeroed bytes of device memory that peers in any process of
    /// the fabric can reach, registered with `access`
    /// ([`access`](crate::device::access) flags).
    pub fn alloc_mr(&self, len: usize, access: u32) -> Result<SimMr, DeviceError> {
        let mem = self.ctx.d.fab.alloc_region_memory(len.max(1))?;
        let va = mem.base().as_ptr() as u64;
        let off = mem.off() as u64;
        self.register(Some(mem), va, off, len as u64, access)
    }

    /// Registers memory of this process. Memory inside a region this process
    /// allocated with [`alloc_mr`](Self::alloc_mr) — on any device of the
    /// fabric, e.g. the same buffer registered on both rails — is reachable
    /// from every process, and the new region keeps it alive. Any other
    /// memory is reachable from peers in the same process only; a peer in
    /// another process gets a remote access error, since the software device
    /// can only share memory it allocated.
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay valid until the MR is dropped, and the
    /// NIC may write it at any time its access flags allow.
    pub unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: u32,
    ) -> Result<SimMr, DeviceError> {
        let (va, len) = (addr as u64, len as u64);
        match self.ctx.d.fab.region_memory_containing(va, len) {
            Some(mem) => {
                // Offsets in the registry are within the segment the
                // region memory was carved from.
                let off = mem.off() as u64 + (va - mem.base().as_ptr() as u64);
                self.register(Some(mem), va, off, len, access)
            }
            None => self.register(None, va, 0, len, access),
        }
    }
}

struct MrInner {
    fab: Arc<Fabric>,
    slot: usize,
    key: u32,
    addr: u64,
    len: usize,
    _mem: Option<Arc<Range>>,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        self.fab.reg().mrs[self.slot]
            .state
            .store(registry::FREE, Ordering::Release);
    }
}

/// A memory region.
#[derive(Clone)]
pub struct SimMr {
    inner: Arc<MrInner>,
}

impl std::fmt::Debug for SimMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("key", &format_args!("{:#x}", self.inner.key))
            .field("addr", &format_args!("{:#x}", self.inner.addr))
            .field("len", &self.inner.len)
            .finish()
    }
}

impl SimMr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.inner.key
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.key
    }
    /// Address of the region in this process (what SGEs and remote addresses use).
    pub fn addr(&self) -> u64 {
        self.inner.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
    /// Base pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.addr as *mut u8
    }
    /// Copies `data` into the region at `off`.
    ///
    /// # Panics
    /// When the range is outside the region.
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.inner.len, "write outside the MR");
        // SAFETY: inside the region; the NIC's concurrent writes are the
        // caller's protocol, as with any DMA buffer.
        unsafe { std::ptr::copy(data.as_ptr(), self.as_ptr().add(off), data.len()) };
    }
    /// Copies bytes at `off` out of the region.
    ///
    /// # Panics
    /// When the range is outside the region.
    pub fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.inner.len, "read outside the MR");
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
