//! The routing table: per slot, the endpoint of the worker that owns it
//! under the map in use, rebuilt whenever a map is installed or a member
//! connected, so that a request costs `slot_of(key)` and one table lookup.
//! A slot whose owner the client is not connected to yet has no endpoint:
//! the request takes the slow path, which connects (see `reach`). `E` is an
//! endpoint.

use kvs_proto::shard::slot_of;
use kvs_proto::{MemberId, Owner, ShardMap};

/// The endpoints of the connected members' workers, and the owner's endpoint
/// of every slot.
#[derive(Debug)]
pub(crate) struct Routes<E> {
    /// The map version the table was built from.
    version: u32,
    /// The map's slot count.
    slots: u32,
    /// Per slot: its owner's endpoint, if the client is connected to it.
    table: Vec<Option<E>>,
    /// Whether every slot has an endpoint.
    complete: bool,
    /// Per member id: the endpoints of its workers, by worker number.
    members: Vec<Vec<E>>,
    /// Every endpoint, in the order they were added.
    all: Vec<E>,
}

impl<E> Default for Routes<E> {
    fn default() -> Self {
        Routes {
            version: 0,
            slots: 0,
            table: Vec::new(),
            complete: true,
            members: Vec::new(),
            all: Vec::new(),
        }
    }
}

impl<E: Copy + PartialEq> Routes<E> {
    /// The endpoint of `key`'s owner (after a [`rebuild`](Self::rebuild)),
    /// if the client is connected to it.
    #[inline]
    pub(crate) fn of_key(&self, key: &[u8]) -> Option<E> {
        self.table[slot_of(key, self.slots) as usize]
    }

    /// Whether the client is connected to the owner of every slot.
    #[inline]
    pub(crate) fn complete(&self) -> bool {
        self.complete
    }

    /// The version of the map the table was built from.
    #[inline]
    pub(crate) fn version(&self) -> u32 {
        self.version
    }

    /// The endpoint of `owner`, if the client is connected to it.
    pub(crate) fn endpoint(&self, owner: Owner) -> Option<E> {
        self.members
            .get(owner.member.index())?
            .get(usize::from(owner.worker))
            .copied()
    }

    /// How many of `member`'s workers the client is connected to.
    pub(crate) fn workers(&self, member: MemberId) -> u16 {
        self.members
            .get(member.index())
            .map_or(0, |w| w.len() as u16)
    }

    /// Adds the endpoint of `member`'s next worker.
    pub(crate) fn push_worker(&mut self, member: MemberId, ep: E) {
        let m = member.index();
        if self.members.len() <= m {
            self.members.resize_with(m + 1, Vec::new);
        }
        self.members[m].push(ep);
        self.all.push(ep);
    }

    /// The member whose worker `ep` is.
    pub(crate) fn member_of(&self, ep: E) -> Option<MemberId> {
        self.members
            .iter()
            .position(|w| w.contains(&ep))
            .map(|m| MemberId(m as u16))
    }

    /// Every connected worker of every member, in the order they were
    /// added.
    pub(crate) fn all(&self) -> &[E] {
        &self.all
    }

    /// How many endpoints there are.
    pub(crate) fn count(&self) -> usize {
        self.all.len()
    }

    /// Forgets `member`'s endpoints (its connections died): its slots take
    /// the slow path, which connects again, after the next
    /// [`rebuild`](Self::rebuild).
    pub(crate) fn drop_member(&mut self, member: MemberId) {
        let Some(eps) = self.members.get_mut(member.index()) else {
            return;
        };
        let gone = std::mem::take(eps);
        self.all.retain(|e| !gone.contains(e));
    }

    /// Rebuilds the table from `map`: the slots of owners the client is
    /// not connected to get no endpoint.
    pub(crate) fn rebuild(&mut self, map: &ShardMap) {
        let mut table = std::mem::take(&mut self.table);
        table.clear();
        table.extend((0..map.slots()).map(|s| self.endpoint(map.owner_of_slot(s))));
        self.complete = table.iter().all(Option::is_some);
        self.table = table;
        self.slots = map.slots();
        self.version = map.version();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::Member;
    use std::net::SocketAddr;

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], p))
    }

    /// Every key routes to its owner's worker: member 0's endpoints are
    /// 100 + worker, member 1's `one` + worker (`None`: not connected).
    fn check(r: &Routes<u32>, m: &ShardMap, one: Option<u32>) {
        let mut seen = [false; 2];
        for i in 0..500 {
            let k = format!("user{i}");
            let o = m.owner(k.as_bytes());
            let want = match o.member {
                MemberId(0) => Some(100 + u32::from(o.worker)),
                _ => one.map(|b| b + u32::from(o.worker)),
            };
            assert_eq!(r.of_key(k.as_bytes()), want, "{k}");
            seen[o.member.index()] = true;
        }
        assert_eq!(seen, [true, true]);
    }

    #[test]
    fn the_table_follows_the_installed_map() {
        let mut m = ShardMap::single(addr(1), 64, 2).unwrap();
        let mut r = Routes::default();
        // Member 0's workers are endpoints 100 and 101.
        r.push_worker(MemberId(0), 100u32);
        r.push_worker(MemberId(0), 101);
        r.rebuild(&m);
        assert_eq!(r.version(), 1);
        assert!(r.complete());
        for i in 0..200 {
            let k = format!("user{i}");
            let o = m.owner(k.as_bytes());
            assert_eq!(
                r.of_key(k.as_bytes()),
                Some(100 + u32::from(o.worker)),
                "{k}"
            );
        }
        // A member joins and takes half the slots: until its endpoints are
        // there, its slots have none (the others keep theirs).
        let b = m
            .add_member(Member {
                addr: addr(2),
                workers: 3,
                bulk_port: 0,
            })
            .unwrap();
        m.assign(0..32, b, Some(MemberId(0))).unwrap();
        m.set_version(2);
        r.rebuild(&m);
        assert_eq!(r.version(), 2);
        assert!(!r.complete());
        // Member 1's slots have no endpoint until it is connected.
        check(&r, &m, None);
        for w in 0..3u32 {
            r.push_worker(b, 200 + w);
        }
        assert_eq!(r.workers(b), 3);
        r.rebuild(&m);
        assert_eq!(r.version(), 2);
        assert!(r.complete());
        check(&r, &m, Some(200));
        assert_eq!(r.all(), [100, 101, 200, 201, 202]);
        assert_eq!(r.count(), 5);
        assert_eq!(r.member_of(201), Some(MemberId(1)));
        assert_eq!(r.member_of(7), None);
        assert_eq!(
            r.endpoint(Owner {
                member: MemberId(1),
                worker: 2
            }),
            Some(202)
        );
        assert_eq!(
            r.endpoint(Owner {
                member: MemberId(1),
                worker: 3
            }),
            None
        );
        assert_eq!(
            r.endpoint(Owner {
                member: MemberId(2),
                worker: 0
            }),
            None
        );
    }
}
