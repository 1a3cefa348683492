//! The private data a client attaches to each connection's setup record: which
//! worker the connection is for (as RDMA CM's `private_data`), and the
//! client's auth token when it has one.
//!
//! ```text
//! hello: magic "KV1" | worker u16 (little-endian) | token (0..=MAX_TOKEN bytes)
//! ```
//!
//! A hello without a token is the 5 bytes of magic and worker.

use crate::auth::{AuthToken, MAX_TOKEN};
use crate::ids::{ClusterId, MemberId};

/// The worker number a hello names to reach the server's control endpoint
/// (membership, map pushes, administration) instead of a worker.
pub const CONTROL: u16 = u16::MAX;

/// Magic and protocol version.
const HELLO_MAGIC: &[u8; 3] = b"KV1";

/// Bytes before the token.
const HELLO_HEADER: usize = 5;

/// Private data of a connection asking for `worker`, presenting `token`.
pub fn hello(worker: u16, token: Option<&AuthToken>) -> Vec<u8> {
    let t = token.map_or(&[][..], AuthToken::expose);
    let mut b = Vec::with_capacity(HELLO_HEADER + t.len());
    b.extend_from_slice(HELLO_MAGIC);
    b.extend_from_slice(&worker.to_le_bytes());
    b.extend_from_slice(t);
    b
}

/// The worker a hello asks for and the token it presents (empty: none), if
/// it is a hello.
pub fn parse_hello(b: &[u8]) -> Option<(u16, &[u8])> {
    if b.len() < HELLO_HEADER || b.len() > HELLO_HEADER + MAX_TOKEN || &b[..3] != HELLO_MAGIC {
        return None;
    }
    Some((u16::from_le_bytes([b[3], b[4]]), &b[HELLO_HEADER..]))
}

/// What a worker or the control endpoint answers a hello with (the private
/// data of its setup record): how many workers the server has, the
/// cluster's slot count, the server's member id, and the id of the cluster
/// it belongs to, which clients, kvs-admin and members check at every
/// setup.
///
/// ```text
/// answer: workers u16 | slots u32 | member u16 | cluster [u8; 16]
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupAnswer {
    /// The server's workers.
    pub workers: u16,
    /// The cluster's slots.
    pub slots: u32,
    /// The server.
    pub member: MemberId,
    /// The server's cluster.
    pub cluster: ClusterId,
}

/// Byte ranges of a setup answer.
mod field {
    use std::ops::Range;
    pub const WORKERS: Range<usize> = 0..2;
    pub const SLOTS: Range<usize> = 2..6;
    pub const MEMBER: Range<usize> = 6..8;
    pub const CLUSTER: Range<usize> = 8..24;
}

impl SetupAnswer {
    /// Encoded length.
    pub const LEN: usize = field::CLUSTER.end;

    /// Encoded.
    pub fn encode(&self) -> [u8; SetupAnswer::LEN] {
        let mut b = [0u8; SetupAnswer::LEN];
        b[field::WORKERS].copy_from_slice(&self.workers.to_le_bytes());
        b[field::SLOTS].copy_from_slice(&self.slots.to_le_bytes());
        b[field::MEMBER].copy_from_slice(&self.member.to_le_bytes());
        b[field::CLUSTER].copy_from_slice(&self.cluster.bytes());
        b
    }
    /// From the wire: `None` unless exactly an answer.
    pub fn parse(b: &[u8]) -> Option<SetupAnswer> {
        if b.len() != SetupAnswer::LEN {
            return None;
        }
        Some(SetupAnswer {
            workers: u16::from_le_bytes(b[field::WORKERS].try_into().ok()?),
            slots: u32::from_le_bytes(b[field::SLOTS].try_into().ok()?),
            member: MemberId::from_le_bytes(b[field::MEMBER].try_into().ok()?),
            cluster: ClusterId::from_bytes(b[field::CLUSTER].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_answers_round_trip() {
        let a = SetupAnswer {
            workers: 3,
            slots: 1024,
            member: MemberId(2),
            cluster: ClusterId::from_bytes([0xab; 16]),
        };
        assert_eq!(SetupAnswer::parse(&a.encode()), Some(a));
        assert_eq!(SetupAnswer::parse(&a.encode()[..23]), None);
        assert_eq!(SetupAnswer::parse(&a.encode()[..8]), None);
        assert_eq!(a.cluster.to_string(), "ab".repeat(16));
    }

    #[test]
    fn a_hello_names_its_worker_and_nothing_else_parses() {
        for w in [0u16, 1, 7, u16::MAX] {
            assert_eq!(parse_hello(&hello(w, None)), Some((w, &[][..])));
        }
        assert_eq!(parse_hello(b"KV1\x01"), None);
        assert_eq!(parse_hello(b"KV2\x01\x00"), None);
        assert_eq!(parse_hello(&[b'K', b'V', b'1', 1, 0].repeat(60)), None);
    }

    #[test]
    fn a_hello_carries_its_token() {
        let t = AuthToken::new(b"s3cret").unwrap();
        let h = hello(3, Some(&t));
        assert_eq!(h.len(), 5 + 6);
        assert_eq!(parse_hello(&h), Some((3, &b"s3cret"[..])));
        let longest = AuthToken::new([b'x'; MAX_TOKEN]).unwrap();
        let h = hello(0, Some(&longest));
        assert!(h.len() <= 256, "fits copyrpc's private data");
        assert_eq!(parse_hello(&h).map(|(_, t)| t.len()), Some(MAX_TOKEN));
    }
}
