//! The control thread's part in replication: it proposes what the workers
//! report (a backup's copy is complete, a ready backup missed a write) and
//! proposes it again until the applied map shows it, since a proposal a
//! follower forwards is lost if leadership moves; and, for a member that
//! resumed from its data dir without its records, it proposes
//! [`Command::Restarted`] and keeps the member from serving until that
//! entry is applied.
//!
//! **Drains.** Asked to drain (SIGTERM, `kvs-admin drain`), the member
//! stops serving (withdraws its lease) and waits until no worker's turn
//! that began under the lease is still running. Writes those turns took
//! may still wait for their backups' answers, and [`Command::Drain`] makes
//! a backup the slot's primary: proposed now, it would drop the links to
//! the backups and fail those writes, though the backups may have applied
//! them. So it freezes every slot on every worker, as a hand-over freezes
//! its chunk ([`ToWorker::Freeze`] over the whole map: writes answered
//! TRY_AGAIN, which a member not serving answers anyway), and waits until
//! each worker says that no write waits for a backup and no slot is held
//! for a backup that missed one ([`ToControl::Quiet`]); a held slot's
//! `BackupStale` entry is then proposed (and ordered before the drain), so
//! the drain does not make a stale copy primary. Then it proposes
//! [`Command::Drain`] until it is applied, and thaws the workers
//! ([`ToWorker::Thaw`]): it serves what it still owns (slots that had no
//! ready backup).
//!
//! The wait is bounded by [`QUIET_MAX`]: a backup that never answers
//! (paused, or dead and not yet marked failed) must not stall a planned
//! stop. The drain is then proposed anyway; once applied, the new map no
//! longer makes this member those slots' primary, its workers drop the
//! links to their backups, and every write still waiting on one is
//! answered UNAVAILABLE (a closed link fails its calls; see
//! [`crate::replication::write_path`]): never acknowledged without every
//! backup's answer. The client sends it again to the new primary.
//!
//! The drain's freeze replaces a hand-over's ([`HandOvers`], not driven
//! while the member drains): the hand-over is abandoned and, if still
//! due after the drain, frozen anew. Every freeze has its own number
//! (`round`), which the workers' [`ToControl::Quiet`] carries, so an
//! answer counts only for the freeze it answers.

use std::ops::Range;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use copyrpc::Waker;
use kvs_control::{Command, Group};
use kvs_proto::{MemberId, ShardMap};

use super::hand_over::{send, HandOvers};
use crate::threads::to_control::{ranges, ToControl};
use crate::threads::to_worker::ToWorker;

/// How long a proposal waits for its effect before it is made again.
const AGAIN: Duration = Duration::from_millis(300);
/// How long a report is pursued at all.
const GIVE_UP: Duration = Duration::from_secs(120);
/// How long a draining member waits, its slots frozen, for the writes
/// waiting on backups before it proposes the drain anyway (they then fail:
/// see the [module docs](self)). A backup's answer takes microseconds;
/// one that lags this long is paused or dead. Twice the default
/// `member_timeout_ms` (1 s), so a dead backup is usually marked failed
/// and dropped from the map first (which fails the writes waiting on it
/// without the drain), and well within systemd's stop timeout
/// (`TimeoutStopSec=30` in deploy/), so a SIGTERM still drains.
const QUIET_MAX: Duration = Duration::from_secs(2);

/// Where a drain is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Drain {
    /// Not asked.
    Idle,
    /// Not serving since then; some worker's turn may still serve by the
    /// withdrawn lease.
    Stopping(Instant),
    /// Every slot frozen on every worker by freeze `round` at `since`.
    Waiting {
        /// The freeze's number.
        round: u64,
        /// When it was sent.
        since: Instant,
        /// Per worker: it said no write waits for a backup.
        quiet: Vec<bool>,
        /// When the entry was proposed (last).
        asked: Option<Instant>,
    },
}

