//! Who a member is: its cluster's id (random, made when the cluster is
//! bootstrapped) and its own member id, kept in `identity` in the data dir
//! so that a restart resumes the same membership and never starts a second
//! cluster.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::StorageError;

/// A cluster's id: 128 random bits, shown as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterId([u8; 16]);

impl ClusterId {
    /// A new random id (from the kernel's random source).
    pub fn random() -> std::io::Result<ClusterId> {
        let mut b = [0u8; 16];
        let mut f = std::fs::File::open("/dev/urandom")?;
        std::io::Read::read_exact(&mut f, &mut b)?;
        Ok(ClusterId(b))
    }

    /// The id's bytes.
    pub fn bytes(&self) -> [u8; 16] {
        self.0
    }

    /// The id of these bytes.
    pub fn from_bytes(b: [u8; 16]) -> ClusterId {
        ClusterId(b)
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterId({self})")
    }
}

/// Text that is not 32 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a cluster id is 32 hex digits, not {0:?}")]
pub struct BadClusterId(String);

impl FromStr for ClusterId {
    type Err = BadClusterId;

    fn from_str(s: &str) -> Result<ClusterId, BadClusterId> {
        let bad = || BadClusterId(s.chars().take(40).collect());
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut b = [0u8; 16];
        for (i, o) in b.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(ClusterId(b))
    }
}

impl Serialize for ClusterId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ClusterId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ClusterId, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A member's identity in its data dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The cluster.
    pub cluster_id: ClusterId,
    /// This member's id in it.
    pub member: u16,
}

impl Identity {
    fn path(data_dir: &Path) -> PathBuf {
        data_dir.join("identity")
    }

    /// The identity kept in `data_dir`, if there is one.
    pub fn load(data_dir: &Path) -> Result<Option<Identity>, StorageError> {
        let path = Identity::path(data_dir);
        let io = |source| StorageError::Io {
            path: path.clone(),
            source,
        };
        crate::files::remove_partial(&path).map_err(io)?;
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| StorageError::Corrupt {
                    path: path.clone(),
                    offset: 0,
                    why: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(e)),
        }
    }

    /// Keeps this identity in `data_dir` (created if missing), durably.
    /// Refuses to replace a different one: a data dir belongs to one member
    /// of one cluster for good.
    pub fn store(&self, data_dir: &Path) -> Result<(), StorageError> {
        if let Some(old) = Identity::load(data_dir)? {
            if old == *self {
                return Ok(());
            }
            return Err(StorageError::Identity(format!(
                "{} holds member {} of cluster {}; it cannot become member {} of cluster {}",
                data_dir.display(),
                old.member,
                old.cluster_id,
                self.member,
                self.cluster_id
            )));
        }
        let io = |source| StorageError::Io {
            path: data_dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(data_dir).map_err(io)?;
        let b = serde_json::to_vec_pretty(self).expect("an identity encodes");
        crate::files::write_atomic(&Identity::path(data_dir), &b).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::TempDir;

    #[test]
    fn cluster_ids_are_random_and_read_back_from_text() {
        let a = ClusterId::random().unwrap();
        let b = ClusterId::random().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.to_string().len(), 32);
        assert_eq!(a.to_string().parse::<ClusterId>().unwrap(), a);
        assert!("abc".parse::<ClusterId>().is_err());
        assert!("zz".repeat(16).parse::<ClusterId>().is_err());
        assert!("é".repeat(16).parse::<ClusterId>().is_err());
    }

    #[test]
    fn an_identity_survives_and_cannot_be_replaced_by_another() {
        let d = TempDir::new("kvs-control", "identity");
        let dir = d.path().join("data");
        assert_eq!(Identity::load(&dir).unwrap(), None);
        let me = Identity {
            cluster_id: ClusterId::random().unwrap(),
            member: 2,
        };
        me.store(&dir).unwrap();
        me.store(&dir).unwrap();
        assert_eq!(Identity::load(&dir).unwrap(), Some(me));
        let other = Identity { member: 3, ..me };
        let e = other.store(&dir).unwrap_err().to_string();
        assert!(e.contains("holds member 2"), "{e}");
        std::fs::write(dir.join("identity"), b"{").unwrap();
        assert!(matches!(
            Identity::load(&dir),
            Err(StorageError::Corrupt { .. })
        ));
    }
}
