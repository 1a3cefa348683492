//! One worker's data, which only its worker thread touches, so no lock is
//! taken on any path: a hash map for point operations (std's keyed SipHash:
//! keys come from clients, and a fixed hash would let one flood a bucket)
//! and an ordered index of the keys for scans.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

/// A worker's keys and values.
#[derive(Debug, Default)]
pub struct Store {
    map: HashMap<Box<[u8]>, Vec<u8>>,
    // The keys again (owned copies: the store stays `Send`, for migration).
    order: BTreeSet<Box<[u8]>>,
    bytes: usize,
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
    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(key).map(|v| v.as_slice())
    }

    /// Sets `key` to `value` (reusing the old value's memory when it fits).
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        match self.map.get_mut(key) {
            Some(v) => {
                self.bytes = self.bytes - v.len() + value.len();
                v.clear();
                v.extend_from_slice(value);
            }
            None => {
                self.bytes += key.len() + value.len();
                self.order.insert(key.into());
                self.map.insert(key.into(), value.to_vec());
            }
        }
    }

    /// Removes `key`; whether it was there.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        match self.map.remove(key) {
            Some(v) => {
                self.order.remove(key);
                self.bytes -= key.len() + v.len();
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_operations_patches_and_ordered_scans() {
        let mut s = Store::default();
        s.put(b"b", b"2222");
        s.put(b"a", b"1");
        s.put(b"c", b"3");
        s.put(b"b", b"22");
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
}
