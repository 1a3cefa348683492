//! One member's part in the control group: raft-rs's [`RawNode`] over the
//! member's [`DiskStorage`], the [`ClusterState`] it applies, and the two
//! clocks the store's safety rests on, the lease and failure detection.
//!
//! A [`Group`] does no network I/O and reads no clock: the caller passes
//! `now`, carries the messages it queues, and feeds it the messages peers
//! send. The call order, from one thread:
//!
//! 1. [`Group::bootstrap`] (a new cluster) or [`Group::open`] (a member
//!    resuming from its data dir, or one just given its id by the leader).
//! 2. In a loop:
//!    - [`Group::step`] for each message a peer sent;
//!    - [`Group::tick`] whenever time passes (at least every
//!      [`GroupConfig::tick`]);
//!    - [`Group::propose`] and friends for changes (leader only);
//!    - [`Group::poll`]: persists what Raft asks (one `fdatasync`) before
//!      the messages that depend on it are queued, applies committed
//!      entries, and takes snapshots;
//!    - [`Group::take_outgoing`]: the messages to send, and
//!      [`Group::take_events`]: what applying did.
//!
//! **Large messages.** No message handed to the transport is larger than
//! [`GroupConfig::max_message`]: a larger Raft message (a snapshot of a
//! large state, an append of a large entry) goes in fragments, put
//! together by the receiver's [`Group::step`]. A snapshot the member has
//! not acknowledged within `member_timeout`, or one sent to a member the
//! transport then reports [unreachable](Group::unreachable), is sent again:
//! raft-rs would otherwise send that member nothing more.
//!
//! **Leases.** A member may serve its slots only while
//! [`Group::lease_valid`]. Every member, the leader included, asks for its
//! lease once per heartbeat interval, ReadIndex-style: [`Group::tick`]
//! hands raft-rs a read request (`read_index`, in its `Safe` mode) whose
//! context is the member's id and its send time (`now`, as nanoseconds
//! since the `now` the group was opened with). The leader notes its commit
//! index when it takes the request and answers once a quorum of voters has
//! acknowledged a heartbeat it sent after that. The answer grants a lease
//! until the send time plus [`GroupConfig::lease`], which holds only once
//! this member has applied up to the index the leader named, and only while
//! the applied state calls it up. Nothing else grants a lease: a heartbeat,
//! an append, or an answer processed late (after a pause, or having waited
//! in a queue) extends nothing, since every lease is timed from when its
//! request was sent. raft-rs drops a request when there is no leader, or
//! when the leader has not yet committed an entry of its term; the member
//! asks again at the next interval, so requests never pile up.
//!
//! **Failure detection.** The leader marks a member failed (a committed
//! [`Command::MarkFailed`], which moves its slots to its backups) once it has
//! heard nothing from it for [`GroupConfig::member_timeout`], counted from
//! when it became leader at the earliest, with "heard" stamped when the
//! message is processed (a late stamp only delays a mark).
//!
//! **Why a member stops serving before its slots move.** Say a member asked
//! at `t` and leader `L` answered, naming index `i`. Its slots move only
//! through an entry that marks it failed or forgets it, and every such
//! entry is one of these:
//!
//! - committed by the time `L` took the request: its index is at most `i`,
//!   so the member applies it before the grant holds, and then, failed or
//!   gone, holds no lease. (`L` commits what earlier leaders left
//!   uncommitted before it answers any request.)
//! - proposed by `L` before it took the request and not yet committed: `L`
//!   drops the member's requests while it has such an entry in flight.
//! - proposed by `L` after it took the request: `L` heard from the member
//!   then, no earlier than `t`, and waits `member_timeout` after that.
//! - proposed by a later leader: it was elected after `t` (a quorum
//!   acknowledged `L`'s heartbeat sent after `t`, and a voter that did so
//!   voted in a later term only afterwards), and counts `member_timeout`
//!   from its election.
//!
//! So the slots move no sooner than `t + member_timeout`, and the lease
//! ends at `t + lease`. The leader's own lease is the same argument (it
//! answers its own request once a quorum has acknowledged a later
//! heartbeat). [`GroupConfig::validate`] keeps the lease two election
//! timeouts shorter than the timeout (a fifth of the timeout is left by
//! default): the argument needs only the lease to be shorter; the rest is
//! margin for clocks that run at slightly different rates.
//!
//! **Clocks.** `now` is the caller's [`Instant`]; on Linux, Rust's standard
//! library reads it from `CLOCK_MONOTONIC`. Setting the wall clock, or NTP
//! stepping it, does not move that clock (NTP only slews its rate, by at
//! most 0.05 %, within the margin above), and a member stopped
//! (`SIGSTOP`) or stalled on a disk is covered: its clock goes on, and what
//! queued for it grants nothing. What the guarantee cannot survive is a
//! clock that stands still while real time passes: `CLOCK_MONOTONIC` does
//! not count time while the system is suspended, nor, with some
//! hypervisors and clock sources, while a virtual machine is paused. A
//! member suspended just after a grant resumes believing little time has
//! passed and may serve for what was left of its lease, up to `lease`,
//! after the group moved its slots. A clock that jumps forward only ends
//! leases early.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfState, Message, MessageType};
use raft::{RawNode, StateRole};

