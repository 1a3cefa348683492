//! Which writes a worker has applied, by request id, per slot: a client
//! sends a write again when its answer was lost (its member died, or the
//! deadline of an answer passed), and the write must not be applied twice
//! (another write in between, the client's own included, would be
//! overwritten by the repeat).
//!
//! Per slot and client, a window ([`Window`]): the highest request number
//! applied, and which of the [`WINDOW`] numbers below it were applied. A
//! client numbers its writes in order, and has at most its depth of them
//! in flight; a write sent again falls in the window unless more than
//! [`WINDOW`] newer writes of its client reached the slot meanwhile. Such a
//! write, or one of a client the slot no longer remembers (a slot keeps at
//! most [`MAX_CLIENTS`] clients: the least recently written one goes when
//! one more comes, and the slot then notes that it forgot some), is
//! decided by the request's [`FLAG_RESENT`]: a first send cannot have been
//! applied, and is; one sent again may have been, and is refused
//! ([`Seen::TooOld`]) rather than applied a second time. So nothing is
//! ever applied twice.
//!
//! Backups record the ids of the writes they apply, in the primary's order,
//! and a copy to a new backup carries the primary's windows (and whether it
//! forgot clients), so a backup promoted to primary decides as its primary
//! would have. A migration does not carry them: a slot imported from
//! another member starts as one that forgot clients.
//!
//! [`FLAG_RESENT`]: kvs_proto::proto::FLAG_RESENT

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use kvs_proto::replica::IdsEntry;
use kvs_proto::RequestId;

/// Hashes a client id by one multiplication (Fibonacci hashing): cheaper
/// than SipHash on every write. Ids come from clients, so a chosen set can
/// collide; a slot keeps at most [`MAX_CLIENTS`] of them, which bounds
/// what that costs.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by ids or fingerprints, hashed by [`IdHasher`].
pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Request numbers a client's window covers below its highest.
pub(crate) const WINDOW: u64 = kvs_proto::replica::IDS_WINDOW;
/// Clients remembered per slot.
pub(crate) const MAX_CLIENTS: usize = 256;

/// What a slot knows of one client's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    /// The highest request number applied.
    top: u64,
    /// Numbers up to this one are not known either way: the window was
    /// made after the slot forgot some client (it may be this one), so
    /// what came before its first number is unknown. 0: all known.
    floor: u64,
    /// Bit `i`: number `top - i` was applied.
    applied: u128,
    /// When it was last written (a count of the records).
    touched: u64,
}

impl Window {
    /// Whether `q` was applied: `Some(true)` or `Some(false)` within the
    /// window (or above it: not yet), `None` below it or at its floor.
    #[inline]
    fn has(&self, q: u64) -> Option<bool> {
        if q <= self.floor {
            return None;
        }
        if q > self.top {
            return Some(false);
        }
        let back = self.top - q;
        (back < WINDOW).then(|| self.applied >> back & 1 == 1)
    }

    /// Notes number `q` applied (nothing if below the window).
    #[inline]
    fn set(&mut self, q: u64) {
        if q > self.top {
            let up = q - self.top;
            self.applied = if up >= WINDOW { 0 } else { self.applied << up };
            self.applied |= 1;
            self.top = q;
        } else if self.top - q < WINDOW {
            self.applied |= 1 << (self.top - q);
        }
    }

    /// Takes in another window of the same client (what either knows
    /// applied; unknown below the higher floor).
    fn merge(&mut self, top: u64, floor: u64, applied: u128) {
        self.floor = self.floor.max(floor);
        let (hi, lo) = if top >= self.top {
            ((top, applied), (self.top, self.applied))
        } else {
            ((self.top, self.applied), (top, applied))
        };
        let down = hi.0 - lo.0;
        self.top = hi.0;
        self.applied = hi.1 | if down >= WINDOW { 0 } else { lo.1 << down };
    }
}

/// What a slot remembers of whether a write was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Not applied here: apply it.
    New,
    /// Applied already: answer as the first time, apply nothing.
    Applied,
    /// Sent again, and too old to tell: refuse it, apply nothing.
    TooOld,
}

/// One slot's clients.
#[derive(Debug, Default)]
struct SlotIds {
    clients: IdMap<Window>,
    /// Some client's window was dropped (more than [`MAX_CLIENTS`]).
    forgot: bool,
}

