//! States and commands the state machine's tests share.

use std::net::SocketAddr;
use std::ops::Range;

use kvs_proto::{MemberId, ShardMap};

use super::{Applied, ClusterState, Command, Founding, Membership};
use crate::log_pos::LogPos;
use kvs_proto::ClusterId;

pub(super) fn addr(p: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], p))
}

pub(super) fn founding(control_voters: u16) -> Founding {
    Founding {
        control_voters,
        replicas: 1,
        zone: None,
        member_timeout_ms: Some(1000),
    }
}

/// A copy of `slots` on `member`, begun under map `since`, is ready.
pub(super) fn ready_cmd(member: MemberId, slots: Vec<Range<u32>>, since: u32) -> Command {
    Command::BackupReady {
        member,
        slots,
        since,
        records: 0,
        bytes: 0,
    }
}

pub(super) fn three() -> ClusterState {
    let map = ShardMap::single(addr(7000), 64, 2).unwrap();
    let mut s = ClusterState::bootstrap(ClusterId::from_bytes([7; 16]), founding(2), map);
    for (i, p) in [(MemberId(1), 7001u16), (MemberId(2), 7002)] {
        let j = Membership::Join {
            member: i,
            addr: addr(p),
            workers: 2,
            bulk_port: 9000 + i.0,
            zone: None,
        };
        assert_eq!(
            s.apply_membership(&j, LogPos::new(u64::from(i.0) + 1, 1)),
            Applied::Joined(i)
        );
    }
    s
}

/// Spreads [`three`]'s slots: member i owns slots 21i.. (the rest stay
/// member 0's), in map versions applied at (9, 1).
pub(super) fn spread(s: &mut ClusterState) {
    for (r, to) in [(21..42, MemberId(1)), (42..64, MemberId(2))] {
        let mut m = s.map.clone();
        m.assign(r, to, None).unwrap();
        s.set_map(m, LogPos::new(9, 1));
    }
}
