//! Control messages: what servers say to each other and what `kvs-admin`
//! asks, on a server's control endpoint. JSON (serde), carried in the value
//! of a [`Op::Control`](crate::proto::Op::Control) request and in the
//! payload of its answer; they are rare, small, and worth reading in a
//! packet capture. Decoding is serde's, which never panics on input.
//!
//! The cluster's configuration changes only through its control group's
//! replicated log; the group's *leader* (the *keeper* in these messages)
//! proposes every change. Members answer a request only the leader serves
//! with [`ControlReply::Keeper`], naming where to go.

use std::net::SocketAddr;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::ids::{ClusterId, MemberId, Ticket};

/// A request to a control endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum ControlRequest {
    /// A new server asks to join the cluster: where clients reach it, its
    /// worker count and its slot count (which must be the cluster's).
    Join {
        /// Its setup address.
        addr: SocketAddr,
        /// Its workers.
        workers: u16,
        /// Its configured slot count.
        slots: u32,
        /// Its bulk-transfer port (at `addr`'s IP).
        bulk_port: u16,
        /// Its zone (host or rack), if it has one: a slot's copies go to
        /// different zones when there are enough.
        #[serde(default)]
        zone: Option<String>,
    },
    /// The member's own figures: keys, bytes and slots per worker, the
    /// imports it runs, and the migration in progress (from the group's state).
    Status,
    /// The member's shard map.
    Map,
    /// Move slots `first..end` (whoever owns them) to member `to` (leader
    /// only). Answered once the migration has started (its entry is
    /// applied); [`Status`] at any member follows it.
    ///
    /// [`Status`]: ControlRequest::Status
    Migrate {
        /// First slot.
        first: u32,
        /// One past the last slot.
        end: u32,
        /// The member to own them.
        to: MemberId,
    },
    /// Spread the slots evenly over all members (leader only): a migration
    /// of every range that moves.
    Rebalance,
    /// Stop the migration in progress (leader only): the slots being pulled
    /// now finish moving, the rest stay where they are.
    Cancel,
    /// Drain the member asked (any member, for itself): it stops serving,
    /// then has the group move each slot it is primary of to the slot's
    /// ready backup and drop its copies; it takes none until it restarts.
    /// Answered at once; [`MemberStatus::drained`] says when it is done.
    Drain,
    /// Snapshot the member's records now (any member, for itself; one
    /// with `durability` other than `none`): each worker copies its slots
    /// to its snapshot file while it serves, and its logs shed what the
    /// snapshot holds. Answered at once; [`WorkerStatus::disk`] follows it.
    Snapshot,
    /// Keep `replicas` copies of every slot, 1 to 3 (leader only): backups
    /// are added, copied and made ready, or dropped.
    SetReplicas {
        /// The copies.
        replicas: u8,
    },
    /// Restore service after a majority of the control group's voters was
    /// lost for good (any member, for itself: a surviving voter): it makes
    /// itself the group's only voter and leader, and the `lost` members are
    /// forgotten. Unsafe: what only the lost members had is gone.
    UnsafeRecover {
        /// The members lost for good.
        lost: Vec<MemberId>,
    },
    /// Make the control group's `member_timeout` `ms` milliseconds (leader
    /// only): every member derives its Raft tick, lease and failure
    /// timeout from it once it has applied the change.
    SetMemberTimeout {
        /// The timeout, in milliseconds.
        ms: u64,
    },
    /// Remove member `member` from the cluster for good (leader only).
    /// Refused while it owns slots, unless `force`: its slots with a ready
    /// backup on a member that is up fail over to it, and the others go,
    /// empty, to the members that are up, their records lost.
    Forget {
        /// The member to forget.
        member: MemberId,
        /// Whether its slots' records may be lost.
        #[serde(default)]
        force: bool,
    },
    /// A target asks the source for a ticket to pull slots `first..end`
    /// (which map `version` handed to it) over the source's bulk port; the
    /// ticket goes in the bulk connection's setup, so the bulk port itself
    /// never sees the cluster's token.
    OpenPull {
        /// The map version that handed the slots over.
        version: u32,
        /// First slot.
        first: u32,
        /// One past the last.
        end: u32,
    },
    /// A target tells the leader it has every record of `slots`, imported
    /// under map `version`.
    ImportDone {
        /// The map version that handed the slots over.
        version: u32,
        /// The slots (`[first, end]` pairs in JSON).
        #[serde(with = "crate::shard::range_pairs")]
        slots: Vec<Range<u32>>,
        /// Records and bytes it pulled.
        records: u64,
        /// Bytes of keys and values pulled.
        bytes: u64,
        /// Set when the source could not be reached for too long and the
        /// import ended without every record (why).
        #[serde(default)]
        lost: Option<String>,
    },
}

