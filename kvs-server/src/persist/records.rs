//! The records of a worker's log and snapshot that are not changes to its
//! store ([`Change`](crate::store::change::Change)s are): the snapshot's
//! first and last records, and the mark a snapshot leaves in the log
//! where it copied a run of slots. Their kinds lie above every change's.
//!
//! Payloads, integers little-endian:
//!
//! ```text
//! COPIED   gen u64 | first u32 | end u32   (log: slots first..end copied by snapshot gen here)
//! HEAD     gen u64 | slots u32             (snapshot: its generation, its map's slot count)
//! END      gen u64 | records u64           (snapshot: the changes between HEAD and END)
//! ```

use std::ops::Range;

/// The kinds; a change's kind is below 64.
pub(super) const COPIED: u8 = 64;
pub(super) const HEAD: u8 = 65;
pub(super) const END: u8 = 66;

mod field {
    use std::ops::Range;

    pub const GEN: Range<usize> = 0..8;
    pub const SECOND: Range<usize> = 8..12;
    pub const THIRD: Range<usize> = 12..16;
    pub const COUNT: Range<usize> = 8..16;
}

/// A record of these kinds whose payload is not its kind's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a record of kind {kind} with a payload of {len} bytes")]
pub(super) struct BadRecord {
    kind: u8,
    len: usize,
}

fn u64_at(p: &[u8], r: Range<usize>) -> u64 {
    u64::from_le_bytes(p[r].try_into().expect("8 bytes"))
}

fn u32_at(p: &[u8], r: Range<usize>) -> u32 {
    u32::from_le_bytes(p[r].try_into().expect("4 bytes"))
}

fn sized(kind: u8, p: &[u8], len: usize) -> Result<&[u8], BadRecord> {
    if p.len() == len {
        Ok(p)
    } else {
        Err(BadRecord { kind, len: p.len() })
    }
}

/// In the log: snapshot `gen` copied slots `slots` at this point. For
/// those slots, a replay from that snapshot skips the changes before it
/// (the snapshot holds them) and applies those after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Copied {
    pub gen: u64,
    pub slots: Range<u32>,
}

impl Copied {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.gen.to_le_bytes());
        out.extend_from_slice(&self.slots.start.to_le_bytes());
        out.extend_from_slice(&self.slots.end.to_le_bytes());
    }

    pub fn decode(p: &[u8]) -> Result<Copied, BadRecord> {
        let p = sized(COPIED, p, field::THIRD.end)?;
        Ok(Copied {
            gen: u64_at(p, field::GEN),
            slots: u32_at(p, field::SECOND)..u32_at(p, field::THIRD),
        })
    }
}

/// A snapshot's first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    /// Its generation: the log it pairs with is the one of the same
    /// generation.
    pub gen: u64,
    /// The slot count of the map its store had.
    pub slots: u32,
}

impl Head {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.gen.to_le_bytes());
        out.extend_from_slice(&self.slots.to_le_bytes());
    }

    pub fn decode(p: &[u8]) -> Result<Head, BadRecord> {
        let p = sized(HEAD, p, field::SECOND.end)?;
        Ok(Head {
            gen: u64_at(p, field::GEN),
            slots: u32_at(p, field::SECOND),
        })
    }
}

/// A snapshot's last record: a snapshot without it was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct End {
    /// The generation, as its head says.
    pub gen: u64,
    /// The changes between head and end.
    pub records: u64,
}

impl End {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.gen.to_le_bytes());
        out.extend_from_slice(&self.records.to_le_bytes());
    }

    pub fn decode(p: &[u8]) -> Result<End, BadRecord> {
        let p = sized(END, p, field::COUNT.end)?;
        Ok(End {
            gen: u64_at(p, field::GEN),
            records: u64_at(p, field::COUNT),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_decodes_to_itself_and_refuses_a_wrong_size() {
        let c = Copied {
            gen: 7,
            slots: 3..9,
        };
        let mut b = Vec::new();
        c.encode(&mut b);
        assert_eq!(Copied::decode(&b), Ok(c));
        assert!(Copied::decode(&b[1..]).is_err());
        let h = Head { gen: 2, slots: 512 };
        b.clear();
        h.encode(&mut b);
        assert_eq!(Head::decode(&b), Ok(h));
        b.push(0);
        assert!(Head::decode(&b).is_err());
        let e = End { gen: 2, records: 9 };
        b.clear();
        e.encode(&mut b);
        assert_eq!(End::decode(&b), Ok(e));
        assert!(End::decode(&[]).is_err());
    }
}