use crate::error::{BadTiming, GroupError, StorageError};
use crate::identity::Identity;
use crate::lease::Leases;
use crate::member_state::MemberState;
use crate::state::{Applied, ClusterState, Command, Founding, Membership};
use crate::storage::{DiskStorage, Recovery};
use kvs_proto::ClusterId;
use kvs_proto::{MemberId, ShardMap};

mod failures;
mod ready;
mod recover;
mod timing;

/// The group's timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupConfig {
    /// One Raft tick.
    pub tick: Duration,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// Ticks without a leader before a voter stands for election (raft-rs
    /// draws each timeout from this to twice this).
    pub election_ticks: usize,
    /// How long the leader waits without hearing from a member before it
    /// marks it failed.
    pub member_timeout: Duration,
    /// How long a member may serve after it sent a lease request that the
    /// leader answered.
    pub lease: Duration,
    /// Entries applied between two snapshots of the state.
    pub snapshot_every: u64,
    /// The largest message handed to the transport, in bytes: a larger
    /// Raft message (a snapshot of a big state, an append of a big entry)
    /// goes as fragments of this size, put together by the receiving
    /// [`Group::step`]. At least [`MIN_MAX_MESSAGE`].
    pub max_message: usize,
}

/// The least [`GroupConfig::max_message`] may be.
pub const MIN_MAX_MESSAGE: usize = crate::fragment::MIN_MAX;

impl GroupConfig {
    /// Timing derived from `member_timeout`: a tick of a fiftieth of it
    /// (5 to 100 ms), heartbeats every 2 ticks, elections after 10 to 20
    /// ticks (a fifth to two fifths of the timeout), a lease of two
    /// fifths of the timeout, and messages of at most 64 KiB (a control
    /// connection's 1 MiB ring takes requests of up to about 256 KiB).
    pub fn for_member_timeout(member_timeout: Duration) -> GroupConfig {
        let tick =
            (member_timeout / 50).clamp(Duration::from_millis(5), Duration::from_millis(100));
        GroupConfig {
            tick,
            heartbeat_ticks: 2,
            election_ticks: 10,
            member_timeout,
            lease: member_timeout * 2 / 5,
            snapshot_every: 1024,
            max_message: 64 << 10,
        }
    }

    /// The election timeout: a leader checks its quorum once per this, and
    /// a follower stands for election after this to twice this.
    fn election(&self) -> Duration {
        self.tick * self.election_ticks as u32
    }

