//! The setup line: its layout, its size bound, reading and writing it, and
//! the refusal a side sends instead of its own record.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::{ConnError, MAX_PRIVATE_DATA, MAX_SETUP_RECORD};
use crate::info::{EndpointInfo, ENDPOINT_INFO_VERSION};

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

/// Longest refusal reason sent (longer ones are cut at a character boundary).
const MAX_REASON: usize = 512;

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

/// Sends a refusal line (best effort, never waiting) and closes the sending
/// direction; the caller drops the stream.
pub(super) fn write_refusal(stream: &TcpStream, reason: &str) {
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let r = Refusal {
        version: ENDPOINT_INFO_VERSION,
        refused: &reason[..end],
    };
    let Ok(mut line) = serde_json::to_string(&r) else {
        return;
    };
    line.push('\n');
    if stream.set_nonblocking(true).is_ok() {
        let mut w = stream;
        let _ = w.write_all(line.as_bytes());
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
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
    let deadline = started + timeout;
    let mut line = Vec::new();
    // Byte by byte up to the newline: nothing after it may be consumed.
    let mut r = stream.take(MAX_SETUP_RECORD as u64);
    let mut b = [0u8; 1];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ConnError::Timeout(timeout));
        }
        r.get_ref().set_read_timeout(Some(left))?;
        match r.read(&mut b) {
            Ok(0) if line.len() >= MAX_SETUP_RECORD => {
                return Err(ConnError::Record(format!(
                    "no end of line within {MAX_SETUP_RECORD} bytes"
                )))
            }
            Ok(0) => return Err(ConnError::Record("no complete record".into())),
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) => line.push(b[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The read timed out: the loop's deadline check says so.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    parse_record(&line)
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

/// A peer's text made safe to print: control characters become `?`, and at
/// most [`MAX_REASON`] characters are kept.
fn printable(s: &str) -> String {
    s.chars()
        .take(MAX_REASON)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
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
