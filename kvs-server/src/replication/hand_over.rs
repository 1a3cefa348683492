//! A migration's hand-over as its source member runs it (with replicas):
//! once the group's state says the chunk being copied may be handed over
//! ([`ClusterState::hand_over_due`]: this member is still each slot's
//! primary, and the target's copy is ready), the control thread freezes the
//! chunk's writes on every worker ([`ToWorker::Freeze`]: writes are
//! answered TRY_AGAIN, reads are served), waits until each worker says no
//! write of the chunk is in flight ([`ToControl::Quiet`]), so every copy is
//! the same, and proposes [`Command::HandOver`] until it is applied. The
//! workers take writes again ([`ToWorker::Thaw`]) once the state no longer
//! names the chunk (handed over: the new primary takes them; or the copy
//! went stale, or the migration ended). A chunk that is not quiet within
//! [`FREEZE_MAX`] is thawed and tried again after [`PAUSE`], so writes are
//! never held long.
//!
//! A drain takes the workers' freeze over (see
//! [`crate::replication::proposals`]): it [`abandon`](HandOvers::abandon)s the
//! chunk being handed over, and once the drain is done the chunk, if still
//! due, is frozen anew. Each freeze has a number of its own (its
//! `round`), which the workers' answers carry: an answer to an older
//! freeze never counts for a newer one of the same slots.
//!
//! [`ClusterState::hand_over_due`]: kvs_control::ClusterState::hand_over_due
//! [`ToControl::Quiet`]: crate::threads::to_control::ToControl::Quiet

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use copyrpc::Waker;
use kvs_control::{Chunk, Command, Group};

use crate::threads::to_worker::ToWorker;

/// How long a proposal waits for its effect before it is made again.
const AGAIN: Duration = Duration::from_millis(300);
/// How long writes stay frozen waiting for the workers to be quiet.
const FREEZE_MAX: Duration = Duration::from_secs(1);
/// How long after a freeze that timed out the next one begins.
const PAUSE: Duration = Duration::from_secs(1);

/// The chunk being handed over.
#[derive(Debug)]
struct Going {
    chunk: Chunk,
    /// The freeze's number.
    round: u64,
    /// Per worker: it said the chunk is quiet.
    quiet: Vec<bool>,
    since: Instant,
    asked: Option<Instant>,
}

/// This member's hand-overs (see the [module docs](self)).
#[derive(Debug, Default)]
pub(crate) struct HandOvers {
    going: Option<Going>,
    pause_until: Option<Instant>,
}

impl HandOvers {
    /// Worker `worker` says the slots of freeze `round` are quiet.
    pub fn quiet(&mut self, round: u64, worker: u16) {
        if let Some(g) = self.going.as_mut().filter(|g| g.round == round) {
            if let Some(q) = g.quiet.get_mut(usize::from(worker)) {
                *q = true;
            }
        }
    }

    /// Forgets the chunk being handed over, without thawing it: a drain
    /// froze every slot in its place.
    pub fn abandon(&mut self) {
        self.going = None;
    }

    /// Freezes (numbering freezes from `rounds`), thaws and proposes as the
    /// group's state and the workers' words say, at `now` (wall clock
    /// `now_ms`).
    pub fn drive(
        &mut self,
        group: &mut Group,
        workers: &[(Sender<ToWorker>, Waker)],
        (now, now_ms): (Instant, u64),
        rounds: &mut u64,
    ) {
        let me = group.me();
        let due = group
            .state()
            .and_then(|s| s.hand_over_due())
            .filter(|c| c.from == me);
        if let Some(g) = &self.going {
            let stuck = g.asked.is_none() && now.duration_since(g.since) >= FREEZE_MAX;
            if due.as_ref() != Some(&g.chunk) || stuck {
                if stuck {
                    tracing::warn!(
                        "slots {}..{}: writes still awaited their backups after \
                         {FREEZE_MAX:?}; taking writes again, and handing over later",
                        g.chunk.first,
                        g.chunk.end
                    );
                    self.pause_until = Some(now + PAUSE);
                }
                send(workers, || ToWorker::Thaw);
                self.going = None;
            }
        }
        if self.going.is_none() {
            let Some(c) = due else {
                return;
            };
            if self.pause_until.is_some_and(|t| now < t) {
                return;
            }
            *rounds += 1;
            let round = *rounds;
            send(workers, || ToWorker::Freeze {
                first: c.first,
                end: c.end,
                round,
            });
            self.going = Some(Going {
                chunk: c,
                round,
                quiet: vec![false; workers.len()],
                since: now,
                asked: None,
            });
        }
        let g = self.going.as_mut().expect("set above");
        if g.quiet.iter().all(|&q| q) && g.asked.is_none_or(|t| now.duration_since(t) >= AGAIN) {
            g.asked = Some(now);
            let _ = group.propose_anywhere(&Command::HandOver {
                first: g.chunk.first,
                end: g.chunk.end,
                to: g.chunk.to,
                at_ms: now_ms,
            });
        }
    }
}

/// Sends every worker what `msg` makes, and wakes it.
pub(crate) fn send(workers: &[(Sender<ToWorker>, Waker)], msg: impl Fn() -> ToWorker) {
    for (tx, waker) in workers {
        if tx.send(msg()).is_ok() {
            waker.wake();
        }
    }
}
