//! WQE tables: the per-WQE user data the NIC does not keep, and the
//! free-space accounting of a queue, chosen by type at compile time.
//!
//! A CQE names a WQE by its `wqe_counter`; the table of the queue maps that
//! counter (masked by the ring size) back to what the user attached.
//!
//! | table | queue | what a CQE retires |
//! |---|---|---|
//! | [`OrderedDense`] | SQ, DCI | every WQE since the previous CQE; each has user data, the signaled one gets `Some(cqe)` |
//! | [`OrderedSparse`] | SQ, DCI | the signaled WQE's data; the free space of the unsignaled ones before it |
//! | [`Unordered`] | DCI streams | only the WQE it names; slots carry generation tags |
//! | [`CommandFifo`] | TM-SRQ command QP | the oldest signaled WQE outstanding, whatever counter the CQE names; the space of the unsignaled ones before it |
//! | [`OrderedRecv`] | RQ, SRQ | the receive WQE it names; exact free count |
//! | [`UnorderedRecv`] | TM-SRQ | the receive WQE it names; generation tags, no exact free count |
//!
//! Error CQEs retire exactly like normal ones and hand their entry out with the
//! error completion; nothing is retried.

use crate::cq::Completion;

/// A send queue's table. Counters are the 16-bit WQE counters of the SQ, in
/// 64-byte basic blocks (BBs).
pub trait SendTable {
    /// What `post` takes.
    type Input;
    /// What a retired WQE yields.
    type Output;
    /// Every WQE must be signaled (completion is per WQE).
    const ALWAYS_SIGNALED: bool;

    /// A table for a ring of `wqe_cnt` BBs (a power of two, at most 32768).
    fn with_capacity(wqe_cnt: u16) -> Self;
    /// Whether `bbs` BBs starting at counter `pi` may be written.
    fn has_room(&self, pi: u16, bbs: u16) -> bool;
    /// Whether this input asks for a CQE.
    fn wants_signal(input: &Self::Input) -> bool;
    /// Records the WQE occupying `[start, end)`; `input` is `None` for the NOP
    /// the queue pads with at the ring's end.
    fn record(&mut self, start: u16, end: u16, input: Option<Self::Input>, signaled: bool);
    /// Retires what completion `c` (for WQE counter `c.wqe_counter()`) completes.
    /// Returns the number of entries handed to `f`. A CQE naming no outstanding
    /// WQE is ignored (returns 0).
    fn retire<F: FnMut(Self::Output, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        f: F,
    ) -> usize;
    /// BBs posted and not yet retired (for unordered tables: an upper bound).
    fn outstanding(&self) -> u16;
}

#[derive(Debug)]
struct OrdSlot<D> {
    start: u16,
    end: u16,
    data: Option<D>,
}

/// The ring bookkeeping shared by the ordered send tables.
#[derive(Debug)]
struct OrderedCore<D> {
    slots: Box<[OrdSlot<D>]>,
    mask: u16,
    ci: u16,
    pi: u16,
}

impl<D> OrderedCore<D> {
    fn new(wqe_cnt: u16) -> Self {
        assert!(
            wqe_cnt.is_power_of_two(),
            "WQE count must be a power of two"
        );
        Self {
            slots: (0..wqe_cnt)
                .map(|_| OrdSlot {
                    start: 1,
                    end: 0,
                    data: None,
                })
                .collect(),
            mask: wqe_cnt - 1,
            ci: 0,
            pi: 0,
        }
    }
    #[inline(always)]
    fn has_room(&self, pi: u16, bbs: u16) -> bool {
        debug_assert_eq!(pi, self.pi);
        u32::from(pi.wrapping_sub(self.ci)) + u32::from(bbs) <= u32::from(self.mask) + 1
    }
    #[inline(always)]
    fn record(&mut self, start: u16, end: u16, data: Option<D>) {
        let s = &mut self.slots[usize::from(start & self.mask)];
        s.start = start;
        s.end = end;
        s.data = data;
        self.pi = end;
    }
    /// The slot index of an outstanding WQE starting at `wc`, if there is one.
    #[inline(always)]
    fn outstanding_start(&self, wc: u16) -> Option<usize> {
        let idx = usize::from(wc & self.mask);
        (wc.wrapping_sub(self.ci) < self.pi.wrapping_sub(self.ci) && self.slots[idx].start == wc)
            .then_some(idx)
    }
}

