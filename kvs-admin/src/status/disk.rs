//! The disk side of `status`: a member's workers' logs and snapshots
//! (`durability` other than `none`), summed into one line.

use kvs_proto::control::DiskStatus;

use super::WorkerView;
use crate::render;

/// A member's workers' records on disk, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskSum {
    /// Workers that report their records on disk.
    pub workers: usize,
    /// Bytes of their logs.
    pub log_bytes: u64,
    /// Bytes of their last snapshots.
    pub snapshot_bytes: u64,
    /// Snapshots they put in place since the member started.
    pub snapshots: u64,
    /// Workers with a snapshot under way.
    pub snapshotting: usize,
    /// Of those snapshots: slots copied, and of how many.
    pub copied: (u64, u64),
    /// What the start read, in bytes.
    pub recovered_bytes: u64,
    /// How long the start took to read it, in milliseconds: the slowest
    /// worker's time (they read their files side by side).
    pub recovery_ms: u64,
    /// Workers whose log's disk is full (they refuse writes).
    pub full: usize,
}

impl DiskSum {
    /// The sum of `disks`; `None` without any (a member with
    /// `durability = "none"`, or one that did not answer).
    pub fn of<'a>(disks: impl IntoIterator<Item = &'a DiskStatus>) -> Option<DiskSum> {
        let mut sum: Option<DiskSum> = None;
        for d in disks {
            let s = sum.get_or_insert_with(DiskSum::default);
            s.workers += 1;
            s.log_bytes += d.log_bytes;
            s.snapshot_bytes += d.snapshot_bytes;
            s.snapshots += d.snapshots;
            if let Some((done, of)) = d.snapshotting {
                s.snapshotting += 1;
                s.copied.0 += u64::from(done);
                s.copied.1 += u64::from(of);
            }
            s.recovered_bytes += d.recovered_bytes;
            s.recovery_ms = s.recovery_ms.max(d.recovery_ms);
            s.full += usize::from(d.disk_full);
        }
        sum
    }

    /// The sums for people: `logs 4.00 KiB, snapshots 12.0 MiB (2 taken
    /// since the start), …`.
    pub fn text(&self) -> String {
        let mut s = String::new();
        if self.full > 0 {
            s.push_str(&format!(
                "DISK FULL ({} of {} workers refuse writes), ",
                self.full, self.workers
            ));
        }
        s.push_str(&format!("logs {}, ", render::bytes(self.log_bytes)));
        if self.snapshot_bytes == 0 && self.snapshots == 0 {
            s.push_str("no snapshot yet");
        } else {
            s.push_str(&format!(
                "snapshots {} ({} taken since the start)",
                render::bytes(self.snapshot_bytes),
                self.snapshots
            ));
        }
        if self.snapshotting > 0 {
            let (done, of) = self.copied;
            s.push_str(&format!(", snapshot under way: {done}/{of} slots copied"));
            if self.workers > 1 {
                s.push_str(&format!(
                    " ({} of {} workers)",
                    self.snapshotting, self.workers
                ));
            }
        }
        if self.recovered_bytes == 0 {
            s.push_str(", nothing to read at the start");
        } else {
            s.push_str(&format!(
                ", start read {} in {}",
                render::bytes(self.recovered_bytes),
                render::duration(self.recovery_ms as f64 / 1000.0)
            ));
        }
        s
    }
}

