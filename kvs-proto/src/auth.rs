//! The auth token: a shared secret the server requires and each client
//! presents in its hello ([`hello`](mod@crate::hello)), compared in constant time.
//!
//! A token is 1 to [`MAX_TOKEN`] bytes; whitespace around it (a file's
//! trailing newline) is not part of it. A token file must be private to its
//! owner (no permission bits for group or others), as ssh requires of private
//! keys: a token others can read is no secret. The token's bytes are never
//! printed: its `Debug` form is redacted.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Longest token: what the hello leaves of copyrpc's 256 bytes of private
/// data after its 5-byte header.
pub const MAX_TOKEN: usize = 251;

/// Shortest token a server accepts for itself ([`AuthToken::check_strength`]):
/// 16 bytes, as `openssl rand -hex 8` gives.
pub const MIN_TOKEN: usize = 16;

/// A shared secret (see the [module documentation](self)).
#[derive(Clone)]
pub struct AuthToken {
    /// The token, zero-padded to [`MAX_TOKEN`] so comparisons always touch
    /// every byte.
    padded: Box<[u8; MAX_TOKEN]>,
    len: usize,
}

impl std::fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthToken(<redacted>)")
    }
}

impl Drop for AuthToken {
    fn drop(&mut self) {
        self.padded.fill(0);
        std::hint::black_box(&self.padded);
    }
}

/// Why a token could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file could not be read.
    #[error("auth token file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The token file is open to group or others.
    #[error(
        "auth token file {path} is accessible to group or others (mode {mode:o}); \
         make it private: chmod 600 {path}"
    )]
    NotPrivate {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Nothing but whitespace.
    #[error("the auth token is empty")]
    Empty,
    /// Longer than [`MAX_TOKEN`] bytes (its length given).
    #[error("the auth token has {0} bytes (at most {MAX_TOKEN})")]
    TooLong(usize),
    /// Shorter than [`MIN_TOKEN`] bytes (its length given).
    #[error(
        "the token has {0} bytes; a server's tokens need at least {MIN_TOKEN} \
         (make one with: openssl rand -hex 32)"
    )]
    TooShort(usize),
}

impl AuthToken {
    /// A token of `bytes`, without the whitespace around them.
    pub fn new(bytes: impl AsRef<[u8]>) -> Result<AuthToken, TokenError> {
        let t = bytes.as_ref().trim_ascii();
        if t.is_empty() {
            return Err(TokenError::Empty);
        }
        if t.len() > MAX_TOKEN {
            return Err(TokenError::TooLong(t.len()));
        }
        let mut padded = Box::new([0u8; MAX_TOKEN]);
        padded[..t.len()].copy_from_slice(t);
        Ok(AuthToken {
            padded,
            len: t.len(),
        })
    }

    /// The token in the file at `path`, which must be private to its owner.
    pub fn from_file(path: &Path) -> Result<AuthToken, TokenError> {
        use std::os::unix::fs::PermissionsExt;
        let io = |source| TokenError::Io {
            path: path.to_owned(),
            source,
        };
        let mut f = std::fs::File::open(path).map_err(io)?;
        // The mode of the file opened, not of whatever the path names later.
        let mode = f.metadata().map_err(io)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(TokenError::NotPrivate {
                path: path.to_owned(),
                mode,
            });
        }
        let mut b = Vec::new();
        // One byte past the longest token with room for whitespace is enough
        // to know it is too long.
        f.by_ref()
            .take(4 * MAX_TOKEN as u64)
            .read_to_end(&mut b)
            .map_err(io)?;
        let t = AuthToken::new(&b);
        b.fill(0);
        t
    }

    /// Whether `presented` is this token, in time that depends only on
    /// `presented`'s length (never on where the two differ, nor on this
    /// token's length).
    pub fn matches(&self, presented: &[u8]) -> bool {
        if presented.len() > MAX_TOKEN {
            return false;
        }
        let mut other = [0u8; MAX_TOKEN];
        other[..presented.len()].copy_from_slice(presented);
        // Both lengths are at most MAX_TOKEN < 256.
        let mut diff = (self.len as u8) ^ (presented.len() as u8);
        for (a, b) in self.padded.iter().zip(other.iter()) {
            diff = std::hint::black_box(diff | (a ^ b));
        }
        other.fill(0);
        std::hint::black_box(&other);
        diff == 0
    }

    /// Whether the token is long enough for a server to require it: at
    /// least [`MIN_TOKEN`] bytes, so it cannot be guessed in the time a
    /// server lives.
    pub fn check_strength(&self) -> Result<(), TokenError> {
        if self.len < MIN_TOKEN {
            return Err(TokenError::TooShort(self.len));
        }
        Ok(())
    }

    /// The token's bytes, to put in a hello. Never print them.
    pub fn expose(&self) -> &[u8] {
        &self.padded[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn matches_only_the_same_bytes() {
        let t = AuthToken::new("correct horse\n").unwrap();
        assert!(t.matches(b"correct horse"));
        for other in [
            &b""[..],
            b"correct hors",
            b"correct horsf",
            b"correct horse ",
            b"Correct horse",
            b"\0correct horse",
            &[b'x'; MAX_TOKEN + 1],
        ] {
            assert!(!t.matches(other), "{other:?}");
        }
        // A presented token padded with zeros is not the token.
        assert!(!t.matches(b"correct horse\0"));
        let longest = AuthToken::new([7u8; MAX_TOKEN]).unwrap();
        assert!(longest.matches(&[7u8; MAX_TOKEN]));
        assert!(!longest.matches(&[7u8; MAX_TOKEN - 1]));
    }

    #[test]
    fn empty_and_long_tokens_are_refused_and_none_is_printed() {
        assert!(matches!(AuthToken::new(" \n"), Err(TokenError::Empty)));
        assert!(matches!(
            AuthToken::new([b'a'; MAX_TOKEN + 1]),
            Err(TokenError::TooLong(252))
        ));
        let t = AuthToken::new("hunter2").unwrap();
        assert!(!format!("{t:?}").contains("hunter2"));
        assert!(matches!(t.check_strength(), Err(TokenError::TooShort(7))));
        assert!(AuthToken::new([b'a'; MIN_TOKEN])
            .unwrap()
            .check_strength()
            .is_ok());
    }

    #[test]
    fn a_token_file_must_be_private() {
        let dir = std::env::temp_dir().join(format!("kvs-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "s3cret-token\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let t = AuthToken::from_file(&path).unwrap();
        assert_eq!(t.expose(), b"s3cret-token");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = AuthToken::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("chmod 600") && e.contains("640"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        let e = AuthToken::from_file(&dir.join("none")).unwrap_err();
        assert!(matches!(e, TokenError::Io { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
