//! A primary worker's recent writes, by key, so that a backup restarted
//! from its files catches up on what it lacks instead of taking a whole
//! copy of the slot (as a Redis replica's partial resync takes the
//! master's backlog instead of a full sync).
//!
//! Each slot's writes form a *stream*: a number naming one primary's term,
//! and the writes' sequence numbers in it. A backup's complete copy stands
//! at a position in that stream ([`Position`]).
//!
//! A primary whose term begins from a complete copy at write `n` of a
//! known stream `s` (a backup promoted by a hand-over or a failover)
//! names its stream [`successor`]`(s, n)`; otherwise (a slot's first
//! primary, or a copy whose stream is not known) it draws one. Every copy
//! that stands at the same write of the same stream when the primary
//! changes (the old primary, the backups that stay) names the new stream
//! the same way, with no message: it holds exactly the writes the new
//! primary's term continues from, so it can catch up later, as a backup
//! restarted from its files does. A copy at another write names another
//! stream, which no primary's term has: it is copied whole. The history keeps, for the last `capacity` bytes of
//! writes, the stream, slot, number and key of each; a write's value is
//! not kept, since a catch-up sends each key's value as it is when the
//! catch-up begins (a key written again since then is sent once, and a key
//! deleted is sent as deleted).
//!
//! A backup at `applied` in the current stream can catch up if no write
//! after `applied` has been pushed out of the history ([`History::keys_since`]).
//! No I/O: the worker's handler owns it; the copies read it.
//!
//! ```text
//! entry: stream u64 | seq u64 | slot u32 | key_len u16 | key
//! ```

use std::collections::VecDeque;

use crate::store::Position;
use std::collections::HashSet;

/// Bytes of an entry before its key.
const ENTRY_HEADER: usize = 8 + 8 + 4 + 2;

/// The last writes' keys, by stream and slot (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct History {
    /// Entries, oldest first; never more than `capacity` bytes.
    ring: VecDeque<u8>,
    capacity: usize,
    /// Per slot: its stream as this worker's (0: none drawn yet).
    stream: Vec<u64>,
    /// Per slot: every write of its stream numbered past this one is in
    /// the history.
    complete_after: Vec<u64>,
}

impl History {
    /// A history of at most `capacity` bytes for `slots` slots (0: none is
    /// kept, and no backup can catch up).
    pub fn new(slots: u32, capacity: usize) -> History {
        History {
            ring: VecDeque::with_capacity(capacity),
            capacity,
            stream: vec![0; slots as usize],
            complete_after: vec![0; slots as usize],
        }
    }

    /// Whether writes are kept.
    #[inline]
    pub fn keeps(&self) -> bool {
        self.capacity > 0
    }

    /// Slot `slot`'s stream, drawn now if it has none: this worker is its
    /// primary, and its last write was number `seq`.
    pub fn stream(&mut self, slot: u32, seq: u64) -> u64 {
        let i = slot as usize;
        if self.stream[i] == 0 {
            self.stream[i] = crate::random::nonce();
            self.complete_after[i] = seq;
        }
        self.stream[i]
    }

    /// This worker stops being slot `slot`'s primary, or becomes it anew:
    /// its stream ends, and the next write draws another.
    pub fn end_stream(&mut self, slot: u32) {
        self.stream[slot as usize] = 0;
    }

    /// This worker becomes slot `slot`'s primary with a complete copy at
    /// write `seq` of stream `stream` (0: not known): its stream is
    /// `stream`'s [`successor`] after `seq` (drawn at its first use if
    /// `stream` is not known), complete from `seq` on.
    pub fn continue_stream(&mut self, slot: u32, stream: u64, seq: u64) {
        if !self.keeps() {
            return;
        }
        let i = slot as usize;
        self.stream[i] = successor(stream, seq);
        self.complete_after[i] = seq;
    }

    /// Slot `slot`'s stream as this worker's, without drawing one (0: none
    /// drawn, or no history is kept).
    pub fn current(&self, slot: u32) -> u64 {
        self.stream.get(slot as usize).copied().unwrap_or(0)
    }

