//! Control-group traffic between members: a batch of Raft messages from one
//! member, carried in the value of an [`Op::Raft`](crate::proto::Op::Raft)
//! request to another member's control endpoint.
//!
//! ```text
//! batch:   cluster_id 16 | from u16 | count u16 | message*
//! message: length u32 | bytes (a raft-rs message in protobuf, or a
//!          fragment of a larger one: kvs-control's `PeerMessage`)
//! ```
//! Integers are little-endian. The cluster id lets a member refuse traffic
//! from another cluster's member that reached its address; `from` is the
//! sender's member id (the receiver checks each message's own sender
//! against it). A batch is input from the network: [`Batch::new_checked`]
//! checks its framing before anything is read from it.

use crate::ids::{ClusterId, MemberId};

mod field {
    use std::ops::Range;
    pub const CLUSTER: Range<usize> = 0..16;
    pub const FROM: Range<usize> = 16..18;
    pub const COUNT: Range<usize> = 18..20;
    pub const HEADER: usize = 20;
    pub const LENGTH: usize = 4;
}

/// The most messages one batch may carry.
pub const MAX_MESSAGES: u16 = 4096;

/// A batch's framing is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad control-group batch: {0}")]
pub struct BadBatch(pub &'static str);

/// A checked view of a batch's bytes.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    bytes: &'a [u8],
}

impl<'a> Batch<'a> {
    /// A view of `bytes`, after checking that the header and every message's
    /// length fit.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Batch<'a>, BadBatch> {
        if bytes.len() < field::HEADER {
            return Err(BadBatch("shorter than its header"));
        }
        let b = Batch { bytes };
        if b.count() > MAX_MESSAGES {
            return Err(BadBatch("too many messages"));
        }
        let mut at = field::HEADER;
        for _ in 0..b.count() {
            let len = read_len(bytes, at).ok_or(BadBatch("a message length past the end"))?;
            at += field::LENGTH;
            if bytes.len() - at < len {
                return Err(BadBatch("a message past the end"));
            }
            at += len;
        }
        if at != bytes.len() {
            return Err(BadBatch("bytes after the last message"));
        }
        Ok(b)
    }

    /// The sender's cluster.
    pub fn cluster_id(&self) -> ClusterId {
        ClusterId::from_bytes(self.bytes[field::CLUSTER].try_into().expect("16 bytes"))
    }

    /// The sender.
    pub fn from(&self) -> MemberId {
        MemberId::from_le_bytes(self.bytes[field::FROM].try_into().expect("2 bytes"))
    }

    /// How many messages.
    pub fn count(&self) -> u16 {
        u16::from_le_bytes(self.bytes[field::COUNT].try_into().expect("2 bytes"))
    }

    /// The messages' bytes, in order.
    pub fn messages(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let bytes = self.bytes;
        let mut at = field::HEADER;
        (0..self.count()).map(move |_| {
            let len = read_len(bytes, at).expect("checked");
            at += field::LENGTH;
            let m = &bytes[at..at + len];
            at += len;
            m
        })
    }
}

fn read_len(b: &[u8], at: usize) -> Option<usize> {
    let l = b.get(at..at + field::LENGTH)?;
    Some(u32::from_le_bytes(l.try_into().ok()?) as usize)
}

/// Builds a batch in place.
#[derive(Debug)]
pub struct BatchWriter<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    count: u16,
}

impl<'a> BatchWriter<'a> {
    /// Starts a batch from member `from` of cluster `cluster_id` at the end
    /// of `out`.
    pub fn new(out: &'a mut Vec<u8>, cluster_id: ClusterId, from: MemberId) -> BatchWriter<'a> {
        let start = out.len();
        out.extend_from_slice(&cluster_id.bytes());
        out.extend_from_slice(&from.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        BatchWriter {
            out,
            start,
            count: 0,
        }
    }

    /// Adds a message; false (and nothing added) when the batch is full.
    pub fn push(&mut self, msg: &[u8]) -> bool {
        if self.count == MAX_MESSAGES || msg.len() > u32::MAX as usize {
            return false;
        }
        self.out
            .extend_from_slice(&(msg.len() as u32).to_le_bytes());
        self.out.extend_from_slice(msg);
        self.count += 1;
        let c = self.start + field::COUNT.start;
        self.out[c..c + 2].copy_from_slice(&self.count.to_le_bytes());
        true
    }

    /// The batch's size so far, in bytes.
    pub fn len(&self) -> usize {
        self.out.len() - self.start
    }

    /// Whether no message was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reads_back_what_was_written() {
        let mut b = Vec::new();
        let mut w = BatchWriter::new(&mut b, ClusterId::from_bytes([9; 16]), MemberId(3));
        assert!(w.is_empty());
        assert!(w.push(b"one"));
        assert!(w.push(b""));
        assert!(w.push(&[7; 300]));
        assert_eq!(w.len(), 20 + 3 * 4 + 3 + 300);
        let v = Batch::new_checked(&b).unwrap();
        assert_eq!(
            (v.cluster_id(), v.from(), v.count()),
            (ClusterId::from_bytes([9; 16]), MemberId(3), 3)
        );
        let m: Vec<&[u8]> = v.messages().collect();
        assert_eq!(m, [&b"one"[..], b"", &[7; 300][..]]);
    }

    #[test]
    fn every_cut_and_every_lie_about_lengths_is_refused() {
        let mut b = Vec::new();
        let mut w = BatchWriter::new(&mut b, ClusterId::from_bytes([1; 16]), MemberId(0));
        w.push(b"abc");
        w.push(b"defg");
        for n in 0..b.len() {
            assert!(Batch::new_checked(&b[..n]).is_err(), "cut at {n}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(Batch::new_checked(&longer).is_err());
        let mut lie = b.clone();
        lie[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Batch::new_checked(&lie).is_err());
        let mut many = b.clone();
        many[18..20].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(Batch::new_checked(&many).is_err());
    }
}
