//! The CTS (clear-to-send) entry: what a receiver's `irecv` RDMA-WRITEs into
//! the sender's FIFO, one 256-byte entry per slot. All fields little-endian.
//!
//! ```text
//!   0..8    seq       u64  FIFO position + 1 (never 0; tells a fresh entry)
//!   8       slot      u8   position % depth
//!   9       nreqs     u8   1..=8 buffers
//!  10..12   reserved
//!  12..16   tag       u32  must equal the sender's tag
//!  16..208  buffers   8 x { addr u64, size u32, rkey0 u32, rkey1 u32, pad u32 }
//! 208..216  seq again u64  (written last: head == tail == seq means complete)
//! 216..256  reserved
//! ```
//!
//! The entry is peer input: [`CtsEntry::validate`] checks it against what the
//! sender expects before anything is posted.

use crate::error::CtsError;

/// Bytes of one entry (a FIFO slot).
pub const ENTRY_LEN: usize = 256;
/// Most buffers one entry (one grouped receive) holds.
pub const MAX_BUFFERS: usize = 8;
/// Bytes of one buffer descriptor.
const BUF_LEN: usize = 24;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const SEQ: Field = 0..8;
    pub const SLOT: usize = 8;
    pub const NREQS: usize = 9;
    pub const TAG: Field = 12..16;
    pub const BUFS: usize = 16;
    pub const SEQ_TAIL: Field = 208..216;
    // Inside a buffer descriptor.
    pub const ADDR: Field = 0..8;
    pub const SIZE: Field = 8..12;
    pub const RKEY0: Field = 12..16;
    pub const RKEY1: Field = 16..20;
    pub const PAD: Field = 20..24;
}

fn le64(b: &[u8], f: field::Field) -> u64 {
    u64::from_le_bytes(b[f].try_into().unwrap_or([0; 8]))
}
fn le32(b: &[u8], f: field::Field) -> u32 {
    u32::from_le_bytes(b[f].try_into().unwrap_or([0; 4]))
}
fn buf_field(i: usize, f: field::Field) -> field::Field {
    let base = field::BUFS + i * BUF_LEN;
    base + f.start..base + f.end
}

/// One receive buffer as the CTS entry describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CtsBuffer {
    /// Address in the receiver's process.
    pub addr: u64,
    /// Bytes the receiver posted.
    pub size: u32,
    /// Remote key on each rail (rail 1's is 0 on a one-rail communicator).
    pub rkeys: [u32; 2],
}

/// A view of a CTS entry over a buffer of at least [`ENTRY_LEN`] bytes.
#[derive(Debug, Clone, Copy)]
pub struct CtsEntry<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> CtsEntry<T> {
    /// Wraps a buffer of at least [`ENTRY_LEN`] bytes (`None` if shorter).
    pub fn new_checked(buffer: T) -> Option<Self> {
        (buffer.as_ref().len() >= ENTRY_LEN).then_some(Self { buffer })
    }
    /// FIFO position + 1, from the head of the entry.
    pub fn seq(&self) -> u64 {
        le64(self.buffer.as_ref(), field::SEQ)
    }
    /// The copy of `seq` at the tail of the entry.
    pub fn seq_tail(&self) -> u64 {
        le64(self.buffer.as_ref(), field::SEQ_TAIL)
    }
    /// The slot.
    pub fn slot(&self) -> u8 {
        self.buffer.as_ref()[field::SLOT]
    }
    /// Number of buffers (valid entries: 1..=8).
    pub fn nreqs(&self) -> u8 {
        self.buffer.as_ref()[field::NREQS]
    }
    /// The receiver's tag.
    pub fn tag(&self) -> u32 {
        le32(self.buffer.as_ref(), field::TAG)
    }
    /// Buffer descriptor `i` (`i < MAX_BUFFERS`; whatever bytes are there).
    pub fn buffer(&self, i: usize) -> CtsBuffer {
        let i = i.min(MAX_BUFFERS - 1);
        let b = self.buffer.as_ref();
        CtsBuffer {
            addr: le64(b, buf_field(i, field::ADDR)),
            size: le32(b, buf_field(i, field::SIZE)),
            rkeys: [
                le32(b, buf_field(i, field::RKEY0)),
                le32(b, buf_field(i, field::RKEY1)),
            ],
        }
    }