/// The request ids of applied writes, per slot (see the [module
/// docs](self)).
#[derive(Debug, Default)]
pub(crate) struct Dedup {
    /// By slot number (grown on first use).
    slots: Vec<Option<SlotIds>>,
    clock: u64,
}

impl Dedup {
    fn slot(&self, slot: u32) -> Option<&SlotIds> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    fn slot_mut(&mut self, slot: u32) -> &mut SlotIds {
        let i = slot as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i].get_or_insert_with(SlotIds::default)
    }

    /// Whether write `id` to `slot` was applied; `resent`: the client sent
    /// it before.
    #[inline]
    pub fn check(&self, slot: u32, id: RequestId, resent: bool) -> Seen {
        let RequestId { client, request } = id;
        let s = self.slot(slot);
        let known = match s.and_then(|s| s.clients.get(&client)) {
            Some(w) => w.has(request),
            // A client the slot never forgot is one it never saw.
            None if !s.is_some_and(|s| s.forgot) => Some(false),
            None => None,
        };
        match known {
            Some(true) => Seen::Applied,
            Some(false) => Seen::New,
            // Unknown: a first send cannot have been applied.
            None if !resent => Seen::New,
            None => Seen::TooOld,
        }
    }

    /// Whether write `id` was applied to `slot`, as far as the slot
    /// remembers.
    #[cfg(test)]
    pub fn seen(&self, slot: u32, id: RequestId) -> bool {
        self.check(slot, id, true) == Seen::Applied
    }

    /// Write `id` was applied to `slot` (none: no id).
    #[inline]
    pub fn record(&mut self, slot: u32, id: RequestId) {
        let RequestId { client, request } = id;
        if client == 0 && request == 0 {
            return;
        }
        self.clock += 1;
        let now = self.clock;
        let w = self.window(slot, client, now, request.saturating_sub(1));
        w.set(request);
        w.touched = now;
    }

    /// `client`'s window of `slot`, made empty if there is none (dropping
    /// the least recently written one if the slot is full). A new window
    /// of a slot that forgot some client knows nothing up to `floor`.
    #[inline]
    fn window(&mut self, slot: u32, client: u64, now: u64, floor: u64) -> &mut Window {
        let s = self.slot_mut(slot);
        if !s.clients.contains_key(&client) && s.clients.len() >= MAX_CLIENTS {
            let oldest = s.clients.iter().min_by_key(|(_, w)| w.touched);
            if let Some(old) = oldest.map(|(&c, _)| c) {
                s.clients.remove(&old);
                s.forgot = true;
            }
        }
        let floor = if s.forgot { floor } else { 0 };
        s.clients.entry(client).or_insert(Window {
            top: 0,
            floor,
            applied: 0,
            touched: now,
        })
    }

    /// The windows remembered for `slot`, by client (for a copy to a new
    /// backup).
    pub fn clients(&self, slot: u32) -> impl Iterator<Item = IdsEntry> + '_ {
        self.slot(slot).into_iter().flat_map(|s| {
            s.clients.iter().map(|(&client, w)| IdsEntry {
                client,
                top: w.top,
                floor: w.floor,
                applied: w.applied,
            })
        })
    }

    /// Whether `slot` dropped some client's window.
    pub fn forgot(&self, slot: u32) -> bool {
        self.slot(slot).is_some_and(|s| s.forgot)
    }

    /// Takes a copy's window for a client of `slot`.
    pub fn merge(&mut self, slot: u32, e: &IdsEntry) {
        if e.top == 0 {
            return;
        }
        self.clock += 1;
        let now = self.clock;
        let w = self.window(slot, e.client, now, e.floor);
        w.merge(e.top, e.floor, e.applied);
        w.touched = now;
    }

    /// A copy says its primary forgot some clients of `slot`.
    pub fn set_forgot(&mut self, slot: u32) {
        self.slot_mut(slot).forgot = true;
    }

    /// `slot` left this worker: what it knew of it goes.
    pub fn forget(&mut self, slot: u32) {
        if let Some(m) = self.slots.get_mut(slot as usize) {
            *m = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_writes_in_flight_than_sixteen_are_all_remembered() {
        let mut d = Dedup::default();
        for q in 1..=40 {
            d.record(3, RequestId::new(7, q));
        }
        let forgotten: Vec<u64> = (1..=40)
            .filter(|&q| !d.seen(3, RequestId::new(7, q)))
            .collect();
        assert!(
            forgotten.is_empty(),
            "would be applied again: {forgotten:?}"
        );
    }

    #[test]
    fn a_window_tells_applied_new_and_too_old_apart() {
        let mut d = Dedup::default();
        // Applied out of order, with gaps (other slots' numbers).
        for q in [5, 3, 9, 200, 150] {
            d.record(3, RequestId::new(7, q));
        }
        for q in [150, 200] {
            assert_eq!(d.check(3, RequestId::new(7, q), true), Seen::Applied, "{q}");
        }
        // In the window and not applied, or above it: new, sent again or not.
        for q in [151, 199, 201, 1000] {
            assert_eq!(d.check(3, RequestId::new(7, q), true), Seen::New, "{q}");
        }
        // Below the window: a first send is new (it cannot have been
        // applied); one sent again cannot be told, and is refused.
        for q in [1, 3, 5, 9, 200 - WINDOW] {
            assert_eq!(d.check(3, RequestId::new(7, q), false), Seen::New, "{q}");
            assert_eq!(d.check(3, RequestId::new(7, q), true), Seen::TooOld, "{q}");
        }
        assert_eq!(
            d.check(3, RequestId::new(7, 200 - WINDOW + 1), true),
            Seen::New
        );
        // Per slot and client; a slot that never forgot a client never saw
        // an unknown one.
        assert_eq!(d.check(4, RequestId::new(7, 200), true), Seen::New);
        assert_eq!(d.check(3, RequestId::new(8, 200), true), Seen::New);
        // A jump past the window forgets the bits below it.
        d.record(3, RequestId::new(7, 200 + 2 * WINDOW));
        assert_eq!(d.check(3, RequestId::new(7, 200), true), Seen::TooOld);
        // No id: nothing to remember.
        d.record(6, RequestId::new(0, 0));
        assert!(d.clients(6).next().is_none());
    }

    #[test]
    fn a_slot_that_forgot_a_client_refuses_its_writes_sent_again() {
        let mut d = Dedup::default();
        for c in 100..(100 + MAX_CLIENTS as u64) {
            d.record(5, RequestId::new(c, 10));
        }
        assert!(!d.forgot(5));
        d.record(5, RequestId::new(100, 11));
        d.record(5, RequestId::new(9999, 1));
        assert!(d.forgot(5));
        // Client 101 was the least recently written: forgotten. Its write
        // sent again may have been applied: refused; a first send is new.
        assert_eq!(d.check(5, RequestId::new(101, 10), true), Seen::TooOld);
        assert_eq!(d.check(5, RequestId::new(101, 10), false), Seen::New);
        assert_eq!(d.check(5, RequestId::new(100, 11), true), Seen::Applied);
        // It writes again: what came before its new window stays unknown.
        d.record(5, RequestId::new(101, 12));
        assert_eq!(d.check(5, RequestId::new(101, 10), true), Seen::TooOld);
        assert_eq!(d.check(5, RequestId::new(101, 12), true), Seen::Applied);
        assert_eq!(d.check(5, RequestId::new(101, 13), true), Seen::New);
    }

    #[test]
    fn a_copy_carries_the_windows_and_what_was_forgotten() {
        let mut d = Dedup::default();
        for q in 1..=40 {
            d.record(5, RequestId::new(7, q));
        }
        d.record(5, RequestId::new(8, 3));
        let mut other = Dedup::default();
        // The backup applied a later write of client 7 before the ids came.
        other.record(5, RequestId::new(7, 41));
        for e in d.clients(5) {
            other.merge(5, &e);
        }
        for q in 1..=41 {
            assert_eq!(
                other.check(5, RequestId::new(7, q), true),
                Seen::Applied,
                "{q}"
            );
        }
        assert_eq!(other.check(5, RequestId::new(8, 3), true), Seen::Applied);
        assert_eq!(other.check(5, RequestId::new(8, 2), true), Seen::New);
        assert!(!other.forgot(5));
        other.set_forgot(5);
        assert_eq!(other.check(5, RequestId::new(9, 1), true), Seen::TooOld);
        // A window with a floor keeps it across the copy.
        let mut third = Dedup::default();
        third.merge(
            5,
            &IdsEntry {
                client: 7,
                top: 50,
                floor: 45,
                applied: 1,
            },
        );
        assert_eq!(third.check(5, RequestId::new(7, 45), true), Seen::TooOld);
        assert_eq!(third.check(5, RequestId::new(7, 46), true), Seen::New);
        d.forget(5);
        assert!(d.clients(5).next().is_none() && !d.forgot(5));
    }
}
