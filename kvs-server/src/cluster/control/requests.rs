//! The control requests the control thread answers: the group's message
//! batches from peers, joins, status, maps, migrations, `forget`, pull
//! tickets and priority pulls. Each is answered at once, or parked until
//! the entry proposed for it is applied.

use kvs_proto::{ClusterId, MemberId};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use copyrpc::transport::Transport;
use copyrpc::RecvHandle;
use kvs_control::{Command, MemberState, Refusal};
use kvs_proto::control::{ControlReply, ControlRequest};

use crate::threads::to_worker::ToWorker;
use kvs_proto::group::{BadBatch, Batch};
use kvs_proto::proto::{write_response, Op, Request, Status};
use kvs_proto::shard::slot_of;

use super::{now_ms, Conns, State, LOG};

/// How long a request waits for the entry proposed for it to be applied.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// What became of a request.
enum Outcome {
    /// The answer is in `out`.
    Now,
    /// Answered once the entry proposed for it is applied.
    Later(Awaited),
}

/// What a parked request waits for.
#[derive(Debug, Clone, Copy)]
enum Awaited {
    /// Member `member` at `addr` (a join).
    Join { member: MemberId, addr: SocketAddr },
    /// The migration proposed at `at_ms` (migrate, rebalance).
    Started { at_ms: u64 },
    /// The running migration cancelled, or over.
    Cancelled,
    /// Member `member` forgotten (`force`: as asked).
    Left { member: MemberId, force: bool },
}

/// A request waiting for its entry.
pub(super) struct ParkedRequest {
    handle: RecvHandle,
    max_response: usize,
    awaited: Awaited,
    deadline: Instant,
}

/// The answer to a proposal the group refused: ask again shortly when
/// another membership change holds it up (a joiner waits its turn), else
/// the reason.
fn refusal(e: kvs_control::GroupError) -> ControlReply {
    match e {
        kvs_control::GroupError::Busy => ControlReply::NotYet {
            message: e.to_string(),
        },
        e => ControlReply::error(e.to_string()),
    }
}

/// Why a batch of the control group's messages was not taken.
#[derive(Debug, thiserror::Error)]
enum BatchRefused {
    /// Fault injection: this member is cut off from the group.
    #[error("cut off from the control group (fault injection)")]
    CutOff,
    /// Its framing is wrong.
    #[error(transparent)]
    Malformed(#[from] BadBatch),
    /// It comes from a member of another cluster.
    #[error("a member of cluster {theirs} reached member {me} of cluster {ours}")]
    OtherCluster {
        theirs: ClusterId,
        me: MemberId,
        ours: ClusterId,
    },
}

impl State {
    /// Takes the turn's control requests: each is answered now, or parked
    /// until its entry is applied (or [`COMMIT_TIMEOUT`] passes). `conns`
    /// tell the address each requester reached this server at.
    pub(super) fn take_requests<T: Transport, F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>)>(
        &mut self,
        ctx: &mut copyrpc::Context<u64, F, T>,
        conns: &Conns,
        req_bytes: &mut Vec<u8>,
        out: &mut Vec<u8>,
        now: Instant,
    ) {
        while let Some(req) = ctx.recv() {
            req_bytes.clear();
            if let Some(b) = ctx.request(&req) {
                req_bytes.extend_from_slice(b);
            }
            let local = conns
                .iter()
                .find(|(c, _)| c.endpoint() == req.endpoint())
                .and_then(|(_, a)| *a);
            let max = req.max_response();
            match self.handle(req_bytes, local, max, out, now) {
                Outcome::Now => {
                    let _ = ctx.reply(req, out);
                }
                Outcome::Later(awaited) => self.parked.push(ParkedRequest {
                    handle: req,
                    max_response: max,
                    awaited,
                    deadline: now + COMMIT_TIMEOUT,
                }),
            }
        }
    }

