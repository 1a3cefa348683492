//! Java `.properties` files, as YCSB reads its workload files and `-p` options.
//!
//! [`Properties::parse`] follows `java.util.Properties.load`:
//!
//! * a logical line is `key=value`, `key:value` or `key value`; the key ends
//!   at the first unescaped `=`, `:` or whitespace (space, tab, form feed),
//!   and whitespace around the separator is skipped, so the value's leading
//!   whitespace is trimmed while its trailing whitespace is kept;
//! * lines whose first non-blank character is `#` or `!` are comments, and
//!   blank lines are ignored;
//! * a line ending in an odd number of backslashes continues on the next
//!   line, whose leading whitespace is dropped;
//! * escapes `\t \n \r \f \uXXXX` (UTF-16, surrogate pairs combined) are
//!   decoded, and a backslash before any other character stands for that
//!   character (`\\`, `\=`, `\:`, `\ `, `\#`);
//! * a later definition of a key replaces an earlier one.
//!
//! Differences from Java, all on malformed input: a `\u` not followed by four
//! hex digits is kept literally (Java throws), and a lone UTF-16 surrogate
//! becomes U+FFFD.

use std::collections::BTreeMap;
use std::path::Path;

/// A property value that could not be converted to the requested type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PropError {
    /// The value of `key` is not a valid `expected`.
    #[error("property `{key}` has invalid value `{value}`: expected {expected}")]
    Invalid {
        /// The property name.
        key: String,
        /// The offending value, as written.
        value: String,
        /// What the value should have been, e.g. "an unsigned integer".
        expected: &'static str,
    },
}

impl PropError {
    fn invalid(key: &str, value: &str, expected: &'static str) -> Self {
        PropError::Invalid {
            key: key.to_owned(),
            value: value.to_owned(),
            expected,
        }
    }
}

/// An ordered (by key) map of string properties.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    map: BTreeMap<String, String>,
}

/// Java's property-file whitespace.
fn is_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\x0c')
}

impl Properties {
    /// An empty property set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the text of a `.properties` file (see the module docs for the
    /// syntax). Parsing never fails; malformed escapes are kept literally.
    pub fn parse(text: &str) -> Self {
        let mut props = Properties::new();
        props.parse_into(text);
        props
    }

    /// Parses `text` like [`Properties::parse`], adding its definitions to
    /// (and overriding entries of) `self`.
    pub fn parse_into(&mut self, text: &str) {
        let mut logical = String::new();
        let mut continuing = false;
        for natural in natural_lines(text) {
            let trimmed = natural.trim_start_matches(is_ws);
            if !continuing {
                if trimmed.is_empty() || trimmed.starts_with(['#', '!']) {
                    continue;
                }
                logical.clear();
            }
            let trailing = trimmed.len() - trimmed.trim_end_matches('\\').len();
            if trailing % 2 == 1 {
                logical.push_str(&trimmed[..trimmed.len() - 1]);
                continuing = true;
            } else {
                logical.push_str(trimmed);
                continuing = false;
                self.add_logical_line(&logical);
            }
        }
        if continuing {
            self.add_logical_line(&logical);
        }
    }

    /// Splits one logical line (leading whitespace already removed) into key
    /// and value and stores them.
    fn add_logical_line(&mut self, line: &str) {
        let mut key_end = line.len();
        let mut value_start = line.len();
        let mut has_separator = false;
        let mut preceding_backslash = false;
        for (i, c) in line.char_indices() {
            if !preceding_backslash && (c == '=' || c == ':') {
                key_end = i;
                value_start = i + 1;
                has_separator = true;
                break;
            }
            if !preceding_backslash && is_ws(c) {
                key_end = i;
                value_start = i + c.len_utf8();
                break;
            }
            preceding_backslash = c == '\\' && !preceding_backslash;
        }
        let mut rest = &line[value_start..];
        while let Some(c) = rest.chars().next() {
            if is_ws(c) {
                rest = &rest[c.len_utf8()..];
            } else if !has_separator && (c == '=' || c == ':') {
                has_separator = true;
                rest = &rest[1..];
            } else {
                break;
            }
        }
        let key = unescape(&line[..key_end]);
        let value = unescape(rest);
        self.map.insert(key, value);
    }

