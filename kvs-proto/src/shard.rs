//! Shards (hash slots) and the versioned map of which worker owns each.

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

/// Which worker owns each slot, under a version that grows with every change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    version: u32,
    workers: u16,
    owner: Vec<u16>,
}

/// A shard map that does not decode or is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad shard map: {0}")]
pub struct BadMap(pub &'static str);

/// The most slots a map may have.
pub const MAX_SLOTS: u32 = 1 << 16;

impl ShardMap {
    /// `slots` slots dealt round-robin to `workers` workers, version 1.
    pub fn round_robin(slots: u32, workers: u16) -> Result<ShardMap, BadMap> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(BadMap("slot count out of range"));
        }
        if workers == 0 {
            return Err(BadMap("no workers"));
        }
        Ok(ShardMap {
            version: 1,
            workers,
            owner: (0..slots)
                .map(|s| (s % u32::from(workers)) as u16)
                .collect(),
        })
    }

    /// The version.
    pub fn version(&self) -> u32 {
        self.version
    }
    /// How many workers.
    pub fn workers(&self) -> u16 {
        self.workers
    }
    /// How many slots.
    pub fn slots(&self) -> u32 {
        self.owner.len() as u32
    }
    /// The owner of a slot.
    #[inline]
    pub fn owner_of_slot(&self, slot: u32) -> u16 {
        self.owner[slot as usize]
    }
    /// The worker that owns `key`.
    #[inline]
    pub fn owner(&self, key: &[u8]) -> u16 {
        self.owner[slot_of(key, self.slots()) as usize]
    }
    /// Moves a slot to another worker (a new version).
    pub fn reassign(&mut self, slot: u32, worker: u16) -> Result<(), BadMap> {
        if slot >= self.slots() || worker >= self.workers {
            return Err(BadMap("slot or worker out of range"));
        }
        self.owner[slot as usize] = worker;
        self.version += 1;
        Ok(())
    }

    /// `version u32 | workers u16 | slots u32 | owner u16 * slots`, little-endian.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.workers.to_le_bytes());
        out.extend_from_slice(&self.slots().to_le_bytes());
        for o in &self.owner {
            out.extend_from_slice(&o.to_le_bytes());
        }
    }

    /// Decodes and checks a map (every owner a real worker).
    pub fn decode(b: &[u8]) -> Result<ShardMap, BadMap> {
        if b.len() < 10 {
            return Err(BadMap("short"));
        }
        let version = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let workers = u16::from_le_bytes([b[4], b[5]]);
        let slots = u32::from_le_bytes([b[6], b[7], b[8], b[9]]);
        if slots == 0 || slots > MAX_SLOTS || workers == 0 {
            return Err(BadMap("slot or worker count out of range"));
        }
        let body = &b[10..];
        if body.len() != 2 * slots as usize {
            return Err(BadMap("length disagrees with the slot count"));
        }
        let owner: Vec<u16> = body
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        if owner.iter().any(|&o| o >= workers) {
            return Err(BadMap("owner out of range"));
        }
        Ok(ShardMap {
            version,
            workers,
            owner,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_round_trip_and_bad_ones_are_refused() {
        let mut m = ShardMap::round_robin(64, 3).unwrap();
        m.reassign(5, 0).unwrap();
        assert_eq!(m.version(), 2);
        let mut b = Vec::new();
        m.encode(&mut b);
        assert_eq!(ShardMap::decode(&b).unwrap(), m);
        for n in 0..b.len() {
            assert!(ShardMap::decode(&b[..n]).is_err());
        }
        let last = b.len() - 2;
        b[last] = 3; // owner 3 of 3 workers
        assert!(ShardMap::decode(&b).is_err());
        assert!(ShardMap::round_robin(0, 1).is_err());
        assert!(m.reassign(64, 0).is_err());
    }

    #[test]
    fn keys_spread_over_slots_and_workers() {
        let m = ShardMap::round_robin(1024, 4).unwrap();
        let mut per = [0u32; 4];
        for i in 0..40_000 {
            per[m.owner(format!("user{i}").as_bytes()) as usize] += 1;
        }
        for p in per {
            assert!((9_000..11_000).contains(&p), "{per:?}");
        }
        assert_eq!(slot_of(b"", 1024), (0xcbf2_9ce4_8422_2325u64 % 1024) as u32);
    }
}
