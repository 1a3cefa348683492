//! A worker's part in replication, with no I/O: as a slot's primary, the
//! sequence numbers of its writes and the keys whose writes its backups
//! have not all acknowledged; as a backup, whose stream of writes it
//! follows for each slot and how far it has applied it.
//!
//! The write path (the worker does the sending):
//! 1. The primary applies a client's write, numbers it (the slot's next
//!    sequence number), and forwards it to every backup of the slot in its
//!    map. The client's answer waits for every backup's.
//! 2. A backup applies writes of a slot only from the member its map names
//!    as the slot's primary, only once the primary began copying the slot
//!    to it (which fixes where the stream starts), and only in order
//!    (each write's number one past the last applied). Anything else is
//!    refused, and the primary does not answer the write as done.
//! 3. Until every backup acknowledged it, a write's key is *in flight*:
//!    reads of it are answered TRY_AGAIN, so nobody reads a value the
//!    backups may not have (a failover would take it back).
//!
//! The fence is step 2's first rule: once the group promotes a backup, its
//! map names it as the primary, and writes from the deposed primary are
//! refused there; the deposed one cannot get a write acknowledged.

use kvs_proto::replica::{Header, Kind, Replicate};
use kvs_proto::{Owner, ShardMap};

use crate::serving::dedup::{Dedup, IdMap};
use crate::store::{Patch, Store};

/// Where a backup is in a primary's stream for one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Follow {
    primary: Owner,
    /// The last write applied.
    applied: u64,
}

/// Why a backup refused a replication message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused(pub String);

/// A worker's replication state (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Replicas {
    me: Owner,
    /// Per slot, as its primary: the last write's number.
    seq: Vec<u64>,
    /// Per slot, as a backup: the stream followed.
    follow: Vec<Option<Follow>>,
    /// Fingerprints of keys with writes in flight, and how many.
    inflight: IdMap<u32>,
    /// Per slot: held (nothing served) until the map shows this backup
    /// member, which missed a write, as not ready; and how many are.
    held: Vec<Option<u16>>,
    holding: u32,
}

impl Replicas {
    /// Nothing followed, nothing in flight, for a map of `slots` slots.
    pub fn new(me: Owner, slots: u32) -> Replicas {
        Replicas {
            me,
            seq: vec![0; slots as usize],
            follow: vec![None; slots as usize],
            inflight: IdMap::with_capacity_and_hasher(1024, Default::default()),
            held: vec![None; slots as usize],
            holding: 0,
        }
    }

    /// The next write's number for `slot`, as its primary.
    #[inline]
    pub fn next_seq(&mut self, slot: u32) -> u64 {
        let s = &mut self.seq[slot as usize];
        *s += 1;
        *s
    }

    /// The last write's number for `slot` (where a copy starts).
    pub fn last_seq(&self, slot: u32) -> u64 {
        self.seq[slot as usize]
    }

    /// A write of `key` awaits its backups.
    #[inline]
    pub fn begin_write(&mut self, key: &[u8]) {
        *self.inflight.entry(fingerprint(key)).or_insert(0) += 1;
    }

    /// A write of the key of fingerprint `fp` is answered.
    #[inline]
    pub fn end_write(&mut self, fp: u64) {
        if let Some(n) = self.inflight.get_mut(&fp) {
            *n -= 1;
            if *n == 0 {
                self.inflight.remove(&fp);
            }
        }
    }

    /// Whether a write of `key` awaits its backups.
    #[inline]
    pub fn in_flight(&self, key: &[u8]) -> bool {
        !self.inflight.is_empty() && self.inflight.contains_key(&fingerprint(key))
    }

    /// The backup member `slot` is held for, if it is.
    #[inline]
    pub fn held(&self, slot: u32) -> Option<u16> {
        if self.holding == 0 {
            return None;
        }
        self.held[slot as usize]
    }

    /// Holds `slot` for its ready backup on `member`, which missed a write
    /// (`None`: lets it go).
    pub fn hold(&mut self, slot: u32, member: Option<u16>) {
        let h = &mut self.held[slot as usize];
        match (h.is_some(), member.is_some()) {
            (false, true) => self.holding += 1,
            (true, false) => self.holding -= 1,
            _ => {}
        }
        *h = member;
    }