    /// Answers one control request into `out`, or parks it. `local`: the
    /// address the requester reached this server at.
    fn handle(
        &mut self,
        req: &[u8],
        local: Option<SocketAddr>,
        max_response: usize,
        out: &mut Vec<u8>,
        now: Instant,
    ) -> Outcome {
        let r = match Request::new_checked(req) {
            Ok(r) => r,
            Err(e) => {
                write_response(
                    out,
                    Status::BadRequest,
                    e.to_string().as_bytes(),
                    max_response,
                );
                return Outcome::Now;
            }
        };
        let answer = match r.op() {
            Op::Raft => {
                match self.on_batch(r.value(), now) {
                    Ok(()) => write_response(out, Status::Ok, &[], max_response),
                    Err(e) => write_response(
                        out,
                        Status::BadRequest,
                        e.to_string().as_bytes(),
                        max_response,
                    ),
                }
                return Outcome::Now;
            }
            Op::Pull => {
                self.pull(r.key(), max_response, out);
                return Outcome::Now;
            }
            Op::Control => match ControlRequest::decode(r.value()) {
                Ok(c) => return self.on_control(c, local, max_response, out),
                Err(e) => ControlReply::error(e.to_string()),
            },
            op => ControlReply::error(format!(
                "{op:?} is a worker's request, not a control request"
            )),
        };
        write_response(out, Status::Ok, &answer.encode(), max_response);
        Outcome::Now
    }

    /// Answers a control request `c` into `out`, or parks it until the entry
    /// proposed for it is applied. Any member answers status, map, pulls'
    /// opening and drains; the rest only the leader (others say where it
    /// is). `local`: the address the requester reached this server at.
    fn on_control(
        &mut self,
        c: ControlRequest,
        local: Option<SocketAddr>,
        max_response: usize,
        out: &mut Vec<u8>,
    ) -> Outcome {
        let answer = match c {
            ControlRequest::Status => ControlReply::Status(self.status()),
            ControlRequest::Map => {
                let mut map = Vec::new();
                self.map.encode(&mut map);
                ControlReply::Map { map }
            }
            ControlRequest::OpenPull {
                version,
                first,
                end,
            } => self.open_pull(version, first, end),
            ControlRequest::Drain => {
                self.shared.drain.store(true, Ordering::Release);
                ControlReply::Ok
            }
            ControlRequest::Snapshot => self.snapshot(),
            // Asked of a survivor, which cannot lead before it.
            ControlRequest::UnsafeRecover { lost } => self.unsafe_recover(&lost),
            _ if !self.group.is_leader() => self.leader_is(),
            ControlRequest::Join {
                addr,
                workers,
                slots,
                bulk_port,
                zone,
            } => match self.join(addr, workers, slots, bulk_port, zone, local) {
                Ok(member) => return Outcome::Later(Awaited::Join { member, addr }),
                Err(r) => *r,
            },
            ControlRequest::Migrate { first, end, to } => {
                let at_ms = now_ms();
                let cmd = Command::Migrate {
                    moves: vec![(first, end, to)],
                    at_ms,
                };
                match self.migrate(&cmd) {
                    Ok(()) => return Outcome::Later(Awaited::Started { at_ms }),
                    Err(r) => *r,
                }
            }
            ControlRequest::Rebalance => {
                let at_ms = now_ms();
                match self.migrate(&Command::Rebalance { at_ms }) {
                    Ok(()) => return Outcome::Later(Awaited::Started { at_ms }),
                    Err(r) => *r,
                }
            }
            ControlRequest::Cancel => match self.migrate(&Command::Cancel { at_ms: now_ms() }) {
                Ok(()) => return Outcome::Later(Awaited::Cancelled),
                Err(r) => *r,
            },
            ControlRequest::SetReplicas { replicas } => self.set_replicas(replicas),
            ControlRequest::SetMemberTimeout { ms } => {
                let t = Duration::from_millis(ms);
                match self.group.propose_member_timeout(t) {
                    Ok(()) => ControlReply::Ok,
                    Err(e) => ControlReply::error(e.to_string()),
                }
            }
            // Answered once applied: the member's address is free for a new
            // member then, and not before.
            ControlRequest::Forget { member, force } => {
                match self.group.propose_forget(member, force, now_ms()) {
                    Ok(()) => return Outcome::Later(Awaited::Left { member, force }),
                    Err(e) => refusal(e),
                }
            }
            ControlRequest::ImportDone {
                version,
                slots,
                records,
                bytes,
                lost,
            } => {
                let cmd = Command::ImportDone {
                    version,
                    slots,
                    records,
                    bytes,
                    lost,
                    at_ms: now_ms(),
                };
                match self.group.propose(&cmd) {
                    Ok(()) => ControlReply::Ok,
                    Err(e) => ControlReply::error(e.to_string()),
                }
            }
        };
        write_response(out, Status::Ok, &answer.encode(), max_response);
        Outcome::Now
    }

