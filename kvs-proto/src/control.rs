//! Control messages: what servers say to each other and what `kvs-admin`
//! asks, on a server's control endpoint. JSON (serde), carried in the value
//! of a [`Op::Control`](crate::proto::Op::Control) request and in the
//! payload of its answer; they are rare, small, and worth reading in a
//! packet capture. Decoding is serde's, which never panics on input.
//!
//! The cluster's map changes only at its *keeper*, member 0 (the server that
//! started the cluster): it gives every change the next version and pushes
//! the map to every other member (`SET_MAP`). Members answer a request they
//! cannot serve with [`ControlReply::Keeper`], naming where to go.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// A request to a control endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum ControlRequest {
    /// A new server asks to join the cluster: where clients reach it, its
    /// worker count and its slot count (which must be the cluster's).
    Join {
        /// Its setup address.
        addr: SocketAddr,
        /// Its workers.
        workers: u16,
        /// Its configured slot count.
        slots: u32,
    },
    /// The member's own figures: keys, bytes and slots per worker.
    Status,
}

/// An answer from a control endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case", deny_unknown_fields)]
pub enum ControlReply {
    /// Done.
    Ok,
    /// Not done, and why.
    Error {
        /// What went wrong, for a person.
        message: String,
    },
    /// Only the keeper does this: ask it, at this address.
    Keeper {
        /// The keeper's setup address.
        addr: SocketAddr,
    },
    /// Joined: the member's id and the map that includes it.
    Joined {
        /// Its member id.
        member: u16,
        /// The encoded map ([`crate::ShardMap::encode`]).
        map: Vec<u8>,
    },
    /// A member's figures.
    Status(MemberStatus),
}

/// One member's figures (the answer to [`ControlRequest::Status`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberStatus {
    /// Its member id.
    pub member: u16,
    /// The version of the map it serves by.
    pub map_version: u32,
    /// Per worker, by number.
    pub workers: Vec<WorkerStatus>,
}

/// One worker's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerStatus {
    /// Slots it owns.
    pub slots: u32,
    /// Keys it holds.
    pub keys: u64,
    /// Heap bytes its records take.
    pub bytes: u64,
}

/// A control message that is not JSON of the expected shape.
#[derive(Debug, thiserror::Error)]
#[error("malformed control message: {0}")]
pub struct BadControl(String);

impl ControlRequest {
    /// The JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a control request always serializes")
    }
    /// From untrusted bytes.
    pub fn decode(b: &[u8]) -> Result<ControlRequest, BadControl> {
        serde_json::from_slice(b).map_err(|e| BadControl(e.to_string()))
    }
}

impl ControlReply {
    /// The JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a control reply always serializes")
    }
    /// From untrusted bytes.
    pub fn decode(b: &[u8]) -> Result<ControlReply, BadControl> {
        serde_json::from_slice(b).map_err(|e| BadControl(e.to_string()))
    }
    /// An error reply.
    pub fn error(message: impl Into<String>) -> ControlReply {
        ControlReply::Error {
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip_and_junk_is_an_error() {
        let j = ControlRequest::Join {
            addr: "10.0.0.2:7000".parse().unwrap(),
            workers: 4,
            slots: 1024,
        };
        assert_eq!(ControlRequest::decode(&j.encode()).unwrap(), j);
        let s = ControlReply::Status(MemberStatus {
            member: 1,
            map_version: 3,
            workers: vec![WorkerStatus {
                slots: 512,
                keys: 10,
                bytes: 1000,
            }],
        });
        assert_eq!(ControlReply::decode(&s.encode()).unwrap(), s);
        for junk in [
            &b""[..],
            b"{",
            b"{\"op\":\"nope\"}",
            b"{\"op\":\"join\",\"addr\":\"x\",\"workers\":1,\"slots\":1}",
            b"{\"op\":\"join\",\"addr\":\"1.2.3.4:5\",\"workers\":70000,\"slots\":1}",
        ] {
            assert!(
                ControlRequest::decode(junk).is_err(),
                "{}",
                String::from_utf8_lossy(junk)
            );
        }
        assert!(ControlReply::decode(b"[1,2]").is_err());
    }
}
