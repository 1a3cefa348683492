//! The ordered index built whole, for a recovery. Replaying a log puts
//! its keys in at random (hash-table order, in a snapshot), and a B-tree
//! insert of a random key misses the cache down the tree: a quarter of a
//! replay's time went there. So while a recovery replays, new keys go to
//! their slots only ([`Store::defer_index`]); at its end the keys the
//! slots hold are gathered, sorted once, and the tree built from the
//! sorted run in one pass ([`Store::build_index`]). It comes out as the
//! index a replay with inserts would have left, less the stale entries
//! (keys of slots taken whole), which no scan returns anyway.

use std::collections::BTreeMap;

use super::index_key::IndexKey;
use super::{Place, Store};

impl Store {
    /// From now on, until [`Store::build_index`], new keys are not put in
    /// the ordered index: scans see none of them. For a recovery's replay,
    /// on a store that serves nothing yet.
    pub(crate) fn defer_index(&mut self) {
        self.unindexed = true;
    }

    /// Builds the ordered index from the keys the slots hold, after
    /// [`Store::defer_index`] (whatever it held goes).
    pub(crate) fn build_index(&mut self) {
        let mut entries: Vec<(IndexKey, Place)> = Vec::with_capacity(self.keys);
        for (slot, sl) in self.slots.iter().enumerate() {
            let Some(sl) = sl.as_deref() else { continue };
            let place = Place {
                // The slot count is a u32.
                slot: slot as u32,
                life: sl.life,
            };
            entries.extend(sl.map.iter().map(|r| (IndexKey::new(r.key()), place)));
        }
        // Keys are unique (a key lives in one slot), so the unstable sort
        // leaves the tree nothing to reorder or drop: its own (stable) sort
        // of a sorted run is one pass, and the build another.
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.order = BTreeMap::from_iter(entries);
        self.unindexed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The live entries of the index, in order: key, slot.
    fn live(s: &Store) -> Vec<(Vec<u8>, u32)> {
        s.order
            .iter()
            .filter(|(_, p)| s.slot(p.slot).is_some_and(|sl| sl.life == p.life))
            .map(|(k, p)| (k.bytes().to_vec(), p.slot))
            .collect()
    }

    /// Puts, deletes, pulls and a slot taken, on `s`.
    fn changes(s: &mut Store) {
        for i in 0..300u32 {
            let k = format!("key{:04}", (i * 7919) % 1000);
            s.put(i % 8, k.as_bytes(), &[i as u8; 5]).unwrap();
        }
        // A long key (boxed in the index), deletes, a slot taken whole
        // and filled again, a pulled record.
        s.put(1, &[b'x'; 60], b"long").unwrap();
        for i in (0..300u32).step_by(3) {
            let k = format!("key{:04}", (i * 7919) % 1000);
            s.delete(i % 8, k.as_bytes());
        }
        s.take_slot(5);
        s.put(5, b"again", b"v").unwrap();
        s.begin_import(6);
        s.apply_pulled(6, b"pulled", Some(b"p"));
        s.end_import(6);
    }

    #[test]
    fn a_built_index_is_the_inserted_one_less_its_stale_keys() {
        let mut inserted = Store::new(8, usize::MAX);
        changes(&mut inserted);
        let mut built = Store::new(8, usize::MAX);
        built.defer_index();
        changes(&mut built);
        assert_eq!(built.scan(b"").count(), 0, "nothing indexed yet");
        assert_eq!(built.stale_keys(), 0);
        built.build_index();
        assert!(inserted.stale_keys() > 0, "the slot taken left stale keys");
        assert_eq!(built.stale_keys(), 0);
        assert_eq!(live(&built), live(&inserted));
        assert_eq!(built.order.len(), built.len());
        let scan = |s: &Store| -> Vec<(Vec<u8>, Vec<u8>)> {
            s.scan(b"key05")
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect()
        };
        assert_eq!(scan(&built), scan(&inserted));
        // Indexed as usual from now on.
        built.put(2, b"key0500x", b"new").unwrap();
        assert_eq!(
            built.scan(b"key0500x").next().map(|(k, _)| k),
            Some(&b"key0500x"[..])
        );
    }
}
