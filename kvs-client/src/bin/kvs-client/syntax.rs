//! The command syntax the shell and `--pipe` share: one command per line,
//! its words split at spaces and tabs, with redis-cli's quoting:
//!
//! - `"..."`: a word with escapes: `\"`, `\\`, `\n`, `\r`, `\t`, `\a`,
//!   `\b`, and `\xHH` for any byte (binary keys and values);
//! - `'...'`: a word taken as written, but for `\'` (a quote);
//! - anything else: the bytes up to the next space or tab.
//!
//! A quoted word ends its word: `"a"b` is an error. Values are printed back
//! in the same syntax ([`show`]), so that what the shell prints can be
//! typed again.

use std::fmt::Write;

/// A command of the shell and of `--pipe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `get KEY`
    Get(Vec<u8>),
    /// `put KEY VALUE`
    Put(Vec<u8>, Vec<u8>),
    /// `del KEY`
    Del(Vec<u8>),
    /// `scan START COUNT`
    Scan(Vec<u8>, u32),
}

/// The commands, their arguments and what they do (for `help` and for
/// completion).
pub const COMMANDS: [(&str, &str, &str); 6] = [
    ("get", "KEY", "prints the key's value, or (not found)"),
    ("put", "KEY VALUE", "sets the key's value"),
    ("del", "KEY", "removes the key"),
    (
        "scan",
        "START COUNT",
        "prints up to COUNT records from START on, in key order",
    ),
    ("help", "", "prints this"),
    ("quit", "", "leaves the shell (also exit, or Ctrl-D)"),
];

/// What `help` prints.
pub fn help() -> String {
    let mut s = String::from("commands:\n");
    for (name, args, what) in COMMANDS {
        let _ = writeln!(s, "  {:<18} {what}", format!("{name} {args}"));
    }
    s.push_str(
        "words are split at spaces; \"a b\\x00\\n\" is a word with escapes (\\\" \\\\ \\n \\r \\t \
         \\xHH), 'a b' one taken as written; values print the same way\n",
    );
    s
}

/// Why a line is not a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    /// A quote with no closing one.
    #[error("unbalanced quotes")]
    Unbalanced,
    /// A closing quote followed by something other than a space.
    #[error("a closing quote must be followed by a space or the end of the line")]
    AfterQuote,
    /// `\x` not followed by two hex digits.
    #[error("\\x must be followed by two hex digits")]
    BadHex,
    /// No such command.
    #[error("unknown command '{0}' (help lists them)")]
    Unknown(String),
    /// The wrong number of words.
    #[error("usage: {0}")]
    Usage(String),
    /// SCAN's count is not a number.
    #[error("scan: COUNT must be a number from 1 to 4294967295, not '{0}'")]
    Count(String),
}

/// The words of `line` (see the [module docs](self)).
pub fn words(line: &[u8]) -> Result<Vec<Vec<u8>>, SyntaxError> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        let Some(&c) = line.get(i) else {
            return Ok(out);
        };
        let (word, next) = match c {
            b'"' => double_quoted(line, i + 1)?,
            b'\'' => single_quoted(line, i + 1)?,
            _ => {
                let end = line[i..]
                    .iter()
                    .position(|&b| is_space(b))
                    .map_or(line.len(), |n| i + n);
                (line[i..end].to_vec(), end)
            }
        };
        let quoted = c == b'"' || c == b'\'';
        if quoted && line.get(next).is_some_and(|&b| !is_space(b)) {
            return Err(SyntaxError::AfterQuote);
        }
        out.push(word);
        i = next;
    }
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// A `"..."` word whose bytes start at `i`; the word and the index past
/// its closing quote.
fn double_quoted(line: &[u8], mut i: usize) -> Result<(Vec<u8>, usize), SyntaxError> {
    let mut w = Vec::new();
    loop {
        match line.get(i) {
            None => return Err(SyntaxError::Unbalanced),
            Some(b'"') => return Ok((w, i + 1)),
            Some(b'\\') => {
                let Some(&e) = line.get(i + 1) else {
                    return Err(SyntaxError::Unbalanced);
                };
                i += 2;
                w.push(match e {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'a' => 0x07,
                    b'b' => 0x08,
                    b'x' => {
                        let hex = line.get(i..i + 2).ok_or(SyntaxError::BadHex)?;
                        let v = std::str::from_utf8(hex)
                            .ok()
                            .and_then(|h| u8::from_str_radix(h, 16).ok())
                            .ok_or(SyntaxError::BadHex)?;
                        i += 2;
                        v
                    }
                    other => other,
                });
            }
            Some(&b) => {
                w.push(b);
                i += 1;
            }
        }
    }
}

/// A `'...'` word whose bytes start at `i`.
fn single_quoted(line: &[u8], mut i: usize) -> Result<(Vec<u8>, usize), SyntaxError> {
    let mut w = Vec::new();
    loop {
        match line.get(i) {
            None => return Err(SyntaxError::Unbalanced),
            Some(b'\'') => return Ok((w, i + 1)),
            Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                w.push(b'\'');
                i += 2;
            }
            Some(&b) => {
                w.push(b);
                i += 1;
            }
        }
    }
}

impl Command {
    /// The key it reads or writes (a SCAN: where it starts).
    pub fn key(&self) -> &[u8] {
        match self {
            Command::Get(k) | Command::Put(k, _) | Command::Del(k) | Command::Scan(k, _) => k,
        }
    }

