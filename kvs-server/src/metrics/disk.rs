//! The workers' records on disk (`durability` other than `none`): their
//! logs and snapshots, and what the start recovered.

use kvs_wal::FLUSH_BOUNDS;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::{worker, Exposition};
use crate::persist::LogStatus;

impl Exposition {
    /// The disk gauges, one per worker; none without durability.
    pub(super) fn encode_disk(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let disks: Vec<(usize, LogStatus)> = self
            .workers
            .iter()
            .enumerate()
            .filter_map(|(w, s)| Some((w, s.disk()?)))
            .collect();
        if disks.is_empty() {
            return Ok(());
        }
        type Pick = fn(&LogStatus) -> u64;
        let gauges: [(&str, &str, Option<&Unit>, MetricType, Pick); 6] = [
            (
                "kvs_log",
                "Bytes of a worker's logs on disk: what a restart replays after its snapshot.",
                Some(&Unit::Bytes),
                MetricType::Gauge,
                |d| d.log_bytes,
            ),
            (
                "kvs_snapshot",
                "Size of a worker's last snapshot (0: none yet).",
                Some(&Unit::Bytes),
                MetricType::Gauge,
                |d| d.snapshot_bytes,
            ),
            (
                "kvs_snapshots",
                "Snapshots a worker put in place since the member started.",
                None,
                MetricType::Counter,
                |d| d.snapshots,
            ),
            (
                "kvs_snapshot_in_progress",
                "1 while a worker's snapshot is under way.",
                None,
                MetricType::Gauge,
                |d| u64::from(d.snapshotting.is_some()),
            ),
            (
                "kvs_disk_full",
                "1 while a worker refuses writes because the disk of its log is full \
                 (reads go on).",
                None,
                MetricType::Gauge,
                |d| u64::from(d.disk_full),
            ),
            (
                "kvs_recovered",
                "Bytes of snapshot and logs a worker read at the member's start.",
                Some(&Unit::Bytes),
                MetricType::Gauge,
                |d| d.recovered.bytes,
            ),
        ];
        for (name, help, unit, kind, pick) in gauges {
            let mut m = enc.encode_descriptor(name, help, unit, kind)?;
            for (w, d) in &disks {
                let labels = worker(*w);
                let mut e = m.encode_family(&labels)?;
                match kind {
                    MetricType::Counter => {
                        e.encode_counter::<NoLabelSet, _, u64>(&pick(d), None)?
                    }
                    _ => e.encode_gauge(&pick(d))?,
                }
            }
        }
        encode_times(enc, &disks)
    }
}

/// The flushes' histogram and the recovery's time, one per worker.
fn encode_times(
    enc: &mut DescriptorEncoder,
    disks: &[(usize, LogStatus)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(
        "kvs_log_fsync",
        "How long a worker's log flushes (fdatasync) take: one per turn that wrote under \
         durability = always, one a second under everysec.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for (w, d) in disks {
        let f = &d.fsync;
        let buckets: Vec<(f64, u64)> = FLUSH_BOUNDS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(f.counts)
            .collect();
        m.encode_family(&worker(*w))?
            .encode_histogram::<NoLabelSet>(f.sum_ns as f64 * 1e-9, f.count(), &buckets, None)?;
    }
    let mut m = enc.encode_descriptor(
        "kvs_recovery",
        "How long a worker took to read its snapshot and logs at the member's start.",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?;
    for (w, d) in disks {
        m.encode_family(&worker(*w))?
            .encode_gauge(&d.recovered.took.as_secs_f64())?;
    }
    Ok(())
}
