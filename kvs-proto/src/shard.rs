//! Shards (hash slots) and the cluster's versioned shard map: its members
//! (servers), which member and worker owns each slot (its primary), which
//! hold synchronous copies of it (its backups, [`replicas`]), and which
//! slots their new owner is still pulling from their old one (a live
//! migration).
//!
//! The map travels in MAP answers and control messages:
//!
//! ```text
//! map:    version u32 | slots u32 | members u16 | runs u32 | member* | run*
//! member: ip 16 (IPv4 as ::ffff:a.b.c.d) | port u16 | workers u16 | bulk_port u16
//! run:    first u32 | count u32 | member u16 | worker u16 | from u16 | epoch u32
//!         | backups u8 | backup{3}
//! backup: member u16 | worker u16 | ready u8
//! ```
//! All integers little-endian. A run is `count` consecutive slots from
//! `first` with one owner; `from` is the member the owner is importing them
//! from ([`NO_MEMBER`]: none); `epoch` is the map version at which the
//! slots' replica set (primary and backups) last changed; `backups` of the
//! three backup fields are in use (the rest zero). The runs cover every slot
//! once, in order. A map is input from the network: [`ShardMap::decode`]
//! checks all of it.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::ops::Range;

use crate::ids::MemberId;

pub mod replicas;
pub use replicas::{Backup, Backups, MAX_BACKUPS};

/// The slot of a key: 64-bit FNV-1a of its bytes, modulo the slot count.
#[inline]
pub fn slot_of(key: &[u8], slots: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(slots.max(1))) as u32
}

/// The most slots a map may have.
pub const MAX_SLOTS: u32 = 1 << 16;
/// The most members a cluster may have.
pub const MAX_MEMBERS: u16 = 1024;
/// The most workers a member may have.
pub const MAX_WORKERS: u16 = 1024;
/// Bytes a run of slots takes in an encoded map.
pub const RUN_BYTES: usize = field::RUN;
/// "No member": the `from` of a slot nobody is importing.
pub const NO_MEMBER: MemberId = MemberId(u16::MAX);

mod field {
    use std::ops::Range;
    pub const VERSION: Range<usize> = 0..4;
    pub const SLOTS: Range<usize> = 4..8;
    pub const MEMBERS: Range<usize> = 8..10;
    pub const RUNS: Range<usize> = 10..14;
    pub const HEADER: usize = 14;

    pub const M_IP: Range<usize> = 0..16;
    pub const M_PORT: Range<usize> = 16..18;
    pub const M_WORKERS: Range<usize> = 18..20;
    pub const M_BULK_PORT: Range<usize> = 20..22;
    pub const MEMBER: usize = 22;

    pub const R_FIRST: Range<usize> = 0..4;
    pub const R_COUNT: Range<usize> = 4..8;
    pub const R_MEMBER: Range<usize> = 8..10;
    pub const R_WORKER: Range<usize> = 10..12;
    pub const R_FROM: Range<usize> = 12..14;
    pub const R_EPOCH: Range<usize> = 14..18;
    pub const R_BACKUPS: usize = 18;
    /// The first backup field; each is [`BACKUP`] bytes.
    pub const R_BACKUP: usize = 19;
    pub const B_MEMBER: Range<usize> = 0..2;
    pub const B_WORKER: Range<usize> = 2..4;
    pub const B_READY: usize = 4;
    pub const BACKUP: usize = 5;
    pub const RUN: usize = R_BACKUP + BACKUP * super::MAX_BACKUPS;
}

/// Who owns a slot: a member and one of its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Owner {
    /// The member.
    pub member: MemberId,
    /// The member's worker.
    pub worker: u16,
}

/// A server of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Where clients and peers set connections up. An unspecified IP
    /// (`0.0.0.0`) means "the address you reached the map's sender at".
    pub addr: SocketAddr,
    /// Its worker threads (one copyrpc endpoint each per client).
    pub workers: u16,
    /// The TCP port (at `addr`'s IP) where it sets up bulk transfers for
    /// migrations; 0: none yet.
    pub bulk_port: u16,
}

