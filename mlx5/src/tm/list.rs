//! Software's copy of a tag-matching SRQ's tag list: which entries are
//! free, the chain the NIC fills them in, and how many CQEs each entry in
//! use still waits for.
//!
//! The NIC fills the entry the previous APPEND named (entry 0 first), so
//! the free entries form a queue whose head is always the entry the NIC
//! will fill next, and an APPEND names the entry after the head. Entries
//! are freed to the queue's tail. The list holds `max_num_tags + 1`
//! entries, one of them always free: an APPEND needs a next entry to name
//! (rdma-core keeps the same spare).
//!
//! An entry in use counts the CQEs it waits for, as rdma-core's
//! `expect_cqe` does: one for the message that consumes it (or the REMOVE
//! that takes it back), and one for each signaled command on it. It is
//! free again when the count reaches zero.

/// A tag in the list: its entry's index (the `app_info` of its CQEs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagHandle(pub(crate) u16);

impl TagHandle {
    /// The handle of list entry `index` (the `app_info` a CQE names).
    pub fn from_index(index: u16) -> Self {
        TagHandle(index)
    }
    /// The entry's index in the NIC's tag list.
    pub fn index(self) -> u16 {
        self.0
    }
}

/// No entry (the end of the free queue).
const NONE: u16 = u16::MAX;

#[derive(Debug)]
struct Entry<U> {
    /// The next free entry, while this one is free.
    next: u16,
    /// CQEs this entry waits for (0: free).
    expect: u8,
    /// A REMOVE was posted for it.
    removing: bool,
    /// Software's unexpected count when it was appended.
    phase: u16,
    /// Bytes of its buffer.
    cap: u32,
    /// What the user attached.
    data: Option<U>,
}

/// The tag list as software tracks it.
#[derive(Debug)]
pub(super) struct TagList<U> {
    entries: Box<[Entry<U>]>,
    head: u16,
    tail: u16,
}

impl<U> TagList<U> {
    /// A list of `max_tags` tags (`max_tags + 1` entries), all free.
    pub(super) fn new(max_tags: u16) -> Self {
        assert!(
            max_tags > 0 && max_tags < NONE,
            "tag list of {max_tags} tags"
        );
        let n = max_tags + 1;
        let entries = (0..n)
            .map(|i| Entry {
                next: if i + 1 < n { i + 1 } else { NONE },
                expect: 0,
                removing: false,
                phase: 0,
                cap: 0,
                data: None,
            })
            .collect();
        TagList {
            entries,
            head: 0,
            tail: n - 1,
        }
    }

    /// The entry the next APPEND fills and the one it names for the APPEND
    /// after it; `None` when only the spare is free.
    pub(super) fn next_append(&self) -> Option<(TagHandle, u16)> {
        let next = self.entries[usize::from(self.head)].next;
        (next != NONE).then_some((TagHandle(self.head), next))
    }

    /// Takes the head entry for an APPEND of a buffer of `cap` bytes that
    /// was posted (with `signaled` its CQE is awaited too), at software's
    /// unexpected count `phase`.
    pub(super) fn appended(&mut self, data: U, cap: u32, phase: u16, signaled: bool) -> TagHandle {
        let h = self.head;
        let e = &mut self.entries[usize::from(h)];
        self.head = e.next;
        e.next = NONE;
        e.expect = 1 + u8::from(signaled);
        e.removing = false;
        e.phase = phase;
        e.cap = cap;
        e.data = Some(data);
        TagHandle(h)
    }

    /// Whether a REMOVE of `h` may be posted: it is in the list, and no
    /// REMOVE of it is posted yet.
    pub(super) fn removable(&self, h: TagHandle) -> bool {
        self.entries
            .get(usize::from(h.0))
            .is_some_and(|e| e.expect != 0 && !e.removing)
    }

    /// Marks `h` as being removed by a posted REMOVE (with `signaled` its
    /// CQE is awaited). False if it was not [`removable`](Self::removable).
    pub(super) fn removing(&mut self, h: TagHandle, signaled: bool) -> bool {
        if !self.removable(h) {
            return false;
        }
        let e = &mut self.entries[usize::from(h.0)];
        e.removing = true;
        e.expect += u8::from(signaled);
        true
    }

    /// Software's unexpected count when `h` was appended.
    pub(super) fn phase(&self, h: TagHandle) -> u16 {
        self.entries[usize::from(h.0)].phase
    }

    /// Bytes of `h`'s buffer.
    pub(super) fn cap(&self, h: TagHandle) -> u32 {
        self.entries[usize::from(h.0)].cap
    }

    /// Whether `h` is in use (appended and not yet freed).
    pub(super) fn in_use(&self, h: TagHandle) -> bool {
        self.entries
            .get(usize::from(h.0))
            .is_some_and(|e| e.expect != 0)
    }

    /// One CQE `h` waited for has come. When it was the last, the entry is
    /// free again and its data is handed back.
    pub(super) fn release(&mut self, h: TagHandle) -> Option<U> {
        let i = usize::from(h.0);
        let e = &mut self.entries[i];
        debug_assert!(e.expect > 0, "tag {} released while free", h.0);
        e.expect = e.expect.saturating_sub(1);
        if e.expect != 0 {
            return None;
        }
        let data = e.data.take();
        e.removing = false;
        self.entries[usize::from(self.tail)].next = h.0;
        self.tail = h.0;
        data
    }

    /// Tags in use.
    pub(super) fn used(&self) -> usize {
        self.entries.iter().filter(|e| e.expect != 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_fill_the_entry_the_previous_one_named() {
        let mut l = TagList::new(3);
        let mut named = 0;
        for i in 0..3u16 {
            let (h, next) = l.next_append().unwrap();
            assert_eq!(h.index(), named, "append {i} fills the named entry");
            assert_eq!(l.appended(i, 0, 0, true), h);
            named = next;
        }
        assert_eq!(l.next_append(), None, "the spare stays free");
        assert_eq!(l.used(), 3);
    }

    #[test]
    fn a_freed_entry_goes_to_the_tail_and_is_named_in_turn() {
        let mut l = TagList::new(2);
        let a = l.appended('a', 0, 0, true);
        let b = l.appended('b', 0, 0, true);
        assert_eq!(l.next_append(), None);
        // The APPEND's CQE, then a REMOVE (signaled) and its success.
        assert_eq!(l.release(a), None);
        assert!(l.removing(a, true));
        assert!(!l.removing(a, true), "removed twice");
        assert_eq!(l.release(a), None);
        assert_eq!(l.release(a), Some('a'));
        assert!(!l.in_use(a));
        // The head (the spare, entry 2) now names entry 0.
        assert_eq!(l.next_append(), Some((TagHandle(2), a.index())));
        let c = l.appended('c', 0, 5, false);
        assert_eq!((c.index(), l.phase(c)), (2, 5));
        assert_eq!(l.next_append(), None);
        assert!(l.in_use(b) && l.in_use(c));
        assert!(!l.removing(TagHandle(9), true), "no such entry");
    }
}
