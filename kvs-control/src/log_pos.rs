//! A position in the control group's Raft log.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An entry's place in the Raft log: its index, and the term of the leader
/// that appended it. Kept in snapshots as the pair `[index, term]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LogPos {
    /// The entry's index (1 is the first entry).
    pub index: u64,
    /// The term it was appended in.
    pub term: u64,
}

impl LogPos {
    /// The entry at `index`, appended in `term`.
    pub const fn new(index: u64, term: u64) -> LogPos {
        LogPos { index, term }
    }
}

impl Serialize for LogPos {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.index, self.term).serialize(s)
    }
}

impl<'de> Deserialize<'de> for LogPos {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LogPos, D::Error> {
        let (index, term) = <(u64, u64)>::deserialize(d)?;
        Ok(LogPos { index, term })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_kept_as_an_index_term_pair() {
        let p = LogPos::new(10, 2);
        assert_eq!(serde_json::to_string(&p).unwrap(), "[10,2]");
        assert_eq!(serde_json::from_str::<LogPos>("[10,2]").unwrap(), p);
    }
}