/// One run of consecutive slots with the same owner, import source,
/// epoch and backups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The slots.
    pub slots: Range<u32>,
    /// Their owner.
    pub owner: Owner,
    /// The member the owner is still importing them from, if any.
    pub from: Option<MemberId>,
    /// The map version at which their replica set last changed.
    pub epoch: u32,
    /// Their backups.
    pub backups: Backups,
}

/// Serde for lists of slot ranges in the form control messages and log
/// entries carry them, `[first, end]` pairs:
/// `#[serde(with = "kvs_proto::shard::range_pairs")]` on a
/// `Vec<Range<u32>>`.
pub mod range_pairs {
    use std::ops::Range;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `[[first, end], ...]`.
    pub fn serialize<S: Serializer>(v: &[Range<u32>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|r| (r.start, r.end)))
    }

    /// Reads `[[first, end], ...]`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Range<u32>>, D::Error> {
        let v = Vec::<(u32, u32)>::deserialize(d)?;
        Ok(v.into_iter().map(|(first, end)| first..end).collect())
    }
}

/// A shard map that does not decode or is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad shard map: {0}")]
pub struct BadMap(pub &'static str);

/// Which member and worker owns each slot, under a version that grows with
/// every change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    version: u32,
    members: Vec<Member>,
    owner: Vec<Owner>,
    /// Per slot: the member its owner imports it from, or [`NO_MEMBER`].
    from: Vec<MemberId>,
    /// Per slot: the version at which its replica set last changed.
    epoch: Vec<u32>,
    /// Per slot: its backups.
    backups: Vec<Backups>,
}

