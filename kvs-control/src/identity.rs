//! Who a member is: its cluster's id (random, made when the cluster is
//! bootstrapped) and its own member id, kept in `identity` in the data dir
//! so that a restart resumes the same membership and never starts a second
//! cluster.

use std::path::{Path, PathBuf};

use kvs_proto::{ClusterId, MemberId};
use serde::{Deserialize, Serialize};

use crate::error::StorageError;

/// A member's identity in its data dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The cluster.
    pub cluster_id: ClusterId,
    /// This member's id in it.
    pub member: MemberId,
}

impl Identity {
    fn path(data_dir: &Path) -> PathBuf {
        data_dir.join("identity")
    }

    /// The identity kept in `data_dir`, if there is one.
    pub fn load(data_dir: &Path) -> Result<Option<Identity>, StorageError> {
        let path = Identity::path(data_dir);
        kvs_wal::remove_partial(&path)?;
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| StorageError::Corrupt {
                    path: path.clone(),
                    offset: 0,
                    why: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StorageError::Io { path, source }),
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
        std::fs::create_dir_all(data_dir).map_err(|source| StorageError::Io {
            path: data_dir.to_path_buf(),
            source,
        })?;
        let b = serde_json::to_vec_pretty(self).expect("an identity encodes");
        kvs_wal::write_atomic(&Identity::path(data_dir), &b)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::TempDir;

    #[test]
    fn an_identity_survives_and_cannot_be_replaced_by_another() {
        let d = TempDir::new("kvs-control", "identity");
        let dir = d.path().join("data");
        assert_eq!(Identity::load(&dir).unwrap(), None);
        let me = Identity {
            cluster_id: ClusterId::random().unwrap(),
            member: MemberId(2),
        };
        me.store(&dir).unwrap();
        me.store(&dir).unwrap();
        assert_eq!(Identity::load(&dir).unwrap(), Some(me));
        let other = Identity {
            member: MemberId(3),
            ..me
        };
        let e = other.store(&dir).unwrap_err().to_string();
        assert!(e.contains("holds member 2"), "{e}");
        std::fs::write(dir.join("identity"), b"{").unwrap();
        assert!(matches!(
            Identity::load(&dir),
            Err(StorageError::Corrupt { .. })
        ));
    }
}
