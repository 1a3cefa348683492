//! Each turn of the control group (time, persistence, messages), and what
//! the control thread does with what the committed log applied: a new map
//! goes to every worker, slots given away are freed once imported,
//! imports of slots gained start, and the lease is published.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvs_control::{Applied, Command, Event, MemberState};
use kvs_proto::{MemberId, ShardMap};

use super::{now_ms, State, LOG};
use crate::bulk::source_slots::free_elsewhere;
use crate::migration::import::{Importer, Progress};
use crate::threads::cluster_view::ClusterFigures;
use crate::threads::to_worker::ToWorker;

/// How often a member whose address or bulk port the map has wrong asks
/// the group to change it.
const READDRESS_EVERY: Duration = Duration::from_secs(1);

impl State {
    /// One turn of the group: time, persistence, messages, what was
    /// applied, the lease.
    pub(super) fn drive(&mut self, now: Instant) -> Result<(), kvs_control::GroupError> {
        for m in self.peers.take_unreachable() {
            self.group.unreachable(m);
        }
        self.group.tick(now);
        self.group.poll(now)?;
        let cut_off = self.shared.cut_off.load(Ordering::Relaxed);
        for o in self.group.take_outgoing() {
            if cut_off {
                continue;
            }
            match self.map.members().get(o.to.index()) {
                Some(m) => {
                    let addr = m.addr;
                    self.peers.send(o.to, addr, o.bytes)
                }
                None => {
                    // A member this one has no address for yet (its map is
                    // older than the group's): the message waits for Raft
                    // to send it again.
                }
            }
        }
        let mut changed = false;
        let mut applied = false;
        for e in self.group.take_events() {
            applied = true;
            changed |= self.on_event(e);
        }
        if applied {
            self.publish_figures();
        }
        if changed {
            if let Some(m) = self.group.state().map(|s| s.map().clone()) {
                if m != self.map {
                    self.install(m);
                }
            }
            let s = self.group.state();
            self.peers
                .retain(|m| s.is_none_or(|s| s.member_state(m) != Some(MemberState::Left)));
        }
        if self.replication.take_rejoined() {
            // After the map the restart made.
            crate::replication::hand_over::send(&self.workers, || ToWorker::EndRetention);
        }
        if self.shared.drain.swap(false, Ordering::AcqRel) {
            tracing::info!(target: LOG, "draining: this member stops serving and hands its slots over");
            self.replication.start_drain(now);
            if self.shared.stopping.load(Ordering::Acquire) {
                // The process stops: the copies the drain takes away stay
                // on disk, for its restart to catch up from.
                crate::replication::hand_over::send(&self.workers, || ToWorker::Retain);
            }
        }
        let quiet = self
            .drain_turns
            .as_ref()
            .is_some_and(|t| self.lease.passed(t));
        self.replication
            .drive(&mut self.group, &self.workers, (now, now_ms()), quiet);
        // A restarted member serves nothing until the group has moved its
        // slots to their backups; given back (then, or after a drain), the
        // lease holds only with the map that moved them.
        let serve = self.replication.may_serve();
        if serve && !self.served {
            self.lease.require_map(self.map.version());
        }
        self.served = serve;
        self.lease.set(self.group.lease_expiry().filter(|_| serve));
        // A drain: the turns that may still serve by the withdrawn lease.
        if !self.replication.draining() {
            self.drain_turns = None;
        } else if self.drain_turns.is_none() {
            self.drain_turns = Some(self.lease.turns());
        }
        self.shared
            .leased
            .store(serve && self.group.lease_valid(now), Ordering::Relaxed);
        self.shared
            .term
            .store(self.group.status().term, Ordering::Relaxed);
        self.readdress(now);
        Ok(())
    }

    /// Logs an event; whether the state changed.
    fn on_event(&mut self, e: Event) -> bool {
        match e {
            Event::Leader(l) => self.on_leader(l),
            Event::Restored { index } => {
                tracing::info!(target: LOG, "control group: state restored from a snapshot at {index}");
                true
            }
            Event::Applied(_, a) => self.on_applied(a),
            Event::Timing { group, configured } => {
                tracing::warn!(
                    target: LOG,
                    "control group: this member uses the cluster's \
                     member_timeout_ms = {}, not its own {}: every member times leases \
                     and failures alike (kvs-admin set member-timeout changes it)",
                    group.as_millis(),
                    configured.as_millis()
                );
                false
            }
        }
    }

