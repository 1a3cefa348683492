//! One setup line, read in whole chunks up to its newline and never past it,
//! within a bound on its size and, when blocking, a deadline.

use std::fmt;
use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Instant;

/// Bytes looked at per read.
const CHUNK: usize = 4096;

/// Where a [`LineReader`] stands after reading what was there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// The line is complete: [`LineReader::line`] holds it.
    Line,
    /// Bytes taken, no newline yet: read again.
    More,
    /// Nothing more to read now (would block, or the read timed out).
    Waiting,
    /// The peer closed its side before the newline.
    Closed,
    /// The bound's worth of bytes and no newline.
    TooLong,
}

/// A setup line being read: whole chunks at a time, up to its newline and
/// never past it, at most `max` bytes with the newline (its buffer grows
/// only by what the peer sent).
#[derive(Debug)]
pub struct LineReader {
    buf: Vec<u8>,
    max: usize,
    trailing: bool,
}

impl LineReader {
    /// A reader of lines of at most `max` bytes, the newline included (at
    /// least 1).
    pub fn new(max: usize) -> LineReader {
        LineReader {
            buf: Vec::new(),
            max: max.max(1),
            trailing: false,
        }
    }

    /// The line read so far, without its newline.
    pub fn line(&self) -> &[u8] {
        &self.buf
    }

    /// Whether, when the line completed, more bytes already followed its
    /// newline (left in the socket). A peer that waits for the answer to its
    /// record before sending more never does this.
    pub fn trailing(&self) -> bool {
        self.trailing
    }

    /// Reads one chunk of what `stream` has: it is peeked at, and only the
    /// bytes up to and including the newline are taken out of the socket,
    /// so whatever the peer sends after its line stays there. A non-blocking
    /// stream returns [`Fill::Waiting`] at once when it has nothing; a
    /// blocking one after its read timeout. Call it again only after
    /// [`Fill::More`] or [`Fill::Waiting`].
    pub fn fill(&mut self, stream: &TcpStream) -> io::Result<Fill> {
        let mut chunk = [0u8; CHUNK];
        // Positive: a full buffer returned `TooLong` before.
        let room = (self.max - self.buf.len()).min(CHUNK);
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
            self.trailing = take < n;
            return Ok(Fill::Line);
        }
        self.buf.extend_from_slice(&chunk[..take]);
        if self.buf.len() >= self.max {
            return Ok(Fill::TooLong);
        }
        Ok(Fill::More)
    }
}

/// Why [`read_line`] found no line.
#[derive(Debug)]
pub enum LineError {
    /// The deadline passed first.
    Timeout,
    /// The peer closed its side before the newline.
    Closed,
    /// No newline within the bound (the bound, in bytes).
    TooLong(usize),
    /// The socket failed.
    Io(io::Error),
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineError::Timeout => f.write_str("no complete setup record by the deadline"),
            LineError::Closed => f.write_str("no complete setup record"),
            LineError::TooLong(max) => write!(f, "no end of line within {max} bytes"),
            LineError::Io(e) => write!(f, "tcp: {e}"),
        }
    }
}

impl std::error::Error for LineError {}

impl From<io::Error> for LineError {
    fn from(e: io::Error) -> LineError {
        LineError::Io(e)
    }
}

/// Reads one line of at most `max` bytes (newline included) from a blocking
/// `stream`, by `deadline` at the latest however the peer spreads its bytes;
/// returns it without its newline. Nothing after the newline is consumed.
/// Leaves a read timeout set on the stream.
pub fn read_line(stream: &TcpStream, max: usize, deadline: Instant) -> Result<Vec<u8>, LineError> {
    let mut r = LineReader::new(max);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LineError::Timeout);
        }
        stream.set_read_timeout(Some(left))?;
        match r.fill(stream)? {
            Fill::Line => return Ok(r.buf),
            // More to come, or the read timed out: the deadline check above
            // says whether there is time for it.
            Fill::More | Fill::Waiting => {}
            Fill::Closed => return Err(LineError::Closed),
            Fill::TooLong => return Err(LineError::TooLong(r.max)),
        }
    }
}