/// What a drain's step asks of the control thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DrainStep {
    /// Nothing.
    Wait,
    /// Freeze every slot on every worker, as freeze `round`.
    Freeze(u64),
    /// Propose the drain; `late`: not every worker said quiet.
    Propose {
        /// Not every worker said quiet within [`QUIET_MAX`].
        late: bool,
    },
}

/// A proposal waiting for its effect.
#[derive(Debug)]
struct Ask {
    cmd: Command,
    first: Instant,
    last: Instant,
}

/// A start from the data dir, until the group applies it.
#[derive(Debug)]
struct Restart {
    /// The start's random number.
    nonce: u64,
    /// The runs of slots the workers' files kept (`(first, end, worker)`).
    kept: Vec<(u32, u32, u16)>,
}

/// The reports being pursued, and the restart in progress (see the
/// [module docs](self)).
#[derive(Debug)]
pub(crate) struct Replication {
    reports: Receiver<ToControl>,
    asks: Vec<Ask>,
    /// This start's `Restarted` entry, until it is applied.
    restart: Option<Restart>,
    restart_asked: Option<Instant>,
    drain: Drain,
    /// The workers are frozen by a drain that is over.
    thaw: bool,
    /// The last freeze's number (a drain's or a hand-over's).
    rounds: u64,
    hand_overs: HandOvers,
    /// This member's restart was applied (see [`Replication::take_rejoined`]).
    rejoined: bool,
}

impl Replication {
    /// Reports from `reports`; `restarted`: the member resumed from its data
    /// dir, with what its workers' files kept (`(first, end, worker)` runs
    /// of slots whose copies know their place in their primaries' writes).
    pub fn new(
        reports: Receiver<ToControl>,
        restarted: Option<Vec<(u32, u32, u16)>>,
    ) -> Replication {
        Replication {
            reports,
            asks: Vec::new(),
            restart: restarted.map(|kept| Restart {
                nonce: crate::random::nonce(),
                kept,
            }),
            restart_asked: None,
            drain: Drain::Idle,
            thaw: false,
            rounds: 0,
            hand_overs: HandOvers::default(),
            rejoined: false,
        }
    }

    /// Whether the member may serve: not before its restart is applied,
    /// nor while it drains.
    pub fn may_serve(&self) -> bool {
        self.restart.is_none() && self.drain == Drain::Idle
    }

    /// Whether the member drains (its lease withdrawn, the group not yet
    /// asked or not yet done).
    pub fn draining(&self) -> bool {
        self.drain != Drain::Idle
    }

    /// Starts draining (if it is not already).
    pub fn start_drain(&mut self, now: Instant) {
        if self.drain == Drain::Idle {
            self.drain = Drain::Stopping(now);
        }
    }

    /// The entry `Drain { member }` was applied: whether it ended this
    /// member's drain (it serves again what it still owns).
    pub fn drained(&mut self, member: MemberId, me: MemberId) -> bool {
        if member == me && self.drain != Drain::Idle {
            self.thaw = matches!(self.drain, Drain::Waiting { .. });
            self.drain = Drain::Idle;
            return true;
        }
        false
    }

    /// The entry `Restarted { member, nonce }` was applied: whether it was
    /// this start's.
    pub fn restarted(&mut self, member: MemberId, nonce: u64, me: MemberId) -> bool {
        if member == me && self.restart.as_ref().is_some_and(|r| r.nonce == nonce) {
            self.restart = None;
            self.rejoined = true;
            return true;
        }
        false
    }

    /// Whether this member's restart was applied since the last call: the
    /// workers, given the map it made, let go of what they kept
    /// ([`ToWorker::EndRetention`]).
    pub fn take_rejoined(&mut self) -> bool {
        std::mem::take(&mut self.rejoined)
    }

