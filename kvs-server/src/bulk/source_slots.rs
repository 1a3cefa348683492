//! A source's side of migrations: the slots this member gave away, frozen
//! as they were at the handover, until the map says their import is done;
//! and the tickets that let a target pull them over the bulk port. Also the
//! snapshots a primary copies to a new backup, each under a ticket of its
//! own that the backup redeems on the same port.

use kvs_proto::Ticket;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::store::SlotRecords;

use super::wire::PullSetup;
use crate::bulk::TicketError;

/// How long a ticket may wait for its bulk connection.
const TICKET_LIFE: Duration = Duration::from_secs(60);

/// The slots held for their new owners, and the open tickets.
#[derive(Debug, Default)]
pub(crate) struct SourceSlots {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    slots: HashMap<u32, Arc<SlotRecords>>,
    tickets: Vec<PullTicket>,
    copies: Vec<CopyTicket>,
}

/// A snapshot for a new backup, until it is pulled.
#[derive(Debug)]
struct CopyTicket {
    id: Ticket,
    first: u32,
    end: u32,
    held: Held,
    expires: Instant,
}

#[derive(Debug)]
struct PullTicket {
    id: Ticket,
    version: u32,
    first: u32,
    end: u32,
    expires: Instant,
}

/// Slots let go of by [`SourceSlots::release`], not freed yet.
#[derive(Debug, Default)]
pub(crate) struct Released {
    pub slots: Vec<Arc<SlotRecords>>,
    /// Bytes of their keys and values.
    pub bytes: usize,
}

/// Frees `released` on a thread of its own. Dropping a slot's records is
/// one `free` per record, tens of milliseconds for a chunk of a migration,
/// and the control thread, which lets them go, must not stall on it: while
/// it frees, it answers no pull ticket, no status and no vote. Freed in
/// place if no thread can start.
pub(crate) fn free_elsewhere(released: Released) {
    if released.slots.is_empty() {
        return;
    }
    // If no thread starts, the closure is dropped here, and the records
    // with it.
    let spawned = std::thread::Builder::new()
        .name("kvs-free".into())
        .spawn(move || drop(released));
    if let Err(e) = spawned {
        tracing::error!("cannot start a thread to free migrated slots (freed here): {e}");
    }
}

/// The records of a pull's slots, in slot order.
pub(crate) type Held = Vec<(u32, Arc<SlotRecords>)>;

impl SourceSlots {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves the data as it
        // was: every change below is a single insert or remove.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds slot `slot`'s records for its new owner.
    pub fn hold(&self, slot: u32, records: Arc<SlotRecords>) {
        self.lock().slots.insert(slot, records);
    }

    /// Holds slot `slot`'s records as a worker recovered them from its log:
    /// every worker holds the exports under way at the stop, the one that
    /// had the slot with its records, the others with none; none never
    /// replaces records.
    pub fn hold_recovered(&self, slot: u32, records: Arc<SlotRecords>) {
        let mut g = self.lock();
        let e = g.slots.entry(slot).or_default();
        if e.is_empty() {
            *e = records;
        }
    }

    /// Slot `slot`'s records, if held.
    pub fn get(&self, slot: u32) -> Option<Arc<SlotRecords>> {
        self.lock().slots.get(&slot).cloned()
    }

    /// Lets go of every held slot `keep` says is no longer needed: returns
    /// them, for the caller to free where the time it takes delays nothing
    /// ([`free_elsewhere`]). A transfer still reading one keeps it alive
    /// until it ends.
    pub fn release(&self, keep: impl Fn(u32) -> bool) -> Released {
        let mut g = self.lock();
        let gone: Vec<u32> = g.slots.keys().copied().filter(|&s| !keep(s)).collect();
        let mut out = Released::default();
        for s in gone {
            if let Some(r) = g.slots.remove(&s) {
                out.bytes += r.bytes();
                out.slots.push(r);
            }
        }
        out
    }

    /// Slots, records and bytes held.
    pub fn held(&self) -> (usize, usize, usize) {
        let g = self.lock();
        let (mut n, mut b) = (0, 0);
        for r in g.slots.values() {
            n += r.len();
            b += r.bytes();
        }
        (g.slots.len(), n, b)
    }

    /// A ticket for pulling `first..end`, which must all be held.
    pub fn issue(&self, version: u32, first: u32, end: u32) -> Result<Ticket, TicketError> {
        let mut g = self.lock();
        if first >= end {
            return Err(TicketError::EmptyRange { first, end });
        }
        if let Some(s) = (first..end).find(|s| !g.slots.contains_key(s)) {
            return Err(TicketError::NotHeld(s));
        }
        let now = Instant::now();
        g.tickets.retain(|t| t.expires > now);
        let id = random_id().map_err(TicketError::NoRandomness)?;
        g.tickets.push(PullTicket {
            id,
            version,
            first,
            end,
            expires: now + TICKET_LIFE,
        });
        Ok(id)
    }