/// Ordered + Dense: every WQE carries user data; a CQE retires the whole range
/// since the previous one, in order, with `Some(cqe)` for the signaled WQE.
#[derive(Debug)]
pub struct OrderedDense<U>(OrderedCore<U>);

impl<U> SendTable for OrderedDense<U> {
    type Input = U;
    type Output = U;
    const ALWAYS_SIGNALED: bool = false;

    fn with_capacity(wqe_cnt: u16) -> Self {
        Self(OrderedCore::new(wqe_cnt))
    }
    #[inline(always)]
    fn has_room(&self, pi: u16, bbs: u16) -> bool {
        self.0.has_room(pi, bbs)
    }
    #[inline(always)]
    fn wants_signal(_: &U) -> bool {
        false
    }
    #[inline(always)]
    fn record(&mut self, start: u16, end: u16, input: Option<U>, _signaled: bool) {
        self.0.record(start, end, input)
    }
    #[inline]
    fn retire<F: FnMut(U, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        mut f: F,
    ) -> usize {
        let wc = c.wqe_counter();
        let Some(idx) = self.0.outstanding_start(wc) else {
            return 0;
        };
        let target = self.0.slots[idx].end;
        let mut pos = self.0.ci;
        let mut n = 0;
        while pos != target {
            let s = &mut self.0.slots[usize::from(pos & self.0.mask)];
            let next = s.end;
            if let Some(d) = s.data.take() {
                f(d, if pos == wc { Some(c) } else { None });
                n += 1;
            }
            pos = next;
        }
        self.0.ci = target;
        n
    }
    fn outstanding(&self) -> u16 {
        self.0.pi.wrapping_sub(self.0.ci)
    }
}

/// Ordered + Sparse: only signaled WQEs carry user data (`post(Some(u))` signals);
/// a CQE hands out that data and frees the space of the unsignaled WQEs before it.
#[derive(Debug)]
pub struct OrderedSparse<U>(OrderedCore<U>);

impl<U> SendTable for OrderedSparse<U> {
    type Input = Option<U>;
    type Output = U;
    const ALWAYS_SIGNALED: bool = false;

    fn with_capacity(wqe_cnt: u16) -> Self {
        Self(OrderedCore::new(wqe_cnt))
    }
    #[inline(always)]
    fn has_room(&self, pi: u16, bbs: u16) -> bool {
        self.0.has_room(pi, bbs)
    }
    #[inline(always)]
    fn wants_signal(input: &Option<U>) -> bool {
        input.is_some()
    }
    #[inline(always)]
    fn record(&mut self, start: u16, end: u16, input: Option<Option<U>>, _signaled: bool) {
        self.0.record(start, end, input.flatten())
    }
    #[inline]
    fn retire<F: FnMut(U, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        mut f: F,
    ) -> usize {
        let Some(idx) = self.0.outstanding_start(c.wqe_counter()) else {
            return 0;
        };
        let s = &mut self.0.slots[idx];
        self.0.ci = s.end;
        match s.data.take() {
            Some(d) => {
                f(d, Some(c));
                1
            }
            None => 0,
        }
    }
    fn outstanding(&self) -> u16 {
        self.0.pi.wrapping_sub(self.0.ci)
    }
}

/// First-in, first-out: the command QP of a tag-matching SRQ. Only commands
/// that ask for a CQE carry user data (`post(Some(u))`; the command's own
/// `CQE_REQ` flag must agree), and each CQE retires the oldest of them
/// still outstanding, with the space of the commands before it. The CQE's
/// `wqe_counter` is not read: rdma-core matches command CQEs to commands in
/// order, never by counter, and so does this table.
#[derive(Debug)]
pub struct CommandFifo<U>(OrderedSparse<U>);

impl<U> SendTable for CommandFifo<U> {
    type Input = Option<U>;
    type Output = U;
    const ALWAYS_SIGNALED: bool = false;

