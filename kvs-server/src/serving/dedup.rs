//! Which writes a worker has applied, by request id, per slot: a client
//! sends a write again when its answer was lost (its member died, or the
//! deadline of an answer passed), and the write must not be applied twice
//! (another client's write in between would be overwritten by the repeat).
//!
//! Per slot and client, the last [`RECENT`] request numbers applied: a
//! client re-sends within its request deadline, long before that many
//! newer writes of its to the same slot. A slot keeps at most
//! [`MAX_CLIENTS`] clients (the oldest entry goes first when one more
//! comes). Backups remember the ids of the writes they apply, so a backup
//! promoted to primary knows them too.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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

/// Request numbers remembered per slot and client (as many as a copy's
/// request ids carry).
pub(crate) const RECENT: usize = kvs_proto::replica::IDS_PER_CLIENT;
/// Clients remembered per slot.
pub(crate) const MAX_CLIENTS: usize = 256;

#[derive(Debug, Clone, Copy)]
struct Recent {
    ids: [u64; RECENT],
    next: usize,
    /// When it was last written (a count of the slot's records).
    touched: u64,
}

/// The request ids of applied writes, per slot (see the [module
/// docs](self)).
#[derive(Debug, Default)]
pub(crate) struct Dedup {
    /// By slot number (grown on first use).
    slots: Vec<Option<IdMap<Recent>>>,
    clock: u64,
}

impl Dedup {
    /// Whether `client`'s request `request` was applied to `slot`.
    #[inline]
    pub fn seen(&self, slot: u32, (client, request): (u64, u64)) -> bool {
        self.slots
            .get(slot as usize)
            .and_then(Option::as_ref)
            .and_then(|m| m.get(&client))
            .is_some_and(|r| r.ids.contains(&request))
    }

    /// `client`'s request `request` was applied to `slot`.
    #[inline]
    pub fn record(&mut self, slot: u32, (client, request): (u64, u64)) {
        if client == 0 && request == 0 {
            return;
        }
        self.clock += 1;
        let now = self.clock;
        let i = slot as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        let m = self.slots[i].get_or_insert_with(IdMap::default);
        if !m.contains_key(&client) && m.len() >= MAX_CLIENTS {
            if let Some(&old) = m.iter().min_by_key(|(_, r)| r.touched).map(|(c, _)| c) {
                m.remove(&old);
            }
        }
        let r = m.entry(client).or_insert(Recent {
            ids: [0; RECENT],
            next: 0,
            touched: now,
        });
        r.ids[r.next] = request;
        r.next = (r.next + 1) % RECENT;
        r.touched = now;
    }

    /// The request numbers remembered for `slot`, by client (for a copy to
    /// a new backup).
    pub fn clients(&self, slot: u32) -> impl Iterator<Item = (u64, [u64; RECENT])> + '_ {
        self.slots
            .get(slot as usize)
            .and_then(Option::as_ref)
            .into_iter()
            .flat_map(|m| m.iter().map(|(&c, r)| (c, r.ids)))
    }

    /// Takes a copy's request numbers for `client` of `slot` (0: none).
    pub fn merge(&mut self, slot: u32, client: u64, ids: &[u64; RECENT]) {
        for &q in ids.iter().filter(|&&q| q != 0) {
            if !self.seen(slot, (client, q)) {
                self.record(slot, (client, q));
            }
        }
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
    fn applied_ids_are_seen_per_slot_and_the_oldest_go_first() {
        let mut d = Dedup::default();
        assert!(!d.seen(3, (7, 1)));
        d.record(3, (7, 1));
        assert!(d.seen(3, (7, 1)));
        assert!(!d.seen(4, (7, 1)), "per slot");
        assert!(!d.seen(3, (8, 1)), "per client");
        // The last RECENT of a client's requests are kept.
        for q in 2..=(RECENT as u64 + 1) {
            d.record(3, (7, q));
        }
        assert!(!d.seen(3, (7, 1)));
        assert!(d.seen(3, (7, 2)) && d.seen(3, (7, RECENT as u64 + 1)));
        // At most MAX_CLIENTS a slot: the least recently written goes.
        for c in 100..(100 + MAX_CLIENTS as u64) {
            d.record(5, (c, 1));
        }
        d.record(5, (100, 2));
        d.record(5, (9999, 1));
        assert!(d.seen(5, (9999, 1)) && d.seen(5, (100, 2)));
        assert!(!d.seen(5, (101, 1)), "the oldest went");
        // A copy carries them to another worker.
        let mut other = Dedup::default();
        for (c, ids) in d.clients(5) {
            other.merge(5, c, &ids);
        }
        assert!(other.seen(5, (9999, 1)) && other.seen(5, (100, 2)));
        assert!(!other.seen(5, (101, 1)) && !other.seen(3, (7, 2)));
        d.forget(5);
        assert!(!d.seen(5, (9999, 1)));
        // No id: nothing to remember.
        d.record(6, (0, 0));
        assert!(!d.seen(6, (0, 0)));
    }
}