    /// Checks a complete entry (head and tail `seq` already matched `seq`)
    /// against what the sender expects: `slot`, a tag of `tag`, `nreqs` in
    /// 1..=8, and buffers whose ranges do not wrap the address space.
    pub fn validate(&self, seq: u64, slot: u8, tag: u32) -> Result<(), CtsError> {
        if self.seq() != seq || self.seq_tail() != seq {
            return Err(CtsError::Sequence {
                expected: seq,
                head: self.seq(),
                tail: self.seq_tail(),
            });
        }
        if self.slot() != slot {
            return Err(CtsError::Slot {
                expected: slot,
                got: self.slot(),
            });
        }
        let n = self.nreqs();
        if n == 0 || usize::from(n) > MAX_BUFFERS {
            return Err(CtsError::Nreqs(n));
        }
        if self.tag() != tag {
            return Err(CtsError::Tag {
                expected: tag,
                got: self.tag(),
            });
        }
        for i in 0..usize::from(n) {
            let b = self.buffer(i);
            if b.addr.checked_add(u64::from(b.size)).is_none() {
                return Err(CtsError::Range { index: i });
            }
        }
        Ok(())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtsEntry<T> {
    /// Writes a whole entry: head and tail `seq`, `slot`, `tag` and the
    /// buffers (at most [`MAX_BUFFERS`]; `nreqs` is their count). Unused
    /// descriptors and reserved bytes are zeroed.
    pub fn set(&mut self, seq: u64, slot: u8, tag: u32, bufs: &[CtsBuffer]) {
        let b = self.buffer.as_mut();
        b[..ENTRY_LEN].fill(0);
        let n = bufs.len().min(MAX_BUFFERS);
        b[field::SEQ].copy_from_slice(&seq.to_le_bytes());
        b[field::SLOT] = slot;
        b[field::NREQS] = n as u8;
        b[field::TAG].copy_from_slice(&tag.to_le_bytes());
        for (i, d) in bufs.iter().take(n).enumerate() {
            b[buf_field(i, field::ADDR)].copy_from_slice(&d.addr.to_le_bytes());
            b[buf_field(i, field::SIZE)].copy_from_slice(&d.size.to_le_bytes());
            b[buf_field(i, field::RKEY0)].copy_from_slice(&d.rkeys[0].to_le_bytes());
            b[buf_field(i, field::RKEY1)].copy_from_slice(&d.rkeys[1].to_le_bytes());
            b[buf_field(i, field::PAD)].fill(0);
        }
        b[field::SEQ_TAIL].copy_from_slice(&seq.to_le_bytes());
    }

    /// Overwrites `nreqs` alone (for building malformed entries in tests and
    /// fuzzers).
    pub fn set_nreqs(&mut self, n: u8) {
        self.buffer.as_mut()[field::NREQS] = n;
    }

    /// Overwrites `slot` alone.
    pub fn set_slot(&mut self, slot: u8) {
        self.buffer.as_mut()[field::SLOT] = slot;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bufs(n: usize) -> Vec<CtsBuffer> {
        (0..n)
            .map(|i| CtsBuffer {
                addr: 0x1000_0000 + i as u64 * 0x1_0000,
                size: 1000 + i as u32,
                rkeys: [0x100 + i as u32, 0x200 + i as u32],
            })
            .collect()
    }

    #[test]
    fn round_trip() {
        let mut raw = [0xeeu8; ENTRY_LEN];
        let b = bufs(8);
        CtsEntry::new_checked(&mut raw[..])
            .unwrap()
            .set(77, 12, 0xabcd, &b);
        let e = CtsEntry::new_checked(&raw[..]).unwrap();
        assert_eq!(
            (e.seq(), e.seq_tail(), e.slot(), e.nreqs(), e.tag()),
            (77, 77, 12, 8, 0xabcd)
        );
        for (i, d) in b.iter().enumerate() {
            assert_eq!(e.buffer(i), *d);
        }
        assert_eq!(e.validate(77, 12, 0xabcd), Ok(()));
        assert!(raw[216..].iter().all(|&x| x == 0), "reserved bytes zeroed");
        assert_eq!(&raw[..8], &77u64.to_le_bytes(), "little-endian seq first");
        assert!(CtsEntry::new_checked(&raw[..ENTRY_LEN - 1]).is_none());
        // Fewer buffers: the unused descriptors are zero.
        CtsEntry::new_checked(&mut raw[..])
            .unwrap()
            .set(78, 13, 1, &b[..2]);
        let e = CtsEntry::new_checked(&raw[..]).unwrap();
        assert_eq!(e.nreqs(), 2);
        assert_eq!(e.buffer(2), CtsBuffer::default());
        assert_eq!(e.buffer(1), b[1]);
    }

    #[test]
    fn malformed_entries_are_rejected() {
        let mut raw = [0u8; ENTRY_LEN];
        let ok = |raw: &mut [u8; ENTRY_LEN]| {
            CtsEntry::new_checked(&mut raw[..])
                .unwrap()
                .set(5, 4, 9, &bufs(3));
        };
        let check =
            |raw: &[u8; ENTRY_LEN]| CtsEntry::new_checked(&raw[..]).unwrap().validate(5, 4, 9);

        ok(&mut raw);
        assert_eq!(check(&raw), Ok(()));

        CtsEntry::new_checked(&mut raw[..]).unwrap().set_nreqs(0);
        assert_eq!(check(&raw), Err(CtsError::Nreqs(0)));
        CtsEntry::new_checked(&mut raw[..]).unwrap().set_nreqs(9);
        assert_eq!(check(&raw), Err(CtsError::Nreqs(9)));
        CtsEntry::new_checked(&mut raw[..]).unwrap().set_nreqs(255);
        assert_eq!(check(&raw), Err(CtsError::Nreqs(255)));

        ok(&mut raw);
        CtsEntry::new_checked(&mut raw[..]).unwrap().set_slot(5);
        assert_eq!(
            check(&raw),
            Err(CtsError::Slot {
                expected: 4,
                got: 5
            })
        );

        ok(&mut raw);
        assert_eq!(
            CtsEntry::new_checked(&raw[..]).unwrap().validate(5, 4, 10),
            Err(CtsError::Tag {
                expected: 10,
                got: 9
            })
        );

        ok(&mut raw);
        raw[208] ^= 1; // a torn or forged tail
        assert!(matches!(check(&raw), Err(CtsError::Sequence { .. })));

        ok(&mut raw);
        raw[0] = 6;
        assert!(matches!(check(&raw), Err(CtsError::Sequence { .. })));

        ok(&mut raw);
        let mut e = CtsEntry::new_checked(&mut raw[..]).unwrap();
        let mut b = bufs(3);
        b[2].addr = u64::MAX - 10;
        e.set(5, 4, 9, &b);
        assert_eq!(check(&raw), Err(CtsError::Range { index: 2 }));

        // Random bytes never pass for the expected entry.
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..1000 {
            for c in raw.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes());
            }
            assert!(check(&raw).is_err());
        }
    }
}
