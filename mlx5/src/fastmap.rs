//! `FastMap`: a direct-indexed table from a 24-bit queue number (QPN, SRQN) to a
//! value, two levels of 4096 entries as rdma-core's `mlx5_find_qp` uses. A
//! lookup is two dependent loads and no hashing; second-level pages are
//! allocated on first insert.

const SHIFT: u32 = 12;
const PAGE: usize = 1 << SHIFT;
const MASK: u32 = (PAGE as u32) - 1;
/// Largest key the map takes: queue numbers are 24 bits.
const MAX_KEY: u32 = (1 << 24) - 1;

type Page<T> = Box<[Option<T>]>;

/// Direct-indexed map from 24-bit keys to values.
pub struct FastMap<T> {
    top: Box<[Option<Page<T>>]>,
    len: usize,
}

impl<T> Default for FastMap<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for FastMap<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastMap").field("len", &self.len).finish()
    }
}

impl<T> FastMap<T> {
    /// An empty map.
    pub fn new() -> Self {
        Self {
            top: (0..PAGE).map(|_| None).collect(),
            len: 0,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Inserts `v` under `key` (masked to 24 bits), returning the previous value.
    pub fn insert(&mut self, key: u32, v: T) -> Option<T> {
        let key = key & MAX_KEY;
        let page = self.top[(key >> SHIFT) as usize]
            .get_or_insert_with(|| (0..PAGE).map(|_| None).collect());
        let old = page[(key & MASK) as usize].replace(v);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes and returns the value under `key`.
    pub fn remove(&mut self, key: u32) -> Option<T> {
        let key = key & MAX_KEY;
        let old = self.top[(key >> SHIFT) as usize]
            .as_mut()
            .and_then(|p| p[(key & MASK) as usize].take());
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// The value under `key`.
    #[inline(always)]
    pub fn get(&self, key: u32) -> Option<&T> {
        let key = key & MAX_KEY;
        match &self.top[(key >> SHIFT) as usize] {
            Some(p) => p[(key & MASK) as usize].as_ref(),
            None => None,
        }
    }

    /// The value under `key`, mutably.
    #[inline(always)]
    pub fn get_mut(&mut self, key: u32) -> Option<&mut T> {
        let key = key & MAX_KEY;
        match &mut self.top[(key >> SHIFT) as usize] {
            Some(p) => p[(key & MASK) as usize].as_mut(),
            None => None,
        }
    }

    /// Iterates over `(key, &value)` in key order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.top.iter().enumerate().flat_map(|(hi, p)| {
            p.iter().flat_map(move |p| {
                p.iter().enumerate().filter_map(move |(lo, v)| {
                    v.as_ref().map(|v| (((hi as u32) << SHIFT) | lo as u32, v))
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove() {
        let mut m = FastMap::new();
        assert!(m.get(5).is_none());
        assert_eq!(m.insert(0x12_3456, 'a'), None);
        assert_eq!(m.insert(0xff_ffff, 'b'), None);
        assert_eq!(m.insert(0x12_3456, 'c'), Some('a'));
        assert_eq!(m.len(), 2);
        assert_eq!(m.get(0x12_3456), Some(&'c'));
        assert_eq!(m.get(0x12_3457), None);
        *m.get_mut(0xff_ffff).unwrap() = 'd';
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            vec![(0x12_3456, &'c'), (0xff_ffff, &'d')]
        );
        assert_eq!(m.remove(0x12_3456), Some('c'));
        assert_eq!(m.remove(0x12_3456), None);
        assert_eq!(m.len(), 1);
    }
}
