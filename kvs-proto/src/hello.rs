//! The private data a client attaches to each connection's setup record: which
//! worker the connection is for (as RDMA CM's `private_data`).
//!
//! ```text
//! hello: magic "KV1" | worker u16 (little-endian)
//! ```

/// Magic and protocol version.
const HELLO_MAGIC: &[u8; 3] = b"KV1";

/// Private data of a connection asking for `worker`.
pub fn hello(worker: u16) -> [u8; 5] {
    let w = worker.to_le_bytes();
    [HELLO_MAGIC[0], HELLO_MAGIC[1], HELLO_MAGIC[2], w[0], w[1]]
}

/// The worker a hello asks for, if it is one.
pub fn parse_hello(b: &[u8]) -> Option<u16> {
    (b.len() == 5 && &b[..3] == HELLO_MAGIC).then(|| u16::from_le_bytes([b[3], b[4]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_names_its_worker_and_nothing_else_parses() {
        for w in [0u16, 1, 7, u16::MAX] {
            assert_eq!(parse_hello(&hello(w)), Some(w));
        }
        assert_eq!(parse_hello(b"KV1\x01"), None);
        assert_eq!(parse_hello(b"KV2\x01\x00"), None);
        assert_eq!(parse_hello(b"KV1\x01\x00\x00"), None);
    }
}
