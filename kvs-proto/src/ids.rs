//! The cluster's ids, typed so that a signature says which number or which
//! 16 bytes it takes: a member ([`MemberId`]), a cluster ([`ClusterId`]),
//! and the ticket that opens a snapshot on a bulk port ([`Ticket`]). Each
//! wraps the plain integer or bytes it is on the wire, and encodes to the
//! same bytes and the same JSON and text as that did.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A member of the cluster: its index in the shard map's member list
/// ([`ShardMap::members`](crate::ShardMap::members)), which is also its id
/// in the control group (whose Raft node id is one more). Ids are dealt in
/// joining order and never reused: a forgotten member keeps its place in
/// the list.
///
/// Shown (`Display` and `Debug` alike) as the bare number, as the `u16` it
/// is on the wire and in JSON.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
#[repr(transparent)]
pub struct MemberId(pub u16);

impl MemberId {
    /// The member's place in per-member lists (the map's members, the
    /// control group's standings).
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The wire form (little-endian).
    #[inline]
    pub const fn to_le_bytes(self) -> [u8; 2] {
        self.0.to_le_bytes()
    }

    /// From the wire form (little-endian).
    #[inline]
    pub const fn from_le_bytes(b: [u8; 2]) -> MemberId {
        MemberId(u16::from_le_bytes(b))
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for MemberId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<MemberId, Self::Err> {
        s.parse().map(MemberId)
    }
}

/// A cluster's id: 128 random bits, made when the cluster is bootstrapped,
/// shown as 32 hex digits. Members, clients and kvs-admin check it at every
/// connection setup, so that nothing talks to another cluster's member
/// that happens to answer at an address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct ClusterId([u8; 16]);

impl ClusterId {
    /// A new random id (from the kernel's random source).
    pub fn random() -> std::io::Result<ClusterId> {
        random16().map(ClusterId)
    }

    /// The id's bytes.
    pub fn bytes(&self) -> [u8; 16] {
        self.0
    }

    /// The id of these bytes.
    pub const fn from_bytes(b: [u8; 16]) -> ClusterId {
        ClusterId(b)
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(&self.0, f)
    }
}

impl fmt::Debug for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterId({self})")
    }
}

/// Text that is not 32 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a cluster id is 32 hex digits, not {0:?}")]
pub struct BadClusterId(String);

impl FromStr for ClusterId {
    type Err = BadClusterId;

    fn from_str(s: &str) -> Result<ClusterId, BadClusterId> {
        parse_hex(s)
            .map(ClusterId)
            .ok_or_else(|| BadClusterId(s.chars().take(40).collect()))
    }
}

impl Serialize for ClusterId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ClusterId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ClusterId, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A ticket that opens one snapshot on a member's bulk port: slots a
/// migration's target pulls, or a copy for a new backup. 128 random bits
/// the source issues over an authenticated channel and the puller presents
/// in the bulk connection's setup, so the bulk port never sees the
/// cluster's token; shown as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Ticket([u8; 16]);

impl Ticket {
    /// The wire form.
    pub fn bytes(&self) -> [u8; 16] {
        self.0
    }

    /// From the wire form.
    pub const fn from_bytes(b: [u8; 16]) -> Ticket {
        Ticket(b)
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(&self.0, f)
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ticket({self})")
    }
}

/// Text that is not 32 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a ticket is 32 hex digits")]
pub struct BadTicket;

impl FromStr for Ticket {
    type Err = BadTicket;

    fn from_str(s: &str) -> Result<Ticket, BadTicket> {
        parse_hex(s).map(Ticket).ok_or(BadTicket)
    }
}

impl Serialize for Ticket {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ticket {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Ticket, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

fn random16() -> std::io::Result<[u8; 16]> {
    let mut b = [0u8; 16];
    let mut f = std::fs::File::open("/dev/urandom")?;
    std::io::Read::read_exact(&mut f, &mut b)?;
    Ok(b)
}

fn write_hex(b: &[u8; 16], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for x in b {
        write!(f, "{x:02x}")?;
    }
    Ok(())
}

/// 32 hex digits' bytes.
fn parse_hex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 || !s.is_ascii() {
        return None;
    }
    let mut b = [0u8; 16];
    for (i, o) in b.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_are_random_and_read_back_from_text() {
        let a = ClusterId::random().unwrap();
        let b = ClusterId::random().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.to_string().len(), 32);
        assert_eq!(a.to_string().parse::<ClusterId>().unwrap(), a);
        assert_eq!(
            ClusterId::from_bytes([0xab; 16]).to_string(),
            "ab".repeat(16)
        );
        assert!("abc".parse::<ClusterId>().is_err());
        assert!("zz".repeat(16).parse::<ClusterId>().is_err());
        assert!("é".repeat(16).parse::<ClusterId>().is_err());
        let j = serde_json::to_string(&a).unwrap();
        assert_eq!(j, format!("\"{a}\""));
        assert_eq!(serde_json::from_str::<ClusterId>(&j).unwrap(), a);
    }

    #[test]
    fn tickets_read_back_from_text() {
        let t = Ticket::from_bytes([1; 16]);
        assert_eq!(t.to_string(), "01".repeat(16));
        assert_eq!(t.to_string().parse::<Ticket>(), Ok(t));
        assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{t}\""));
        assert_eq!("01".parse::<Ticket>(), Err(BadTicket));
    }

    #[test]
    fn a_member_id_shows_and_encodes_as_its_number() {
        let m = MemberId(7);
        assert_eq!((m.to_string(), format!("{m:?}")), ("7".into(), "7".into()));
        assert_eq!(format!("{:?}", Some(m)), "Some(7)");
        assert_eq!(serde_json::to_string(&m).unwrap(), "7");
        assert_eq!(MemberId::from_le_bytes(m.to_le_bytes()), m);
        assert_eq!("7".parse::<MemberId>(), Ok(m));
    }
}