    fn with_capacity(wqe_cnt: u16) -> Self {
        Self(OrderedSparse::with_capacity(wqe_cnt))
    }
    #[inline(always)]
    fn has_room(&self, pi: u16, bbs: u16) -> bool {
        self.0.has_room(pi, bbs)
    }
    #[inline(always)]
    fn wants_signal(input: &Option<U>) -> bool {
        OrderedSparse::<U>::wants_signal(input)
    }
    #[inline(always)]
    fn record(&mut self, start: u16, end: u16, input: Option<Option<U>>, signaled: bool) {
        self.0.record(start, end, input, signaled)
    }
    /// The oldest outstanding WQE with data (a signaled command) takes the
    /// CQE, whatever counter it names.
    fn retire<F: FnMut(U, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        mut f: F,
    ) -> usize {
        let core = &mut (self.0).0;
        let mut pos = core.ci;
        while pos != core.pi {
            let s = &mut core.slots[usize::from(pos & core.mask)];
            let end = s.end;
            if let Some(d) = s.data.take() {
                core.ci = end;
                f(d, Some(c));
                return 1;
            }
            pos = end;
        }
        0
    }
    fn outstanding(&self) -> u16 {
        self.0.outstanding()
    }
}

/// A handle on a WQE in an unordered table: its counter and the slot's
/// generation when it was posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    /// WQE counter.
    pub counter: u16,
    /// Slot generation.
    pub gen: u32,
}

#[derive(Debug)]
enum USlot<U> {
    Free,
    Head {
        counter: u16,
        bbs: u16,
        data: Option<U>,
    },
    Tail,
}

/// Unordered: every WQE is signaled and retired individually by its own CQE.
/// Free space is per slot; generation tags tell a reused slot from the WQE a
/// [`Ticket`] was issued for.
#[derive(Debug)]
pub struct Unordered<U> {
    slots: Box<[USlot<U>]>,
    gens: Box<[u32]>,
    mask: u16,
    busy: u16,
}

impl<U> Unordered<U> {
    /// The ticket of the WQE just recorded at `counter`.
    pub fn ticket(&self, counter: u16) -> Ticket {
        Ticket {
            counter,
            gen: self.gens[usize::from(counter & self.mask)],
        }
    }
    /// Whether the WQE of `t` is still outstanding.
    pub fn is_pending(&self, t: Ticket) -> bool {
        let i = usize::from(t.counter & self.mask);
        self.gens[i] == t.gen
            && matches!(self.slots[i], USlot::Head { counter, .. } if counter == t.counter)
    }
}

impl<U> SendTable for Unordered<U> {
    type Input = U;
    type Output = U;
    const ALWAYS_SIGNALED: bool = true;

    fn with_capacity(wqe_cnt: u16) -> Self {
        assert!(
            wqe_cnt.is_power_of_two(),
            "WQE count must be a power of two"
        );
        Self {
            slots: (0..wqe_cnt).map(|_| USlot::Free).collect(),
            gens: vec![0; usize::from(wqe_cnt)].into_boxed_slice(),
            mask: wqe_cnt - 1,
            busy: 0,
        }
    }
    fn has_room(&self, pi: u16, bbs: u16) -> bool {
        (0..bbs).all(|i| {
            matches!(
                self.slots[usize::from(pi.wrapping_add(i) & self.mask)],
                USlot::Free
            )
        })
    }
    fn wants_signal(_: &U) -> bool {
        true
    }
    fn record(&mut self, start: u16, end: u16, input: Option<U>, _signaled: bool) {
        let bbs = end.wrapping_sub(start);
        let i = usize::from(start & self.mask);
        self.gens[i] = self.gens[i].wrapping_add(1);
        self.slots[i] = USlot::Head {
            counter: start,
            bbs,
            data: input,
        };
        for k in 1..bbs {
            self.slots[usize::from(start.wrapping_add(k) & self.mask)] = USlot::Tail;
        }
        self.busy += bbs;
    }
    fn retire<F: FnMut(U, Option<&Completion<'_>>)>(
        &mut self,
        c: &Completion<'_>,
        mut f: F,
    ) -> usize {
        let wc = c.wqe_counter();
        let i = usize::from(wc & self.mask);
        let (bbs, data) = match &mut self.slots[i] {
            USlot::Head { counter, bbs, data } if *counter == wc => (*bbs, data.take()),
            _ => return 0,
        };
        for k in 0..bbs {
            self.slots[usize::from(wc.wrapping_add(k) & self.mask)] = USlot::Free;
        }
        self.busy -= bbs;
        match data {
            Some(d) => {
                f(d, Some(c));
                1
            }
            None => 0,
        }
    }
    fn outstanding(&self) -> u16 {
        self.busy
    }
}

