//! A change to a worker's store, as its durable log records it: each call
//! that changes the records ([`Store::put`], [`Store::delete`],
//! [`Store::patch`], a slot dropped or taken, an import's or a copy's begin
//! and end, a pulled record taken) is one [`Change`], and replaying the
//! changes in order on an empty store, by calling the same methods, gives
//! the same records, tombstones and import states.
//!
//! A change is a log record's kind and payload; the log frames it (length,
//! checksum). Payloads, integers little-endian:
//!
//! ```text
//! PUT          slot u32 | key_len u16 | key | value
//! DELETE       slot u32 | key_len u16 | key
//! PATCH        slot u32 | key_len u16 | key | offset u32 | bytes
//! PULLED       slot u32 | key_len u16 | key | present u8 | value
//! DROP_SLOT, BEGIN_IMPORT, END_IMPORT, BEGIN_COPY, END_COPY
//!              slot u32
//! POSITION     slot u32 | stream u64 | applied u64   (stream 0: none)
//! ```

use kvs_wal::Batch;

use super::Position;
use super::{Patch, Store};

mod field {
    use std::ops::Range;

    pub const SLOT: Range<usize> = 0..4;
    pub const KEY_LEN: Range<usize> = 4..6;
    /// Where the key starts in a keyed change.
    pub const KEY: usize = 6;

    pub const PUT: u8 = 1;
    pub const DELETE: u8 = 2;
    pub const PATCH: u8 = 3;
    pub const PULLED: u8 = 4;
    pub const DROP_SLOT: u8 = 5;
    pub const BEGIN_IMPORT: u8 = 6;
    pub const END_IMPORT: u8 = 7;
    pub const BEGIN_COPY: u8 = 8;
    pub const END_COPY: u8 = 9;
    pub const POSITION: u8 = 10;

    pub const STREAM: Range<usize> = 4..12;
    pub const APPLIED: Range<usize> = 12..20;
}

/// One change to a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change<'a> {
    /// [`Store::put`].
    Put {
        slot: u32,
        key: &'a [u8],
        value: &'a [u8],
    },
    /// [`Store::delete`].
    Delete { slot: u32, key: &'a [u8] },
    /// [`Store::patch`].
    Patch {
        slot: u32,
        key: &'a [u8],
        offset: u32,
        bytes: &'a [u8],
    },
    /// [`Store::apply_pulled`] that took the record (or settled the key
    /// as absent: `value` `None`).
    Pulled {
        slot: u32,
        key: &'a [u8],
        value: Option<&'a [u8]>,
    },
    /// [`Store::drop_slot`] or [`Store::take_slot`]: the slot's records
    /// left this store.
    DropSlot { slot: u32 },
    /// [`Store::begin_import`].
    BeginImport { slot: u32 },
    /// [`Store::end_import`].
    EndImport { slot: u32 },
    /// [`Store::begin_copy`].
    BeginCopy { slot: u32 },
    /// [`Store::end_copy`].
    EndCopy { slot: u32 },
    /// [`Store::set_position`] (`stream` 0: cleared).
    Position {
        slot: u32,
        stream: u64,
        applied: u64,
    },
}

/// A log record that is not a change to a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadChange {
    /// A kind no change has.
    #[error("a record of unknown kind {0}")]
    Kind(u8),
    /// A payload shorter than its kind's fields, or with bytes past them.
    #[error("a record of kind {kind} with a payload of {len} bytes")]
    Size { kind: u8, len: usize },
}

impl<'a> Change<'a> {
    /// The slot the change is to.
    pub fn slot(&self) -> u32 {
        match *self {
            Change::Put { slot, .. }
            | Change::Delete { slot, .. }
            | Change::Patch { slot, .. }
            | Change::Pulled { slot, .. }
            | Change::DropSlot { slot }
            | Change::BeginImport { slot }
            | Change::EndImport { slot }
            | Change::BeginCopy { slot }
            | Change::EndCopy { slot }
            | Change::Position { slot, .. } => slot,
        }
    }

    /// The log record's kind.
    pub fn kind(&self) -> u8 {
        match self {
            Change::Put { .. } => field::PUT,
            Change::Delete { .. } => field::DELETE,
            Change::Patch { .. } => field::PATCH,
            Change::Pulled { .. } => field::PULLED,
            Change::DropSlot { .. } => field::DROP_SLOT,
            Change::BeginImport { .. } => field::BEGIN_IMPORT,
            Change::EndImport { .. } => field::END_IMPORT,
            Change::BeginCopy { .. } => field::BEGIN_COPY,
            Change::EndCopy { .. } => field::END_COPY,
            Change::Position { .. } => field::POSITION,
        }
    }