    /// Publishes the cluster's figures for the metrics endpoint.
    pub(super) fn publish_figures(&self) {
        let Some(s) = self.group.state() else {
            return;
        };
        let f = ClusterFigures::of(s);
        let mut g = match self.shared.figures.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *g = f;
    }

    /// Publishes and logs who leads now (`l`; none known); the state did
    /// not change.
    fn on_leader(&self, l: Option<MemberId>) -> bool {
        let t = self.group.status().term;
        self.shared
            .leader
            .store(l.map_or(0, |l| u32::from(l.0) + 1), Ordering::Relaxed);
        if self.alone() {
            // A one-member cluster leads itself: nothing to say.
            return false;
        }
        match l {
            Some(l) if l == self.me => {
                tracing::info!(target: LOG, "control group: this member leads (term {t})")
            }
            Some(l) => tracing::info!(target: LOG, "control group: member {l} leads (term {t})"),
            None => tracing::info!(target: LOG, "control group: no leader (term {t})"),
        }
        false
    }

    /// Logs a member forgotten (`moved` of its slots failed over to their
    /// ready backups, `lost_slots` went out empty), and stops if it is
    /// this one; the state changed.
    fn on_left(&mut self, member: MemberId, moved: u32, lost_slots: u32) -> bool {
        tracing::info!(
            target: LOG,
            "control group: member {member} was forgotten{}{}",
            if moved > 0 {
                format!("; {moved} of its slots failed over to their ready backups")
            } else {
                String::new()
            },
            if lost_slots > 0 {
                format!(
                    "; {lost_slots} slots had no ready backup and go out empty: \
                     their records are lost"
                )
            } else {
                String::new()
            }
        );
        if member == self.me {
            tracing::warn!(target: LOG, "this member was forgotten: stopping");
            self.stop.store(true, Ordering::Release);
        }
        true
    }

    /// Logs what an applied entry did (`a`); whether the state changed.
    fn on_applied(&mut self, a: Applied) -> bool {
        match a {
            Applied::Nothing => false,
            Applied::Refused(why) => {
                if self.group.is_leader() {
                    tracing::debug!(target: LOG, "control group: an entry changed nothing: {why}");
                }
                false
            }
            Applied::Failed(m) => {
                tracing::warn!(
                    target: LOG,
                    "control group: member {m} is marked failed (no word from it \
                     within member_timeout_ms = {}); its slots with a ready backup moved \
                     to it, the others are unavailable until it returns or is forgotten",
                    self.group.config().member_timeout.as_millis()
                );
                true
            }
            Applied::Drained { member, moved } => {
                if self.replication.drained(member, self.me) {
                    tracing::info!(
                        target: LOG,
                        "drained: {moved} slots moved to their backups; this \
                         member serves what had no ready backup"
                    );
                    self.shared.drained.store(true, Ordering::Release);
                } else if member != self.me {
                    tracing::info!(
                        target: LOG,
                        "control group: member {member} was drained ({moved} \
                         slots moved to their backups)"
                    );
                }
                true
            }
            Applied::Restarted { member, nonce } => {
                if self.replication.restarted(member, nonce, self.me) {
                    tracing::info!(
                        target: LOG,
                        "control group: this member is back in service; its \
                         slots with a ready backup moved to it"
                    );
                } else if member != self.me {
                    tracing::info!(
                        target: LOG,
                        "control group: member {member} restarted without its \
                         records; its slots with a ready backup moved to it"
                    );
                }
                true
            }
            Applied::Up(m) => {
                tracing::info!(target: LOG, "control group: member {m} is up again");
                true
            }
            Applied::Left {
                member,
                moved,
                lost_slots,
            } => self.on_left(member, moved, lost_slots),
            Applied::Voter { member, voter } => {
                tracing::info!(
                    target: LOG,
                    "control group: member {member} {}",
                    if voter {
                        "votes now"
                    } else {
                        "no longer votes"
                    }
                );
                false
            }
            Applied::Recovered {
                survivor,
                lost,
                lost_slots,
                ..
            } => {
                tracing::warn!(
                    target: LOG,
                    "control group: unsafe recovery by member {survivor}: members \
                     {lost:?} are forgotten, {lost_slots} of their slots had no ready backup \
                     and lost their records"
                );
                if lost.contains(&self.me) {
                    tracing::warn!(target: LOG, "this member was forgotten: stopping");
                    self.stop.store(true, Ordering::Release);
                }
                true
            }
            Applied::MemberTimeout(ms) => {
                tracing::info!(target: LOG, "control group: member_timeout_ms is {ms} now");
                false
            }
            Applied::Joined(_) | Applied::Map(_) => true,
        }
    }