impl ShardMap {
    /// Version 1 of a one-member cluster: `slots` slots dealt to `workers`
    /// workers in contiguous blocks (keys are hashed, so blocks load the
    /// workers as evenly as any other deal).
    pub fn single(addr: SocketAddr, slots: u32, workers: u16) -> Result<ShardMap, BadMap> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(BadMap("slot count out of range"));
        }
        if workers == 0 || workers > MAX_WORKERS {
            return Err(BadMap("worker count out of range"));
        }
        let owner = (0..slots)
            .map(|s| Owner {
                member: MemberId(0),
                worker: block_worker(s, slots, workers),
            })
            .collect();
        Ok(ShardMap {
            version: 1,
            members: vec![Member {
                addr,
                workers,
                bulk_port: 0,
            }],
            owner,
            from: vec![NO_MEMBER; slots as usize],
            epoch: vec![1; slots as usize],
            backups: vec![Backups::default(); slots as usize],
        })
    }

    /// The version.
    pub fn version(&self) -> u32 {
        self.version
    }
    /// Sets the version (a changed map takes the next one).
    pub fn set_version(&mut self, v: u32) {
        self.version = v;
    }
    /// How many slots.
    pub fn slots(&self) -> u32 {
        self.owner.len() as u32
    }
    /// The members, by id.
    pub fn members(&self) -> &[Member] {
        &self.members
    }
    /// The members' ids, in order.
    pub fn member_ids(&self) -> impl Iterator<Item = MemberId> + use<> {
        (0..self.members.len() as u16).map(MemberId)
    }
    /// The owner of a slot (`slot < slots()`).
    #[inline]
    pub fn owner_of_slot(&self, slot: u32) -> Owner {
        self.owner[slot as usize]
    }
    /// The owner of `key`'s slot.
    #[inline]
    pub fn owner(&self, key: &[u8]) -> Owner {
        self.owner[slot_of(key, self.slots()) as usize]
    }
    /// The member `slot`'s owner is still importing it from, if any.
    pub fn importing_from(&self, slot: u32) -> Option<MemberId> {
        match self.from.get(slot as usize) {
            Some(&f) if f != NO_MEMBER => Some(f),
            _ => None,
        }
    }
    /// Whether any slot is being imported.
    pub fn migrating(&self) -> bool {
        self.from.iter().any(|&f| f != NO_MEMBER)
    }
    /// How many slots `member` owns.
    pub fn slots_of(&self, member: MemberId) -> u32 {
        self.owner.iter().filter(|o| o.member == member).count() as u32
    }

    /// Adds a member owning no slots; returns its id. The caller sets the
    /// version.
    pub fn add_member(&mut self, m: Member) -> Result<MemberId, BadMap> {
        if self.members.len() >= usize::from(MAX_MEMBERS) {
            return Err(BadMap("too many members"));
        }
        if m.workers == 0 || m.workers > MAX_WORKERS {
            return Err(BadMap("worker count out of range"));
        }
        self.members.push(m);
        Ok(MemberId((self.members.len() - 1) as u16))
    }

    /// Sets a member's bulk-transfer port.
    pub fn set_bulk_port(&mut self, member: MemberId, port: u16) -> Result<(), BadMap> {
        let m = self
            .members
            .get_mut(member.index())
            .ok_or(BadMap("no such member"))?;
        m.bulk_port = port;
        Ok(())
    }

    /// Replaces a member's address (it learned its reachable one).
    pub fn set_member_addr(&mut self, member: MemberId, addr: SocketAddr) -> Result<(), BadMap> {
        let m = self
            .members
            .get_mut(member.index())
            .ok_or(BadMap("no such member"))?;
        m.addr = addr;
        Ok(())
    }

    /// Gives `slots` to `member`, dealt to its workers in contiguous blocks
    /// (each worker an equal share of the range), with `from` the member the new
    /// owner imports them from (None: nothing to import). The caller sets
    /// the version.
    pub fn assign(
        &mut self,
        slots: Range<u32>,
        member: MemberId,
        from: Option<MemberId>,
    ) -> Result<(), BadMap> {
        if slots.start > slots.end || slots.end > self.slots() {
            return Err(BadMap("slot range out of bounds"));
        }
        let workers = self
            .members
            .get(member.index())
            .ok_or(BadMap("no such member"))?
            .workers;
        if let Some(f) = from {
            if f.index() >= self.members.len() || f == member {
                return Err(BadMap("bad import source"));
            }
        }
        let (first, n) = (slots.start, slots.end - slots.start);
        let next = self.version + 1;
        for s in slots {
            let owner = Owner {
                member,
                worker: block_worker(s - first, n, workers),
            };
            let i = s as usize;
            if self.owner[i] != owner {
                // A new primary starts with no backups: its copies are made
                // anew from it.
                self.backups[i] = Backups::default();
                self.epoch[i] = next;
            }
            self.owner[i] = owner;
            self.from[i] = from.unwrap_or(NO_MEMBER);
        }
        Ok(())
    }

    /// Marks `slots` imported (nothing left to pull). The caller sets the
    /// version.
    pub fn finish_import(&mut self, slots: Range<u32>) -> Result<(), BadMap> {
        if slots.start > slots.end || slots.end > self.slots() {
            return Err(BadMap("slot range out of bounds"));
        }
        for s in slots {
            self.from[s as usize] = NO_MEMBER;
        }
        Ok(())
    }

    /// The moves that spread the slots evenly over the members: each member
    /// ends with `slots / members` slots, the first `slots % members` one
    /// more. Members with too many give up their highest slots; the moves
    /// come as `(slots, to)` with consecutive slots for one target merged.
    pub fn rebalance_moves(&self) -> Vec<(Range<u32>, MemberId)> {
        let all: Vec<MemberId> = self.member_ids().collect();
        self.rebalance_moves_among(&all)
    }

    /// [`rebalance_moves`](Self::rebalance_moves) over the members in
    /// `among` only: the others (failed, or gone) end with no slots. Empty
    /// when `among` is.
    pub fn rebalance_moves_among(&self, among: &[MemberId]) -> Vec<(Range<u32>, MemberId)> {
        let n = among.len() as u32;
        if n == 0 {
            return Vec::new();
        }
        let share = |m: MemberId| match among.iter().position(|&a| a == m) {
            Some(rank) => self.slots() / n + u32::from((rank as u32) < self.slots() % n),
            None => 0,
        };
        let mut held: Vec<Vec<u32>> = vec![Vec::new(); self.members.len()];
        for (s, o) in self.owner.iter().enumerate() {
            held[o.member.index()].push(s as u32);
        }
        // Surplus slots, highest first from each member with too many.
        let mut spare: Vec<u32> = Vec::new();
        for (m, h) in held.iter().enumerate() {
            let keep = share(MemberId(m as u16)) as usize;
            if h.len() > keep {
                spare.extend_from_slice(&h[keep..]);
            }
        }
        spare.sort_unstable();
        let mut spare = spare.into_iter();
        let mut to: Vec<(u32, MemberId)> = Vec::new();
        for (m, h) in held.iter().enumerate() {
            let m = MemberId(m as u16);
            let want = share(m) as usize;
            for _ in h.len()..want {
                match spare.next() {
                    Some(s) => to.push((s, m)),
                    None => break,
                }
            }
        }
        to.sort_unstable();
        let mut moves: Vec<(Range<u32>, MemberId)> = Vec::new();
        for (s, m) in to {
            match moves.last_mut() {
                Some((r, t)) if *t == m && r.end == s => r.end = s + 1,
                _ => moves.push((s..s + 1, m)),
            }
        }
        moves
    }

    /// The runs of consecutive slots with one owner, import source, epoch
    /// and backups, in slot order.
    pub fn runs(&self) -> Vec<Run> {
        let mut out: Vec<Run> = Vec::new();
        for i in 0..self.owner.len() {
            let s = i as u32;
            let (owner, f) = (self.owner[i], self.from[i]);
            let (epoch, backups) = (self.epoch[i], self.backups[i]);
            let from = (f != NO_MEMBER).then_some(f);
            match out.last_mut() {
                Some(r)
                    if r.owner == owner
                        && r.from == from
                        && r.epoch == epoch
                        && r.backups == backups
                        && r.slots.end == s =>
                {
                    r.slots.end = s + 1
                }
                _ => out.push(Run {
                    slots: s..s + 1,
                    owner,
                    from,
                    epoch,
                    backups,
                }),
            }
        }
        out
    }

    /// Appends the encoded map to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let runs = self.runs();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.slots().to_le_bytes());
        out.extend_from_slice(&(self.members.len() as u16).to_le_bytes());
        out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
        for m in &self.members {
            let ip = match m.addr.ip() {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            out.extend_from_slice(&ip.octets());
            out.extend_from_slice(&m.addr.port().to_le_bytes());
            out.extend_from_slice(&m.workers.to_le_bytes());
            out.extend_from_slice(&m.bulk_port.to_le_bytes());
        }
        for r in &runs {
            out.extend_from_slice(&r.slots.start.to_le_bytes());
            out.extend_from_slice(&(r.slots.end - r.slots.start).to_le_bytes());
            out.extend_from_slice(&r.owner.member.to_le_bytes());
            out.extend_from_slice(&r.owner.worker.to_le_bytes());
            out.extend_from_slice(&r.from.unwrap_or(NO_MEMBER).to_le_bytes());
            out.extend_from_slice(&r.epoch.to_le_bytes());
            out.push(r.backups.len() as u8);
            let mut fields = [0u8; field::BACKUP * MAX_BACKUPS];
            for (b, f) in r.backups.iter().zip(fields.chunks_mut(field::BACKUP)) {
                f[field::B_MEMBER].copy_from_slice(&b.owner.member.to_le_bytes());
                f[field::B_WORKER].copy_from_slice(&b.owner.worker.to_le_bytes());
                f[field::B_READY] = u8::from(b.ready);
            }
            out.extend_from_slice(&fields);
        }
    }

    /// The encoded map's length.
    pub fn encoded_len(&self) -> usize {
        field::HEADER + field::MEMBER * self.members.len() + field::RUN * self.runs().len()
    }

    /// Decodes and checks a map: counts in range, runs covering every slot
    /// once in order, every owner a real member's real worker, every import
    /// source another real member. Never panics on any input.
    pub fn decode(b: &[u8]) -> Result<ShardMap, BadMap> {
        if b.len() < field::HEADER {
            return Err(BadMap("short"));
        }
        let version = le32(&b[field::VERSION]);
        let slots = le32(&b[field::SLOTS]);
        let nmembers = le16(&b[field::MEMBERS]);
        let nruns = le32(&b[field::RUNS]);
        if slots == 0 || slots > MAX_SLOTS {
            return Err(BadMap("slot count out of range"));
        }
        if nmembers == 0 || nmembers > MAX_MEMBERS {
            return Err(BadMap("member count out of range"));
        }
        if nruns == 0 || nruns > slots {
            return Err(BadMap("run count out of range"));
        }
        let want =
            field::HEADER + field::MEMBER * usize::from(nmembers) + field::RUN * nruns as usize;
        if b.len() != want {
            return Err(BadMap("length disagrees with the counts"));
        }
        let mut members = Vec::with_capacity(usize::from(nmembers));
        let mut at = field::HEADER;
        for _ in 0..nmembers {
            let m = &b[at..at + field::MEMBER];
            at += field::MEMBER;
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&m[field::M_IP]);
            let ip = Ipv6Addr::from(ip);
            let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
            let workers = le16(&m[field::M_WORKERS]);
            if workers == 0 || workers > MAX_WORKERS {
                return Err(BadMap("worker count out of range"));
            }
            members.push(Member {
                addr: SocketAddr::new(ip, le16(&m[field::M_PORT])),
                workers,
                bulk_port: le16(&m[field::M_BULK_PORT]),
            });
        }
        let mut owner = Vec::with_capacity(slots as usize);
        let mut from = Vec::with_capacity(slots as usize);
        let mut epochs = Vec::with_capacity(slots as usize);
        let mut backups = Vec::with_capacity(slots as usize);
        for _ in 0..nruns {
            let r = &b[at..at + field::RUN];
            at += field::RUN;
            let first = le32(&r[field::R_FIRST]);
            let count = le32(&r[field::R_COUNT]);
            if first as usize != owner.len() || count == 0 || count > slots - first {
                return Err(BadMap("runs do not cover the slots once, in order"));
            }
            let o = Owner {
                member: MemberId(le16(&r[field::R_MEMBER])),
                worker: le16(&r[field::R_WORKER]),
            };
            let m = members
                .get(o.member.index())
                .ok_or(BadMap("owner is not a member"))?;
            if o.worker >= m.workers {
                return Err(BadMap("owner's worker out of range"));
            }
            let f = MemberId(le16(&r[field::R_FROM]));
            if f != NO_MEMBER && (f.0 >= nmembers || f == o.member) {
                return Err(BadMap("bad import source"));
            }
            let epoch = le32(&r[field::R_EPOCH]);
            if epoch == 0 || epoch > version {
                return Err(BadMap("epoch out of range"));
            }
            let b = decode_backups(r, o, &members)?;
            owner.extend(std::iter::repeat_n(o, count as usize));
            from.extend(std::iter::repeat_n(f, count as usize));
            epochs.extend(std::iter::repeat_n(epoch, count as usize));
            backups.extend(std::iter::repeat_n(b, count as usize));
        }
        if owner.len() != slots as usize {
            return Err(BadMap("runs do not cover the slots once, in order"));
        }
        Ok(ShardMap {
            version,
            members,
            owner,
            from,
            epoch: epochs,
            backups,
        })
    }
}

