//! Pulled records waiting for their worker: batches of a migration's import
//! or a backup's copy, taken into the store a few records at a time between
//! the worker's turns, so requests go first and the copy fills the gaps.
//! Taking a 1 MiB batch whole held the worker for a millisecond, and every
//! request that arrived meanwhile waited for it.
//!
//! A batch's sender is told it was taken only at the end of the turn that
//! took its last record, once the turn's changes are in the worker's log
//! ([`Intake::acknowledge`]): what it tells lets the source free its copy
//! of the records (a migration's) or the slot's copies count this one
//! (a backup's), so the records must be as durable as the worker's
//! `durability` makes its own writes first.

use kvs_proto::Ticket;
use std::collections::VecDeque;
use std::sync::mpsc::Sender;

use crate::store::Ready;

use super::handle::Handler;

/// Records a worker takes per turn that served requests; an idle turn
/// takes [`IDLE_TAKE`]. About a microsecond each: a turn under load grows
/// by a few tens of microseconds at most.
pub(crate) const BUSY_TAKE: usize = 4;
/// Records a worker takes per turn that found no request.
pub(crate) const IDLE_TAKE: usize = 128;

/// Whose records a batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whose {
    /// A migration's import: every record is offered to the store.
    Import,
    /// A backup's copy under this ticket: only records of slots still
    /// copied under it.
    Copy(Ticket),
}

#[derive(Debug)]
struct Untaken {
    /// The records not taken yet.
    recs: std::vec::IntoIter<Ready>,
    whose: Whose,
    /// Told once every record is in the store and its log.
    taken: Sender<()>,
}

/// The batches a worker has received and not yet taken, in order.
#[derive(Debug, Default)]
pub(crate) struct Intake {
    batches: VecDeque<Untaken>,
    /// Batches taken whole this turn: told at its end.
    taken: Vec<Sender<()>>,
}

impl Intake {
    /// Queues a batch's records ([`crate::bulk::wire::Batch::take_checked`]).
    pub fn push(&mut self, recs: Vec<Ready>, whose: Whose, taken: Sender<()>) {
        self.batches.push_back(Untaken {
            recs: recs.into_iter(),
            whose,
            taken,
        });
    }

    /// Nothing waits to be taken.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Tells the senders of the batches taken whole since the last call
    /// that they are in: called at the turn's end, once the turn's changes
    /// are in the log.
    #[inline]
    pub fn acknowledge(&mut self) {
        for t in self.taken.drain(..) {
            let _ = t.send(());
        }
    }

    /// Takes up to `budget` records into `h`'s store, in arrival order;
    /// a batch taken whole is told so at the next
    /// [`acknowledge`](Self::acknowledge). Returns how many.
    pub fn take(&mut self, h: &mut Handler, budget: usize) -> usize {
        let mut n = 0;
        while n < budget {
            let Some(p) = self.batches.front_mut() else {
                break;
            };
            for r in p.recs.by_ref().take(budget - n) {
                let wanted = match &p.whose {
                    Whose::Import => true,
                    Whose::Copy(ticket) => h.slot_state.copying_with(r.slot(), ticket),
                };
                if wanted {
                    h.store.apply_ready(r);
                }
                n += 1;
            }
            if p.recs.len() == 0 {
                if let Some(done) = self.batches.pop_front() {
                    self.taken.push(done.taken);
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bulk::wire::{Batch, BatchWriter, LAST};
    use kvs_proto::MemberId;
    use kvs_proto::{Owner, ShardMap};

    /// The records of `batch`, a checked batch of slots 0..16 of 16.
    fn ready(batch: &[u8]) -> Vec<Ready> {
        Batch::take_checked(batch, 0, 0, 16, 16, 0).unwrap().ready
    }

    fn handler() -> Handler {
        let me = Owner {
            member: MemberId(0),
            worker: 0,
        };
        let addr = "127.0.0.1:1".parse().unwrap();
        Handler::new(me, ShardMap::single(addr, 16, 1).unwrap(), 64, 64)
    }

    #[test]
    fn batches_are_taken_a_budget_at_a_time_and_acknowledged_when_whole() {
        let mut h = handler();
        for s in 0..16 {
            h.store.begin_import(s);
        }
        let mut w = BatchWriter::new(1 << 16);
        w.begin(0);
        for i in 0..40 {
            assert!(w.push(format!("key{i}").as_bytes(), b"value"));
        }
        let batch = w.finish(16, LAST).to_vec();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut intake = Intake::default();
        intake.push(ready(&batch), Whose::Import, tx.clone());
        intake.push(ready(&batch), Whose::Import, tx);
        assert_eq!(intake.take(&mut h, 16), 16);
        intake.acknowledge();
        assert!(rx.try_recv().is_err(), "not whole yet");
        assert_eq!(h.store.len(), 16);
        assert_eq!(
            intake.take(&mut h, 30),
            30,
            "the first's other 24, six of the next"
        );
        assert!(
            rx.try_recv().is_err(),
            "the first is whole, told at the turn's end"
        );
        intake.acknowledge();
        assert!(rx.try_recv().is_ok(), "the first is in");
        assert!(rx.try_recv().is_err());
        assert_eq!(
            h.store.len(),
            40,
            "the second batch's keys are there already"
        );
        assert_eq!(intake.take(&mut h, 100), 34);
        intake.acknowledge();
        assert!(rx.try_recv().is_ok());
        assert!(intake.is_empty());
        assert_eq!(intake.take(&mut h, 100), 0);
    }

    #[test]
    fn a_copy_batch_gives_the_store_only_slots_copied_under_its_ticket() {
        let mut h = handler();
        let mut w = BatchWriter::new(1 << 16);
        w.begin(0);
        for i in 0..8 {
            assert!(w.push(format!("key{i}").as_bytes(), b"value"));
        }
        let batch = w.finish(16, LAST).to_vec();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut intake = Intake::default();
        // No slot is copied here under this ticket.
        intake.push(ready(&batch), Whose::Copy(Ticket::from_bytes([7; 16])), tx);
        assert_eq!(intake.take(&mut h, 100), 8, "read");
        assert_eq!(h.store.len(), 0, "and not taken");
        intake.acknowledge();
        assert!(rx.try_recv().is_ok());
    }
}