    /// Refuses timing under which a lease could outlive the member's
    /// failure being committed.
    pub fn validate(&self) -> Result<(), BadTiming> {
        if self.tick.is_zero() || self.heartbeat_ticks == 0 {
            return Err(BadTiming::Zero);
        }
        if self.election_ticks <= self.heartbeat_ticks {
            return Err(BadTiming::ElectionTooShort);
        }
        if self.max_message < MIN_MAX_MESSAGE {
            return Err(BadTiming::MessagesTooSmall {
                min: MIN_MAX_MESSAGE,
                max: self.max_message,
            });
        }
        // The lease must end before the group can mark the member failed
        // (see the module docs); two election timeouts between them leave
        // a margin for clocks that run at different rates.
        if self.lease + 2 * self.election() > self.member_timeout {
            return Err(BadTiming::LeaseTooLong {
                lease: self.lease,
                election: self.election(),
                member_timeout: self.member_timeout,
            });
        }
        Ok(())
    }
}

/// A message for a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerMessage {
    /// The member it is for.
    pub to: MemberId,
    /// Its bytes: a raft-rs message in protobuf, or a fragment of one
    /// (at most [`GroupConfig::max_message`] bytes either way). The
    /// transport carries a member's messages to a peer in order.
    pub bytes: Vec<u8>,
}

/// What happened in the group, for the caller to act on and log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An entry was applied (index, what it did).
    Applied(u64, Applied),
    /// The member now times by the group's `member_timeout`, which is not
    /// the one it was configured with (see [`Group::config`]).
    Timing {
        /// The group's, which the member uses.
        group: Duration,
        /// The member's own, which it does not.
        configured: Duration,
    },
    /// The whole state was replaced by a snapshot from the leader.
    Restored {
        /// Its index.
        index: u64,
    },
    /// The member this group believes leads changed.
    Leader(Option<MemberId>),
}

/// The group's figures, for status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupStatus {
    /// The member this one believes leads.
    pub leader: Option<MemberId>,
    /// The Raft term.
    pub term: u64,
    /// The highest index known committed.
    pub commit: u64,
    /// The highest index applied.
    pub applied: u64,
    /// The log file's size in bytes.
    pub log_bytes: u64,
}

