//! Where a backup's copy of a slot stands in its primary's stream of
//! writes ([`Position`]), kept with the slot's records so that the log,
//! the snapshots and a recovery carry it with them: a backup restarted
//! from its files tells its primary how far its copy goes, and the
//! primary sends only the writes after that (a catch-up, see
//! [`crate::replication::history`]) when it still knows them.
//!
//! A position is set only once a copy is complete, and moves with the
//! writes applied after it; it goes with the slot's records (a dropped
//! slot has none) and is cleared when the slot stops following that
//! stream. It is journaled after the changes it covers, so a log cut
//! anywhere recovers a position no later than its records.

use std::ops::Range;

use super::change::Change;
use super::{Position, Slot, Store};

impl Store {
    /// Sets (or, `None`, clears) where slot `slot`'s copy stands.
    pub(crate) fn set_position(&mut self, slot: u32, p: Option<Position>) {
        let Some(entry) = self.slots.get_mut(slot as usize) else {
            return;
        };
        match (entry.as_mut(), p) {
            (None, None) => return,
            (Some(sl), p) if sl.position == p => return,
            (Some(sl), p) => sl.position = p,
            (None, Some(_)) => {
                entry
                    .get_or_insert_with(|| Slot::new(&mut self.lives))
                    .position = p
            }
        }
        let (stream, applied) = p.map_or((0, 0), |p| (p.stream, p.applied));
        self.journal_change(Change::Position {
            slot,
            stream,
            applied,
        });
    }

    /// Where slot `slot`'s copy stands, if it is a complete copy that
    /// follows a stream.
    pub(crate) fn position(&self, slot: u32) -> Option<Position> {
        self.slot(slot).and_then(|s| s.position)
    }

    /// The runs of consecutive slots that have a position, in order.
    pub(crate) fn positioned(&self) -> Vec<Range<u32>> {
        let mut out: Vec<Range<u32>> = Vec::new();
        for slot in (0..self.slots()).filter(|&s| self.position(s).is_some()) {
            match out.last_mut() {
                Some(r) if r.end == slot => r.end += 1,
                _ => out.push(slot..slot + 1),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_goes_with_its_slot_and_is_journaled_once() {
        let mut s = Store::new(4, usize::MAX);
        s.keep_journal(crate::persist::FORMAT);
        let p = Position {
            stream: 9,
            applied: 40,
        };
        s.set_position(2, Some(p));
        s.set_position(2, Some(p));
        assert_eq!(s.position(2), Some(p));
        assert_eq!(s.journal().unwrap().records(), 1);
        s.drop_slot(2);
        assert_eq!(s.position(2), None);
        s.set_position(2, None);
        assert_eq!(s.journal().unwrap().records(), 2, "the drop only");
    }

    #[test]
    fn positioned_slots_come_in_runs() {
        let mut s = Store::new(8, usize::MAX);
        assert!(s.positioned().is_empty());
        let p = Position {
            stream: 1,
            applied: 2,
        };
        for slot in [0, 1, 2, 5, 7] {
            s.set_position(slot, Some(p));
        }
        assert_eq!(s.positioned(), [0..3, 5..6, 7..8]);
    }
}
