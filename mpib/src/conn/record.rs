//! The setup line: its layout, reading it in whole chunks up to its newline
//! (and never past it), parsing it, and the refusal a side sends instead of
//! its own record.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::{MAX_PRIVATE_DATA, MAX_SETUP_RECORD};
use crate::error::SetupError;
use crate::info::{CommInfo, COMM_INFO_VERSION};

/// The setup line: the communicator record and the sender's private data.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct SetupRecord {
    #[serde(flatten)]
    pub info: CommInfo,
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

/// Longest refusal reason sent or reported (longer ones are cut).
const MAX_REASON: usize = 512;

/// Bytes looked at per read.
const CHUNK: usize = 4096;

/// Refuses private data over [`MAX_PRIVATE_DATA`].
pub(super) fn check_private_data(p: &[u8]) -> Result<(), SetupError> {
    if p.len() > MAX_PRIVATE_DATA {
        return Err(SetupError::Config(format!(
            "private data of {} bytes (at most {MAX_PRIVATE_DATA})",
            p.len()
        )));
    }
    Ok(())
}

/// Writes this side's record. On a non-blocking stream a full send buffer
/// fails the setup instead of waiting (a fresh connection's buffer takes a
/// whole record, so only a peer that reads nothing meets this).
pub(super) fn write_record(
    stream: &TcpStream,
    info: &CommInfo,
    private_data: &[u8],
) -> Result<(), SetupError> {
    check_private_data(private_data)?;
    let rec = SetupRecord {
        info: info.clone(),
        private_data: private_data.to_vec(),
    };
    let mut line =
        serde_json::to_string(&rec).map_err(|e| SetupError::Peer(format!("encoding: {e}")))?;
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
        version: COMM_INFO_VERSION,
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

/// Where a [`LineReader`] stands after reading what was there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fill {
    /// The line is complete: [`LineReader::line`] holds it.
    Line,
    /// Bytes taken, no newline yet: read again.
    More,
    /// Nothing more to read now (would block, or the read timed out).
    Waiting,
    /// The peer closed its side before the newline.
    Closed,
    /// [`MAX_SETUP_RECORD`] bytes and no newline.
    TooLong,
}

/// A setup line being read: whole chunks at a time, up to its newline and
/// never past it, at most [`MAX_SETUP_RECORD`] bytes (its buffer grows
/// only by what the peer sent).
#[derive(Debug, Default)]
pub(super) struct LineReader {
    buf: Vec<u8>,
}

impl LineReader {
    /// The line read so far, without its newline.
    pub fn line(&self) -> &[u8] {
        &self.buf
    }

    /// Reads one chunk of what `stream` has: it is peeked at, and only the
    /// bytes up to and including the newline are taken out of the socket,
    /// so whatever the peer sends after its record stays there. A
    /// non-blocking stream returns [`Fill::Waiting`] at once when it has
    /// nothing; a blocking one after its read timeout.
    pub fn fill(&mut self, stream: &TcpStream) -> io::Result<Fill> {
        let mut chunk = [0u8; CHUNK];
        // Positive: a full buffer returned `TooLong` before.
        let room = (MAX_SETUP_RECORD - self.buf.len()).min(CHUNK);
        let n = loop {
            match stream.peek(&mut chunk[..room]) {
                Ok(0) => return Ok(Fill::Closed),
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(Fill::Waiting)
                }
                Err(e) => return Err(e),
            }
        };
        let newline = chunk[..n].iter().position(|&b| b == b'\n');
        let take = newline.map_or(n, |i| i + 1);
        // The bytes were peeked, so this read returns them at once.
        (&*stream).read_exact(&mut chunk[..take])?;
        if let Some(i) = newline {
            self.buf.extend_from_slice(&chunk[..i]);
            return Ok(Fill::Line);
        }
        self.buf.extend_from_slice(&chunk[..take]);
        if self.buf.len() >= MAX_SETUP_RECORD {
            return Ok(Fill::TooLong);
        }
        Ok(Fill::More)
    }
}

/// How long the blocking setups ([`connect_with`](super::connect_with),
/// [`Listener::accept_pending`](super::Listener::accept_pending)) give the
/// peer, from the start of the setup to its whole setup record.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads the peer's setup line on a blocking stream, until `timeout` after
/// `started` at the latest, however the peer spreads its bytes.
pub(super) fn read_record(
    stream: &TcpStream,
    started: Instant,
    timeout: Duration,
) -> Result<SetupRecord, SetupError> {
    let deadline = started + timeout;
    let mut r = LineReader::default();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(SetupError::Peer(format!(
                "no complete setup record within {timeout:?}"
            )));
        }
        stream.set_read_timeout(Some(left))?;
        match r.fill(stream)? {
            Fill::Line => return parse_record(r.line()),
            // More to come, or the read timed out: the deadline check above
            // says whether there is time for it.
            Fill::More | Fill::Waiting => {}
            Fill::Closed => return Err(SetupError::Peer("no complete setup record".into())),
            Fill::TooLong => {
                return Err(SetupError::Peer(format!(
                    "no end of line within {MAX_SETUP_RECORD} bytes"
                )))
            }
        }
    }
}