/// One member's part in the control group (the module docs of `group.rs` tell how).
pub struct Group {
    me: MemberId,
    cluster_id: ClusterId,
    /// The timing in force: `configured`'s, with the group's
    /// `member_timeout` once the state says it.
    cfg: GroupConfig,
    /// The timing the member was started with.
    configured: GroupConfig,
    node: RawNode<DiskStorage>,
    /// `None` until a joiner gets its first snapshot.
    state: Option<ClusterState>,
    conf: ConfState,
    applied: u64,
    outgoing: Vec<PeerMessage>,
    events: Vec<Event>,
    /// When the clock last ticked Raft.
    last_tick: Instant,
    /// This member's lease requests and the grants they were answered with.
    leases: Leases,
    /// At the leader: when each member was last heard from (processing
    /// time, for failure detection only).
    heard: HashMap<MemberId, Instant>,
    /// At the leader: members whose join it applied and that it has not
    /// heard from since, with when it applied the join.
    joining: HashMap<MemberId, Instant>,
    /// When [`Group::tick`] was last called: a leader that was itself
    /// stalled does not count the stall as its members' silence.
    last_tick_call: Instant,
    /// At the leader: per member, the log index of the last entry this
    /// leader proposed that fails or forgets it; the member's lease
    /// requests are dropped until it is committed.
    evicting: HashMap<MemberId, u64>,
    leader_since: Option<Instant>,
    /// Marks proposed and not yet applied.
    /// (Member, when proposed): a mark proposed that applying has not yet
    /// cleared; one older than `member_timeout` may be proposed again (a
    /// proposal can be dropped).
    marking: HashMap<MemberId, Instant>,
    leader: Option<MemberId>,
    /// Messages from peers being put together from fragments.
    fragments: crate::fragment::Reassembly,
    /// The id of the next message sent in fragments.
    next_fragmented: u32,
    /// At the leader: when a snapshot was last sent to each member that has
    /// not yet acknowledged it.
    snapshots_sent: HashMap<MemberId, Instant>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("me", &self.me)
            .field("cluster_id", &self.cluster_id)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

/// Raft's node id of a member.
fn node_of(member: MemberId) -> u64 {
    u64::from(member.0) + 1
}

/// How many failure timeouts a member that just joined may stay silent
/// before the leader marks it failed.
const JOIN_GRACE: u32 = 3;

/// The member of a Raft node id.
fn member_of(node: u64) -> Option<MemberId> {
    node.checked_sub(1)
        .and_then(|m| u16::try_from(m).ok())
        .map(MemberId)
}

impl Group {
    /// Starts a new cluster in `data_dir`, which must hold no member: this
    /// member is member 0 of a cluster with a new random id, owning `map`
    /// (a one-member map), the group's only voter to begin with, with
    /// the settings of `founding`.
    pub fn bootstrap(
        data_dir: &Path,
        map: ShardMap,
        founding: Founding,
        cfg: GroupConfig,
        now: Instant,
    ) -> Result<Group, GroupError> {
        cfg.validate()?;
        if let Some(id) = Identity::load(data_dir)? {
            return Err(StorageError::Identity(format!(
                "{} holds member {} of cluster {} already; start it without bootstrapping",
                data_dir.display(),
                id.member,
                id.cluster_id
            ))
            .into());
        }
        let io = |source| StorageError::Io {
            path: data_dir.to_path_buf(),
            source,
        };
        let cluster_id = ClusterId::random().map_err(io)?;
        let founding = Founding {
            member_timeout_ms: founding
                .member_timeout_ms
                .or(Some(cfg.member_timeout.as_millis() as u64)),
            ..founding
        };
        let state = ClusterState::bootstrap(cluster_id, founding, map);
        // The first state is a snapshot at index 1: a member that joins
        // later has an empty log and is given it whole.
        let (mut store, _) = DiskStorage::open(&DiskStorage::dir_in(data_dir))?;
        if !store.is_empty() {
            return Err(StorageError::Identity(format!(
                "{} holds a Raft log but no identity; it is not a data dir to bootstrap in",
                data_dir.display()
            ))
            .into());
        }
        let mut snap = raft::eraftpb::Snapshot::default();
        snap.mut_metadata().index = 1;
        snap.mut_metadata().term = 1;
        snap.mut_metadata()
            .set_conf_state(ConfState::from((vec![node_of(MemberId(0))], vec![])));
        snap.data = state.encode().into();
        store.install(&snap)?;
        store.sync()?;
        Identity {
            cluster_id,
            member: MemberId(0),
        }
        .store(data_dir)?;
        drop(store);
        let mut g = Group::open(data_dir, cfg, now)?.0;
        // Alone, it need not wait out an election timeout.
        g.node.campaign()?;
        Ok(g)
    }

