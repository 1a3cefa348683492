//! The record format a crate gives the setup code, and the refusal line.

use std::io::Write;
use std::net::{Shutdown, TcpStream};

/// A setup record format: what one side sends the other as one line.
///
/// The setup code finds the line (up to its newline, at most
/// [`MAX_LINE`](Self::MAX_LINE) bytes) and hands it over whole; the format
/// says what it holds.
pub trait SetupFormat {
    /// A parsed, well-formed record.
    type Record;

    /// Most bytes of a setup line, its newline included. A reader stops
    /// there: a peer cannot make it buffer more.
    const MAX_LINE: usize;

    /// Parses one complete line (without its newline): the record, or why it
    /// is malformed (a refusal, another version, bad syntax, ...). The reason
    /// may quote the peer; the acceptor makes it printable before use.
    fn parse(&self, line: &[u8]) -> Result<Self::Record, String>;

    /// The refusal line carrying `reason` (without its newline), sent instead
    /// of a record. `reason` is at most [`MAX_REASON`] bytes.
    fn refusal(&self, reason: &str) -> String;
}

/// Longest refusal reason sent or reported (longer ones are cut).
pub const MAX_REASON: usize = 512;

/// Sends `format`'s refusal line with `reason` (cut to [`MAX_REASON`] bytes
/// at a character boundary), best effort and never waiting, then closes the
/// sending direction; the caller drops the stream. Leaves the stream
/// non-blocking.
pub fn refuse<F: SetupFormat + ?Sized>(stream: &TcpStream, format: &F, reason: &str) {
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut line = format.refusal(&reason[..end]);
    line.push('\n');
    if stream.set_nonblocking(true).is_ok() {
        let mut w = stream;
        let _ = w.write_all(line.as_bytes());
    }
    let _ = stream.shutdown(Shutdown::Write);
}

/// A peer's text made safe to print: control characters become `?`, and at
/// most [`MAX_REASON`] characters are kept.
pub fn printable(s: &str) -> String {
    s.chars()
        .take(MAX_REASON)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_question_marks_and_long_text_is_cut() {
        assert_eq!(printable("a\u{1b}[2J\nb"), "a?[2J?b");
        assert_eq!(printable(&"é".repeat(600)).chars().count(), MAX_REASON);
    }
}