/// Parses one setup line (without its newline): a record of our version, or
/// the peer's refusal (an error saying the peer's reason).
pub(super) fn parse_record(line: &[u8]) -> Result<SetupRecord, SetupError> {
    let version_error = |v| {
        SetupError::Peer(format!(
            "version {v} (this side speaks {COMM_INFO_VERSION})"
        ))
    };
    match serde_json::from_slice(line) {
        Ok(Probe {
            refused: Some(why), ..
        }) => {
            return Err(SetupError::Peer(format!(
                "refused by the peer: {}",
                printable(&why)
            )))
        }
        Ok(Probe {
            version: Some(v), ..
        }) if v != COMM_INFO_VERSION => return Err(version_error(v)),
        _ => {}
    }
    let rec: SetupRecord =
        serde_json::from_slice(line).map_err(|e| SetupError::Peer(e.to_string()))?;
    if rec.info.version != COMM_INFO_VERSION {
        return Err(version_error(rec.info.version));
    }
    if rec.private_data.len() > MAX_PRIVATE_DATA {
        return Err(SetupError::Peer(format!(
            "private data of {} bytes (at most {MAX_PRIVATE_DATA})",
            rec.private_data.len()
        )));
    }
    Ok(rec)
}

/// A peer's text made safe to print: control characters become `?`, and at
/// most [`MAX_REASON`] characters are kept.
pub(super) fn printable(s: &str) -> String {
    s.chars()
        .take(MAX_REASON)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn a_line_is_read_in_chunks_and_nothing_after_it() {
        let (mut c, s) = pair();
        s.set_nonblocking(true).unwrap();
        let mut r = LineReader::default();
        assert_eq!(r.fill(&s).unwrap(), Fill::Waiting);
        c.write_all(b"{\"a\":").unwrap();
        c.flush().unwrap();
        let t = Instant::now();
        while r.line().len() < 5 {
            assert!(matches!(r.fill(&s).unwrap(), Fill::More | Fill::Waiting));
            assert!(t.elapsed() < Duration::from_secs(5));
        }
        c.write_all(b"1}\nAFTER").unwrap();
        let t = Instant::now();
        loop {
            match r.fill(&s).unwrap() {
                Fill::Line => break,
                Fill::More | Fill::Waiting => assert!(t.elapsed() < Duration::from_secs(5)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(r.line(), b"{\"a\":1}");
        // The bytes after the newline are still in the socket.
        s.set_nonblocking(false).unwrap();
        let mut rest = [0u8; 5];
        (&s).read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b"AFTER");
    }

    #[test]
    fn a_line_without_end_stops_at_the_bound_and_a_closed_peer_is_seen() {
        let (mut c, s) = pair();
        let w = std::thread::spawn(move || {
            // Fails once the reader has closed: that is fine.
            let _ = c.write_all(&vec![b'x'; MAX_SETUP_RECORD + 100]);
        });
        let mut r = LineReader::default();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let f = loop {
            match r.fill(&s).unwrap() {
                Fill::More | Fill::Waiting => continue,
                f => break f,
            }
        };
        assert_eq!(f, Fill::TooLong);
        assert_eq!(r.line().len(), MAX_SETUP_RECORD);
        drop(s);
        w.join().unwrap();
        let (c, s) = pair();
        drop(c);
        assert_eq!(LineReader::default().fill(&s).unwrap(), Fill::Closed);
    }

    #[test]
    fn a_trickled_record_times_out_at_one_deadline() {
        let (mut c, s) = pair();
        let w = std::thread::spawn(move || {
            for _ in 0..100 {
                if c.write_all(b" ").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let t = Instant::now();
        let e = read_record(&s, t, Duration::from_millis(300))
            .err()
            .unwrap();
        assert!(e.to_string().contains("within"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        drop(s);
        w.join().unwrap();
    }

    #[test]
    fn a_refusal_parses_as_the_peers_reason_made_printable() {
        let line = br#"{"version":1,"refused":"no ticket\u001b[2J\n"}"#;
        match parse_record(line) {
            Err(SetupError::Peer(why)) => {
                assert_eq!(why, "refused by the peer: no ticket?[2J?")
            }
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
            br#"{"version":1,"rails":"x"}"#,
        ] {
            match parse_record(line) {
                Err(SetupError::Peer(_)) => {}
                other => panic!("{:?}: {:?}", line, other.err()),
            }
        }
    }
}