/// A receive queue's table, indexed by receive WQE index.
pub trait RecvTable {
    /// What a receive WQE carries.
    type Entry;
    /// A table for `wqe_cnt` receive WQEs (a power of two).
    fn with_capacity(wqe_cnt: u16) -> Self;
    /// Whether WQE index `idx` is free to post.
    fn is_free(&self, idx: u16) -> bool;
    /// Records a posted WQE.
    fn insert(&mut self, idx: u16, e: Self::Entry);
    /// Retires WQE `idx` (a CQE's `wqe_counter`); `None` if it was not posted.
    fn take(&mut self, idx: u16) -> Option<Self::Entry>;
    /// Posted WQEs not yet retired.
    fn outstanding(&self) -> u16;
}

/// RQ / SRQ table: receive WQEs complete in the order the NIC consumes them, so
/// the free count is exact.
#[derive(Debug)]
pub struct OrderedRecv<U> {
    slots: Box<[Option<U>]>,
    mask: u16,
    outstanding: u16,
}

impl<U> OrderedRecv<U> {
    /// Exactly how many more WQEs fit.
    pub fn free(&self) -> u16 {
        self.mask + 1 - self.outstanding
    }
}

impl<U> RecvTable for OrderedRecv<U> {
    type Entry = U;
    fn with_capacity(wqe_cnt: u16) -> Self {
        assert!(
            wqe_cnt.is_power_of_two(),
            "WQE count must be a power of two"
        );
        Self {
            slots: (0..wqe_cnt).map(|_| None).collect(),
            mask: wqe_cnt - 1,
            outstanding: 0,
        }
    }
    #[inline(always)]
    fn is_free(&self, idx: u16) -> bool {
        self.slots[usize::from(idx & self.mask)].is_none()
    }
    #[inline(always)]
    fn insert(&mut self, idx: u16, e: U) {
        self.slots[usize::from(idx & self.mask)] = Some(e);
        self.outstanding += 1;
    }
    #[inline(always)]
    fn take(&mut self, idx: u16) -> Option<U> {
        let e = self.slots[usize::from(idx & self.mask)].take();
        if e.is_some() {
            self.outstanding -= 1;
        }
        e
    }
    fn outstanding(&self) -> u16 {
        self.outstanding
    }
}

/// TM-SRQ table: completions arrive in tag order, not posting order; each slot
/// carries a generation tag so a [`Ticket`] can tell its WQE from a later reuse
/// of the slot. There is no exact free count: posting looks for a free slot.
#[derive(Debug)]
pub struct UnorderedRecv<U> {
    slots: Box<[Option<U>]>,
    gens: Box<[u32]>,
    mask: u16,
    outstanding: u16,
}

impl<U> UnorderedRecv<U> {
    /// The ticket of the WQE at `idx`.
    pub fn ticket(&self, idx: u16) -> Ticket {
        Ticket {
            counter: idx,
            gen: self.gens[usize::from(idx & self.mask)],
        }
    }
    /// Whether the WQE of `t` is still posted.
    pub fn is_pending(&self, t: Ticket) -> bool {
        let i = usize::from(t.counter & self.mask);
        self.gens[i] == t.gen && self.slots[i].is_some()
    }
}

impl<U> RecvTable for UnorderedRecv<U> {
    type Entry = U;
    fn with_capacity(wqe_cnt: u16) -> Self {
        assert!(
            wqe_cnt.is_power_of_two(),
            "WQE count must be a power of two"
        );
        Self {
            slots: (0..wqe_cnt).map(|_| None).collect(),
            gens: vec![0; usize::from(wqe_cnt)].into_boxed_slice(),
            mask: wqe_cnt - 1,
            outstanding: 0,
        }
    }
    fn is_free(&self, idx: u16) -> bool {
        self.slots[usize::from(idx & self.mask)].is_none()
    }
    fn insert(&mut self, idx: u16, e: U) {
        let i = usize::from(idx & self.mask);
        self.gens[i] = self.gens[i].wrapping_add(1);
        self.slots[i] = Some(e);
        self.outstanding += 1;
    }
    fn take(&mut self, idx: u16) -> Option<U> {
        let e = self.slots[usize::from(idx & self.mask)].take();
        if e.is_some() {
            self.outstanding -= 1;
        }
        e
    }
    fn outstanding(&self) -> u16 {
        self.outstanding
    }
}
