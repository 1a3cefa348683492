//! The control thread's part in replication: it proposes what the workers
//! report (a backup's copy is complete, a ready backup missed a write) and
//! proposes it again until the applied map shows it, since a proposal a
//! follower forwards is lost if leadership moves; and, for a member that
//! resumed from its data dir without its records, it proposes
//! [`Command::Restarted`] and keeps the member from serving until that
//! entry is applied. Asked to drain (SIGTERM, `kvs-admin drain`), it stops
//! serving, lets the writes in flight settle, and proposes
//! [`Command::Drain`] until it is applied; then it serves what it still
//! owns (slots that had no ready backup).

use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use copyrpc::Waker;
use kvs_control::{Command, Group};
use kvs_proto::ShardMap;

use crate::cluster::hand_over::HandOvers;
use crate::to_control::{ranges, ToControl};
use crate::to_worker::ToWorker;

/// How long a proposal waits for its effect before it is made again.
const AGAIN: Duration = Duration::from_millis(300);
/// How long a report is pursued at all.
const GIVE_UP: Duration = Duration::from_secs(120);
/// How long a draining member waits, not serving, before it asks (and,
/// before that, until every worker's turn that began under the lease is
/// over): the writes in flight have their backups' answers by then.
const SETTLE: Duration = Duration::from_millis(50);

/// Where a drain is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// Not asked.
    Idle,
    /// Not serving since then; the entry proposed (last) then.
    Stopping(Instant, Option<Instant>),
}

/// A proposal waiting for its effect.
#[derive(Debug)]
struct Ask {
    cmd: Command,
    first: Instant,
    last: Instant,
}

/// The reports being pursued, and the restart in progress (see the
/// [module docs](self)).
#[derive(Debug)]
pub(crate) struct Replication {
    reports: Receiver<ToControl>,
    asks: Vec<Ask>,
    /// This start's number, until its `Restarted` entry is applied.
    restart: Option<u64>,
    restart_asked: Option<Instant>,
    drain: Drain,
    hand_overs: HandOvers,
}

impl Replication {
    /// Reports from `reports`; `restarted`: the member resumed from its data
    /// dir (and holds none of the records it had).
    pub fn new(reports: Receiver<ToControl>, restarted: bool) -> Replication {
        Replication {
            reports,
            asks: Vec::new(),
            restart: restarted.then(nonce),
            restart_asked: None,
            drain: Drain::Idle,
            hand_overs: HandOvers::default(),
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
            self.drain = Drain::Stopping(now, None);
        }
    }

    /// The entry `Drain { member }` was applied: whether it ended this
    /// member's drain (it serves again what it still owns).
    pub fn drained(&mut self, member: u16, me: u16) -> bool {
        if member == me && self.drain != Drain::Idle {
            self.drain = Drain::Idle;
            return true;
        }
        false
    }

    /// The entry `Restarted { member, nonce }` was applied: whether it was
    /// this start's.
    pub fn restarted(&mut self, member: u16, nonce: u64, me: u16) -> bool {
        if member == me && self.restart == Some(nonce) {
            self.restart = None;
            return true;
        }
        false
    }

    /// Proposes what is new and again what has not taken effect; a drain
    /// once `quiet` (no worker serves by the withdrawn lease any more); and
    /// runs this member's hand-overs with its `workers`, at `now` (wall
    /// clock `now_ms`).
    pub fn drive(
        &mut self,
        group: &mut Group,
        workers: &[(Sender<ToWorker>, Waker)],
        (now, now_ms): (Instant, u64),
        quiet: bool,
    ) {
        if let Drain::Stopping(since, asked) = self.drain {
            let due = asked.is_none_or(|t| now.duration_since(t) >= AGAIN);
            if quiet && now.duration_since(since) >= SETTLE && due {
                self.drain = Drain::Stopping(since, Some(now));
                let _ = group.propose_anywhere(&Command::Drain { member: group.me() });
            }
        }
        if let Some(n) = self.restart {
            if self
                .restart_asked
                .is_none_or(|t| now.duration_since(t) >= AGAIN)
            {
                self.restart_asked = Some(now);
                let cmd = Command::Restarted {
                    member: group.me(),
                    nonce: n,
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
                ToControl::Quiet { first, end, worker } => {
                    self.hand_overs.quiet(first, end, worker);
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
            self.hand_overs.drive(group, workers, now, now_ms);
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
    let backup = |s: u32, member: u16| {
        map.backups(s)
            .iter()
            .find(|b| b.owner.member == member)
            .copied()
    };
    let slots = |r: &[(u32, u32)]| {
        r.iter()
            .flat_map(|&(a, b)| a..b.min(map.slots()))
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

/// A random number for this start (from the kernel's random source; the
/// clock if that fails).
fn nonce() -> u64 {
    let mut b = [0u8; 8];
    match std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
    {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
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
        m.add_backup(0..8, 1).unwrap();
        m.set_version(2);
        let ready = Command::BackupReady {
            member: 1,
            slots: vec![(0, 4)],
            since: 2,
            records: 0,
            bytes: 0,
        };
        assert!(!done(&ready, &m));
        m.set_backup_ready(0..4, 1).unwrap();
        assert!(done(&ready, &m));
        let stale = Command::BackupStale {
            member: 1,
            slots: vec![(0, 4)],
        };
        assert!(!done(&stale, &m));
        m.set_backup_unready(0..4, 1).unwrap();
        assert!(done(&stale, &m));
        // The backup dropped since: nothing left to do.
        m.drop_backup(0..8, 1).unwrap();
        m.set_version(3);
        assert!(done(&ready, &m));
        assert_ne!(nonce(), nonce());
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
        let mut r = Replication::new(rx, true);
        let ready = ToControl::BackupReady {
            member: 1,
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
        let n = r.restart.unwrap();
        assert!(r.restarted(0, n, 0));
        r.drive(&mut group, &[], (now, 0), true);
        assert!(
            r.reports.try_recv().is_err(),
            "the report once the restart is applied"
        );
    }
}