    /// Reads and parses a `.properties` file. The file is decoded as UTF-8,
    /// or as ISO-8859-1 (Java's encoding for property files) when it is not
    /// valid UTF-8.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, std::io::Error> {
        let bytes = std::fs::read(path)?;
        let text = match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => e.into_bytes().iter().map(|&b| char::from(b)).collect(),
        };
        Ok(Properties::parse(&text))
    }

    /// Sets `key` to `value`, replacing any previous value.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.map.insert(key.into(), value.into());
    }

    /// Parses a command-line assignment `key=value` (as given to YCSB's `-p`)
    /// and sets it; the value is taken verbatim after the first `=`.
    /// Returns false (and changes nothing) when there is no `=` or the key is
    /// empty.
    pub fn set_assignment(&mut self, assignment: &str) -> bool {
        match assignment.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                self.set(k, v);
                true
            }
            _ => false,
        }
    }

    /// Copies every entry of `other` into `self`, overriding existing keys.
    pub fn merge(&mut self, other: &Properties) {
        for (k, v) in &other.map {
            self.map.insert(k.clone(), v.clone());
        }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(String::as_str)
    }

    /// Whether `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// Removes `key`, returning its value if it was set.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.map.remove(key)
    }

    /// Number of properties.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no properties.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// All `(key, value)` pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The value of `key`, or `default` when unset.
    pub fn get_str<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.get(key).unwrap_or(default)
    }

    /// The value of `key` as an unsigned integer (surrounding whitespace
    /// ignored), or `default` when unset.
    pub fn get_u64(&self, key: &str, default: u64) -> Result<u64, PropError> {
        self.parse_or(key, default, "an unsigned integer")
    }

    /// The value of `key` as a `usize` (surrounding whitespace ignored), or
    /// `default` when unset.
    pub fn get_usize(&self, key: &str, default: usize) -> Result<usize, PropError> {
        self.parse_or(key, default, "an unsigned integer")
    }

    fn parse_or<T: std::str::FromStr>(
        &self,
        key: &str,
        default: T,
        expected: &'static str,
    ) -> Result<T, PropError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| PropError::invalid(key, v, expected)),
        }
    }

    /// The value of `key` as a finite floating-point number (surrounding
    /// whitespace ignored), or `default` when unset.
    pub fn get_f64(&self, key: &str, default: f64) -> Result<f64, PropError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(x),
                _ => Err(PropError::invalid(key, v, "a finite number")),
            },
        }
    }

    /// The value of `key` as a boolean, or `default` when unset.
    ///
    /// `true` and `false` are accepted in any letter case (surrounding
    /// whitespace ignored). Unlike Java's `Boolean.parseBoolean`, which reads
    /// any other text as false, other values are an error.
    pub fn get_bool(&self, key: &str, default: bool) -> Result<bool, PropError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => {
                let t = v.trim();
                if t.eq_ignore_ascii_case("true") {
                    Ok(true)
                } else if t.eq_ignore_ascii_case("false") {
                    Ok(false)
                } else {
                    Err(PropError::invalid(key, v, "`true` or `false`"))
                }
            }
        }
    }
}

/// Natural lines: terminated by `\n`, `\r` or `\r\n`.
fn natural_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match rest.find(['\n', '\r']) {
            Some(i) => {
                let line = &rest[..i];
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[i + skip..];
                Some(line)
            }
            None => {
                let line = rest;
                rest = "";
                Some(line)
            }
        }
    })
}

/// Reads four hex digits at the start of `s`.
fn hex4(s: &str) -> Option<u16> {
    let digits = s.get(..4)?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(digits, 16).ok()
}