/// A member's line of `status`: `  disk: …` with its workers' figures
/// summed; empty when none reports any.
pub fn line(workers: &[WorkerView]) -> String {
    match DiskSum::of(workers.iter().filter_map(|w| w.disk.as_ref())) {
        Some(d) => format!("  disk: {}\n", d.text()),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake;
    use crate::status::gather;
    use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus, WorkerStatus};
    use kvs_proto::MemberId;

    fn disk(log: u64, snap: u64, snapshots: u64, copying: Option<(u32, u32)>) -> DiskStatus {
        DiskStatus {
            log_bytes: log,
            snapshot_bytes: snap,
            snapshots,
            snapshotting: copying,
            recovered_bytes: 3 << 20,
            recovery_ms: 1200,
            disk_full: false,
            answered: 0,
        }
    }

    /// `reply` (a status) with workers whose disks are `disks`.
    fn with_disks(reply: ControlReply, disks: &[Option<DiskStatus>]) -> ControlReply {
        match reply {
            ControlReply::Status(s) => ControlReply::Status(MemberStatus {
                workers: disks
                    .iter()
                    .map(|&disk| WorkerStatus {
                        slots: 32,
                        disk,
                        ..WorkerStatus::default()
                    })
                    .collect(),
                ..s
            }),
            other => other,
        }
    }

    #[test]
    fn the_sums_read_as_one_line() {
        let d = DiskSum::of(&[
            disk(2048, 10 << 20, 2, None),
            disk(2048, 2 << 20, 1, Some((512, 1024))),
        ])
        .unwrap();
        assert_eq!(
            (
                d.workers,
                d.log_bytes,
                d.snapshots,
                d.snapshotting,
                d.copied
            ),
            (2, 4096, 3, 1, (512, 1024))
        );
        assert_eq!(d.recovered_bytes, 6 << 20);
        assert_eq!(d.recovery_ms, 1200, "the slowest worker's, not the sum");
        assert_eq!(
            d.text(),
            "logs 4.00 KiB, snapshots 12.0 MiB (3 taken since the start), snapshot under way: \
             512/1024 slots copied (1 of 2 workers), start read 6.00 MiB in 1.2s"
        );
        let one = DiskSum::of(&[disk(100, 0, 0, Some((0, 64)))]).unwrap();
        assert_eq!(
            one.text(),
            "logs 100 B, no snapshot yet, snapshot under way: 0/64 slots copied, start read \
             3.00 MiB in 1.2s"
        );
        let fresh = DiskStatus {
            recovered_bytes: 0,
            recovery_ms: 0,
            ..disk(0, 0, 0, None)
        };
        assert_eq!(
            DiskSum::of(&[fresh]).unwrap().text(),
            "logs 0 B, no snapshot yet, nothing to read at the start"
        );
        let full = DiskStatus {
            disk_full: true,
            ..fresh
        };
        assert!(DiskSum::of(&[full, fresh])
            .unwrap()
            .text()
            .starts_with("DISK FULL (1 of 2 workers refuse writes), logs 0 B"));
        assert_eq!(DiskSum::of(&[]), None);
    }

    #[test]
    fn status_shows_disks_of_members_that_keep_records_on_disk_only() {
        // Member 0 (two workers) keeps its records on disk, one of them
        // snapshotting; member 1 does not (durability none); member 2 is
        // silent.
        let mut a = fake::admin("10.0.0.1:7000", |at, req| {
            Ok(match (req, at.to_string().as_str()) {
                (ControlRequest::Map, _) => fake::map_reply(&fake::map()),
                (_, "10.0.0.1:7000") => with_disks(
                    fake::status(MemberId(0), None),
                    &[
                        Some(disk(1024, 4 << 20, 1, None)),
                        Some(disk(3072, 4 << 20, 2, Some((10, 32)))),
                    ],
                ),
                (_, "10.0.0.1:7001") => fake::status(MemberId(1), None),
                _ => {
                    return Err(kvs_client::ControlError::Timeout {
                        addr: at,
                        after: std::time::Duration::from_secs(1),
                    })
                }
            })
        });
        let s = gather(&mut a).unwrap();
        let text = s.text();
        assert!(
            text.contains(
                "\n  disk: logs 4.00 KiB, snapshots 8.00 MiB (3 taken since the start), \
                 snapshot under way: 10/32 slots copied (1 of 2 workers), start read 6.00 MiB \
                 in 1.2s\n"
            ),
            "{text}"
        );
        assert_eq!(text.matches("disk:").count(), 1, "{text}");
        // It belongs to member 0's section.
        let zero = text.find("\nmember 0 (10.0.0.1:7000)").unwrap();
        let one = text.find("\nmember 1 (10.0.0.1:7001)").unwrap();
        let line = text.find("  disk: ").unwrap();
        assert!(zero < line && line < one, "{text}");

        let j: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(
            j["members"][0]["workers"][1]["disk"],
            serde_json::json!({
                "log_bytes": 3072,
                "snapshot_bytes": 4 << 20,
                "snapshots": 2,
                "answered": 0,
                "snapshotting": [10, 32],
                "recovered_bytes": 3 << 20,
                "recovery_ms": 1200,
                "disk_full": false
            })
        );
        assert_eq!(
            j["members"][0]["workers"][0]["disk"]["snapshotting"],
            serde_json::Value::Null
        );
        // Nothing new for the member without records on disk, nor for the
        // silent one.
        for m in [1, 2] {
            let w = j["members"][m]["workers"][0].as_object().unwrap();
            assert!(!w.contains_key("disk"), "{w:?}");
        }
    }
}
