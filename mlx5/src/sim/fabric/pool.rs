//! Carving: memory regions and queue memory share larger segments.
//!
//! A segment is a file and a mapping in every process that touches it; one
//! per MR and per QP did not scale to tens of thousands of endpoints (the
//! kernel allows a process 65530 mappings, and a peer maps what it writes
//! into). So this process's small objects on a fabric take [`Range`]s carved
//! out of [`CHUNK_LEN`]-byte segments; a request larger than [`CARVE_MAX`]
//! keeps a segment of its own. Ranges are [`ALIGN`]-aligned, zero-filled when
//! handed out, handed back when dropped, and a segment goes back to the
//! fabric once none of its ranges is in use.
//!
//! Nothing about a range is in the registry beyond what names any memory
//! there: a segment slot and an offset. A peer finds a carved MR or queue
//! exactly as it finds one with a segment of its own.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::{Fabric, FabricError, Segment};

/// Bytes of each segment ranges are carved from.
pub const CHUNK_LEN: usize = 32 << 20;
/// Requests larger than this (after rounding to [`ALIGN`]) get a segment of
/// their own.
pub const CARVE_MAX: usize = 1 << 20;
/// Alignment and granule of every range: a page, so rings and BlueFlame
/// pages stay page-aligned.
pub const ALIGN: usize = 4096;

/// One carving segment: its free extents (offset → length, coalesced, all
/// zero-filled) and the bytes handed out.
#[derive(Debug)]
struct Chunk {
    seg: Arc<Segment>,
    free: BTreeMap<usize, usize>,
    used: usize,
}

impl Chunk {
    /// A fresh chunk over `seg` with its first `len` bytes handed out.
    fn new(seg: Arc<Segment>, len: usize) -> Self {
        let mut free = BTreeMap::new();
        if seg.len() > len {
            free.insert(len, seg.len() - len);
        }
        Chunk {
            seg,
            free,
            used: len,
        }
    }

    /// Takes `len` bytes from the first free extent that holds them.
    fn take(&mut self, len: usize) -> Option<usize> {
        if self.seg.len() - self.used < len {
            return None;
        }
        let (off, flen) = self
            .free
            .iter()
            .map(|(&o, &l)| (o, l))
            .find(|&(_, l)| l >= len)?;
        self.free.remove(&off);
        if flen > len {
            self.free.insert(off + len, flen - len);
        }
        self.used += len;
        Some(off)
    }

    /// Returns `[off, off + len)` (already zeroed), merging it with the free
    /// extents on either side.
    fn give_back(&mut self, off: usize, len: usize) {
        let (mut start, mut total) = (off, len);
        if let Some((&p, &pl)) = self.free.range(..off).next_back() {
            if p + pl == off {
                self.free.remove(&p);
                start = p;
                total += pl;
            }
        }
        if let Some(nl) = self.free.remove(&(off + len)) {
            total += nl;
        }
        self.free.insert(start, total);
        self.used -= len;
    }
}

/// This process's carving segments on one fabric, by segment slot.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    chunks: Mutex<BTreeMap<u32, Chunk>>,
}