/// An answer from a control endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case", deny_unknown_fields)]
pub enum ControlReply {
    /// Done.
    Ok,
    /// Not done, and why.
    Error {
        /// What went wrong, for a person.
        message: String,
    },
    /// Only the control group's leader does this: ask it, at this address.
    Keeper {
        /// The leader's setup address.
        addr: SocketAddr,
    },
    /// Only the control group's leader does this, and no leader is known
    /// now (an election is under way, or this member is cut off from the
    /// group): ask again shortly.
    NoLeader,
    /// Not yet: this member has not applied the map the request needs (a
    /// pull ticket for slots it has not frozen yet). Ask again shortly.
    NotYet {
        /// What it is waiting for, for a person.
        message: String,
    },
    /// Joined: the cluster's id, the member's id and the map that includes
    /// it. The new member keeps both ids in its data dir.
    Joined {
        /// The cluster (32 hex digits in JSON).
        cluster_id: ClusterId,
        /// The new member.
        member: MemberId,
        /// The encoded map ([`crate::ShardMap::encode`]).
        map: Vec<u8>,
    },
    /// A member's figures.
    Status(MemberStatus),
    /// A member's map (the answer to [`ControlRequest::Map`]).
    Map {
        /// The encoded map ([`crate::ShardMap::encode`]).
        map: Vec<u8>,
    },
    /// A migration started (the answer to `migrate` and `rebalance`).
    Started(MigrationStatus),
    /// A pull ticket (the answer to `open_pull`): present it, hex-encoded
    /// here, in the bulk connection's setup.
    Ticket {
        /// The ticket (32 hex digits in JSON).
        ticket: Ticket,
    },
    /// Not now: this member is loading its records from its data dir
    /// (snapshot and logs) and serves nothing else until it is done; it
    /// answers only status ([`MemberStatus::recovering`]) and its map
    /// meanwhile. Ask again later, or another member.
    Recovering {
        /// How far its workers got, summed.
        progress: RecoveryProgress,
    },
    /// [`ControlRequest::Snapshot`] taken: the member's request number
    /// `ask` (counted from its start). A worker's snapshot answers it once
    /// the worker's [`DiskStatus::answered`] reaches it.
    SnapshotAsked {
        /// The request's number.
        ask: u64,
    },
}

/// One member's figures (the answer to [`ControlRequest::Status`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberStatus {
    /// The member.
    pub member: MemberId,
    /// The version of the map it serves by.
    pub map_version: u32,
    /// Per worker, by number.
    pub workers: Vec<WorkerStatus>,
    /// The imports this member runs as a migration's target.
    #[serde(default)]
    pub imports: Vec<ImportStatus>,
    /// The migration in progress or the last one, as the group's state has it.
    #[serde(default)]
    pub migration: Option<MigrationStatus>,
    /// Slots this member gave away and still holds, frozen, for their new
    /// owner to pull; and their bytes of keys and values.
    #[serde(default)]
    pub held: (u32, u64),
    /// The control group as this member sees it.
    #[serde(default)]
    pub group: Option<GroupView>,
    /// Whether this member was drained (its slots with a ready backup moved
    /// to it; it takes none until it restarts).
    #[serde(default)]
    pub drained: bool,
    /// The copies of slots arriving at this member as a new backup.
    #[serde(default)]
    pub copies: Vec<CopyStatus>,
    /// Bulk connections this member accepted as a source, and the pulls
    /// (migration chunks, backup copies) it served over them: a target
    /// keeps one connection across a migration's chunks.
    #[serde(default)]
    pub bulk_served: (u64, u64),
    /// Whether this member is still loading its records from its data dir
    /// (each worker says how far it got, [`WorkerStatus::recovering`]): it
    /// serves none of its slots and takes no part in the control group yet,
    /// so this answer has no [`group`](Self::group) and no keys. Absent
    /// from the JSON when false, so a reader from before it reads every
    /// other answer.
    #[serde(default, skip_serializing_if = "is_false")]
    pub recovering: bool,
}