    /// A drain's next step at `now`: `turns_over`, no worker serves by
    /// the withdrawn lease any more; `workers`, how many answer a freeze.
    fn drain_step(&mut self, now: Instant, turns_over: bool, workers: usize) -> DrainStep {
        // A restarted member not yet back in service took no write.
        let never_served = self.restart.is_some();
        match &mut self.drain {
            Drain::Idle => DrainStep::Wait,
            Drain::Stopping(_) if !turns_over => DrainStep::Wait,
            Drain::Stopping(_) => {
                self.rounds += 1;
                self.drain = Drain::Waiting {
                    round: self.rounds,
                    since: now,
                    quiet: vec![false; workers],
                    asked: None,
                };
                DrainStep::Freeze(self.rounds)
            }
            Drain::Waiting {
                since,
                quiet,
                asked,
                ..
            } => {
                let all = never_served || quiet.iter().all(|&q| q);
                let due = asked.is_none_or(|t| now.duration_since(t) >= AGAIN);
                if !due || !(all || now.duration_since(*since) >= QUIET_MAX) {
                    return DrainStep::Wait;
                }
                let late = !all && asked.is_none();
                *asked = Some(now);
                DrainStep::Propose { late }
            }
        }
    }

    /// Worker `worker` said the slots of freeze `round` are quiet.
    fn on_quiet(&mut self, round: u64, worker: u16) {
        match &mut self.drain {
            Drain::Waiting {
                round: r, quiet, ..
            } if *r == round => {
                if let Some(q) = quiet.get_mut(usize::from(worker)) {
                    *q = true;
                }
            }
            _ => self.hand_overs.quiet(round, worker),
        }
    }

    /// Thaws the workers after a drain, and takes the drain's next step
    /// with them (see the [module docs](self)).
    fn drive_drain(
        &mut self,
        group: &mut Group,
        workers: &[(Sender<ToWorker>, Waker)],
        now: Instant,
        turns_over: bool,
    ) {
        if std::mem::take(&mut self.thaw) {
            send(workers, || ToWorker::Thaw);
        }
        let slots = group.state().map(|s| s.map().slots());
        let turns_over = turns_over && slots.is_some();
        match self.drain_step(now, turns_over, workers.len()) {
            DrainStep::Wait => {}
            DrainStep::Freeze(round) => {
                self.hand_overs.abandon();
                send(workers, || ToWorker::Freeze {
                    first: 0,
                    end: slots.unwrap_or(0),
                    round,
                });
            }
            DrainStep::Propose { late } => {
                if late {
                    tracing::warn!(
                        "draining: writes still awaited their backups after \
                         {QUIET_MAX:?}; asking the group anyway (those writes fail, and \
                         their clients send them again)"
                    );
                }
                let _ = group.propose_anywhere(&Command::Drain { member: group.me() });
            }
        }
    }

    /// Proposes what is new and again what has not taken effect; a
    /// drain's steps (`quiet`: no worker serves by the withdrawn lease any
    /// more); and runs this member's hand-overs with its `workers`, at
    /// `now` (wall clock `now_ms`).
    pub fn drive(
        &mut self,
        group: &mut Group,
        workers: &[(Sender<ToWorker>, Waker)],
        (now, now_ms): (Instant, u64),
        quiet: bool,
    ) {
        self.drive_drain(group, workers, now, quiet);
        if let Some(r) = &self.restart {
            if self
                .restart_asked
                .is_none_or(|t| now.duration_since(t) >= AGAIN)
            {
                self.restart_asked = Some(now);
                let cmd = Command::Restarted {
                    member: group.me(),
                    nonce: r.nonce,
                    kept: r.kept.clone(),
                };
                let _ = group.propose_anywhere(&cmd);
            }
        }
        // A member that resumed without its records reports nothing until
        // the group has applied its restart: its workers may have copied
        // their empty stores to new backups, and a report ordered before
        // the restart in the log would count such a copy ready (and a
        // failover could then promote it). Ordered after, the restart has
        // moved the slots' epochs past the copies, and the reports are void.
        while self.restart.is_none() {
            let Ok(r) = self.reports.try_recv() else {
                break;
            };
            let cmd = match r {
                ToControl::Quiet { round, worker } => {
                    self.on_quiet(round, worker);
                    continue;
                }
                ToControl::BackupReady {
                    member,
                    slots,
                    since,
                    records,
                    bytes,
                } => Command::BackupReady {
                    member,
                    slots: ranges(&slots),
                    since,
                    records,
                    bytes,
                },
                ToControl::BackupStale { member, slots } => Command::BackupStale {
                    member,
                    slots: ranges(&slots),
                },
            };
            let _ = group.propose_anywhere(&cmd);
            self.asks.push(Ask {
                cmd,
                first: now,
                last: now,
            });
        }
        if self.drain == Drain::Idle {
            self.hand_overs
                .drive(group, workers, (now, now_ms), &mut self.rounds);
        }
        if self.asks.is_empty() {
            return;
        }
        let Some(map) = group.state().map(|s| s.map().clone()) else {
            return;
        };
        self.asks
            .retain(|a| !done(&a.cmd, &map) && now.duration_since(a.first) < GIVE_UP);
        for a in &mut self.asks {
            if now.duration_since(a.last) >= AGAIN {
                a.last = now;
                let _ = group.propose_anywhere(&a.cmd);
            }
        }
    }
}