/// A run's backups: members of the map other than the owner and each
/// other, workers in range, unused fields zero.
fn decode_backups(r: &[u8], owner: Owner, members: &[Member]) -> Result<Backups, BadMap> {
    let n = usize::from(r[field::R_BACKUPS]);
    if n > MAX_BACKUPS {
        return Err(BadMap("too many backups"));
    }
    let mut out = Backups::default();
    for i in 0..MAX_BACKUPS {
        let at = field::R_BACKUP + i * field::BACKUP;
        let f = &r[at..at + field::BACKUP];
        if i >= n {
            if f.iter().any(|&x| x != 0) {
                return Err(BadMap("an unused backup field is not zero"));
            }
            continue;
        }
        let b = Backup {
            owner: Owner {
                member: MemberId(le16(&f[field::B_MEMBER])),
                worker: le16(&f[field::B_WORKER]),
            },
            ready: match f[field::B_READY] {
                0 => false,
                1 => true,
                _ => return Err(BadMap("a backup's ready flag is not 0 or 1")),
            },
        };
        let m = members
            .get(b.owner.member.index())
            .ok_or(BadMap("a backup is not a member"))?;
        if b.owner.worker >= m.workers {
            return Err(BadMap("a backup's worker out of range"));
        }
        if b.owner.member == owner.member || out.holds(b.owner.member) {
            return Err(BadMap("a member holds two copies of a slot"));
        }
        out.push(b);
    }
    Ok(out)
}

