//! Raft messages larger than the transport carries, cut into fragments and
//! put together again.
//!
//! A snapshot holds the whole cluster state and an append may hold a large
//! entry (a shard map): either can be larger than one request on a control
//! connection. The sender cuts such a message into fragments of at most
//! [`GroupConfig::max_message`](crate::GroupConfig::max_message) bytes; the
//! receiver keeps, per sender, the one message being put together, and
//! steps it once its last fragment is in.
//!
//! ```text
//! message:  a raft-rs message in protobuf, whole (never starts with 0)
//! fragment: 0 u8 | id u32 | total u32 | offset u32 | bytes
//! ```
//! Integers are little-endian. A protobuf message starts with the tag of a
//! field, whose number is at least 1, so a leading 0 tells a fragment from
//! a whole message. `id` is the message's (each sender counts its own),
//! `total` its length, `offset` where the fragment's bytes go in it.
//! The transport keeps a sender's messages in order but may lose some: a
//! fragment that does not continue the message being put together drops
//! it (Raft sends again what is lost).

use kvs_proto::MemberId;
use std::collections::HashMap;

mod field {
    pub const TAG: u8 = 0;
    /// tag, id, total and offset.
    pub const HEADER: usize = 13;
}

/// The largest message put together: more is a peer that lies.
const MAX_TOTAL: usize = 256 << 20;

/// The smallest `max` that [`split`] takes.
pub(crate) const MIN_MAX: usize = field::HEADER + 1;

/// `msg` as it goes to the transport: whole if it is at most `max` bytes,
/// else fragments of at most `max` bytes, numbered `id`. `max` is at least
/// [`MIN_MAX`].
pub(crate) fn split(msg: Vec<u8>, id: u32, max: usize) -> Vec<Vec<u8>> {
    if msg.len() <= max {
        return vec![msg];
    }
    let total = msg.len() as u32;
    let mut out = Vec::with_capacity(msg.len().div_ceil(max - field::HEADER));
    for (i, part) in msg.chunks(max - field::HEADER).enumerate() {
        let offset = (i * (max - field::HEADER)) as u32;
        let mut f = Vec::with_capacity(field::HEADER + part.len());
        f.push(field::TAG);
        f.extend_from_slice(&id.to_le_bytes());
        f.extend_from_slice(&total.to_le_bytes());
        f.extend_from_slice(&offset.to_le_bytes());
        f.extend_from_slice(part);
        out.push(f);
    }
    out
}

/// Whether `bytes` from the transport are a fragment, not a whole message.
pub(crate) fn is_fragment(bytes: &[u8]) -> bool {
    bytes.first() == Some(&field::TAG)
}

/// A fragment no sender could have made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadFragment {
    /// Shorter than the fragment header.
    #[error("a fragment shorter than its header")]
    Short,
    /// Empty, past its message's end, or of a message larger than any.
    #[error("a fragment of {len} bytes at {offset} of a message of {total}")]
    OutOfBounds {
        len: usize,
        offset: usize,
        total: usize,
    },
}

/// One message being put together.
#[derive(Debug)]
struct Partial {
    id: u32,
    total: usize,
    bytes: Vec<u8>,
}

/// The messages being put together, one per sender.
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    partial: HashMap<MemberId, Partial>,
}