/// Decodes Java property escapes.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        let Some(c) = rest.chars().next() else {
            break; // a lone trailing backslash is dropped
        };
        rest = &rest[c.len_utf8()..];
        match c {
            't' => out.push('\t'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            'f' => out.push('\x0c'),
            'u' => match hex4(rest) {
                None => out.push_str("\\u"),
                Some(unit) => {
                    rest = &rest[4..];
                    if (0xD800..0xDC00).contains(&unit) {
                        // High surrogate: combine with a following \uDCxx.
                        let low = rest.strip_prefix("\\u").and_then(hex4);
                        match low {
                            Some(low) if (0xDC00..0xE000).contains(&low) => {
                                rest = &rest[6..];
                                let cp = 0x10000
                                    + ((u32::from(unit) - 0xD800) << 10)
                                    + (u32::from(low) - 0xDC00);
                                out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                            }
                            _ => out.push('\u{FFFD}'),
                        }
                    } else {
                        out.push(char::from_u32(u32::from(unit)).unwrap_or('\u{FFFD}'));
                    }
                }
            },
            other => out.push(other),
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_and_whitespace() {
        let p = Properties::parse("a=1\nb:2\nc 3\n  d  =  4  \ne\t:\t5\nf = = 6\ng\nh=\n i:j=k\n");
        assert_eq!(p.get("a"), Some("1"));
        assert_eq!(p.get("b"), Some("2"));
        assert_eq!(p.get("c"), Some("3"));
        // Leading whitespace of the value trimmed, trailing kept.
        assert_eq!(p.get("d"), Some("4  "));
        assert_eq!(p.get("e"), Some("5"));
        // Only one separator is consumed.
        assert_eq!(p.get("f"), Some("= 6"));
        assert_eq!(p.get("g"), Some(""));
        assert_eq!(p.get("h"), Some(""));
        assert_eq!(p.get("i"), Some("j=k"));
        assert_eq!(p.len(), 9);
    }

    #[test]
    fn comments_blank_lines_and_line_endings() {
        let p = Properties::parse(
            "# comment=1\n! other:2\n   # indented comment\n\n \t \r\nx=1\r\ny=2\rz=3",
        );
        assert_eq!(p.len(), 3, "{p:?}");
        assert_eq!(p.get("x"), Some("1"));
        assert_eq!(p.get("y"), Some("2"));
        assert_eq!(p.get("z"), Some("3"));
        // A '#' that is not at the start of a line is ordinary text.
        let p = Properties::parse("k = v # not a comment");
        assert_eq!(p.get("k"), Some("v # not a comment"));
    }

    #[test]
    fn continuation_lines() {
        let p = Properties::parse("list = a, \\\n      b, \\\n   c\nnext=1\n");
        assert_eq!(p.get("list"), Some("a, b, c"));
        assert_eq!(p.get("next"), Some("1"));
        // An even number of backslashes does not continue the line.
        let p = Properties::parse("path=C:\\\\\nq=2");
        assert_eq!(p.get("path"), Some("C:\\"));
        assert_eq!(p.get("q"), Some("2"));
        // A comment marker on a continuation line is data.
        let p = Properties::parse("k=a\\\n  #b\n");
        assert_eq!(p.get("k"), Some("a#b"));
        // Continuation at end of input.
        let p = Properties::parse("k=a\\");
        assert_eq!(p.get("k"), Some("a"));
        // A comment line ending in a backslash does not swallow the next line.
        let p = Properties::parse("# c \\\nk=v");
        assert_eq!(p.get("k"), Some("v"));
    }

    #[test]
    fn escapes() {
        let p = Properties::parse(
            "tab=a\\tb\nnl=a\\nb\nbs=a\\\\b\nu=\\u0041\\u00e9\nkey\\ with\\=eq\\:colon = v\nx=\\q\nemoji=\\uD83D\\uDE00\nbad=\\u12G4\nlone=\\uD800x",
        );
        assert_eq!(p.get("tab"), Some("a\tb"));
        assert_eq!(p.get("nl"), Some("a\nb"));
        assert_eq!(p.get("bs"), Some("a\\b"));
        assert_eq!(p.get("u"), Some("Aé"));
        assert_eq!(p.get("key with=eq:colon"), Some("v"));
        assert_eq!(p.get("x"), Some("q"));
        assert_eq!(p.get("emoji"), Some("😀"));
        assert_eq!(p.get("bad"), Some("\\u12G4"));
        assert_eq!(p.get("lone"), Some("\u{FFFD}x"));
    }

    #[test]
    fn later_definitions_override_and_set() {
        let mut p = Properties::parse("a=1\na=2\n");
        assert_eq!(p.get("a"), Some("2"));
        p.set("a", "3");
        assert_eq!(p.get("a"), Some("3"));
        assert!(p.set_assignment("recordcount=10=x"));
        assert_eq!(p.get("recordcount"), Some("10=x"));
        assert!(!p.set_assignment("noequals"));
        assert!(!p.set_assignment("=v"));
        let mut q = Properties::parse("a=9\nb=8");
        q.merge(&p);
        assert_eq!(q.get("a"), Some("3"));
        assert_eq!(q.get("b"), Some("8"));
        let keys: Vec<&str> = q.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "b", "recordcount"]);
    }

    #[test]
    fn typed_getters() {
        let p = Properties::parse(
            "n = 42 \nf=0.25\nt=TRUE\nfl=false\nbadn=-3\nbadf=abc\nnan=NaN\nbadb=yes\n",
        );
        assert_eq!(p.get_u64("n", 0), Ok(42));
        assert_eq!(p.get_usize("n", 0), Ok(42));
        assert_eq!(p.get_u64("missing", 7), Ok(7));
        assert_eq!(p.get_f64("f", 0.0), Ok(0.25));
        assert_eq!(p.get_f64("n", 0.0), Ok(42.0));
        assert_eq!(p.get_f64("missing", 1.5), Ok(1.5));
        assert_eq!(p.get_bool("t", false), Ok(true));
        assert_eq!(p.get_bool("fl", true), Ok(false));
        assert_eq!(p.get_bool("missing", true), Ok(true));
        assert_eq!(p.get_str("missing", "dflt"), "dflt");
        assert_eq!(p.get_str("f", "dflt"), "0.25");

        let e = p.get_u64("badn", 0).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("badn") && msg.contains("-3"), "{msg}");
        assert!(p.get_f64("badf", 0.0).is_err());
        assert!(p.get_f64("nan", 0.0).is_err());
        let msg = p.get_bool("badb", false).unwrap_err().to_string();
        assert!(msg.contains("badb") && msg.contains("yes"), "{msg}");
    }

    #[test]
    fn load_from_file() {
        let dir = std::env::temp_dir().join(format!("ycsb-props-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.properties");
        // ISO-8859-1 byte 0xE9 ('é') is not valid UTF-8.
        std::fs::write(&path, b"name=caf\xe9\nrecordcount=5\n").unwrap();
        let p = Properties::load(&path).unwrap();
        assert_eq!(p.get("name"), Some("café"));
        assert_eq!(p.get_u64("recordcount", 0), Ok(5));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(Properties::load(dir.join("missing")).is_err());
    }
}