    /// `kvs-admin snapshot`: every worker snapshots its records at the end
    /// of its turn; refused with no records on disk. The answer numbers
    /// the request, for the asker to know which snapshot answers it.
    fn snapshot(&mut self) -> ControlReply {
        if self.cfg.durability == crate::config::Durability::None {
            return ControlReply::Error {
                message: format!(
                    "member {} keeps its records in memory only (durability = \"none\"): \
                     there is nothing to snapshot; set durability to everysec or always \
                     (with a data_dir) and restart it",
                    self.me
                ),
            };
        }
        self.snapshot_asks += 1;
        let ask = self.snapshot_asks;
        for (tx, waker) in &self.workers {
            if tx.send(ToWorker::Snapshot { ask }).is_ok() {
                waker.wake();
            }
        }
        ControlReply::SnapshotAsked { ask }
    }

    /// A ticket to pull slots `first..end` given away in map `version`, or
    /// why not.
    fn open_pull(&mut self, version: u32, first: u32, end: u32) -> ControlReply {
        if first >= end {
            return ControlReply::error(format!("empty slot range {first}..{end}"));
        }
        // Slots this process never held: it gave them away before a
        // restart, and their records went with the old process.
        if (first..end).any(|s| self.lost_exports.contains(&s)) {
            return ControlReply::error(format!(
                "member {} restarted after it handed slots {first}..{end} over: the \
                 records it held for them are lost",
                self.me
            ));
        }
        // Slots not held (yet): this member has not applied the map that
        // gives them away.
        match self.source_slots.issue(version, first, end) {
            Ok(ticket) => ControlReply::Ticket { ticket },
            Err(e) => ControlReply::NotYet {
                message: e.to_string(),
            },
        }
    }

    /// Proposes that the cluster keep `replicas` copies of each slot.
    fn set_replicas(&mut self, replicas: u8) -> ControlReply {
        if !kvs_control::REPLICAS.contains(&replicas) {
            return ControlReply::error(Refusal::Replicas(replicas).to_string());
        }
        match self.group.propose(&Command::SetReplicas { replicas }) {
            Ok(()) => ControlReply::Ok,
            Err(e) => ControlReply::error(e.to_string()),
        }
    }

    /// An unsafe recovery without the `lost` members, this member the
    /// group's only voter and leader.
    fn unsafe_recover(&mut self, lost: &[MemberId]) -> ControlReply {
        match self.group.unsafe_recover(lost, now_ms()) {
            Ok(()) => {
                tracing::warn!(
                    target: LOG,
                    "UNSAFE RECOVERY: this member forces a control group of its \
                     own without members {lost:?}: writes acknowledged only by them are lost, \
                     and they must never be started again with their old data dirs"
                );
                ControlReply::Ok
            }
            Err(e) => ControlReply::error(e.to_string()),
        }
    }