    /// Asks the group to correct this member's address or bulk port when
    /// the map has them wrong (a restart on a new bulk port, or a member
    /// that listens on an unspecified address).
    fn readdress(&mut self, now: Instant) {
        if now.duration_since(self.last_readdress) < READDRESS_EVERY {
            return;
        }
        self.last_readdress = now;
        let Some(s) = self.group.state() else { return };
        let Some(mine) = s.map().members().get(self.me.index()) else {
            return;
        };
        let addr = if self.own.ip().is_unspecified() {
            mine.addr
        } else {
            self.own
        };
        if mine.bulk_port == self.bulk_port && mine.addr == addr {
            return;
        }
        let cmd = Command::Readdress {
            member: self.me,
            addr,
            bulk_port: self.bulk_port,
        };
        let _ = self.group.propose_anywhere(&cmd);
    }

    /// Makes `m` the map in force: sent to every worker (each serves by it
    /// from its next turn on), frozen copies whose import is over freed,
    /// and imports of slots gained started.
    fn install(&mut self, m: ShardMap) {
        for (tx, waker) in &self.workers {
            if tx.send(ToWorker::Map(m.clone())).is_ok() {
                waker.wake();
            }
        }
        self.shared.version.store(m.version(), Ordering::Release);
        self.map = m;
        let (me, map) = (self.me, &self.map);
        // Kept: slots another member still imports from this one.
        let gone = self
            .source_slots
            .release(|s| map.importing_from(s) == Some(me) && map.owner_of_slot(s).member != me);
        let (n, bytes) = (gone.slots.len(), gone.bytes);
        free_elsewhere(gone);
        if n > 0 {
            tracing::info!(target: LOG, "freeing {n} migrated slots ({bytes} bytes of keys and values)");
        }
        self.start_imports();
    }

    /// Starts an importer for each run of slots a worker of this member
    /// imports from one source and that has none yet; ends those the map
    /// no longer lists.
    pub(super) fn start_imports(&mut self) {
        let map = &self.map;
        let mut runs: Vec<(u32, u32, MemberId, u16)> = Vec::new();
        for s in 0..map.slots() {
            let o = map.owner_of_slot(s);
            let Some(from) = map.importing_from(s).filter(|_| o.member == self.me) else {
                continue;
            };
            match runs.last_mut() {
                Some((_, end, f, w)) if *end == s && *f == from && *w == o.worker => *end += 1,
                _ => runs.push((s, s + 1, from, o.worker)),
            }
        }
        self.imports.retain(|k, p| {
            let listed = runs.iter().any(|&(a, b, f, _)| (a, b, f) == *k);
            if !listed {
                p.ended.store(true, Ordering::Release);
            }
            listed
        });
        self.sessions
            .retain(|w, from| runs.iter().any(|&(_, _, f, rw)| (rw, f) == (w, from)));
        let own = if self.own.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], self.own.port()))
        } else {
            self.own
        };
        for &(first, end, from, worker) in &runs {
            if let Some(p) = self.imports.get(&(first, end, from)) {
                // A source that restarted elsewhere readdressed itself.
                if let Some(&m) = map.members().get(from.index()) {
                    p.set_source(m);
                }
                continue;
            }
            let (Some(source), Some(link)) = (
                map.members().get(from.index()).copied(),
                self.workers.get(usize::from(worker)),
            ) else {
                continue;
            };
            let progress = Arc::new(Progress::new(from, source, end - first));
            let imp = Importer {
                version: map.version(),
                first,
                end,
                own,
                slots: map.slots(),
                worker: link.clone(),
                cfg: self.cfg.clone(),
                rails: self.rails.clone(),
                cluster_token: self.cluster_token.clone(),
                progress: progress.clone(),
                frozen_told: AtomicBool::new(false),
                shared: self.shared.clone(),
                stop: self.stop.clone(),
            };
            // One session per worker and source, unless the map gives the
            // worker more than one run of slots from that source at once.
            let runs_alike = runs.iter().filter(|r| (r.2, r.3) == (from, worker)).count();
            match self.sessions.start(worker, imp, runs_alike == 1) {
                Ok(_) => {
                    self.imports.insert((first, end, from), progress);
                }
                Err(e) => tracing::error!(target: LOG, "cannot start an import: {e}"),
            }
        }
    }
}