    /// Resumes the member whose identity is in `data_dir` (a member that
    /// has just been given its id stores it first, with
    /// [`Identity::store`], and starts with an empty log), its state
    /// everything its log holds as committed.
    pub fn open(
        data_dir: &Path,
        cfg: GroupConfig,
        now: Instant,
    ) -> Result<(Group, Recovery), GroupError> {
        cfg.validate()?;
        let id = Identity::load(data_dir)?.ok_or_else(|| {
            StorageError::Identity(format!("{} holds no member", data_dir.display()))
        })?;
        let (store, rec) = DiskStorage::open(&DiskStorage::dir_in(data_dir))?;
        let snap = store.latest_snapshot().clone();
        let commit = store.hard_state().commit;
        let state = if store.is_empty() {
            None
        } else {
            let s = ClusterState::decode(snap.get_data()).map_err(|why| StorageError::Corrupt {
                path: DiskStorage::dir_in(data_dir).join("snapshot"),
                offset: 0,
                why: why.to_string(),
            })?;
            if s.cluster_id() != id.cluster_id {
                return Err(StorageError::Identity(format!(
                    "{}: the log is of cluster {}, the identity of cluster {}",
                    data_dir.display(),
                    s.cluster_id(),
                    id.cluster_id
                ))
                .into());
            }
            Some(s)
        };
        let applied = snap.get_metadata().index;
        let rc = raft::Config {
            id: node_of(id.member),
            election_tick: cfg.election_ticks,
            heartbeat_tick: cfg.heartbeat_ticks,
            applied,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            // A leader that cannot reach a quorum steps down, and voters
            // that hear from a leader ignore others' elections: what bounds
            // how long a deposed leader renews leases.
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        let node = RawNode::new(&rc, store, &crate::raft_log::TracingDrain::logger())?;
        let conf = snap.get_metadata().get_conf_state().clone();
        let (mut g, rec) = (
            Group {
                me: id.member,
                cluster_id: id.cluster_id,
                cfg,
                configured: cfg,
                node,
                state,
                conf,
                applied,
                outgoing: Vec::new(),
                events: Vec::new(),
                last_tick: now,
                leases: Leases::new(
                    id.member,
                    now,
                    cfg.lease,
                    cfg.tick * cfg.heartbeat_ticks as u32,
                ),
                heard: HashMap::new(),
                joining: HashMap::new(),
                last_tick_call: now,
                evicting: HashMap::new(),
                leader_since: None,
                marking: HashMap::new(),
                leader: None,
                fragments: Default::default(),
                next_fragmented: 0,
                snapshots_sent: HashMap::new(),
            },
            rec,
        );
        g.apply_logged_commits(commit, now)?;
        g.adopt_group_timing(now);
        Ok((g, rec))
    }

    /// Applies the entries up to `commit` that the log holds as committed,
    /// at open rather than at the first poll: the state, its map above
    /// all, is then the newest the log knows was committed, not the
    /// snapshot's (up to [`GroupConfig::snapshot_every`] entries older).
    /// A member's workers start from that map, and their records' logs
    /// were written under the newest map the member had applied: a map
    /// older than those records would drop slots the member still holds
    /// copies of. The entries' events come out at the first poll, as they
    /// would have.
    fn apply_logged_commits(&mut self, commit: u64, now: Instant) -> Result<(), GroupError> {
        if self.state.is_none() {
            return Ok(());
        }
        while self.applied < commit && self.node.has_ready() {
            let before = self.applied;
            self.ready(now)?;
            if self.applied == before {
                break;
            }
        }
        Ok(())
    }

    /// This member's id.
    pub fn me(&self) -> MemberId {
        self.me
    }

    /// The cluster's id.
    pub fn cluster_id(&self) -> ClusterId {
        self.cluster_id
    }

    /// The configuration as applied here (`None`: a member that joined and
    /// has not yet been given the state).
    pub fn state(&self) -> Option<&ClusterState> {
        self.state.as_ref()
    }

    /// The member this one believes leads.
    pub fn leader(&self) -> Option<MemberId> {
        self.leader
    }

    /// Whether this member leads.
    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// The group's figures here.
    pub fn status(&self) -> GroupStatus {
        GroupStatus {
            leader: self.leader,
            term: self.node.raft.term,
            commit: self.node.raft.raft_log.committed,
            applied: self.applied,
            log_bytes: self.node.store().log_bytes(),
        }
    }

    /// Whether this member may serve its slots now (see the module docs):
    /// it holds a lease, and the applied state does not call it failed.
    pub fn lease_valid(&self, now: Instant) -> bool {
        self.lease_expiry().is_some_and(|t| now < t)
    }

    /// Until when this member's lease holds (`None`: it holds none, or the
    /// applied state calls it failed or gone): the latest grant whose index
    /// is applied, which runs from when its request was sent (see the
    /// module docs). The time may have passed.
    pub fn lease_expiry(&self) -> Option<Instant> {
        let s = self.state.as_ref()?;
        if s.member_state(self.me) != Some(MemberState::Up) {
            return None;
        }
        self.leases.expiry(self.applied)
    }

    /// Lets time pass: Raft ticks for every [`GroupConfig::tick`] since the
    /// last call, the member asks for its lease once per heartbeat
    /// interval, and the leader marks members it has not heard from.
    pub fn tick(&mut self, now: Instant) {
        let gap = now.saturating_duration_since(self.last_tick_call);
        self.last_tick_call = now;
        if gap > self.cfg.election() {
            self.excuse_stall(gap, now);
        }
        let mut n = 0;
        while self.last_tick + self.cfg.tick <= now {
            self.last_tick += self.cfg.tick;
            // A long stall is not a storm of ticks.
            if n < 2 * self.cfg.election_ticks {
                self.node.tick();
            }
            n += 1;
        }
        if let Some(ctx) = self.leases.due(now) {
            self.node.read_index(ctx);
        }
        if self.is_leader() {
            self.detect_failures(now);
            self.balance_voters();
            self.resend_lost_snapshots(now);
        }
    }

    /// At the leader: a snapshot a member has not acknowledged within
    /// `member_timeout` is taken as lost. raft-rs sends a member nothing
    /// more after a snapshot until it hears how the snapshot went; told it
    /// failed, it probes the member again and sends a new one.
    fn resend_lost_snapshots(&mut self, now: Instant) {
        let timeout = self.cfg.member_timeout;
        let lost: Vec<MemberId> = self
            .snapshots_sent
            .iter()
            .filter(|(_, &sent)| now.saturating_duration_since(sent) > timeout)
            .map(|(&m, _)| m)
            .collect();
        for m in lost {
            self.snapshots_sent.remove(&m);
            // raft-rs ignores this for a member that acknowledged it.
            self.node
                .report_snapshot(node_of(m), raft::SnapshotStatus::Failure);
        }
    }

    /// Takes a message from member `from`, as its transport delivered it
    /// (a fragment is kept until the rest of its message is in).
    pub fn step(&mut self, from: MemberId, bytes: &[u8], now: Instant) -> Result<(), GroupError> {
        let bad = |why: String| GroupError::BadMessage { from, why };
        if crate::fragment::is_fragment(bytes) {
            return match self
                .fragments
                .take(from, bytes)
                .map_err(|e| bad(e.to_string()))?
            {
                Some(whole) => self.step_whole(from, &whole, now),
                None => Ok(()),
            };
        }
        self.step_whole(from, bytes, now)
    }

    /// [`Group::step`] for a whole message.
    fn step_whole(&mut self, from: MemberId, bytes: &[u8], now: Instant) -> Result<(), GroupError> {
        let bad = |why: String| GroupError::BadMessage { from, why };
        let msg = Message::parse_from_bytes(bytes).map_err(|e| bad(e.to_string()))?;
        if member_of(msg.from) != Some(from) {
            return Err(bad(format!(
                "it claims to come from node {}, not member {from}",
                msg.from
            )));
        }
        if msg.to != node_of(self.me) {
            return Err(bad(format!("it is for node {}, not this member", msg.to)));
        }
        let kind = msg.get_msg_type();
        // raft-rs forwards these to the leader, and panics if one it
        // forwards carries a term (a sender's own never does).
        if matches!(kind, MessageType::MsgReadIndex | MessageType::MsgPropose) && msg.term != 0 {
            return Err(bad(format!("a {kind:?} with a term")));
        }
        self.heard.insert(from, now);
        self.joining.remove(&from);
        // A lease request is dropped, and asked again at the next
        // heartbeat: by a member that no longer leads (raft-rs would
        // forward it under its sender's id, which the leader refuses from
        // anyone but that sender), and by a leader failing its sender (it
        // is answered once that entry is committed, with an index that
        // includes it).
        if kind == MessageType::MsgReadIndex && (!self.is_leader() || self.evicting_now(from)) {
            return Ok(());
        }
        self.node.step(msg)?;
        // A failed member speaks again.
        if self.is_leader()
            && self.state.as_ref().and_then(|s| s.member_state(from)) == Some(MemberState::Failed)
            && !self.marking_now(from, now)
            && self.propose(&Command::MarkUp { member: from }).is_ok()
        {
            self.marking.insert(from, now);
        }
        Ok(())
    }

    /// The transport could not deliver to `member`: Raft slows down
    /// sending to it, and sends again a snapshot it was waiting on word of
    /// (the message lost may have been, or held part of, that snapshot).
    pub fn unreachable(&mut self, member: MemberId) {
        self.node.report_unreachable(node_of(member));
        if self.snapshots_sent.remove(&member).is_some() {
            self.node
                .report_snapshot(node_of(member), raft::SnapshotStatus::Failure);
        }
    }

    fn not_leader(&self) -> GroupError {
        GroupError::NotLeader {
            leader: self.leader.filter(|&l| l != self.me),
        }
    }

    /// Proposes a command (leader only); it takes effect when committed and
    /// applied (watch [`Group::take_events`] or the state).
    pub fn propose(&mut self, cmd: &Command) -> Result<(), GroupError> {
        if !self.is_leader() {
            return Err(self.not_leader());
        }
        self.node.propose(Vec::new(), cmd.encode())?;
        Ok(())
    }

    /// Proposes a command from any member: the leader's is proposed, a
    /// follower's is forwarded to the leader by raft-rs. A forwarded
    /// proposal is lost if leadership changes before it arrives, so the
    /// caller watches the applied state and proposes again (for commands
    /// whose effect it can see, such as [`Command::Readdress`]).
    pub fn propose_anywhere(&mut self, cmd: &Command) -> Result<(), GroupError> {
        match self.node.propose(Vec::new(), cmd.encode()) {
            Ok(()) => Ok(()),
            Err(raft::Error::ProposalDropped) => Err(self.not_leader()),
            Err(e) => Err(e.into()),
        }
    }

    /// Proposes that a new member join with the next id, which this returns
    /// (leader only). One membership change at a time: another is refused
    /// until the one before is applied.
    pub fn propose_join(
        &mut self,
        addr: std::net::SocketAddr,
        workers: u16,
        bulk_port: u16,
        zone: Option<String>,
    ) -> Result<MemberId, GroupError> {
        let member = self
            .state
            .as_ref()
            .map_or(MemberId(0), ClusterState::next_member);
        let change = Membership::Join {
            member,
            addr,
            workers,
            bulk_port,
            zone,
        };
        self.propose_membership(&change, ConfChangeType::AddLearnerNode, member)?;
        Ok(member)
    }

    /// Proposes that `member` be forgotten (leader only), at `at_ms` (the
    /// caller's wall clock, Unix milliseconds); see [`Membership::Forget`].
    pub fn propose_forget(
        &mut self,
        member: MemberId,
        force: bool,
        at_ms: u64,
    ) -> Result<(), GroupError> {
        let change = Membership::Forget {
            member,
            force,
            at_ms,
        };
        self.propose_membership(&change, ConfChangeType::RemoveNode, member)?;
        self.note_evicting(member);
        Ok(())
    }

    fn propose_membership(
        &mut self,
        change: &Membership,
        kind: ConfChangeType,
        member: MemberId,
    ) -> Result<(), GroupError> {
        if !self.is_leader() {
            return Err(self.not_leader());
        }
        let s = self.state.as_ref().ok_or_else(|| self.not_leader())?;
        s.check_membership(change)?;
        if self.node.raft.has_pending_conf() {
            return Err(GroupError::Busy);
        }
        let mut cc = ConfChange::default();
        cc.set_change_type(kind);
        cc.node_id = node_of(member);
        cc.context = change.encode().into();
        self.node.propose_conf_change(Vec::new(), cc)?;
        Ok(())
    }

    /// The messages queued for peers since the last call.
    pub fn take_outgoing(&mut self) -> Vec<PeerMessage> {
        std::mem::take(&mut self.outgoing)
    }

    /// What happened since the last call.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }
}