    /// The command of `words` (its first word, in any case, names it).
    pub fn parse(words: Vec<Vec<u8>>) -> Result<Command, SyntaxError> {
        let mut it = words.into_iter();
        let name = it.next().unwrap_or_default();
        let name = String::from_utf8_lossy(&name).to_lowercase();
        let args: Vec<Vec<u8>> = it.collect();
        let usage = |n: &str| {
            let (_, a, _) = COMMANDS
                .iter()
                .find(|c| c.0 == n)
                .copied()
                .unwrap_or_default();
            SyntaxError::Usage(format!("{n} {a}"))
        };
        let mut args = args.into_iter();
        let (a, b, rest) = (args.next(), args.next(), args.next());
        match (name.as_str(), a, b, rest) {
            ("get", Some(k), None, None) => Ok(Command::Get(k)),
            ("put", Some(k), Some(v), None) => Ok(Command::Put(k, v)),
            ("del", Some(k), None, None) => Ok(Command::Del(k)),
            ("scan", Some(s), Some(n), None) => {
                let count = std::str::from_utf8(&n)
                    .ok()
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| SyntaxError::Count(String::from_utf8_lossy(&n).into()))?;
                Ok(Command::Scan(s, count))
            }
            (n @ ("get" | "put" | "del" | "scan"), ..) => Err(usage(n)),
            (n, ..) => Err(SyntaxError::Unknown(n.to_string())),
        }
    }
}

/// `b` as a word of the syntax: as it is if it needs no quotes, else in
/// double quotes with escapes (`\xHH` for bytes that are not printable
/// characters).
pub fn show(b: &[u8]) -> String {
    let plain = !b.is_empty()
        && std::str::from_utf8(b).is_ok_and(|s| {
            s.chars()
                .all(|c| !c.is_control() && !c.is_whitespace() && !"\"'\\".contains(c))
        });
    if plain {
        return String::from_utf8_lossy(b).into_owned();
    }
    let mut s = String::from("\"");
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => s.push_str("\\\""),
                '\\' => s.push_str("\\\\"),
                '\n' => s.push_str("\\n"),
                '\r' => s.push_str("\\r"),
                '\t' => s.push_str("\\t"),
                ' ' => s.push(' '),
                c if c.is_control() || c.is_whitespace() => {
                    let mut buf = [0u8; 4];
                    for byte in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(s, "\\x{byte:02x}");
                    }
                }
                c => s.push(c),
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(s, "\\x{byte:02x}");
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(line: &str) -> Result<Vec<String>, SyntaxError> {
        words(line.as_bytes()).map(|ws| {
            ws.into_iter()
                .map(|w| String::from_utf8_lossy(&w).into_owned())
                .collect()
        })
    }

    #[test]
    fn words_split_at_spaces_and_quotes_hold_them() {
        assert_eq!(w("  put\tk  v ").unwrap(), ["put", "k", "v"]);
        assert_eq!(w("put k \"a b\"").unwrap(), ["put", "k", "a b"]);
        assert_eq!(w("put k 'it\\'s \\n'").unwrap(), ["put", "k", "it's \\n"]);
        assert_eq!(w("put \"\" \"\"").unwrap(), ["put", "", ""]);
        assert_eq!(w("").unwrap(), Vec::<String>::new());
        assert_eq!(
            words(b"put \"\\x00\\xff\\n\\\"\\\\\" x").unwrap()[1],
            b"\x00\xff\n\"\\"
        );
    }

    #[test]
    fn bad_quoting_is_named() {
        assert_eq!(w("get \"abc"), Err(SyntaxError::Unbalanced));
        assert_eq!(w("get 'abc"), Err(SyntaxError::Unbalanced));
        assert_eq!(w("get \"a\"b"), Err(SyntaxError::AfterQuote));
        assert_eq!(w("get \"\\x4\""), Err(SyntaxError::BadHex));
        assert_eq!(w("get \"\\xzz\""), Err(SyntaxError::BadHex));
        assert_eq!(w("get \"\\"), Err(SyntaxError::Unbalanced));
    }

    #[test]
    fn commands_check_their_words() {
        let p = |l: &str| Command::parse(words(l.as_bytes()).unwrap());
        assert_eq!(p("GET k"), Ok(Command::Get(b"k".to_vec())));
        assert_eq!(p("put k v"), Ok(Command::Put(b"k".to_vec(), b"v".to_vec())));
        assert_eq!(p("del k"), Ok(Command::Del(b"k".to_vec())));
        assert_eq!(p("scan a 10"), Ok(Command::Scan(b"a".to_vec(), 10)));
        assert_eq!(p("put k"), Err(SyntaxError::Usage("put KEY VALUE".into())));
        assert_eq!(p("get a b"), Err(SyntaxError::Usage("get KEY".into())));
        assert_eq!(p("scan a x"), Err(SyntaxError::Count("x".into())));
        assert_eq!(p("scan a 0"), Err(SyntaxError::Count("0".into())));
        assert_eq!(p("set k v"), Err(SyntaxError::Unknown("set".into())));
    }

    #[test]
    fn shown_values_read_back_as_they_were() {
        for v in [
            &b"plain"[..],
            b"",
            b"a b",
            b"\x00\x01\xff\xfe",
            b"quote\"back\\slash'",
            b"tab\tnl\ncr\r",
            "caf\u{e9} \u{1f600}".as_bytes(),
            b"\xe2\x82",
        ] {
            let s = show(v);
            let line = format!("put k {s}");
            let back = words(line.as_bytes()).unwrap();
            assert_eq!(back[2], v, "{s}");
        }
        assert_eq!(show(b"plain"), "plain");
        assert_eq!(show(b"a b"), "\"a b\"");
        assert_eq!(show(b"\x00"), "\"\\x00\"");
    }
}