    /// Keeps write `seq` of `key` in slot `slot`'s stream (drawn if
    /// needed). The oldest writes go to make room; a key larger than the
    /// whole history ends what the slot's stream can catch up from.
    #[inline]
    pub fn push(&mut self, slot: u32, seq: u64, key: &[u8]) {
        let stream = self.stream(slot, seq - 1);
        let len = ENTRY_HEADER + key.len();
        if len > self.capacity {
            self.complete_after[slot as usize] = seq;
            return;
        }
        while self.capacity - self.ring.len() < len {
            self.pop();
        }
        self.ring.extend(stream.to_le_bytes());
        self.ring.extend(seq.to_le_bytes());
        self.ring.extend(slot.to_le_bytes());
        self.ring.extend((key.len() as u16).to_le_bytes());
        self.ring.extend(key.iter().copied());
    }

    /// Drops the oldest entry; its stream, if still its slot's, can no
    /// longer catch up from before it.
    fn pop(&mut self) {
        let mut h = [0u8; ENTRY_HEADER];
        for (i, b) in h.iter_mut().enumerate() {
            *b = self.ring[i];
        }
        let e = Entry::read(&h);
        let slot = e.slot as usize;
        if self.stream[slot] == e.stream {
            let c = &mut self.complete_after[slot];
            *c = (*c).max(e.seq);
        }
        self.ring.drain(..ENTRY_HEADER + e.key_len);
    }

    /// The keys slot `slot`'s stream wrote after a backup's position `at`,
    /// each once, if the history has them all: `at` is in the slot's
    /// current stream, no later than its last write `last`, and nothing
    /// written after it has left the history. `None`: the backup needs a
    /// whole copy.
    pub fn keys_since(&mut self, slot: u32, at: Position, last: u64) -> Option<Vec<Vec<u8>>> {
        let i = slot as usize;
        let stream = *self.stream.get(i)?;
        if stream == 0 || at.stream != stream || at.applied > last {
            return None;
        }
        if at.applied < self.complete_after[i] {
            return None;
        }
        let mut seen = HashSet::new();
        let mut keys = Vec::new();
        let mut ring: &[u8] = self.ring.make_contiguous();
        while ring.len() >= ENTRY_HEADER {
            let (h, rest) = ring.split_at(ENTRY_HEADER);
            let e = Entry::read(h.try_into().expect("a whole header"));
            let (key, rest) = rest.split_at(e.key_len);
            ring = rest;
            let after = e.seq > at.applied && e.seq <= last;
            if e.stream == stream && e.slot == slot && after && seen.insert(key) {
                keys.push(key.to_vec());
            }
        }
        Some(keys)
    }
}

/// The stream of the primary whose term continues stream `stream` after
/// its write `seq` (0, not known, if `stream` is not): a function of the
/// two alone, so that every copy standing there names it alike (see the
/// [module docs](self)). Streams are drawn at random and the mix spreads
/// `(stream, seq)` over 64 bits: two terms share a name by chance only.
pub fn successor(stream: u64, seq: u64) -> u64 {
    if stream == 0 {
        return 0;
    }
    // splitmix64's finalizer; the odd constant keeps seq 0 from mixing to 0.
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    mix(stream ^ mix(seq.wrapping_add(0x9e37_79b9_7f4a_7c15))).max(1)
}

/// An entry's header, read.
struct Entry {
    stream: u64,
    seq: u64,
    slot: u32,
    key_len: usize,
}