impl Reassembly {
    /// Takes a fragment from `from`: the whole message once this was its
    /// last fragment. `Err`: a fragment no sender could have made.
    pub fn take(
        &mut self,
        from: MemberId,
        fragment: &[u8],
    ) -> Result<Option<Vec<u8>>, BadFragment> {
        let header = fragment.get(..field::HEADER).ok_or(BadFragment::Short)?;
        let word = |at: usize| {
            let b = [header[at], header[at + 1], header[at + 2], header[at + 3]];
            u32::from_le_bytes(b) as usize
        };
        let (id, total, offset) = (word(1) as u32, word(5), word(9));
        let part = &fragment[field::HEADER..];
        let past_end = offset.checked_add(part.len()).is_none_or(|end| end > total);
        if total > MAX_TOTAL || past_end || part.is_empty() {
            self.partial.remove(&from);
            return Err(BadFragment::OutOfBounds {
                len: part.len(),
                offset,
                total,
            });
        }
        if offset == 0 {
            self.partial.insert(
                from,
                Partial {
                    id,
                    total,
                    bytes: Vec::new(),
                },
            );
        }
        let Some(p) = self.partial.get_mut(&from) else {
            return Ok(None);
        };
        if p.id != id || p.total != total || p.bytes.len() != offset {
            // A fragment of this message or of the one before was lost.
            self.partial.remove(&from);
            return Ok(None);
        }
        p.bytes.extend_from_slice(part);
        if p.bytes.len() < p.total {
            return Ok(None);
        }
        Ok(self.partial.remove(&from).map(|p| p.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8 + 1).collect()
    }

    #[test]
    fn a_small_message_goes_whole_and_a_large_one_comes_back_from_its_fragments() {
        assert_eq!(split(msg(100), 1, 100), [msg(100)]);
        for len in [101, 174, 175, 1000] {
            let frags = split(msg(len), 7, 100);
            assert!(frags.len() > 1);
            assert!(frags.iter().all(|f| f.len() <= 100 && is_fragment(f)));
            let mut r = Reassembly::default();
            let (last, rest) = frags.split_last().unwrap();
            for f in rest {
                assert_eq!(r.take(MemberId(3), f), Ok(None));
            }
            assert_eq!(r.take(MemberId(3), last), Ok(Some(msg(len))), "{len} bytes");
            assert!(r.partial.is_empty());
        }
    }

    #[test]
    fn senders_are_put_together_apart_and_a_lost_fragment_drops_its_message() {
        let a = split(msg(300), 1, 100);
        let b = split(msg(250), 1, 100);
        let mut r = Reassembly::default();
        // Interleaved senders.
        assert_eq!(r.take(MemberId(1), &a[0]), Ok(None));
        assert_eq!(r.take(MemberId(2), &b[0]), Ok(None));
        for f in &a[1..a.len() - 1] {
            assert_eq!(r.take(MemberId(1), f), Ok(None));
        }
        for f in &b[1..b.len() - 1] {
            assert_eq!(r.take(MemberId(2), f), Ok(None));
        }
        assert_eq!(r.take(MemberId(2), b.last().unwrap()), Ok(Some(msg(250))));
        assert_eq!(r.take(MemberId(1), a.last().unwrap()), Ok(Some(msg(300))));
        // A lost middle fragment: the rest is dropped, and the next
        // message comes whole.
        let c = split(msg(300), 2, 100);
        assert_eq!(r.take(MemberId(1), &c[0]), Ok(None));
        for f in &c[2..] {
            assert_eq!(r.take(MemberId(1), f), Ok(None));
        }
        assert!(r.partial.is_empty());
        let d = split(msg(120), 3, 100);
        assert_eq!(r.take(MemberId(1), &d[0]), Ok(None));
        assert_eq!(r.take(MemberId(1), &d[1]), Ok(Some(msg(120))));
        // A first fragment lost: the next one is dropped too.
        let e = split(msg(300), 4, 100);
        assert_eq!(r.take(MemberId(1), &e[1]), Ok(None));
        assert!(r.partial.is_empty());
    }

    #[test]
    fn a_fragment_no_sender_makes_is_refused() {
        let mut r = Reassembly::default();
        let good = split(msg(300), 1, 100);
        let mut past_end = good[1].clone();
        past_end[5..9].copy_from_slice(&100u32.to_le_bytes());
        let mut huge = good[0].clone();
        huge[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        for bad in [&good[0][..5], &good[0][..field::HEADER], &past_end, &huge] {
            assert!(r.take(MemberId(1), bad).is_err(), "{bad:?}");
        }
        assert!(r.partial.is_empty());
    }
}
