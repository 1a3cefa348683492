//! Memory the rails can reach: [`Span`]s (what `isend` and `irecv` take) and
//! [`Buffer`]s (memory a communicator allocates and registers on every rail).

use mlx5::device::{access, Mr, Pd};

use crate::error::Error;

/// Access rights of every registration: local writes (receives land there)
/// and remote writes (the peer's data and CTS entries).
pub(crate) const ACCESS: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE;

/// A byte range registered on every rail of a communicator: its address and
/// each rail's keys. Made by [`Buffer::span`] or
/// [`Region::span`](crate::Region::span).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) lkeys: [u32; 2],
    pub(crate) rkeys: [u32; 2],
}

impl Span {
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True for an empty span.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Checks `off..off+len` inside `0..size`.
pub(crate) fn range(off: u64, len: u64, size: u64) -> Result<(), Error> {
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::Invalid("range outside the registered memory")),
    }
}

/// Memory allocated by a communicator's rail-0 device and registered on every
/// rail (on the software device, rail 0's registration is reachable from
/// other processes of the fabric).
pub struct Buffer {
    // Dropped first: the registration on the other rail of memory `owner`
    // holds.
    other: Option<Mr>,
    owner: Mr,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("addr", &self.owner.addr())
            .field("len", &self.owner.len())
            .finish()
    }
}

impl Buffer {
    /// `len` zeroed bytes on `pds[0]`'s device, registered on every PD.
    pub(crate) fn alloc(pds: &[&Pd], len: usize) -> Result<Buffer, Error> {
        let owner = pds[0].alloc_mr(len.max(1), ACCESS)?;
        let other = match pds.get(1) {
            None => None,
            // SAFETY: the memory belongs to `owner`, which this Buffer holds
            // and drops after `other` (field order), so it stays valid for
            // the registration's whole life.
            Some(pd) => Some(unsafe { pd.reg_mr(owner.as_ptr(), owner.len(), ACCESS) }?),
        };
        Ok(Buffer { other, owner })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.owner.len()
    }
    /// True for an empty buffer.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.owner.addr()
    }
    /// Copies `data` in at `off`.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<(), Error> {
        range(off as u64, data.len() as u64, self.len() as u64)?;
        self.owner.write(off, data);
        Ok(())
    }
    /// Lends the buffer's bytes to `f`, to build a message in place where
    /// it is sent from. As with [`write`](Self::write), the buffer must not
    /// be part of a send or receive in flight meanwhile: the NIC reads or
    /// writes it then.
    pub fn fill<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        // SAFETY: the region is `len` bytes that `owner` keeps allocated for
        // as long as `self` lives, and `&mut self` keeps any other slice of
        // it from existing while `f` holds this one. Concurrent NIC access
        // is the caller's protocol, as for `write`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.owner.as_ptr(), self.len()) };
        f(bytes)
    }
    /// Copies bytes at `off` out into `out`.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<(), Error> {
        range(off as u64, out.len() as u64, self.len() as u64)?;
        self.owner.read(off, out);
        Ok(())
    }
    /// `len` bytes at `off`, copied out.
    pub fn to_vec(&self, off: usize, len: usize) -> Result<Vec<u8>, Error> {
        range(off as u64, len as u64, self.len() as u64)?;
        let mut v = Vec::with_capacity(len);
        // SAFETY: `off..off + len` is inside the registration (checked
        // above), and `v` has room for `len` bytes, all written by the copy
        // before `set_len` makes them part of it. Concurrent NIC writes are
        // the caller's protocol, as for `read`. Zeroing the vector first, to
        // overwrite it at once, cost a third of a migration target's copy.
        unsafe {
            std::ptr::copy_nonoverlapping(self.owner.as_ptr().add(off), v.as_mut_ptr(), len);
            v.set_len(len);
        }
        Ok(v)
    }
    /// The bytes `off..off + len` as a span for `isend` / `irecv`.
    pub fn span(&self, off: u64, len: u64) -> Result<Span, Error> {
        range(off, len, self.len() as u64)?;
        let o = self.other.as_ref();
        Ok(Span {
            addr: self.owner.addr() + off,
            len,
            lkeys: [self.owner.lkey(), o.map_or(0, Mr::lkey)],
            rkeys: [self.owner.rkey(), o.map_or(0, Mr::rkey)],
        })
    }
    /// The whole buffer as a span.
    pub fn all(&self) -> Span {
        let o = self.other.as_ref();
        Span {
            addr: self.owner.addr(),
            len: self.len() as u64,
            lkeys: [self.owner.lkey(), o.map_or(0, Mr::lkey)],
            rkeys: [self.owner.rkey(), o.map_or(0, Mr::rkey)],
        }
    }
}
