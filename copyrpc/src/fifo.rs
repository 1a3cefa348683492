//! A FIFO of small `Copy` items for the per-message path: a power-of-two ring
//! indexed by free-running counters, so a push or a pop is one store or load
//! and a mask (std's `VecDeque::push_back` stayed an out-of-line call there,
//! a tenth of a server thread's time at 32-byte RPCs). It grows by doubling,
//! off the hot path.

/// See the module documentation.
pub(crate) struct Fifo<T: Copy + Default> {
    buf: Box<[T]>,
    head: usize,
    tail: usize,
}

impl<T: Copy + Default> Fifo<T> {
    /// A FIFO with room for `cap` items (rounded up to a power of two) before
    /// it first grows.
    pub fn with_capacity(cap: usize) -> Self {
        Fifo {
            buf: vec![T::default(); cap.max(2).next_power_of_two()].into_boxed_slice(),
            head: 0,
            tail: 0,
        }
    }

    fn mask(&self) -> usize {
        self.buf.len() - 1
    }

    /// Items queued.
    pub fn len(&self) -> usize {
        self.tail.wrapping_sub(self.head)
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.head == self.tail
    }

    /// Appends `v`.
    #[inline(always)]
    pub fn push_back(&mut self, v: T) {
        if self.len() == self.buf.len() {
            self.grow();
        }
        let i = self.tail & self.mask();
        self.buf[i] = v;
        self.tail = self.tail.wrapping_add(1);
    }

    /// Removes and returns the oldest item.
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<T> {
        if self.is_empty() {
            return None;
        }
        let v = self.buf[self.head & self.mask()];
        self.head = self.head.wrapping_add(1);
        Some(v)
    }

    /// The oldest item.
    #[inline(always)]
    pub fn front(&self) -> Option<&T> {
        (!self.is_empty()).then(|| &self.buf[self.head & self.mask()])
    }

    #[cold]
    fn grow(&mut self) {
        let n = self.buf.len();
        let mut buf = vec![T::default(); 2 * n].into_boxed_slice();
        for (k, slot) in buf.iter_mut().take(n).enumerate() {
            *slot = self.buf[self.head.wrapping_add(k) & (n - 1)];
        }
        self.buf = buf;
        self.head = 0;
        self.tail = n;
    }
}

#[cfg(test)]
mod tests {
    use super::Fifo;
    use std::collections::VecDeque;

    #[test]
    fn behaves_as_a_vecdeque_across_growth_and_wrap() {
        let mut f = Fifo::<u64>::with_capacity(2);
        let mut d = VecDeque::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..10_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Pushes slightly outnumber pops: the FIFO grows and wraps.
            if x % 5 < 3 {
                f.push_back(i);
                d.push_back(i);
            } else {
                assert_eq!(f.pop_front(), d.pop_front());
            }
            assert_eq!(f.len(), d.len());
            assert_eq!(f.front(), d.front());
            assert_eq!(f.is_empty(), d.is_empty());
        }
        while let Some(v) = d.pop_front() {
            assert_eq!(f.pop_front(), Some(v));
        }
        assert_eq!(f.pop_front(), None);
    }
}
