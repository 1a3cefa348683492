//! A cluster in memory for unit tests: a [`Control`] whose answers the test
//! scripts, and which records every request.

use std::net::SocketAddr;

use kvs_client::ControlError;
use kvs_proto::control::{
    ControlReply, ControlRequest, GroupMember, GroupView, MemberStatus, MigrationStatus,
    WorkerStatus,
};
use kvs_proto::{ClusterId, Member, MemberId, ShardMap};

use crate::admin::{Admin, Control};

/// How the fake answers one request.
pub type Script = Box<dyn FnMut(SocketAddr, &ControlRequest) -> Result<ControlReply, ControlError>>;

/// A scripted control client.
pub struct Fake {
    /// Every request, in order, with where it went.
    pub asked: Vec<(SocketAddr, ControlRequest)>,
    script: Script,
}

impl std::fmt::Debug for Fake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fake").field("asked", &self.asked).finish()
    }
}

impl Control for Fake {
    fn request(
        &mut self,
        addr: SocketAddr,
        req: &ControlRequest,
    ) -> Result<ControlReply, ControlError> {
        self.asked.push((addr, req.clone()));
        (self.script)(addr, req)
    }
}

/// An [`Admin`] through `contact` of a cluster `script` plays.
pub fn admin(
    contact: &str,
    script: impl FnMut(SocketAddr, &ControlRequest) -> Result<ControlReply, ControlError> + 'static,
) -> Admin<Fake> {
    Admin::new(
        Fake {
            asked: Vec::new(),
            script: Box::new(script),
        },
        addr(contact),
    )
}

/// Following at once, with a minute's patience.
pub const QUICK: crate::progress::Pace = crate::progress::Pace {
    poll: std::time::Duration::ZERO,
    patience: std::time::Duration::from_secs(60),
};

/// The requests `a`'s fake was asked, in order, with where they went.
pub fn requests(a: &Admin<Fake>) -> Vec<(String, ControlRequest)> {
    a.client()
        .asked
        .iter()
        .map(|(at, r)| (at.to_string(), r.clone()))
        .collect()
}

/// An address from its text.
pub fn addr(s: &str) -> SocketAddr {
    s.parse().expect("a socket address")
}

/// A map of 64 slots all at member 0 (`10.0.0.1:7000`, 2 workers), with
/// members at `0.0.0.0:7001` and `10.0.0.3:7000` (1 worker each).
pub fn map() -> ShardMap {
    let mut m = ShardMap::single(addr("10.0.0.1:7000"), 64, 2).expect("a map");
    for a in ["0.0.0.0:7001", "10.0.0.3:7000"] {
        m.add_member(Member {
            addr: addr(a),
            workers: 1,
            bulk_port: 0,
        })
        .expect("room");
    }
    m.set_version(3);
    m
}

/// The answer to `Map` with `m`.
pub fn map_reply(m: &ShardMap) -> ControlReply {
    let mut map = Vec::new();
    m.encode(&mut map);
    ControlReply::Map { map }
}

/// A member's status answer with one idle worker, and `migration`.
pub fn status(member: MemberId, migration: Option<MigrationStatus>) -> ControlReply {
    ControlReply::Status(MemberStatus {
        member,
        map_version: 3,
        workers: vec![WorkerStatus::default()],
        imports: Vec::new(),
        migration,
        held: (0, 0),
        copies: Vec::new(),
        bulk_served: (0, 0),
        group: None,
        drained: false,
        recovering: false,
    })
}

/// A member's status answer with one idle worker and the view `group`.
pub fn status_in(member: MemberId, group: GroupView) -> ControlReply {
    ControlReply::Status(MemberStatus {
        member,
        map_version: 3,
        workers: vec![WorkerStatus::default()],
        imports: Vec::new(),
        migration: None,
        held: (0, 0),
        copies: Vec::new(),
        bulk_served: (0, 0),
        group: Some(group),
        drained: false,
        recovering: false,
    })
}

/// A view of the control group of [`map`]'s three members, all up, led by
/// member 0 in term 2 and applied up to `applied`, keeping `replicas`
/// copies with `under` slots short of them.
pub fn group(replicas: u8, under: u32, applied: u64) -> GroupView {
    let m = map();
    GroupView {
        cluster_id: ClusterId::from_bytes([0xab; 16]),
        leader: Some(MemberId(0)),
        term: 2,
        commit: applied,
        applied,
        lease: true,
        replicas,
        under_replicated_slots: under,
        members: m
            .member_ids()
            .zip(m.members())
            .map(|(id, x)| GroupMember {
                id,
                addr: x.addr,
                state: "up".into(),
                voter: true,
                zone: None,
                drained: false,
            })
            .collect(),
    }
}

/// A migration of `total` slots to member 1 with `done` of them moved.
pub fn migration(done: u32, total: u32, finished: bool) -> MigrationStatus {
    MigrationStatus {
        moves: vec![(0, total, MemberId(1))],
        slots_total: total,
        slots_done: done,
        slots_moving: total - done,
        records: u64::from(done) * 10,
        bytes: u64::from(done) * 1000,
        seconds: f64::from(done) / 10.0,
        started_ms: 0,
        finished,
        cancelled: false,
        error: None,
        stalled: None,
    }
}