/// A copy arriving at a new backup: the snapshot of some of a primary's
/// slots, pulled over the bulk port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyStatus {
    /// The primary's member.
    pub from: MemberId,
    /// The slots the snapshot covers: `first..end` (not every slot between
    /// need be in it).
    pub first: u32,
    /// One past the last.
    pub end: u32,
    /// Records received so far.
    pub records: u64,
    /// Bytes of keys and values received so far.
    pub bytes: u64,
    /// Bytes of keys and values in the snapshot.
    pub total_bytes: u64,
    /// Seconds since the pull started.
    pub seconds: f64,
}

/// The control group as one member sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupView {
    /// The cluster (32 hex digits in JSON).
    pub cluster_id: ClusterId,
    /// The member this one believes leads the group.
    pub leader: Option<MemberId>,
    /// The Raft term.
    pub term: u64,
    /// The highest log index known committed, and the highest applied.
    pub commit: u64,
    /// The highest log index applied.
    pub applied: u64,
    /// Whether this member may serve its slots now (it holds a lease).
    pub lease: bool,
    /// Copies of each slot the cluster keeps.
    #[serde(default = "one")]
    pub replicas: u8,
    /// Slots with fewer ready copies than `replicas`.
    #[serde(default)]
    pub under_replicated_slots: u32,
    /// Every member that ever had an id, as the applied log has it.
    pub members: Vec<GroupMember>,
}

/// A member as the control group's log has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupMember {
    /// Its id.
    pub id: MemberId,
    /// Its setup address.
    pub addr: SocketAddr,
    /// `"up"`, `"failed"` (the leader lost touch with it) or `"left"`
    /// (forgotten).
    pub state: String,
    /// Whether it votes in the control group.
    pub voter: bool,
    /// Its zone, if it gave one.
    #[serde(default)]
    pub zone: Option<String>,
    /// Whether it was drained (and has not restarted since).
    #[serde(default)]
    pub drained: bool,
}

fn one() -> u8 {
    1
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One import a target runs: the slots it pulls from one source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportStatus {
    /// The member pulled from.
    pub from: MemberId,
    /// Slots being pulled.
    pub slots: u32,
    /// Records received so far.
    pub records: u64,
    /// Bytes of keys and values received so far.
    pub bytes: u64,
    /// Seconds since it started.
    pub seconds: f64,
    /// Times the bulk connection failed and was set up again.
    pub retries: u32,
}

/// A migration as the control group runs it: slots move to `to` in chunks, each
/// handed over by a new map version and final by the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrationStatus {
    /// Moves still to run after the current one, and the current one:
    /// `(first, end, to)` slot ranges and their target.
    pub moves: Vec<(u32, u32, MemberId)>,
    /// Slots the whole migration moves.
    pub slots_total: u32,
    /// Slots whose move is final.
    pub slots_done: u32,
    /// Slots handed over and being pulled now.
    pub slots_moving: u32,
    /// Records and bytes the targets reported for the finished chunks.
    pub records: u64,
    /// Bytes of keys and values moved in finished chunks.
    pub bytes: u64,
    /// Seconds since it started (until it ended, once it has).
    pub seconds: f64,
    /// When it started: Unix milliseconds, by the clock of the leader that
    /// proposed it.
    #[serde(default)]
    pub started_ms: u64,
    /// Whether it is over (done, cancelled, or failed).
    pub finished: bool,
    /// Whether a cancel stopped it.
    pub cancelled: bool,
    /// Why it stopped, if it failed.
    pub error: Option<String>,
    /// Why it cannot move now, while it runs: the member its chunk moves
    /// from or to is not up.
    #[serde(default)]
    pub stalled: Option<String>,
}