    /// Where to take a request only the leader serves.
    pub(super) fn leader_is(&self) -> ControlReply {
        match self.group.leader().filter(|&l| l != self.me) {
            Some(l) => match self.map.members().get(l.index()) {
                Some(m) => ControlReply::Keeper { addr: m.addr },
                None => ControlReply::NoLeader,
            },
            None => ControlReply::NoLeader,
        }
    }

    /// A batch of the group's messages from a peer.
    fn on_batch(&mut self, b: &[u8], now: Instant) -> Result<(), BatchRefused> {
        if self.shared.cut_off.load(Ordering::Relaxed) {
            return Err(BatchRefused::CutOff);
        }
        let batch = Batch::new_checked(b)?;
        if batch.cluster_id() != self.group.cluster_id() {
            return Err(BatchRefused::OtherCluster {
                theirs: batch.cluster_id(),
                me: self.me,
                ours: self.group.cluster_id(),
            });
        }
        let from = batch.from();
        for m in batch.messages() {
            if let Err(e) = self.group.step(from, m, now) {
                self.step_errors += 1;
                if self.step_errors <= 10 || self.step_errors % 1000 == 0 {
                    tracing::warn!(
                        target: LOG,
                        "control group: a message from member {from} refused \
                         ({} so far): {e}",
                        self.step_errors
                    );
                }
            }
        }
        Ok(())
    }

    /// A migration command (leader only): checked against the committed
    /// state, then proposed. `Err`: the answer now (a refusal, or `Ok` for a
    /// rebalance with nothing to move).
    fn migrate(&mut self, cmd: &Command) -> Result<(), Box<ControlReply>> {
        let Some(s) = self.group.state() else {
            return Err(Box::new(self.leader_is()));
        };
        if let Err(why) = s.check_migration(cmd) {
            let nothing = matches!(why, Refusal::Balanced | Refusal::NothingToMove);
            if matches!(cmd, Command::Rebalance { .. }) && nothing {
                return Err(Box::new(ControlReply::Ok));
            }
            return Err(Box::new(ControlReply::error(why.to_string())));
        }
        self.group
            .propose(cmd)
            .map_err(|e| Box::new(ControlReply::error(e.to_string())))
    }

    /// A server asks to join (the leader proposes it): the id it will have.
    fn join(
        &mut self,
        addr: SocketAddr,
        workers: u16,
        slots: u32,
        bulk_port: u16,
        zone: Option<String>,
        local: Option<SocketAddr>,
    ) -> Result<MemberId, Box<ControlReply>> {
        if addr.ip().is_unspecified() || addr.port() == 0 {
            return Err(Box::new(ControlReply::error(format!(
                "{addr} is not an address others can reach (set advertise)"
            ))));
        }
        let s = self.group.state().ok_or_else(|| {
            Box::new(ControlReply::error(
                "this member has no state yet".to_string(),
            ))
        })?;
        if slots != s.map().slots() {
            return Err(Box::new(ControlReply::error(format!(
                "the joining server has slots = {slots}; the cluster has {}",
                s.map().slots()
            ))));
        }
        if let Some(m) = s.member_at(addr) {
            return Err(Box::new(ControlReply::error(format!(
                "{addr} is member {m} already: start it with its data dir to resume it, \
                 or forget member {m} (kvs-admin forget {m}) to join anew"
            ))));
        }
        // The leader learns its own address from the first member that
        // reaches it, when it listens on an unspecified one.
        let own = s.map().members()[self.me.index()].addr;
        if let (true, Some(l)) = (own.ip().is_unspecified(), local) {
            let cmd = Command::Readdress {
                member: self.me,
                addr: SocketAddr::new(l.ip(), own.port()),
                bulk_port: self.bulk_port,
            };
            self.group.propose(&cmd).map_err(|e| Box::new(refusal(e)))?;
        }
        let id = self
            .group
            .propose_join(addr, workers, bulk_port, zone)
            .map_err(|e| Box::new(refusal(e)))?;
        tracing::info!(target: LOG, "proposing {addr} ({workers} workers) as member {id}");
        Ok(id)
    }

