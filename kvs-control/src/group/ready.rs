//! What Raft has ready, done in order: entries, hard state and snapshots
//! persisted (and flushed before the messages that depend on them are
//! queued), committed entries applied to the cluster's state, and the
//! state snapshotted every so many entries.

use std::time::Instant;

use kvs_proto::MemberId;
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, Entry, EntryType, Message, MessageType};
use raft::{StateRole, Storage as _};

use super::{member_of, Event, Group, PeerMessage};
use crate::error::GroupError;
use crate::log_pos::LogPos;
use crate::refusal::Refusal;
use crate::state::{Applied, ClusterState, Command, Membership};

impl Group {
    /// Does what Raft has ready: persists entries, hard state and snapshots
    /// (flushed before the messages that depend on them are queued),
    /// applies what is committed, and snapshots the state every
    /// [`GroupConfig::snapshot_every`](super::GroupConfig::snapshot_every) entries.
    pub fn poll(&mut self, now: Instant) -> Result<(), GroupError> {
        for _ in 0..4 {
            if !self.node.has_ready() {
                break;
            }
            self.ready(now)?;
        }
        self.leases.prune(now, self.applied);
        self.adopt_group_timing(now);
        self.maybe_snapshot()
    }

    pub(super) fn ready(&mut self, now: Instant) -> Result<(), GroupError> {
        let mut rd = self.node.ready();
        if let Some(ss) = rd.ss() {
            self.on_soft_state(ss.leader_id, ss.raft_state, now);
        }
        // A leader's messages may leave before its own write: it counts
        // itself in the quorum only once the write is done.
        let msgs = rd.take_messages();
        self.queue(msgs, now);
        for rs in rd.take_read_states() {
            // Only this member's own requests are answered to it; a
            // context it does not recognise grants nothing.
            self.leases.confirmed(&rs.request_ctx, rs.index, now);
        }
        if !rd.snapshot().is_empty() {
            let snap = rd.snapshot().clone();
            let state =
                ClusterState::decode(snap.get_data()).map_err(|why| GroupError::BadMessage {
                    from: self.leader.unwrap_or(MemberId(u16::MAX)),
                    why: format!("a snapshot whose state does not decode: {why}"),
                })?;
            if state.cluster_id() != self.cluster_id {
                return Err(GroupError::OtherCluster {
                    theirs: state.cluster_id(),
                    ours: self.cluster_id,
                });
            }
            self.node.mut_store().install(&snap)?;
            self.state = Some(state);
            self.conf = snap.get_metadata().get_conf_state().clone();
            self.applied = snap.get_metadata().index;
            self.events.push(Event::Restored {
                index: self.applied,
            });
        }
        let committed = rd.take_committed_entries();
        self.apply_entries(committed, now)?;
        self.node.mut_store().append(rd.entries())?;
        if let Some(hs) = rd.hs() {
            self.node.mut_store().set_hard_state(hs);
        }
        // One flush for all of it, before a vote or an append's answer
        // leaves: a member that forgot its vote could elect two leaders.
        self.node.mut_store().sync()?;
        let msgs = rd.take_persisted_messages();
        self.queue(msgs, now);
        let mut light = self.node.advance(rd);
        if let Some(c) = light.commit_index() {
            self.node.mut_store().set_commit(c);
        }
        let msgs = light.take_messages();
        self.queue(msgs, now);
        let committed = light.take_committed_entries();
        self.apply_entries(committed, now)?;
        self.node.advance_apply_to(self.applied);
        Ok(())
    }

    pub(super) fn on_soft_state(&mut self, leader: u64, role: StateRole, now: Instant) {
        let leader = member_of(leader);
        if leader != self.leader {
            self.leader = leader;
            self.events.push(Event::Leader(leader));
        }
        if role == StateRole::Leader {
            if self.leader_since.is_none() {
                self.leader_since = Some(now);
                self.heard.clear();
                self.joining.clear();
                self.marking.clear();
                self.evicting.clear();
            }
        } else {
            self.leader_since = None;
            self.marking.clear();
            self.snapshots_sent.clear();
            self.evicting.clear();
        }
    }

    pub(super) fn queue(&mut self, msgs: Vec<Message>, now: Instant) {
        for m in msgs {
            let Some(to) = member_of(m.to) else { continue };
            if m.get_msg_type() == MessageType::MsgSnapshot {
                self.snapshots_sent.insert(to, now);
            }
            let bytes = m.write_to_bytes().expect("a raft message encodes");
            if bytes.len() > self.cfg.max_message {
                self.next_fragmented = self.next_fragmented.wrapping_add(1);
            }
            for bytes in crate::fragment::split(bytes, self.next_fragmented, self.cfg.max_message) {
                self.outgoing.push(PeerMessage { to, bytes });
            }
        }
    }

    pub(super) fn apply_entries(
        &mut self,
        entries: Vec<Entry>,
        now: Instant,
    ) -> Result<(), GroupError> {
        for e in entries {
            if e.index <= self.applied {
                continue;
            }
            let at = LogPos::new(e.index, e.term);
            let state = self.state.as_mut().ok_or_else(|| GroupError::BadLog {
                index: e.index,
                why: "committed before this member was given the state".into(),
            })?;
            let done = match e.get_entry_type() {
                EntryType::EntryNormal if e.data.is_empty() => Applied::Nothing,
                EntryType::EntryNormal => match Command::decode(&e.data) {
                    Ok(cmd) => {
                        // A mark applied, or refused, is no longer awaited.
                        if let Command::MarkFailed { member } | Command::MarkUp { member } = cmd {
                            self.marking.remove(&member);
                        }
                        state.apply(&cmd, at)
                    }
                    Err(why) => Applied::Refused(Refusal::BadEntry(why.to_string())),
                },
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&e.data).map_err(|err| {
                        GroupError::BadLog {
                            index: e.index,
                            why: format!("a configuration change that does not decode: {err}"),
                        }
                    })?;
                    match Membership::decode(&cc.context) {
                        Ok(change) => {
                            let done = state.apply_membership(&change, at);
                            if !matches!(done, Applied::Refused(_)) {
                                self.conf = self.node.apply_conf_change(&cc)?;
                            }
                            done
                        }
                        Err(why) => Applied::Refused(Refusal::BadChange(why.to_string())),
                    }
                }
                EntryType::EntryConfChangeV2 => Applied::Refused(Refusal::JointChange),
            };
            // An unsafe recovery forces its configuration on every member.
            if let Applied::Recovered { lost, demoted, .. } = &done {
                self.force_conf(lost, demoted)?;
            }
            self.applied = e.index;
            if let (Applied::Joined(m), true) = (&done, self.is_leader()) {
                self.joining.insert(*m, now);
            }
            self.events.push(Event::Applied(e.index, done));
        }
        Ok(())
    }

    pub(super) fn maybe_snapshot(&mut self) -> Result<(), GroupError> {
        let Some(state) = &self.state else {
            return Ok(());
        };
        let si = self.node.store().latest_snapshot().get_metadata().index;
        let wanted = self.node.store().take_wanted();
        if self.applied <= si || (!wanted && self.applied < si + self.cfg.snapshot_every) {
            return Ok(());
        }
        let term = self.node.store().term(self.applied)?;
        let mut snap = raft::eraftpb::Snapshot::default();
        snap.mut_metadata().index = self.applied;
        snap.mut_metadata().term = term;
        snap.mut_metadata().set_conf_state(self.conf.clone());
        snap.data = state.encode().into();
        self.node.mut_store().compact(&snap)?;
        Ok(())
    }
}
