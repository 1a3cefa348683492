//! Where a worker's records lie in the data dir, by generation:
//!
//! ```text
//! data/worker-W.snap      the last whole snapshot (its head names its generation S)
//! data/worker-W.G.log     the changes from the start of snapshot G on (G ≥ S)
//! ```
//!
//! Snapshot G begins by starting log G; the logs before it are removed
//! once snapshot G is in place. A log older than the snapshot on disk is
//! one a crash kept from being removed.

use std::path::{Path, PathBuf};

use kvs_wal::WalError;

/// The directory of the records' files in data dir `data_dir`.
pub(crate) fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("data")
}

/// Worker `worker`'s snapshot.
pub(crate) fn snapshot_path(dir: &Path, worker: u16) -> PathBuf {
    dir.join(format!("worker-{worker}.snap"))
}

/// Worker `worker`'s log of generation `gen`.
pub(crate) fn log_path(dir: &Path, worker: u16, gen: u64) -> PathBuf {
    dir.join(format!("worker-{worker}.{gen}.log"))
}

/// Worker `worker`'s logs in `dir`, by generation, oldest first.
pub(crate) fn logs(dir: &Path, worker: u16) -> Result<Vec<(u64, PathBuf)>, WalError> {
    let io = |source| WalError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let prefix = format!("worker-{worker}.");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(gen) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|g| g.parse::<u64>().ok())
        else {
            continue;
        };
        found.push((gen, entry.path()));
    }
    found.sort();
    Ok(found)
}

/// A log from before snapshots (`worker-W.log`, with no generation) is
/// generation 0's: renamed so, durably, when there is no generation 0.
pub(crate) fn adopt_unnumbered(dir: &Path, worker: u16) -> Result<(), WalError> {
    let old = dir.join(format!("worker-{worker}.log"));
    let new = log_path(dir, worker, 0);
    if !old.exists() || new.exists() {
        return Ok(());
    }
    std::fs::rename(&old, &new).map_err(|source| WalError::Io {
        path: old.clone(),
        source,
    })?;
    tracing::info!(
        "worker {worker}: {} is now {} (a log from before snapshots)",
        old.display(),
        new.display()
    );
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| WalError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// Removes `path` (a log a snapshot made obsolete); its size.
pub(crate) fn remove(path: &Path) -> Result<u64, WalError> {
    let io = |source| WalError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    std::fs::remove_file(path).map_err(io)?;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_listed_by_generation_and_others_ignored() {
        let d = test_support::TempDir::new("kvs-server", "persist-files");
        for name in [
            "worker-0.10.log",
            "worker-0.2.log",
            "worker-0.snap",
            "worker-1.3.log",
            "worker-0.x.log",
            "worker-0.2.log.partial",
        ] {
            std::fs::write(d.path().join(name), b"").unwrap();
        }
        let gens: Vec<u64> = logs(d.path(), 0)
            .unwrap()
            .into_iter()
            .map(|l| l.0)
            .collect();
        assert_eq!(gens, [2, 10]);
        assert_eq!(log_path(d.path(), 0, 2), d.path().join("worker-0.2.log"));
    }
}