impl Pool {
    /// Segments the pool holds now.
    pub(crate) fn segments(&self) -> usize {
        self.chunks.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A zero-filled range of a segment of this process: carved from a shared
/// segment, or (when large) a segment of its own. Dropping it hands it back.
#[derive(Debug)]
pub struct Range {
    fab: Arc<Fabric>,
    seg: Arc<Segment>,
    off: usize,
    len: usize,
    carved: bool,
}

impl Range {
    /// Allocates `len` zeroed bytes (rounded up to [`ALIGN`]) at an
    /// [`ALIGN`]-aligned offset of a segment of this process.
    pub fn alloc(fab: &Arc<Fabric>, len: usize) -> Result<Range, FabricError> {
        let len = len.max(1).next_multiple_of(ALIGN);
        if len > CARVE_MAX {
            let seg = Arc::new(fab.alloc_segment(len)?);
            return Ok(Range {
                fab: fab.clone(),
                seg,
                off: 0,
                len,
                carved: false,
            });
        }
        let mut chunks = fab.pool().chunks.lock().unwrap_or_else(|e| e.into_inner());
        let found = chunks
            .values_mut()
            .find_map(|c| c.take(len).map(|off| (c.seg.clone(), off)));
        let (seg, off) = match found {
            Some(hit) => hit,
            None => {
                let seg = Arc::new(fab.alloc_segment(CHUNK_LEN)?);
                chunks.insert(seg.slot(), Chunk::new(seg.clone(), len));
                (seg, 0)
            }
        };
        Ok(Range {
            fab: fab.clone(),
            seg,
            off,
            len,
            carved: true,
        })
    }

    /// The segment's registry slot.
    pub fn slot(&self) -> u32 {
        self.seg.slot()
    }
    /// Offset of the range in its segment.
    pub fn off(&self) -> usize {
        self.off
    }
    /// Length in bytes (a multiple of [`ALIGN`]).
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the range shares its segment with others.
    #[cfg(test)]
    pub fn carved(&self) -> bool {
        self.carved
    }
    /// Start of the range in this process.
    pub fn base(&self) -> NonNull<u8> {
        self.at(0)
    }
    /// Pointer at `off` within the range.
    ///
    /// # Panics
    /// When `off` is outside the range.
    pub fn at(&self, off: usize) -> NonNull<u8> {
        assert!(
            off < self.len,
            "offset {off} outside a range of {} bytes",
            self.len
        );
        self.seg.at(self.off + off)
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        self.fab.forget_region_memory(self.base().as_ptr() as u64);
        if !self.carved {
            // A segment of its own: freed with the last reference.
            return;
        }
        zero(self.base(), self.len);
        let mut chunks = self
            .fab
            .pool()
            .chunks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let slot = self.seg.slot();
        if let Some(c) = chunks.get_mut(&slot) {
            c.give_back(self.off, self.len);
            if c.used == 0 {
                // The chunk's reference goes; ours goes after this returns,
                // and with it the segment.
                chunks.remove(&slot);
            }
        }
    }
}

/// Zero-fills `len` bytes at `p` (page-aligned, a multiple of [`ALIGN`]) by
/// punching them out of the shared file: their memory goes back to the
/// system, pages never touched are not touched now (a QP's queues are mostly
/// untouched), and later reads see zeros. Where the kernel will not punch,
/// by writing zeros.
fn zero(p: NonNull<u8>, len: usize) {
    // SAFETY: `[p, p + len)` is a page-aligned range of a shared mapping of a
    // tmpfs file that this process owns and nobody else may use until it is
    // handed out again; MADV_REMOVE only frees its pages.
    let rc = unsafe { libc::madvise(p.as_ptr().cast(), len, libc::MADV_REMOVE) };
    if rc == 0 {
        return;
    }
    // SAFETY: as above: the range is mapped, writable and ours.
    unsafe { std::ptr::write_bytes(p.as_ptr(), 0, len) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric(tag: &str) -> (String, Arc<Fabric>) {
        let name = format!("pool-{tag}-{}", std::process::id());
        let f = Fabric::open(&name).unwrap();
        (name, f)
    }

    /// Small ranges share one segment, are aligned and do not overlap; a
    /// large one gets a segment of its own.
    #[test]
    fn small_ranges_share_a_segment_and_large_ones_do_not() {
        let (name, f) = fabric("share");
        let sizes = [1, 4096, 5000, 65536, 12288, 100];
        let rs: Vec<Range> = sizes
            .iter()
            .map(|&l| Range::alloc(&f, l).unwrap())
            .collect();
        assert!(rs.iter().all(|r| r.slot() == rs[0].slot() && r.carved()));
        assert!(rs.iter().all(|r| r.off() % ALIGN == 0));
        let mut spans: Vec<_> = rs.iter().map(|r| (r.off(), r.off() + r.len())).collect();
        spans.sort();
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
        let big = Range::alloc(&f, CARVE_MAX + 1).unwrap();
        assert!(!big.carved() && big.off() == 0 && big.slot() != rs[0].slot());
        assert_eq!(f.carving_segments(), 1);
        drop((rs, big, f));
        Fabric::remove_if_unused(&name);
    }

    /// A range handed back is zero when handed out again, short or long.
    #[test]
    fn a_range_handed_out_again_is_zeroed() {
        let (name, f) = fabric("zero");
        let _keep = Range::alloc(&f, 4096).unwrap();
        for len in [4096, 20480, 131072] {
            let r = Range::alloc(&f, len).unwrap();
            let (slot, off) = (r.slot(), r.off());
            // SAFETY: the range is ours and `len` bytes long.
            unsafe { std::ptr::write_bytes(r.base().as_ptr(), 0xa5, len) };
            drop(r);
            let again = Range::alloc(&f, len).unwrap();
            assert_eq!((again.slot(), again.off()), (slot, off), "the same range");
            // SAFETY: as above.
            let bytes = unsafe { std::slice::from_raw_parts(again.base().as_ptr(), len) };
            assert!(bytes.iter().all(|&b| b == 0), "{len} bytes not zeroed");
        }
        drop((_keep, f));
        Fabric::remove_if_unused(&name);
    }

    /// A segment goes back to the fabric once its last range does, and
    /// freed neighbours merge so that a larger range fits where they were.
    #[test]
    fn an_empty_segment_is_freed_and_free_ranges_merge() {
        let (name, f) = fabric("free");
        let a = Range::alloc(&f, 8192).unwrap();
        let b = Range::alloc(&f, 8192).unwrap();
        let c = Range::alloc(&f, 8192).unwrap();
        let slot = a.slot();
        let live = |f: &Fabric| f.segment(slot).is_some();
        assert!(live(&f));
        let (a_off, _) = (a.off(), drop(a));
        drop(b);
        let ab = Range::alloc(&f, 16384).unwrap();
        assert_eq!((ab.slot(), ab.off()), (slot, a_off), "merged extent reused");
        drop((ab, c));
        assert_eq!(f.carving_segments(), 0);
        assert!(!live(&f), "the empty segment went back to the fabric");
        drop(f);
        Fabric::remove_if_unused(&name);
    }
}