    /// The map changed from `old` to `new`: a backup promoted to primary
    /// numbers its writes on from the last it applied; a slot this worker
    /// no longer backs up is not followed any more.
    pub fn install(&mut self, old: &ShardMap, new: &ShardMap) {
        for s in 0..new.slots().min(self.seq.len() as u32) {
            let i = s as usize;
            let backs = new.backups(s).iter().any(|b| b.owner == self.me);
            let primary = new.owner_of_slot(s) == self.me;
            if primary && old.owner_of_slot(s) != self.me {
                self.seq[i] = self.follow[i].map_or(0, |f| f.applied);
            }
            if !backs {
                self.follow[i] = None;
            }
            // A slot held for a backup the map no longer has as ready.
            if let Some(m) = self.held[i] {
                if !primary
                    || !new
                        .backups(s)
                        .iter()
                        .any(|b| b.ready && b.owner.member == m)
                {
                    self.hold(s, None);
                }
            }
        }
    }

    /// Applies a replication message as a backup of its slot, under `map`,
    /// to `store`; why not, if it is refused.
    pub fn apply(
        &mut self,
        msg: &Replicate<'_>,
        map: &ShardMap,
        store: &mut Store,
        dedup: &mut Dedup,
    ) -> Result<(), Refused> {
        let h: Header = msg.header();
        if h.slot >= map.slots() {
            return Err(Refused(format!("slot {} out of range", h.slot)));
        }
        let s = h.slot;
        let i = s as usize;
        if map.owner_of_slot(s) != h.primary {
            return Err(Refused(format!(
                "member {} worker {} is not slot {s}'s primary in map {} (epoch {} here, {} \
                 there)",
                h.primary.member,
                h.primary.worker,
                map.version(),
                map.epoch(s),
                h.epoch
            )));
        }
        if !map.backups(s).iter().any(|b| b.owner == self.me) {
            return Err(Refused(format!(
                "this worker does not back slot {s} up in map {}",
                map.version()
            )));
        }
        match h.kind {
            Kind::CopyBegin => {
                // The copy starts from nothing.
                store.drop_slot(s);
                self.follow[i] = Some(Follow {
                    primary: h.primary,
                    applied: h.seq,
                });
                return Ok(());
            }
            _ if self.follow[i].is_none_or(|f| f.primary != h.primary) => {
                return Err(Refused(format!(
                    "slot {s}'s copy from member {} worker {} has not begun here",
                    h.primary.member, h.primary.worker
                )))
            }
            _ => {}
        }
        let key = msg.key();
        let f = self.follow[i].as_mut().expect("checked above");
        if h.kind.is_write() {
            if h.seq != f.applied + 1 {
                let last = f.applied;
                self.follow[i] = None;
                return Err(Refused(format!(
                    "slot {s}: write {} does not follow {last}, the last applied",
                    h.seq
                )));
            }
            f.applied = h.seq;
        }
        let done = match h.kind {
            Kind::Put | Kind::CopyPut => store.put(s, key, msg.value()).map_err(|e| {
                format!(
                    "out of memory: the worker holds {} of its {}-byte share",
                    e.used, e.limit
                )
            }),
            Kind::Delete => {
                store.delete(s, key);
                Ok(())
            }
            Kind::Patch => match store.patch(s, key, h.offset as usize, msg.value()) {
                Patch::Done => Ok(()),
                other => Err(format!("the patch does not apply here ({other:?})")),
            },
            Kind::CopyBegin | Kind::CopyEnd => Ok(()),
        };
        match done {
            Ok(()) => {
                if h.kind.is_write() {
                    dedup.record(s, h.id);
                }
                Ok(())
            }
            Err(why) => {
                // Diverged from the primary: nothing more until a new copy.
                self.follow[i] = None;
                Err(Refused(format!("slot {s}: {why}")))
            }
        }
    }
}

