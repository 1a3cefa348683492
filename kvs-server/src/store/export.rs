//! Slots given away to a migration's target, until its import is over.
//!
//! A migration's source takes a slot's records out of its store when the
//! map gives the slot away, and holds them, frozen, for the target to
//! pull. Their log records stay: the slot's drop is journaled only once
//! the import is over ([`Store::end_export`]), so a source that restarts
//! from its files mid-migration recovers the records and holds them for
//! the target again, instead of losing them. A snapshot meanwhile copies
//! the frozen records as the slot ([`Store::copy_slot`]).

use std::sync::{Arc, Weak};

use super::change::Change;
use super::{SlotRecords, Store};

impl Store {
    /// Takes slot `slot`'s records out, for a migration's target to pull;
    /// they stay in the log until [`end_export`](Self::end_export). The
    /// caller holds the records (the store keeps a weak reference, for
    /// snapshots).
    pub(crate) fn export_slot(&mut self, slot: u32) -> Arc<SlotRecords> {
        let records = Arc::new(self.take_unjournaled(slot));
        self.exports.retain(|(s, _)| *s != slot);
        self.exports.push((slot, Arc::downgrade(&records)));
        records
    }

    /// Whether slot `slot` is given away and its import not over.
    pub(crate) fn exporting(&self, slot: u32) -> bool {
        !self.exports.is_empty() && self.exports.iter().any(|(s, _)| *s == slot)
    }

    /// Slot `slot`'s import is over (or off): its records leave the log.
    pub(crate) fn end_export(&mut self, slot: u32) {
        let n = self.exports.len();
        self.exports.retain(|(s, _)| *s != slot);
        if self.exports.len() != n {
            self.journal_change(Change::DropSlot { slot });
        }
    }

    /// The records of exported slot `slot`, while its source holds them.
    pub(super) fn exported(&self, slot: u32) -> Option<Arc<SlotRecords>> {
        self.exports
            .iter()
            .find(|(s, _)| *s == slot)
            .and_then(|(_, w)| Weak::upgrade(w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::FORMAT;

    #[test]
    fn an_exported_slot_leaves_the_log_only_when_its_import_is_over() {
        let mut s = Store::new(4, usize::MAX);
        s.put(1, b"k", b"v").unwrap();
        s.keep_journal(FORMAT);
        let held = s.export_slot(1);
        assert_eq!((held.len(), s.len()), (1, 0));
        assert!(s.exporting(1));
        assert_eq!(s.journal().unwrap().records(), 0, "no drop yet");
        // A snapshot's copy holds the frozen records.
        let mut b = kvs_wal::Batch::new(crate::persist::SNAPSHOT_FORMAT);
        assert_eq!(s.copy_slot(1, &mut b), 1);
        s.end_export(1);
        assert!(!s.exporting(1));
        assert_eq!(s.journal().unwrap().records(), 1, "the drop");
        s.end_export(1);
        assert_eq!(s.journal().unwrap().records(), 1, "once");
    }
}