    /// Appends the payload to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.slot().to_le_bytes());
        let key = |out: &mut Vec<u8>, k: &[u8]| {
            // Keys are at most `max_key` (≤ 65,535) bytes: the config checks.
            out.extend_from_slice(&(k.len() as u16).to_le_bytes());
            out.extend_from_slice(k);
        };
        match *self {
            Change::Put { key: k, value, .. } => {
                key(out, k);
                out.extend_from_slice(value);
            }
            Change::Delete { key: k, .. } => key(out, k),
            Change::Patch {
                key: k,
                offset,
                bytes,
                ..
            } => {
                key(out, k);
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(bytes);
            }
            Change::Pulled { key: k, value, .. } => {
                key(out, k);
                out.push(u8::from(value.is_some()));
                out.extend_from_slice(value.unwrap_or_default());
            }
            Change::Position {
                stream, applied, ..
            } => {
                out.extend_from_slice(&stream.to_le_bytes());
                out.extend_from_slice(&applied.to_le_bytes());
            }
            Change::DropSlot { .. }
            | Change::BeginImport { .. }
            | Change::EndImport { .. }
            | Change::BeginCopy { .. }
            | Change::EndCopy { .. } => {}
        }
    }

    /// The change a log record of `kind` holds; the payload is a file's
    /// bytes, checked before anything is read from it.
    pub fn decode(kind: u8, p: &'a [u8]) -> Result<Change<'a>, BadChange> {
        let bad = BadChange::Size { kind, len: p.len() };
        let slot = p
            .get(field::SLOT)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .ok_or(bad)?;
        let keyed = || -> Option<(&'a [u8], &'a [u8])> {
            let len = u16::from_le_bytes(p.get(field::KEY_LEN)?.try_into().ok()?) as usize;
            let rest = p.get(field::KEY..)?;
            (rest.len() >= len).then(|| rest.split_at(len))
        };
        match kind {
            field::PUT => keyed()
                .map(|(key, value)| Change::Put { slot, key, value })
                .ok_or(bad),
            field::DELETE => match keyed() {
                Some((key, [])) => Ok(Change::Delete { slot, key }),
                _ => Err(bad),
            },
            field::PATCH => match keyed() {
                Some((key, rest)) if rest.len() >= 4 => Ok(Change::Patch {
                    slot,
                    key,
                    offset: u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")),
                    bytes: &rest[4..],
                }),
                _ => Err(bad),
            },
            field::PULLED => match keyed() {
                Some((key, [1, value @ ..])) => Ok(Change::Pulled {
                    slot,
                    key,
                    value: Some(value),
                }),
                Some((key, [0])) => Ok(Change::Pulled {
                    slot,
                    key,
                    value: None,
                }),
                _ => Err(bad),
            },
            k @ field::DROP_SLOT..=field::END_COPY if p.len() == field::SLOT.end => Ok(match k {
                field::DROP_SLOT => Change::DropSlot { slot },
                field::BEGIN_IMPORT => Change::BeginImport { slot },
                field::END_IMPORT => Change::EndImport { slot },
                field::BEGIN_COPY => Change::BeginCopy { slot },
                _ => Change::EndCopy { slot },
            }),
            field::DROP_SLOT..=field::END_COPY => Err(bad),
            field::POSITION if p.len() == field::APPLIED.end => Ok(Change::Position {
                slot,
                stream: u64::from_le_bytes(p[field::STREAM].try_into().expect("8 bytes")),
                applied: u64::from_le_bytes(p[field::APPLIED].try_into().expect("8 bytes")),
            }),
            field::POSITION => Err(bad),
            k => Err(BadChange::Kind(k)),
        }
    }

    /// Makes the change to `store`, by the call that made it first. A
    /// replay runs with no memory limit (what was taken once is taken
    /// again), so a change that does not apply means the log is not this
    /// store's history: a slot past the store's, or a patch that does not
    /// fit the value.
    pub fn apply(&self, store: &mut Store) -> Result<(), Unapplied> {
        if self.slot() >= store.slots() {
            return Err(Unapplied::Slot(self.slot()));
        }
        if self.changes_records() {
            // A position is journaled after the changes it covers: one
            // that changes follow was cut from its turn (a torn write) or
            // outdated, and says nothing of the records now. (A backup's
            // records ahead of its position would catch up anyway; a
            // primary's would hold writes no other copy has.)
            store.set_position(self.slot(), None);
        }
        match *self {
            Change::Put { slot, key, value } => {
                store.put(slot, key, value).map_err(|_| Unapplied::Memory)?;
            }
            Change::Delete { slot, key } => {
                store.delete(slot, key);
            }
            Change::Patch {
                slot,
                key,
                offset,
                bytes,
            } => match store.patch(slot, key, offset as usize, bytes) {
                Patch::Done => {}
                other => return Err(Unapplied::Patch(other)),
            },
            Change::Pulled { slot, key, value } => {
                store.apply_pulled(slot, key, value);
            }
            Change::DropSlot { slot } => {
                store.drop_slot(slot);
            }
            Change::BeginImport { slot } => store.begin_import(slot),
            Change::EndImport { slot } => store.end_import(slot),
            Change::BeginCopy { slot } => store.begin_copy(slot),
            Change::EndCopy { slot } => store.end_copy(slot),
            Change::Position {
                slot,
                stream,
                applied,
            } => store.set_position(slot, (stream != 0).then_some(Position { stream, applied })),
        }
        Ok(())
    }
}