/// A key's fingerprint for the in-flight table (FNV-1a with another basis
/// than the slot hash, so keys of one slot spread).
#[inline]
pub(crate) fn fingerprint(key: &[u8]) -> u64 {
    let mut h: u64 = 0x6c62_272e_07bb_0142;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::replica::write_replicate;
    use kvs_proto::Member;
    use std::net::SocketAddr;

    const P: Owner = Owner {
        member: 0,
        worker: 0,
    };
    const B: Owner = Owner {
        member: 1,
        worker: 0,
    };

    fn map() -> ShardMap {
        let mut m = ShardMap::single(SocketAddr::from(([10, 0, 0, 1], 7000)), 4, 1).unwrap();
        m.add_member(Member {
            addr: SocketAddr::from(([10, 0, 0, 2], 7000)),
            workers: 1,
            bulk_port: 0,
        })
        .unwrap();
        m.add_backup(0..4, 1).unwrap();
        m.set_version(2);
        m
    }

    fn msg(kind: Kind, primary: Owner, seq: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        let h = Header {
            kind,
            slot: 1,
            epoch: 2,
            primary,
            seq,
            offset: 0,
            id: (0, 0),
        };
        write_replicate(&mut b, &h, key, value);
        b
    }

    fn apply(r: &mut Replicas, m: &ShardMap, st: &mut Store, b: &[u8]) -> Result<(), Refused> {
        r.apply(
            &Replicate::new_checked(b).unwrap(),
            m,
            st,
            &mut Dedup::default(),
        )
    }

    #[test]
    fn a_backup_follows_its_primary_in_order_from_the_copy_on() {
        let m = map();
        let mut r = Replicas::new(B, 4);
        let mut st = Store::new(4, usize::MAX);
        // No write before the copy begins.
        let e = apply(&mut r, &m, &mut st, &msg(Kind::Put, P, 1, b"k", b"v"));
        assert!(e.unwrap_err().0.contains("has not begun"));
        st.put(1, b"stale", b"x").unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::CopyBegin, P, 5, b"", b"")).unwrap();
        assert_eq!(st.get(1, b"stale"), None, "the copy starts from nothing");
        apply(&mut r, &m, &mut st, &msg(Kind::CopyPut, P, 0, b"a", b"1")).unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::Put, P, 6, b"k", b"v")).unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::Patch, P, 7, b"k", b"w")).unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::CopyEnd, P, 0, b"", b"")).unwrap();
        assert_eq!(st.get(1, b"k"), Some(&b"w"[..]));
        assert_eq!(st.get(1, b"a"), Some(&b"1"[..]));
        // A gap: refused, and nothing more until a new copy.
        let e = apply(&mut r, &m, &mut st, &msg(Kind::Delete, P, 9, b"k", b""));
        assert!(e.unwrap_err().0.contains("does not follow 7"));
        let e = apply(&mut r, &m, &mut st, &msg(Kind::Delete, P, 8, b"k", b""));
        assert!(e.is_err());
        assert_eq!(st.get(1, b"k"), Some(&b"w"[..]));
    }

    #[test]
    fn writes_from_anyone_but_the_maps_primary_are_fenced() {
        let m = map();
        let mut r = Replicas::new(B, 4);
        let mut st = Store::new(4, usize::MAX);
        apply(&mut r, &m, &mut st, &msg(Kind::CopyBegin, P, 0, b"", b"")).unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::Put, P, 1, b"k", b"v1")).unwrap();
        // The group promotes this backup: the old primary is refused.
        let mut promoted = m.clone();
        promoted.set_backup_ready(0..4, 1).unwrap();
        promoted.promote(1, 1).unwrap();
        promoted.set_version(3);
        let e = apply(
            &mut r,
            &promoted,
            &mut st,
            &msg(Kind::Put, P, 2, b"k", b"v2"),
        );
        assert!(e.unwrap_err().0.contains("is not slot 1's primary"));
        assert_eq!(st.get(1, b"k"), Some(&b"v1"[..]));
        // Promoted, it numbers its writes on from the last applied.
        r.install(&m, &promoted);
        assert_eq!(r.next_seq(1), 2);
        // A worker that does not back the slot up refuses it.
        let mut other = Replicas::new(
            Owner {
                member: 1,
                worker: 1,
            },
            4,
        );
        let e = apply(
            &mut other,
            &m,
            &mut st,
            &msg(Kind::CopyBegin, P, 0, b"", b""),
        );
        assert!(e.unwrap_err().0.contains("does not back slot 1 up"));
    }

    #[test]
    fn keys_in_flight_and_held_slots_are_counted() {
        let mut r = Replicas::new(P, 4);
        assert!(!r.in_flight(b"k"));
        r.begin_write(b"k");
        r.begin_write(b"k");
        assert!(r.in_flight(b"k") && !r.in_flight(b"j"));
        r.end_write(fingerprint(b"k"));
        assert!(r.in_flight(b"k"));
        r.end_write(fingerprint(b"k"));
        assert!(!r.in_flight(b"k"));
        r.hold(2, Some(1));
        assert_eq!((r.held(2), r.held(1)), (Some(1), None));
        r.hold(2, None);
        assert_eq!(r.held(2), None);
    }
}
