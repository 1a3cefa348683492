//! What a worker tells its member's control thread, which proposes it to
//! the control group: copies of slots made complete on a backup, ready
//! backups that missed a write, and slots ready to be handed over (or
//! drained).

use std::ops::Range;

use kvs_proto::MemberId;

/// A worker's report to the control thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToControl {
    /// This worker, primary of `slots`, copied them whole to their backup
    /// on `member`, under map version `since` or later.
    BackupReady {
        /// The backup's member.
        member: MemberId,
        /// The slots.
        slots: Vec<u32>,
        /// The map version the copies began under.
        since: u32,
        /// Records and bytes of keys and values copied.
        records: u64,
        /// Bytes of keys and values copied.
        bytes: u64,
    },
    /// Worker `worker` takes no write of the slots of freeze `round` (for
    /// a hand-over or a drain), and every write of them it took is on
    /// every backup.
    Quiet {
        /// The freeze's number ([`crate::threads::to_worker::ToWorker::Freeze`]).
        round: u64,
        /// The worker.
        worker: u16,
    },
    /// The ready backup on `member` of `slots` missed a write (it refused
    /// it, or could not be reached): it must not be promoted until copied
    /// anew.
    BackupStale {
        /// The backup's member.
        member: MemberId,
        /// The slots.
        slots: Vec<u32>,
    },
}

/// `slots` as sorted ranges.
pub(crate) fn ranges(slots: &[u32]) -> Vec<Range<u32>> {
    let mut s = slots.to_vec();
    s.sort_unstable();
    s.dedup();
    let mut out: Vec<Range<u32>> = Vec::new();
    for x in s {
        match out.last_mut() {
            Some(r) if r.end == x => r.end = x + 1,
            _ => out.push(x..x + 1),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_become_ranges() {
        assert_eq!(ranges(&[5, 1, 2, 3, 9, 2]), vec![1..4, 5..6, 9..10]);
        assert!(ranges(&[]).is_empty());
    }
}
