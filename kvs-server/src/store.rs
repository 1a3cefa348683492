//! One worker's data, which only its worker thread touches, so no lock is
//! taken on any path: a hash map for point operations (std's keyed SipHash:
//! keys come from clients, and a fixed hash would let one flood a bucket)
//! and an ordered index of the keys for scans. Writes that would take the
//! heap the records occupy past the store's limit (its worker's share of
//! `max_memory`) are refused; see [`crate::memory`] for what a record costs.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use crate::memory::{record_cost, OutOfMemory};

/// A worker's keys and values.
#[derive(Debug)]
pub struct Store {
    map: HashMap<Box<[u8]>, Vec<u8>>,
    // The keys again (owned copies: the store stays `Send`, for migration).
    order: BTreeSet<Box<[u8]>>,
    bytes: usize,
    // Heap bytes the records cost (`memory::record_cost` summed).
    used: usize,
    limit: usize,
}

impl Default for Store {
    fn default() -> Self {
        Store::with_limit(usize::MAX)
    }
}

/// UPDATE_RANGE outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patch {
    /// Written.
    Done,
    /// No such key.
    NotFound,
    /// The range runs past the value's end.
    OutOfRange,
}

impl Store {
    /// An empty store whose records may cost at most `limit` heap bytes
    /// (`usize::MAX`: no limit).
    pub fn with_limit(limit: usize) -> Store {
        Store {
            map: HashMap::new(),
            order: BTreeSet::new(),
            bytes: 0,
            used: 0,
            limit,
        }
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(key).map(|v| v.as_slice())
    }

    /// Sets `key` to `value`, reusing the old value's memory when it fits
    /// (and is not four times larger than needed). Refused, with nothing
    /// changed, when the write would take the records' cost past the limit;
    /// a write that does not grow the cost is never refused.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), OutOfMemory> {
        match self.map.get_mut(key) {
            Some(v) => {
                let old_len = v.len();
                let reuse = value.len() <= v.capacity() && value.len() >= v.capacity() / 4;
                if !reuse {
                    let old = record_cost(key.len(), v.capacity());
                    let new = record_cost(key.len(), value.len());
                    if new > old {
                        charge(self.used, self.limit, new - old)?;
                    }
                    self.used = self.used - old + new;
                    // An exact-size buffer: growing in place would double it.
                    *v = value.to_vec();
                } else {
                    v.clear();
                    v.extend_from_slice(value);
                }
                self.bytes = self.bytes - old_len + value.len();
            }
            None => {
                let cost = record_cost(key.len(), value.len());
                charge(self.used, self.limit, cost)?;
                self.used += cost;
                self.bytes += key.len() + value.len();
                self.order.insert(key.into());
                self.map.insert(key.into(), value.to_vec());
            }
        }
        Ok(())
    }

    /// Removes `key`; whether it was there.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        match self.map.remove(key) {
            Some(v) => {
                self.order.remove(key);
                self.bytes -= key.len() + v.len();
                self.used -= record_cost(key.len(), v.capacity());
                true
            }
            None => false,
        }
    }

    /// Overwrites `bytes` of `key`'s value at `offset`.
    pub fn patch(&mut self, key: &[u8], offset: usize, bytes: &[u8]) -> Patch {
        let Some(v) = self.map.get_mut(key) else {
            return Patch::NotFound;
        };
        match offset.checked_add(bytes.len()) {
            Some(end) if end <= v.len() => {
                v[offset..end].copy_from_slice(bytes);
                Patch::Done
            }
            _ => Patch::OutOfRange,
        }
    }

    /// Records with keys from `start` on, in order.
    pub fn scan<'a>(&'a self, start: &[u8]) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.order
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .filter_map(|k| Some((&**k, self.map.get(&**k)?.as_slice())))
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No keys.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Heap bytes the records cost (what the limit bounds).
    pub fn memory_used(&self) -> usize {
        self.used
    }

    /// The most heap bytes the records may cost (`usize::MAX`: no limit).
    pub fn memory_limit(&self) -> usize {
        self.limit
    }
}

/// Whether `needed` more bytes fit under `limit`.
#[inline]
fn charge(used: usize, limit: usize, needed: usize) -> Result<(), OutOfMemory> {
    match used.checked_add(needed) {
        Some(total) if total <= limit => Ok(()),
        _ => Err(OutOfMemory {
            used,
            limit,
            needed,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_operations_patches_and_ordered_scans() {
        let mut s = Store::default();
        s.put(b"b", b"2222").unwrap();
        s.put(b"a", b"1").unwrap();
        s.put(b"c", b"3").unwrap();
        s.put(b"b", b"22").unwrap();
        assert_eq!(s.get(b"b"), Some(&b"22"[..]));
        assert_eq!(s.bytes(), 3 + 1 + 2 + 1);
        assert_eq!(s.patch(b"b", 1, b"x"), Patch::Done);
        assert_eq!(s.patch(b"b", 1, b"xy"), Patch::OutOfRange);
        assert_eq!(s.patch(b"b", usize::MAX, b"x"), Patch::OutOfRange);
        assert_eq!(s.patch(b"z", 0, b""), Patch::NotFound);
        assert_eq!(s.get(b"b"), Some(&b"2x"[..]));
        let keys: Vec<_> = s.scan(b"ab").map(|(k, _)| k.to_vec()).collect();
        assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
        assert!(s.delete(b"a"));
        assert!(!s.delete(b"a"));
        assert_eq!((s.len(), s.bytes()), (2, 3 + 2));
    }

    #[test]
    fn the_limit_refuses_growth_and_nothing_else() {
        let rec = record_cost(4, 100);
        // Room for three such records and a little more.
        let mut s = Store::with_limit(3 * rec + 10);
        for k in [b"key1", b"key2", b"key3"] {
            s.put(k, &[1; 100]).unwrap();
        }
        assert_eq!(s.memory_used(), 3 * rec);
        let e = s.put(b"key4", &[1; 100]).unwrap_err();
        assert_eq!((e.used, e.limit, e.needed), (3 * rec, 3 * rec + 10, rec));
        assert_eq!((s.len(), s.get(b"key4")), (3, None));
        // Overwrites that fit the old buffer, patches, reads and deletes go on.
        s.put(b"key1", &[2; 100]).unwrap();
        s.put(b"key2", &[2; 60]).unwrap();
        assert_eq!(s.get(b"key2"), Some(&[2u8; 60][..]));
        assert_eq!(s.patch(b"key3", 0, &[3; 10]), Patch::Done);
        assert_eq!(s.memory_used(), 3 * rec);
        // Growing a value past its buffer is growth.
        let e = s.put(b"key1", &[2; 200]).unwrap_err();
        assert_eq!(e.needed, record_cost(4, 200) - rec);
        assert_eq!(s.get(b"key1"), Some(&[2u8; 100][..]));
        // A much smaller value gets a buffer of its own size: less is charged.
        s.put(b"key3", &[3; 8]).unwrap();
        assert_eq!(s.memory_used(), 2 * rec + record_cost(4, 8));
        assert!(s.delete(b"key3"));
        assert_eq!(s.memory_used(), 2 * rec);
        s.put(b"key4", &[4; 100]).unwrap();
        assert_eq!((s.len(), s.bytes()), (3, 3 * 4 + 100 + 60 + 100));
        let keys: Vec<Vec<u8>> = s.scan(b"").map(|(k, _)| k.to_vec()).collect();
        for k in keys {
            assert!(s.delete(&k));
        }
        assert_eq!((s.memory_used(), s.bytes()), (0, 0));
    }
}