impl Change<'_> {
    /// Whether the change adds, removes or alters records of its slot (or
    /// starts it over).
    fn changes_records(&self) -> bool {
        matches!(
            self,
            Change::Put { .. }
                | Change::Delete { .. }
                | Change::Patch { .. }
                | Change::Pulled { .. }
                | Change::BeginImport { .. }
                | Change::BeginCopy { .. }
        )
    }
}

impl Store {
    /// Slot `slot` as the changes that make it again on a store without it
    /// (a snapshot's copy of the slot), appended to `out`: its import or
    /// copy begun, the keys deleted since that began, then its records.
    /// Returns how many changes; none for a slot the store does not hold.
    pub(crate) fn copy_slot(&self, slot: u32, out: &mut Batch) -> u64 {
        let Some(sl) = self.slots.get(slot as usize).and_then(Option::as_deref) else {
            return self.copy_export(slot, out);
        };
        let mut n = 0;
        let mut push = |c: Change<'_>| {
            // A change holds one record, as in the log (see
            // `Store::journal_change`).
            out.push_with(c.kind(), |b| c.encode(b))
                .expect("a change fits a log record");
            n += 1;
        };
        if let Some(tombstones) = &sl.import {
            push(if sl.copying {
                Change::BeginCopy { slot }
            } else {
                Change::BeginImport { slot }
            });
            // Deleted while the slot is imported, and absent: a delete
            // leaves the tombstone. A key put again after its delete keeps
            // its tombstone too, as here (its put follows).
            for key in tombstones {
                push(Change::Delete { slot, key });
            }
        }
        for r in sl.map.iter() {
            push(Change::Put {
                slot,
                key: r.key(),
                value: r.value(),
            });
        }
        if let Some(p) = sl.position {
            // After the records it covers, as in the log.
            push(Change::Position {
                slot,
                stream: p.stream,
                applied: p.applied,
            });
        }
        n
    }
}

impl Store {
    /// An exported slot's frozen records as the changes that make the slot
    /// again (its drop is journaled once its import is over); none if it
    /// is not exported.
    fn copy_export(&self, slot: u32, out: &mut Batch) -> u64 {
        let Some(records) = self.exported(slot) else {
            return 0;
        };
        for (key, value) in records.iter() {
            let c = Change::Put { slot, key, value };
            out.push_with(c.kind(), |b| c.encode(b))
                .expect("a change fits a log record");
        }
        records.len() as u64
    }
}