/// Whether `map` shows what `cmd` asked for (or has moved past it: the
/// backup is gone, or the slot's replica set changed since).
fn done(cmd: &Command, map: &ShardMap) -> bool {
    let backup = |s: u32, member: MemberId| {
        map.backups(s)
            .iter()
            .find(|b| b.owner.member == member)
            .copied()
    };
    let slots = |r: &[Range<u32>]| {
        r.iter()
            .flat_map(|r| r.start..r.end.min(map.slots()))
            .collect::<Vec<u32>>()
    };
    match cmd {
        Command::BackupReady {
            member,
            slots: r,
            since,
            ..
        } => slots(r)
            .into_iter()
            .all(|s| map.epoch(s) > *since || backup(s, *member).is_none_or(|b| b.ready)),
        Command::BackupStale { member, slots: r } => slots(r)
            .into_iter()
            .all(|s| backup(s, *member).is_none_or(|b| !b.ready)),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::Member;
    use std::net::SocketAddr;

    #[test]
    fn a_report_is_done_once_the_map_shows_it_or_moved_past_it() {
        let a = |p: u16| SocketAddr::from(([10, 0, 0, 1], p));
        let mut m = ShardMap::single(a(1), 8, 1).unwrap();
        m.add_member(Member {
            addr: a(2),
            workers: 1,
            bulk_port: 0,
        })
        .unwrap();
        m.add_backup(0..8, MemberId(1)).unwrap();
        m.set_version(2);
        let ready = Command::BackupReady {
            member: MemberId(1),
            slots: vec![0..4],
            since: 2,
            records: 0,
            bytes: 0,
        };
        assert!(!done(&ready, &m));
        m.set_backup_ready(0..4, MemberId(1)).unwrap();
        assert!(done(&ready, &m));
        let stale = Command::BackupStale {
            member: MemberId(1),
            slots: vec![0..4],
        };
        assert!(!done(&stale, &m));
        m.set_backup_unready(0..4, MemberId(1)).unwrap();
        assert!(done(&stale, &m));
        // The backup dropped since: nothing left to do.
        m.drop_backup(0..8, MemberId(1)).unwrap();
        m.set_version(3);
        assert!(done(&ready, &m));
        assert_ne!(crate::random::nonce(), crate::random::nonce());
    }

    #[test]
    fn a_drain_proposes_once_every_worker_is_quiet_or_the_wait_is_over() {
        let ms = Duration::from_millis;
        let (_tx, rx) = std::sync::mpsc::channel();
        let mut r = Replication::new(rx, None);
        let t0 = Instant::now();
        assert_eq!(r.drain_step(t0, true, 2), DrainStep::Wait);
        r.start_drain(t0);
        assert!(!r.may_serve());
        // Not while a turn may still serve by the withdrawn lease.
        assert_eq!(r.drain_step(t0, false, 2), DrainStep::Wait);
        let DrainStep::Freeze(round) = r.drain_step(t0, true, 2) else {
            panic!("no freeze once the turns are over");
        };
        assert_eq!(r.drain_step(t0, true, 2), DrainStep::Wait);
        // Answers to another freeze (a hand-over's) do not count.
        r.on_quiet(round - 1, 0);
        r.on_quiet(round - 1, 1);
        assert_eq!(r.drain_step(t0 + ms(10), true, 2), DrainStep::Wait);
        r.on_quiet(round, 0);
        assert_eq!(r.drain_step(t0 + ms(10), true, 2), DrainStep::Wait);
        r.on_quiet(round, 1);
        let asked = DrainStep::Propose { late: false };
        assert_eq!(r.drain_step(t0 + ms(20), true, 2), asked);
        // Again only if it has not taken effect after AGAIN.
        assert_eq!(r.drain_step(t0 + ms(30), true, 2), DrainStep::Wait);
        assert_eq!(r.drain_step(t0 + ms(20) + AGAIN, true, 2), asked);
        assert!(r.drained(MemberId(0), MemberId(0)));
        assert!(r.thaw && r.may_serve(), "the workers stay frozen");
        r.thaw = false;
        // A second drain whose workers never say quiet (a backup that does
        // not answer): proposed anyway after QUIET_MAX; the first drain's
        // answers do not count for it.
        let t1 = t0 + ms(1000);
        r.start_drain(t1);
        let DrainStep::Freeze(second) = r.drain_step(t1, true, 2) else {
            panic!("no freeze");
        };
        assert!(second > round);
        r.on_quiet(round, 0);
        r.on_quiet(round, 1);
        assert_eq!(
            r.drain_step(t1 + QUIET_MAX - ms(1), true, 2),
            DrainStep::Wait
        );
        let late = DrainStep::Propose { late: true };
        assert_eq!(r.drain_step(t1 + QUIET_MAX, true, 2), late);
        // A drain applied before its freeze leaves nothing to thaw.
        assert!(r.drained(MemberId(0), MemberId(0)));
        r.thaw = false;
        r.start_drain(t1);
        assert!(r.drained(MemberId(0), MemberId(0)));
        assert!(!r.thaw);
    }

    #[test]
    fn a_restarted_member_reports_no_copy_until_its_restart_is_applied() {
        let dir = crate::cluster::temp_dir::TempDir::new_in(&std::env::temp_dir()).unwrap();
        let a = SocketAddr::from(([127, 0, 0, 1], 7000));
        let founding = kvs_control::Founding {
            control_voters: 1,
            replicas: 2,
            zone: None,
            member_timeout_ms: None,
        };
        let cfg = kvs_control::GroupConfig::for_member_timeout(Duration::from_secs(1));
        let now = Instant::now();
        let map = ShardMap::single(a, 8, 1).unwrap();
        let mut group = kvs_control::Group::bootstrap(dir.path(), map, founding, cfg, now).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut r = Replication::new(rx, Some(Vec::new()));
        let ready = ToControl::BackupReady {
            member: MemberId(1),
            slots: vec![0, 1],
            since: 1,
            records: 0,
            bytes: 0,
        };
        tx.send(ready).unwrap();
        r.drive(&mut group, &[], (now, 0), true);
        let kept = r.reports.try_recv();
        assert!(kept.is_ok(), "a copy reported before the restart");
        tx.send(kept.unwrap()).unwrap();
        let n = r.restart.as_ref().unwrap().nonce;
        assert!(r.restarted(MemberId(0), n, MemberId(0)));
        r.drive(&mut group, &[], (now, 0), true);
        assert!(
            r.reports.try_recv().is_err(),
            "the report once the restart is applied"
        );
    }
}