    /// Answers the parked requests whose entries are applied, or that
    /// waited too long (their entries may still be applied later).
    pub(super) fn answer_pending<
        T: Transport,
        F: FnMut(u64, Result<&[u8], copyrpc::CallFailed>),
    >(
        &mut self,
        ctx: &mut copyrpc::Context<u64, F, T>,
        out: &mut Vec<u8>,
        now: Instant,
    ) {
        let mut i = 0;
        while i < self.parked.len() {
            let p = &self.parked[i];
            let answer = match (self.settled(p.awaited), now >= p.deadline) {
                (Some(a), _) => a,
                (None, true) => ControlReply::error(format!(
                    "the control group did not commit the change within {COMMIT_TIMEOUT:?} \
                     (it may still; see kvs-admin status)"
                )),
                (None, false) => {
                    i += 1;
                    continue;
                }
            };
            let p = self.parked.swap_remove(i);
            write_response(out, Status::Ok, &answer.encode(), p.max_response);
            let _ = ctx.reply(p.handle, out);
        }
    }

    /// The answer to a parked request, once its entry is applied.
    fn settled(&self, awaited: Awaited) -> Option<ControlReply> {
        let s = self.group.state()?;
        match awaited {
            Awaited::Join { member, addr } => {
                let m = s.map().members().get(member.index())?;
                if m.addr != addr {
                    return Some(ControlReply::error(format!(
                        "member id {member} went to another server; try again"
                    )));
                }
                let mut b = Vec::new();
                s.map().encode(&mut b);
                tracing::info!(
                    target: LOG,
                    "member {member} ({addr}) joined; map version {}",
                    s.map().version()
                );
                Some(ControlReply::Joined {
                    cluster_id: s.cluster_id(),
                    member,
                    map: b,
                })
            }
            Awaited::Started { at_ms } => {
                let st = s.migration_status(now_ms())?;
                (st.started_ms == at_ms).then_some(ControlReply::Started(st))
            }
            Awaited::Cancelled => {
                let st = s.migration_status(now_ms())?;
                (st.cancelled || st.finished).then_some(ControlReply::Ok)
            }
            Awaited::Left { member, force } => {
                if s.member_state(member) == Some(MemberState::Left) {
                    return Some(ControlReply::Ok);
                }
                // Refused when applied: what was checked before proposing
                // no longer holds (else it is still being committed).
                let change = kvs_control::Membership::Forget {
                    member,
                    force,
                    at_ms: 0,
                };
                s.check_membership(&change)
                    .err()
                    .map(|why| ControlReply::error(why.to_string()))
            }
        }
    }

    /// A priority pull: a key's value from the frozen copy of its slot.
    fn pull(&self, key: &[u8], max_response: usize, out: &mut Vec<u8>) {
        let slot = slot_of(key, self.map.slots());
        match self.source_slots.get(slot) {
            Some(recs) => match recs.get(key) {
                Some(v) => write_response(out, Status::Ok, v, max_response),
                None => write_response(out, Status::NotFound, &[], max_response),
            },
            // Its import is over (the map that says so reached this member
            // before the target): every record of the frozen copy is at
            // the target already, so a key it lacks was not in it.
            None if self.map.owner_of_slot(slot).member != self.me
                && self.map.importing_from(slot) != Some(self.me) =>
            {
                write_response(out, Status::NotFound, &[], max_response)
            }
            None => {
                // Not frozen here yet: this member has not applied the map
                // that gives the slot away. The target asks again.
                let m = format!("slot {slot} is not held here for a migration (yet)");
                write_response(out, Status::TryAgain, m.as_bytes(), max_response)
            }
        }
    }
}