/// One worker's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerStatus {
    /// Slots it owns.
    pub slots: u32,
    /// Keys it holds, backup copies included.
    pub keys: u64,
    /// Of those, keys it holds as a backup of another member's slots.
    #[serde(default)]
    pub backup_keys: u64,
    /// Heap bytes its records take.
    pub bytes: u64,
    /// Its records on disk (`None`: `durability = "none"`).
    #[serde(default)]
    pub disk: Option<DiskStatus>,
    /// While its member recovers ([`MemberStatus::recovering`]): how far
    /// this worker got through its files (a worker done waits for the
    /// others). Absent from the JSON otherwise, so a reader from before it
    /// reads every other answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovering: Option<RecoveryProgress>,
}

/// How far a recovery from the data dir got: bytes of the snapshot and
/// logs read, of all there are to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryProgress {
    /// Bytes read so far (never more than `total`).
    pub read: u64,
    /// Bytes of the snapshot and logs to read.
    pub total: u64,
}

impl RecoveryProgress {
    /// The sum of `parts` (a member's workers).
    pub fn sum(parts: impl IntoIterator<Item = RecoveryProgress>) -> RecoveryProgress {
        parts
            .into_iter()
            .fold(RecoveryProgress::default(), |a, p| RecoveryProgress {
                read: a.read.saturating_add(p.read),
                total: a.total.saturating_add(p.total),
            })
    }

    /// The share read, in percent (100 with nothing to read).
    pub fn percent(&self) -> u32 {
        if self.total == 0 {
            return 100;
        }
        (u128::from(self.read.min(self.total)) * 100 / u128::from(self.total)) as u32
    }
}

/// A worker's records on disk: its logs and snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskStatus {
    /// Bytes of its logs (what a restart replays after the snapshot).
    pub log_bytes: u64,
    /// Its snapshot's size (0: none yet).
    pub snapshot_bytes: u64,
    /// Snapshots it put in place since the member started.
    pub snapshots: u64,
    /// The snapshot under way: slots copied, and of how many.
    pub snapshotting: Option<(u32, u32)>,
    /// What its start read (snapshot and logs), in bytes.
    pub recovered_bytes: u64,
    /// How long its start took to read them, in milliseconds.
    pub recovery_ms: u64,
    /// Its log's disk is full: it refuses writes (reads go on).
    #[serde(default)]
    pub disk_full: bool,
    /// The last snapshot request ([`ControlReply::SnapshotAsked`]) a
    /// snapshot in place answers: one that began after the request came,
    /// or was under way then.
    #[serde(default)]
    pub answered: u64,
}

/// A control message that is not JSON of the expected shape.
#[derive(Debug, thiserror::Error)]
#[error("malformed control message: {0}")]
pub struct BadControl(String);

impl ControlRequest {
    /// The JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a control request always serializes")
    }
    /// From untrusted bytes.
    pub fn decode(b: &[u8]) -> Result<ControlRequest, BadControl> {
        serde_json::from_slice(b).map_err(|e| BadControl(e.to_string()))
    }
}