/// The worker a member with `workers` workers gives `slot` of `slots`:
/// contiguous blocks.
fn block_worker(slot: u32, slots: u32, workers: u16) -> u16 {
    (u64::from(slot) * u64::from(workers) / u64::from(slots)) as u16
}

fn le16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], p))
    }

    #[test]
    fn a_cluster_map_round_trips_and_every_corruption_is_refused() {
        let mut m = ShardMap::single(addr(7000), 64, 3).unwrap();
        let b = m.add_member(Member {
            addr: "[fe80::1]:7001".parse().unwrap(),
            workers: 2,
            bulk_port: 9,
        });
        assert_eq!(b, Ok(MemberId(1)));
        m.assign(10..20, MemberId(1), Some(MemberId(0))).unwrap();
        m.set_version(2);
        assert_eq!(m.importing_from(15), Some(MemberId(0)));
        assert_eq!(m.importing_from(20), None);
        assert_eq!(m.slots_of(MemberId(1)), 10);
        let mut e = Vec::new();
        m.encode(&mut e);
        assert_eq!(e.len(), m.encoded_len());
        assert_eq!(ShardMap::decode(&e).unwrap(), m);
        for n in 0..e.len() {
            assert!(ShardMap::decode(&e[..n]).is_err(), "{n}");
        }
        let mut long = e.clone();
        long.push(0);
        assert!(ShardMap::decode(&long).is_err());
        // Every single-byte change either decodes to a consistent map or is
        // refused; never a panic.
        for i in 0..e.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut c = e.clone();
                c[i] = v;
                if let Ok(d) = ShardMap::decode(&c) {
                    for s in 0..d.slots() {
                        let o = d.owner_of_slot(s);
                        assert!(o.worker < d.members()[o.member.index()].workers);
                    }
                }
            }
        }
        m.finish_import(10..20).unwrap();
        assert!(!m.migrating());
    }

    #[test]
    fn runs_are_checked() {
        let m = ShardMap::single(addr(1), 8, 2).unwrap();
        let mut e = Vec::new();
        m.encode(&mut e);
        let run0 = field::HEADER + field::MEMBER;
        // The second run's first slot moved: a gap.
        let mut c = e.clone();
        c[run0 + field::RUN] = 5;
        assert_eq!(
            ShardMap::decode(&c),
            Err(BadMap("runs do not cover the slots once, in order"))
        );
        // An owner's worker past its member's count.
        let mut c = e.clone();
        c[run0 + 10] = 2;
        assert_eq!(
            ShardMap::decode(&c),
            Err(BadMap("owner's worker out of range"))
        );
        // Importing from itself.
        let mut c = e.clone();
        c[run0 + 12..run0 + 14].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(ShardMap::decode(&c), Err(BadMap("bad import source")));
        // A count that would run past the slots, and one of huge size.
        let mut c = e.clone();
        c[run0 + 4..run0 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(ShardMap::decode(&c).is_err());
    }

    #[test]
    fn assignment_deals_blocks_and_checks_its_arguments() {
        let mut m = ShardMap::single(addr(1), 1024, 4).unwrap();
        assert_eq!(m.runs().len(), 4);
        assert_eq!(m.owner_of_slot(255).worker, 0);
        assert_eq!(m.owner_of_slot(256).worker, 1);
        let id = m
            .add_member(Member {
                addr: addr(2),
                workers: 2,
                bulk_port: 0,
            })
            .unwrap();
        m.assign(0..512, id, None).unwrap();
        assert_eq!(
            m.owner_of_slot(0),
            Owner {
                member: MemberId(1),
                worker: 0
            }
        );
        assert_eq!(
            m.owner_of_slot(255),
            Owner {
                member: MemberId(1),
                worker: 0
            }
        );
        assert_eq!(
            m.owner_of_slot(256),
            Owner {
                member: MemberId(1),
                worker: 1
            }
        );
        assert_eq!(
            m.owner_of_slot(511),
            Owner {
                member: MemberId(1),
                worker: 1
            }
        );
        assert_eq!(
            m.owner_of_slot(512),
            Owner {
                member: MemberId(0),
                worker: 2
            }
        );
        assert!(m.assign(0..1025, id, None).is_err());
        assert!(m.assign(0..1, MemberId(2), None).is_err());
        assert!(m.assign(0..1, MemberId(1), Some(MemberId(1))).is_err());
        assert!(ShardMap::single(addr(1), 0, 1).is_err());
        assert!(ShardMap::single(addr(1), 1, 0).is_err());
    }

    #[test]
    fn rebalancing_evens_the_members_out_with_few_moves() {
        let mut m = ShardMap::single(addr(1), 1000, 2).unwrap();
        assert!(m.rebalance_moves().is_empty());
        for p in 2..=3 {
            m.add_member(Member {
                addr: addr(p),
                workers: 1,
                bulk_port: 0,
            })
            .unwrap();
        }
        let moves = m.rebalance_moves();
        // Member 0 keeps 334 (1000 = 334 + 333 + 333), the rest moves in
        // two ranges.
        assert_eq!(
            moves,
            vec![(334..667, MemberId(1)), (667..1000, MemberId(2))]
        );
        for (r, to) in &moves {
            m.assign(r.clone(), *to, Some(MemberId(0))).unwrap();
        }
        assert_eq!(
            (0..3).map(|i| m.slots_of(MemberId(i))).collect::<Vec<_>>(),
            [334, 333, 333]
        );
        assert!(m.rebalance_moves().is_empty());
        // A fourth member takes a quarter from the others.
        m.add_member(Member {
            addr: addr(4),
            workers: 1,
            bulk_port: 0,
        })
        .unwrap();
        for (r, to) in m.rebalance_moves() {
            assert_eq!(to, MemberId(3));
            m.assign(r, to, None).unwrap();
        }
        assert_eq!(
            (0..4).map(|i| m.slots_of(MemberId(i))).collect::<Vec<_>>(),
            [250, 250, 250, 250]
        );
        // Over members 0, 2 and 3 only: member 1 gives all of its slots up.
        for (r, to) in m.rebalance_moves_among(&[MemberId(0), MemberId(2), MemberId(3)]) {
            assert_ne!(to, MemberId(1));
            m.assign(r, to, None).unwrap();
        }
        assert_eq!(
            (0..4).map(|i| m.slots_of(MemberId(i))).collect::<Vec<_>>(),
            [334, 0, 333, 333]
        );
        assert!(m.rebalance_moves_among(&[]).is_empty());
    }

    #[test]
    fn keys_spread_over_slots_and_workers() {
        let m = ShardMap::single(addr(1), 1024, 4).unwrap();
        let mut per = [0u32; 4];
        for i in 0..40_000 {
            per[usize::from(m.owner(format!("user{i}").as_bytes()).worker)] += 1;
        }
        for p in per {
            assert!((9_000..11_000).contains(&p), "{per:?}");
        }
        assert_eq!(slot_of(b"", 1024), (0xcbf2_9ce4_8422_2325u64 % 1024) as u32);
    }
}