/// Why a change read from a log does not apply to the store replaying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unapplied {
    /// A slot the store does not have.
    #[error("a change to slot {0}, past the store's slots")]
    Slot(u32),
    /// A put the store refused for memory (a replay has no limit).
    #[error("a put refused for memory")]
    Memory,
    /// A partial update that did not apply this time.
    #[error("a partial update that does not apply ({0:?})")]
    Patch(Patch),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Change<'static>> {
        vec![
            Change::BeginImport { slot: 3 },
            Change::Put {
                slot: 3,
                key: b"k1",
                value: b"value one",
            },
            Change::Put {
                slot: 3,
                key: b"empty",
                value: b"",
            },
            Change::Patch {
                slot: 3,
                key: b"k1",
                offset: 6,
                bytes: b"ONE",
            },
            Change::Pulled {
                slot: 3,
                key: b"k2",
                value: Some(b"pulled"),
            },
            Change::Pulled {
                slot: 3,
                key: b"gone",
                value: None,
            },
            Change::Delete {
                slot: 3,
                key: b"empty",
            },
            Change::EndImport { slot: 3 },
            Change::BeginCopy { slot: 5 },
            Change::Put {
                slot: 5,
                key: b"c",
                value: b"copied",
            },
            Change::EndCopy { slot: 5 },
            Change::Position {
                slot: 5,
                stream: 77,
                applied: 12,
            },
            Change::Put {
                slot: 7,
                key: b"x",
                value: b"dropped",
            },
            Change::DropSlot { slot: 7 },
        ]
    }

    #[test]
    fn every_change_decodes_to_itself() {
        for c in all() {
            let mut b = Vec::new();
            c.encode(&mut b);
            assert_eq!(Change::decode(c.kind(), &b), Ok(c));
        }
    }

    #[test]
    fn replayed_changes_make_the_same_store() {
        let mut live = Store::new(8, usize::MAX);
        live.begin_import(3);
        live.put(3, b"k1", b"value one").unwrap();
        live.put(3, b"empty", b"").unwrap();
        assert_eq!(live.patch(3, b"k1", 6, b"ONE"), Patch::Done);
        live.apply_pulled(3, b"k2", Some(b"pulled"));
        live.apply_pulled(3, b"gone", None);
        live.delete(3, b"empty");
        live.end_import(3);
        live.begin_copy(5);
        live.put(5, b"c", b"copied").unwrap();
        live.end_copy(5);
        let at = Position {
            stream: 77,
            applied: 12,
        };
        live.set_position(5, Some(at));
        live.put(7, b"x", b"dropped").unwrap();
        live.drop_slot(7);

        let mut replayed = Store::new(8, usize::MAX);
        for c in all() {
            let mut b = Vec::new();
            c.encode(&mut b);
            Change::decode(c.kind(), &b)
                .unwrap()
                .apply(&mut replayed)
                .unwrap();
        }
        let dump = |s: &Store| -> Vec<(Vec<u8>, Vec<u8>)> {
            s.scan(b"").map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
        };
        assert_eq!(dump(&replayed), dump(&live));
        assert_eq!(
            dump(&replayed),
            vec![
                (b"c".to_vec(), b"copied".to_vec()),
                (b"k1".to_vec(), b"value ONE".to_vec()),
                (b"k2".to_vec(), b"pulled".to_vec()),
            ]
        );
        assert_eq!(replayed.len(), live.len());
        assert_eq!(replayed.bytes(), live.bytes());
        assert!(!replayed.importing(3));
        assert_eq!(replayed.position(5), Some(at));
    }

    #[test]
    fn a_replayed_position_that_changes_follow_is_dropped() {
        let at = Change::Position {
            slot: 2,
            stream: 77,
            applied: 12,
        };
        let put = Change::Put {
            slot: 2,
            key: b"k",
            value: b"v",
        };
        let mut s = Store::new(4, usize::MAX);
        for c in [put, at] {
            c.apply(&mut s).unwrap();
        }
        assert!(s.position(2).is_some(), "after the changes it covers");
        // A change after it (its turn's position was cut off, say): the
        // records are no longer where the position says.
        put.apply(&mut s).unwrap();
        assert_eq!(s.position(2), None);
        at.apply(&mut s).unwrap();
        Change::EndCopy { slot: 2 }.apply(&mut s).unwrap();
        assert!(s.position(2).is_some(), "no record changed");
        Change::Delete { slot: 2, key: b"k" }.apply(&mut s).unwrap();
        assert_eq!(s.position(2), None);
    }

    #[test]
    fn a_slot_being_imported_keeps_its_tombstones_across_a_replay() {
        // A key deleted while its slot is imported must not come back
        // when the import's pull runs again after a restart.
        let changes = [
            Change::BeginImport { slot: 1 },
            Change::Delete { slot: 1, key: b"k" },
        ];
        let mut s = Store::new(4, usize::MAX);
        for c in changes {
            c.apply(&mut s).unwrap();
        }
        assert!(s.importing(1) && s.deleted_in_import(1, b"k"));
        s.apply_pulled(1, b"k", Some(b"old"));
        assert_eq!(s.get(1, b"k"), None);
    }

    #[test]
    fn a_copied_slot_makes_the_same_slot_again() {
        const F: kvs_wal::Format = kvs_wal::Format::new(*b"TESTCOPY", 1 << 16);
        let mut live = Store::new(4, usize::MAX);
        live.put(0, b"plain", b"p").unwrap();
        live.begin_import(1);
        live.put(1, b"kept", b"k").unwrap();
        live.delete(1, b"gone");
        live.delete(1, b"again");
        live.put(1, b"again", b"back").unwrap();
        live.begin_copy(2);
        live.put(2, b"c", b"copied").unwrap();
        live.delete(2, b"x");
        let mut b = Batch::new(F);
        let n: u64 = (0..4).map(|s| live.copy_slot(s, &mut b)).sum();
        assert_eq!(n as usize, b.records());
        // The batch's records, replayed through a log.
        let d = test_support::TempDir::new("kvs-server", "copy-slot");
        let p = d.path().join("copy");
        let mut r = kvs_wal::Replacement::create(&p, F).unwrap();
        r.write(&mut b).unwrap();
        r.finish().unwrap();
        let mut again = Store::new(4, usize::MAX);
        kvs_wal::Log::open(&p, F)
            .unwrap()
            .replay(&mut |kind, payload: &[u8], _| {
                Change::decode(kind, payload)?.apply(&mut again)?;
                Ok(())
            })
            .unwrap();
        for slot in 0..4 {
            let mut a: Vec<_> = live.slot_records(slot).collect();
            let mut b: Vec<_> = again.slot_records(slot).collect();
            a.sort();
            b.sort();
            assert_eq!(a, b, "slot {slot}");
            assert_eq!(live.importing(slot), again.importing(slot));
        }
        for (slot, key) in [(1, &b"gone"[..]), (1, b"again"), (2, b"x")] {
            assert!(again.deleted_in_import(slot, key), "{key:?}");
        }
        assert!(!again.deleted_in_import(1, b"kept"));
        // The copy still takes pulled records as a copy does.
        assert_eq!(
            again.apply_pulled(2, b"y", Some(b"pulled")),
            super::super::Pulled::Taken
        );
        assert_eq!(
            again.apply_pulled(2, b"x", Some(b"stale")),
            super::super::Pulled::Stale
        );
        again.end_copy(2);
        assert_eq!(again.len(), live.len() + 1);
    }

    #[test]
    fn a_change_the_store_cannot_take_is_an_error() {
        let mut s = Store::new(4, usize::MAX);
        let put = |slot| Change::Put {
            slot,
            key: b"k",
            value: b"v",
        };
        assert_eq!(put(4).apply(&mut s), Err(Unapplied::Slot(4)));
        let patch = Change::Patch {
            slot: 1,
            key: b"k",
            offset: 0,
            bytes: b"x",
        };
        assert_eq!(patch.apply(&mut s), Err(Unapplied::Patch(Patch::NotFound)));
        put(1).apply(&mut s).unwrap();
        patch.apply(&mut s).unwrap();
        assert_eq!(s.get(1, b"k"), Some(&b"x"[..]));
    }

    #[test]
    fn a_record_of_the_wrong_size_or_kind_is_an_error() {
        assert_eq!(Change::decode(42, &[0; 4]), Err(BadChange::Kind(42)));
        let short = BadChange::Size { kind: 1, len: 3 };
        assert_eq!(Change::decode(field::PUT, &[0; 3]), Err(short));
        // A key longer than the payload.
        let mut b = 1u32.to_le_bytes().to_vec();
        b.extend_from_slice(&9u16.to_le_bytes());
        b.extend_from_slice(b"abc");
        assert!(Change::decode(field::PUT, &b).is_err());
        // A delete with bytes after its key, a drop with any.
        let mut d = Vec::new();
        Change::Delete { slot: 1, key: b"k" }.encode(&mut d);
        d.push(0);
        assert!(Change::decode(field::DELETE, &d).is_err());
        assert!(Change::decode(field::DROP_SLOT, &[0; 5]).is_err());
        assert!(Change::decode(field::PULLED, &{
            let mut p = Vec::new();
            Change::Pulled {
                slot: 0,
                key: b"k",
                value: None,
            }
            .encode(&mut p);
            p[7] = 2;
            p
        })
        .is_err());
    }
}