impl ControlReply {
    /// The JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a control reply always serializes")
    }
    /// From untrusted bytes.
    pub fn decode(b: &[u8]) -> Result<ControlReply, BadControl> {
        serde_json::from_slice(b).map_err(|e| BadControl(e.to_string()))
    }
    /// An error reply.
    pub fn error(message: impl Into<String>) -> ControlReply {
        ControlReply::Error {
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip_and_junk_is_an_error() {
        let j = ControlRequest::Join {
            addr: "10.0.0.2:7000".parse().unwrap(),
            workers: 4,
            slots: 1024,
            bulk_port: 7001,
            zone: Some("rack-3".into()),
        };
        assert_eq!(ControlRequest::decode(&j.encode()).unwrap(), j);
        // A join from before zones reads as one without a zone.
        let old = br#"{"op":"join","addr":"10.0.0.2:7000","workers":4,"slots":8,"bulk_port":1}"#;
        assert!(matches!(
            ControlRequest::decode(old),
            Ok(ControlRequest::Join { zone: None, .. })
        ));
        let s = ControlReply::Status(MemberStatus {
            member: MemberId(1),
            map_version: 3,
            workers: vec![WorkerStatus {
                slots: 512,
                keys: 10,
                backup_keys: 4,
                bytes: 1000,
                disk: Some(DiskStatus {
                    log_bytes: 4096,
                    snapshot_bytes: 1 << 20,
                    snapshots: 2,
                    snapshotting: Some((10, 512)),
                    recovered_bytes: 5000,
                    recovery_ms: 12,
                    disk_full: false,
                    answered: 3,
                }),
                recovering: None,
            }],
            imports: vec![ImportStatus {
                from: MemberId(0),
                slots: 64,
                records: 5,
                bytes: 500,
                seconds: 0.5,
                retries: 0,
            }],
            migration: Some(MigrationStatus {
                moves: vec![(0, 64, MemberId(1))],
                slots_total: 64,
                slots_done: 0,
                slots_moving: 64,
                records: 0,
                bytes: 0,
                seconds: 0.5,
                started_ms: 1_700_000_000_000,
                finished: false,
                cancelled: false,
                error: None,
                stalled: None,
            }),
            held: (2, 100),
            drained: false,
            bulk_served: (3, 9),
            recovering: false,
            copies: vec![CopyStatus {
                from: MemberId(1),
                first: 0,
                end: 64,
                records: 10,
                bytes: 1000,
                total_bytes: 4000,
                seconds: 0.25,
            }],
            group: Some(GroupView {
                cluster_id: ClusterId::from_bytes([0xab; 16]),
                leader: Some(MemberId(1)),
                term: 3,
                commit: 9,
                applied: 9,
                lease: true,
                replicas: 2,
                under_replicated_slots: 12,
                members: vec![GroupMember {
                    id: MemberId(0),
                    addr: "10.0.0.1:7000".parse().unwrap(),
                    state: "up".into(),
                    voter: true,
                    zone: None,
                    drained: false,
                }],
            }),
        });
        let f = ControlRequest::Forget {
            member: MemberId(2),
            force: true,
        };
        assert_eq!(ControlRequest::decode(&f.encode()).unwrap(), f);
        assert_eq!(ControlReply::decode(&s.encode()).unwrap(), s);
        for junk in [
            &b""[..],
            b"{",
            b"{\"op\":\"nope\"}",
            b"{\"op\":\"join\",\"addr\":\"x\",\"workers\":1,\"slots\":1}",
            b"{\"op\":\"join\",\"addr\":\"1.2.3.4:5\",\"workers\":70000,\"slots\":1}",
        ] {
            assert!(
                ControlRequest::decode(junk).is_err(),
                "{}",
                String::from_utf8_lossy(junk)
            );
        }
        assert!(ControlReply::decode(b"[1,2]").is_err());
    }

    /// A status of a member still recovering, two workers: one done.
    fn recovering_status() -> MemberStatus {
        let w = |read, total| WorkerStatus {
            slots: 8,
            recovering: Some(RecoveryProgress { read, total }),
            ..WorkerStatus::default()
        };
        MemberStatus {
            member: MemberId(2),
            map_version: 7,
            workers: vec![w(100, 100), w(30, 300)],
            imports: vec![],
            migration: None,
            held: (0, 0),
            group: None,
            drained: false,
            copies: vec![],
            bulk_served: (0, 0),
            recovering: true,
        }
    }

    #[test]
    fn a_recovering_status_round_trips_and_a_serving_one_does_not_mention_it() {
        let s = ControlReply::Status(recovering_status());
        assert_eq!(ControlReply::decode(&s.encode()).unwrap(), s);
        // Once it serves, neither field is written: a reader from before
        // them (deny_unknown_fields) reads the answer as it always did.
        let mut serving = recovering_status();
        serving.recovering = false;
        for w in &mut serving.workers {
            w.recovering = None;
        }
        let text = String::from_utf8(ControlReply::Status(serving.clone()).encode()).unwrap();
        assert!(!text.contains("recovering"), "{text}");
        // And a status from before them reads as a member that serves.
        let old = br#"{"reply":"status","member":2,"map_version":7,"workers":[{"slots":8,"keys":0,"bytes":0}]}"#;
        match ControlReply::decode(old).unwrap() {
            ControlReply::Status(s) => {
                assert!(!s.recovering);
                assert_eq!(s.workers[0].recovering, None);
            }
            other => panic!("{other:?}"),
        }
        // A progress of the wrong shape is refused, not guessed at.
        let bad = br#"{"reply":"status","member":2,"map_version":7,"workers":[{"slots":8,"keys":0,"bytes":0,"recovering":{"read":1}}],"recovering":true}"#;
        assert!(ControlReply::decode(bad).is_err());
    }

    #[test]
    fn the_recovering_refusal_keeps_its_json_and_sums_its_workers() {
        let p = RecoveryProgress::sum(
            recovering_status()
                .workers
                .iter()
                .filter_map(|w| w.recovering),
        );
        assert_eq!(
            p,
            RecoveryProgress {
                read: 130,
                total: 400
            }
        );
        assert_eq!(p.percent(), 32);
        let r = ControlReply::Recovering { progress: p };
        let want = r#"{"reply":"recovering","progress":{"read":130,"total":400}}"#;
        assert_eq!(String::from_utf8(r.encode()).unwrap(), want);
        assert_eq!(ControlReply::decode(want.as_bytes()).unwrap(), r);
        // Nothing to read is done; a count past its total is clamped.
        assert_eq!(RecoveryProgress::default().percent(), 100);
        let over = RecoveryProgress { read: 9, total: 3 };
        assert_eq!(over.percent(), 100);
        let big = RecoveryProgress {
            read: u64::MAX / 2,
            total: u64::MAX,
        };
        assert_eq!(big.percent(), 49);
    }

    #[test]
    fn typed_ids_and_ranges_keep_their_json() {
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        let j = ControlReply::Joined {
            cluster_id: ClusterId::from_bytes([0xab; 16]),
            member: MemberId(2),
            map: vec![1],
        };
        let want = format!(
            r#"{{"reply":"joined","cluster_id":"{}","member":2,"map":[1]}}"#,
            "ab".repeat(16)
        );
        assert_eq!(text(j.encode()), want);
        assert_eq!(ControlReply::decode(want.as_bytes()).unwrap(), j);
        let t = ControlReply::Ticket {
            ticket: Ticket::from_bytes([1; 16]),
        };
        let want = format!(r#"{{"reply":"ticket","ticket":"{}"}}"#, "01".repeat(16));
        assert_eq!(text(t.encode()), want);
        assert_eq!(ControlReply::decode(want.as_bytes()).unwrap(), t);
        let d = ControlRequest::ImportDone {
            version: 3,
            slots: vec![0..4, 9..10],
            records: 1,
            bytes: 2,
            lost: None,
        };
        let want = r#"{"op":"import_done","version":3,"slots":[[0,4],[9,10]],"records":1,"bytes":2,"lost":null}"#;
        assert_eq!(text(d.encode()), want);
        assert_eq!(ControlRequest::decode(want.as_bytes()).unwrap(), d);
        let r = ControlRequest::UnsafeRecover {
            lost: vec![MemberId(1), MemberId(4)],
        };
        assert_eq!(text(r.encode()), r#"{"op":"unsafe_recover","lost":[1,4]}"#);
    }
}
