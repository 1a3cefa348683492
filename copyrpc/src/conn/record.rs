//! The setup line: its layout, its size bound, writing and parsing it, and
//! the refusal a side sends instead of its own record (the reading, bounded
//! and under a deadline, is setup-conn's).

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use setup_conn::{printable, read_line, LineError, SetupFormat};

use super::{ConnError, MAX_PRIVATE_DATA, MAX_SETUP_RECORD};
use crate::info::{EndpointInfo, ENDPOINT_INFO_VERSION};

/// copyrpc's setup line, for setup-conn's acceptor.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Format;

impl SetupFormat for Format {
    type Record = SetupRecord;
    const MAX_LINE: usize = MAX_SETUP_RECORD;

    fn parse(&self, line: &[u8]) -> Result<SetupRecord, String> {
        parse_record(line).map_err(|e| e.to_string())
    }

    fn refusal(&self, reason: &str) -> String {
        let r = Refusal {
            version: ENDPOINT_INFO_VERSION,
            refused: reason,
        };
        // A struct of a number and a string always serializes.
        serde_json::to_string(&r).unwrap_or_default()
    }
}

/// The setup line: the endpoint record and the sender's private data.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct SetupRecord {
    #[serde(flatten)]
    pub info: EndpointInfo,
    #[serde(default)]
    pub private_data: Vec<u8>,
}

/// A refusal: sent instead of a record, then the connection closes.
#[derive(serde::Serialize)]
struct Refusal<'a> {
    version: u32,
    refused: &'a str,
}

/// What a line says before it is taken as a record: whether it is a
/// refusal, and its version (another version's layout may differ).
#[derive(serde::Deserialize)]
struct Probe {
    #[serde(default)]
    refused: Option<String>,
    #[serde(default)]
    version: Option<u32>,
}

/// Refuses private data over [`MAX_PRIVATE_DATA`].
pub(super) fn check_private_data(private_data: &[u8]) -> Result<(), ConnError> {
    if private_data.len() > MAX_PRIVATE_DATA {
        return Err(ConnError::Record(format!(
            "private data of {} bytes (at most {MAX_PRIVATE_DATA})",
            private_data.len()
        )));
    }
    Ok(())
}

/// Writes this side's record. On a non-blocking stream a full send buffer
/// fails the setup instead of waiting (a fresh connection's buffer takes a
/// whole record, so only a peer that reads nothing meets this).
pub(super) fn write_record(
    stream: &TcpStream,
    info: EndpointInfo,
    private_data: &[u8],
) -> Result<(), ConnError> {
    check_private_data(private_data)?;
    let rec = SetupRecord {
        info,
        private_data: private_data.to_vec(),
    };
    let mut line = serde_json::to_string(&rec).map_err(|e| ConnError::Record(e.to_string()))?;
    line.push('\n');
    let mut w = stream;
    w.write_all(line.as_bytes())?;
    Ok(())
}

/// Sends a refusal line (best effort, never waiting; the reason cut to 512
/// bytes) and closes the sending direction; the caller drops the stream.
pub(super) fn write_refusal(stream: &TcpStream, reason: &str) {
    setup_conn::refuse(stream, &Format, reason);
}

/// How long the blocking setups ([`connect_with`](super::connect_with),
/// [`Listener::accept_pending`](super::Listener::accept_pending)) give a peer,
/// from the TCP connection to its whole setup record.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads the peer's setup line, blocking until `timeout` after `started` at
/// the latest (however the peer spreads its bytes), at most
/// [`MAX_SETUP_RECORD`] bytes (the peer is untrusted).
pub(super) fn read_record(
    stream: &TcpStream,
    started: Instant,
    timeout: Duration,
) -> Result<SetupRecord, ConnError> {
    match read_line(stream, MAX_SETUP_RECORD, started + timeout) {
        Ok(line) => parse_record(&line),
        Err(LineError::Timeout) => Err(ConnError::Timeout(timeout)),
        Err(LineError::Io(e)) => Err(e.into()),
        Err(e @ (LineError::Closed | LineError::TooLong(_))) => {
            Err(ConnError::Record(e.to_string()))
        }
    }
}

/// Parses one setup line (without its newline): a record of our version, or
/// the peer's refusal.
pub(super) fn parse_record(line: &[u8]) -> Result<SetupRecord, ConnError> {
    let version_error = |v| {
        ConnError::Record(format!(
            "version {v} (this side speaks {ENDPOINT_INFO_VERSION})"
        ))
    };
    match serde_json::from_slice(line) {
        Ok(Probe {
            refused: Some(why), ..
        }) => return Err(ConnError::Refused(printable(&why))),
        Ok(Probe {
            version: Some(v), ..
        }) if v != ENDPOINT_INFO_VERSION => return Err(version_error(v)),
        _ => {}
    }
    let rec: SetupRecord =
        serde_json::from_slice(line).map_err(|e| ConnError::Record(e.to_string()))?;
    if rec.info.version != ENDPOINT_INFO_VERSION {
        return Err(version_error(rec.info.version));
    }
    check_private_data(&rec.private_data)?;
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_parses_as_the_peers_reason_made_printable() {
        let line = br#"{"version":1,"refused":"wrong token\u001b[2J\n"}"#;
        match parse_record(line) {
            Err(ConnError::Refused(why)) => assert_eq!(why, "wrong token?[2J?"),
            other => panic!("{:?}", other.err()),
        }
    }

    #[test]
    fn garbage_and_other_versions_are_bad_records() {
        for line in [
            &b"\x00\x01garbage"[..],
            b"{}",
            br#"{"version":99}"#,
            b"[1,2]",
        ] {
            match parse_record(line) {
                Err(ConnError::Record(_)) => {}
                other => panic!("{:?}: {:?}", line, other.err()),
            }
        }
    }
}