    /// A ticket for pulling `held` (snapshots of slots in increasing
    /// order, for one backup); the ticket and the slot range it covers.
    pub fn issue_copy(&self, held: Held) -> Result<(Ticket, u32, u32), TicketError> {
        let (Some(&(first, _)), Some(&(last, _))) = (held.first(), held.last()) else {
            return Err(TicketError::NoSlots);
        };
        let id = random_id().map_err(TicketError::NoRandomness)?;
        let now = Instant::now();
        let mut g = self.lock();
        g.copies.retain(|t| t.expires > now);
        g.copies.push(CopyTicket {
            id,
            first,
            end: last + 1,
            held,
            expires: now + TICKET_LIFE,
        });
        Ok((id, first, last + 1))
    }

    /// Frees a copy's snapshot not pulled yet (the copy starts over, or is
    /// no longer wanted).
    pub fn cancel_copy(&self, id: &Ticket) {
        self.lock().copies.retain(|t| &t.id != id);
    }

    /// The records a bulk connection's setup may have, and whether they are
    /// a copy's snapshot (else a migration's frozen slots): its ticket must
    /// be open and match; it is used up.
    pub fn redeem(&self, s: &PullSetup) -> Option<(Held, bool)> {
        let mut g = self.lock();
        let now = Instant::now();
        if let Some(i) = g.copies.iter().position(|t| {
            t.expires > now && t.id == s.ticket && (t.first, t.end) == (s.first, s.end)
        }) {
            return Some((g.copies.swap_remove(i).held, true));
        }
        let i = g.tickets.iter().position(|t| {
            t.expires > now
                && t.id == s.ticket
                && (t.version, t.first, t.end) == (s.version, s.first, s.end)
        })?;
        g.tickets.swap_remove(i);
        let held = (s.first..s.end)
            .map(|slot| g.slots.get(&slot).map(|r| (slot, r.clone())))
            .collect::<Option<Held>>()?;
        Some((held, false))
    }
}

/// A new ticket: 16 bytes from the kernel's random source.
fn random_id() -> std::io::Result<Ticket> {
    let mut b = [0u8; 16];
    crate::random::fill(&mut b)?;
    Ok(Ticket::from_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_open_exactly_the_slots_held_once() {
        let o = SourceSlots::default();
        for s in 4..8 {
            o.hold(s, Arc::default());
        }
        assert!(matches!(o.issue(3, 3, 8), Err(TicketError::NotHeld(3))));
        let t = o.issue(3, 4, 8).unwrap();
        let setup = PullSetup {
            version: 3,
            first: 4,
            end: 8,
            ticket: t,
            rails: 1,
        };
        let wrong = PullSetup {
            ticket: Ticket::from_bytes([0; 16]),
            ..setup.clone()
        };
        assert!(o.redeem(&wrong).is_none());
        let other = PullSetup {
            first: 5,
            ..setup.clone()
        };
        assert!(o.redeem(&other).is_none());
        assert_eq!(
            o.redeem(&setup).map(|(h, copy)| (h.len(), copy)),
            Some((4, false))
        );
        assert!(o.redeem(&setup).is_none(), "used up");
        let r = o.release(|s| s >= 6);
        assert_eq!((r.slots.len(), r.bytes), (2, 0));
        assert_eq!(o.held().0, 2);
    }

    #[test]
    fn a_copy_ticket_opens_its_snapshots_once() {
        let o = SourceSlots::default();
        let held: Held = vec![(3, Arc::default()), (9, Arc::default())];
        let (t, first, end) = o.issue_copy(held).unwrap();
        assert_eq!((first, end), (3, 10));
        let setup = PullSetup {
            version: 0,
            first,
            end,
            ticket: t,
            rails: 1,
        };
        assert!(o
            .redeem(&PullSetup {
                end: 9,
                ..setup.clone()
            })
            .is_none());
        let (h, copy) = o.redeem(&setup).unwrap();
        assert!(copy);
        assert_eq!(h.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [3, 9]);
        assert!(o.redeem(&setup).is_none(), "used up");
        let (t, first, end) = o.issue_copy(vec![(1, Arc::default())]).unwrap();
        o.cancel_copy(&t);
        let gone = PullSetup {
            first,
            end,
            ticket: t,
            ..setup
        };
        assert!(o.redeem(&gone).is_none(), "cancelled");
        assert!(o.issue_copy(Vec::new()).is_err());
    }
}
