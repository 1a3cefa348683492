//! The registration cache: user memory registered on every rail's PD, with
//! registrations shared by every range they cover.
//!
//! A registration covers whole pages around the range asked for; a later
//! request for a range inside a live registration takes a reference on it
//! instead of registering again. The last [`deregister`](RegCache::deregister)
//! drops the registration: one is never kept past its last user, because the
//! memory behind an address may be freed and reused by then.

use mlx5::device::{Mr, Pd};

use crate::buffer::{range, Span, ACCESS};
use crate::error::Error;

/// Registrations are page-aligned.
const PAGE: u64 = 4096;

/// A range of user memory registered through [`Comm::register`](crate::Comm::register).
/// Give it back with [`Comm::deregister`](crate::Comm::deregister).
#[derive(Debug, PartialEq, Eq)]
pub struct Region {
    id: u64,
    addr: u64,
    len: u64,
    lkeys: [u32; 2],
    rkeys: [u32; 2],
}

impl Region {
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes `off..off + len` of the region as a span.
    pub fn span(&self, off: u64, len: u64) -> Result<Span, Error> {
        range(off, len, self.len)?;
        Ok(Span {
            addr: self.addr + off,
            len,
            lkeys: self.lkeys,
            rkeys: self.rkeys,
        })
    }
    /// The whole region as a span.
    pub fn all(&self) -> Span {
        Span {
            addr: self.addr,
            len: self.len,
            lkeys: self.lkeys,
            rkeys: self.rkeys,
        }
    }
}

struct Entry {
    id: u64,
    start: u64,
    end: u64,
    mrs: Vec<Mr>,
    refs: u32,
}

/// What the cache did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegStats {
    /// Registrations made (one per rail each).
    pub registered: u64,
    /// Requests served by a live registration.
    pub hits: u64,
    /// Registrations live now.
    pub live: usize,
}

/// Live registrations of one communicator.
#[derive(Default)]
pub(crate) struct RegCache {
    entries: Vec<Entry>,
    next_id: u64,
    stats: RegStats,
}

impl std::fmt::Debug for RegCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegCache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl RegCache {
    /// A region for `addr..addr + len`, from a live registration covering it
    /// or a new one on every PD of `pds`.
    ///
    /// # Safety
    /// The pages around the range must stay valid, and the NIC may write the
    /// range at the peer's request, until the region is deregistered or the
    /// communicator dropped.
    pub unsafe fn register(&mut self, pds: &[&Pd], addr: u64, len: u64) -> Result<Region, Error> {
        if len == 0 {
            return Err(Error::Invalid("empty registration"));
        }
        let end = addr.checked_add(len).ok_or(Error::Invalid("range wraps"))?;
        let pos = self
            .entries
            .iter()
            .position(|e| e.start <= addr && end <= e.end);
        let i = match pos {
            Some(i) => {
                self.entries[i].refs += 1;
                self.stats.hits += 1;
                i
            }
            None => {
                let start = addr / PAGE * PAGE;
                let stop = end.div_ceil(PAGE) * PAGE;
                let mut mrs = Vec::with_capacity(pds.len());
                for pd in pds {
                    // SAFETY: the caller's guarantee covers the pages around
                    // the range until deregistration.
                    mrs.push(unsafe {
                        pd.reg_mr(start as *mut u8, (stop - start) as usize, ACCESS)
                    }?);
                }
                self.stats.registered += 1;
                self.next_id += 1;
                self.entries.push(Entry {
                    id: self.next_id,
                    start,
                    end: stop,
                    mrs,
                    refs: 1,
                });
                self.entries.len() - 1
            }
        };
        let e = &self.entries[i];
        let key = |i: usize, f: fn(&Mr) -> u32| e.mrs.get(i).map_or(0, f);
        Ok(Region {
            id: e.id,
            addr,
            len,
            lkeys: [key(0, Mr::lkey), key(1, Mr::lkey)],
            rkeys: [key(0, Mr::rkey), key(1, Mr::rkey)],
        })
    }

    /// Drops a reference; the last one drops the registration.
    pub fn deregister(&mut self, r: Region) -> Result<(), Error> {
        let i = self
            .entries
            .iter()
            .position(|e| e.id == r.id)
            .ok_or(Error::Invalid("region of another communicator"))?;
        self.entries[i].refs -= 1;
        if self.entries[i].refs == 0 {
            self.entries.swap_remove(i);
        }
        Ok(())
    }

    pub fn stats(&self) -> RegStats {
        RegStats {
            live: self.entries.len(),
            ..self.stats
        }
    }
}