impl Entry {
    fn read(h: &[u8; ENTRY_HEADER]) -> Entry {
        let le64 =
            |r: std::ops::Range<usize>| u64::from_le_bytes(h[r].try_into().expect("8 bytes"));
        Entry {
            stream: le64(0..8),
            seq: le64(8..16),
            slot: u32::from_le_bytes([h[16], h[17], h[18], h[19]]),
            key_len: usize::from(u16::from_le_bytes([h[20], h[21]])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(h: &mut History, slot: u32, applied: u64) -> Position {
        Position {
            stream: h.stream(slot, 0),
            applied,
        }
    }

    #[test]
    fn a_backup_in_the_stream_gets_the_keys_written_after_it_once() {
        let mut h = History::new(4, 1 << 10);
        h.push(1, 1, b"a");
        h.push(1, 2, b"b");
        h.push(2, 1, b"other slot");
        h.push(1, 3, b"a");
        h.push(1, 4, b"c");
        let p = at(&mut h, 1, 1);
        assert_eq!(
            h.keys_since(1, p, 4),
            Some(vec![b"b".to_vec(), b"a".to_vec(), b"c".to_vec()])
        );
        assert_eq!(
            h.keys_since(1, Position { applied: 4, ..p }, 4),
            Some(vec![])
        );
        assert_eq!(
            h.keys_since(1, Position { applied: 5, ..p }, 4),
            None,
            "ahead"
        );
        assert_eq!(h.keys_since(1, Position { stream: 1, ..p }, 4), None);
    }

    #[test]
    fn writes_pushed_out_end_the_catch_up_from_before_them() {
        let key = [7u8; 10];
        let entry = ENTRY_HEADER + key.len();
        let mut h = History::new(2, 3 * entry);
        for seq in 1..=5 {
            h.push(0, seq, &key);
        }
        // Writes 1 and 2 left.
        let p = at(&mut h, 0, 0);
        assert_eq!(h.keys_since(0, Position { applied: 1, ..p }, 5), None);
        assert_eq!(
            h.keys_since(0, Position { applied: 2, ..p }, 5),
            Some(vec![key.to_vec()])
        );
    }

    #[test]
    fn a_new_stream_does_not_count_the_old_ones_writes() {
        let mut h = History::new(2, 1 << 10);
        h.push(0, 1, b"old");
        let old = at(&mut h, 0, 0);
        h.end_stream(0);
        h.push(0, 2, b"new");
        let new = at(&mut h, 0, 1);
        assert_ne!(old.stream, new.stream);
        assert_eq!(h.keys_since(0, old, 2), None);
        assert_eq!(h.keys_since(0, new, 2), Some(vec![b"new".to_vec()]));
        assert_eq!(h.keys_since(0, Position { applied: 0, ..new }, 2), None);
    }

    #[test]
    fn a_continued_stream_catches_up_a_copy_that_stood_where_it_began() {
        let mut h = History::new(2, 1 << 10);
        let old = h.stream(0, 0);
        // Promoted at write 7 of the old stream: writes 8 and 9 follow.
        h.end_stream(0);
        h.continue_stream(0, old, 7);
        let new = h.current(0);
        assert_eq!(new, successor(old, 7));
        assert_ne!(new, old);
        assert_ne!(new, successor(old, 6), "another write, another stream");
        assert_ne!(new, successor(successor(old, 7), 7), "a second term");
        h.push(0, 8, b"a");
        h.push(0, 9, b"b");
        let stood = Position {
            stream: successor(old, 7),
            applied: 7,
        };
        assert_eq!(
            h.keys_since(0, stood, 9),
            Some(vec![b"a".to_vec(), b"b".to_vec()])
        );
        // A copy that held a write 7 the new term does not (it stood at 8
        // of the old stream) names another stream.
        let ahead = Position {
            stream: successor(old, 8),
            applied: 8,
        };
        assert_eq!(h.keys_since(0, ahead, 9), None);
        let before = Position {
            applied: 6,
            ..stood
        };
        assert_eq!(h.keys_since(0, before, 9), None, "before the term began");
        // An unknown stream is continued by a drawn one.
        h.end_stream(1);
        h.continue_stream(1, 0, 3);
        assert_eq!(h.current(1), 0);
        assert_ne!(h.stream(1, 3), 0);
        assert_eq!(successor(0, 3), 0);
    }

    #[test]
    fn a_key_larger_than_the_history_ends_the_catch_up() {
        let mut h = History::new(1, 64);
        h.push(0, 1, &[1u8; 100]);
        let p = at(&mut h, 0, 0);
        assert_eq!(h.keys_since(0, p, 1), None);
        assert_eq!(
            h.keys_since(0, Position { applied: 1, ..p }, 1),
            Some(vec![])
        );
    }
}
