//! A slab of pending calls: the index is the call id. Allocation only when it
//! grows past its high-water mark.

/// Slots indexed by call id.
#[derive(Debug)]
pub(crate) struct Slab<U> {
    slots: Vec<Option<U>>,
    free: Vec<u32>,
    len: usize,
}

impl<U> Slab<U> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            slots: Vec::with_capacity(n),
            free: Vec::with_capacity(n),
            len: 0,
        }
    }
    /// Stores `u`; returns its id.
    #[inline]
    pub(crate) fn insert(&mut self, u: U) -> u32 {
        self.len += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(u);
                i
            }
            None => {
                self.slots.push(Some(u));
                (self.slots.len() - 1) as u32
            }
        }
    }
    /// Takes the entry `id`, if present.
    #[inline]
    pub(crate) fn remove(&mut self, id: u32) -> Option<U> {
        let u = self.slots.get_mut(id as usize)?.take()?;
        self.free.push(id);
        self.len -= 1;
        Some(u)
    }
    /// Whether `id` holds an entry.
    #[inline]
    pub(crate) fn contains(&self, id: u32) -> bool {
        self.slots.get(id as usize).is_some_and(Option::is_some)
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    /// Takes every entry.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = U> + '_ {
        self.len = 0;
        self.free.clear();
        self.slots.drain(..).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_reused() {
        let mut s = Slab::with_capacity(2);
        let a = s.insert('a');
        let b = s.insert('b');
        assert_eq!(s.remove(a), Some('a'));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.insert('c'), a);
        assert_eq!(s.len(), 2);
        assert_eq!(s.remove(b), Some('b'));
        assert_eq!(s.remove(99), None);
        assert_eq!(s.drain().collect::<Vec<_>>(), vec!['c']);
    }
}
