//! What the metrics endpoint reports, and how it gets there without touching
//! the request path: each worker counts its requests in plain counters it
//! owns ([`RequestMetrics`]: no atomics, no lock, no allocation per request),
//! and copies them into its
//! [`Published`](crate::request_metrics::Published) snapshot every
//! housekeeping turn (at least every 50 ms) with a `try_lock`, so it never
//! waits for a scrape. A scrape ([`Exposition`]) reads the snapshots, the
//! workers' gauges ([`WorkerStats`]) and the setup counters, and encodes them
//! with `prometheus-client` in the Prometheus text format.

mod cluster;
mod disk;

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use kvs_proto::proto::{Op, Status};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use crate::request_metrics::{RequestMetrics, OPS};
use crate::serving::setup::SetupStats;
use crate::worker_stats::WorkerStats;

/// The `result` label of a status code.
fn result_name(code: usize) -> &'static str {
    let Some(st) = u8::try_from(code).ok().and_then(Status::from_u8) else {
        return "unknown";
    };
    // Exhaustive: a new status needs a name here.
    match st {
        Status::Ok => "ok",
        Status::NotFound => "not_found",
        Status::Redirect => "redirect",
        Status::TooLarge => "too_large",
        Status::BadRequest => "bad_request",
        Status::ShuttingDown => "shutting_down",
        Status::AllowanceTooSmall => "allowance_too_small",
        Status::OutOfRange => "out_of_range",
        Status::OutOfMemory => "out_of_memory",
        Status::Fenced => "fenced",
        Status::Forbidden => "forbidden",
        Status::TooOld => "too_old",
        Status::DiskFull => "disk_full",
        Status::TryAgain => "try_again",
        Status::Unavailable => "unavailable",
    }
}

/// Upper bounds (seconds) of the service-time histogram's buckets: 100 ns to
/// 1 s in 1-2.5-5 steps (a request is answered in well under a microsecond
/// when nothing goes wrong).
const BUCKETS: [f64; 22] = [
    1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
    5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0,
];

/// Everything a scrape reads.
#[derive(Debug)]
pub(crate) struct Exposition {
    /// The member's place in the cluster and its migration totals.
    pub(crate) cluster: Arc<crate::threads::cluster_view::Shared>,
    /// The slots it holds for their new owners.
    pub(crate) source_slots: Arc<crate::bulk::source_slots::SourceSlots>,
    /// The workers' gauges and published requests.
    pub(crate) workers: Vec<Arc<WorkerStats>>,
    /// Connection setup's counters.
    pub(crate) setup: Arc<Mutex<SetupStats>>,
    /// The configured cap (0: none).
    pub(crate) max_memory: u64,
    /// When the server started.
    pub(crate) started: SystemTime,
}

impl Exposition {
    /// The metrics in the Prometheus text format (version 0.0.4).
    pub(crate) fn encode(self: &Arc<Self>) -> Result<String, std::fmt::Error> {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(self.clone()));
        let mut out = String::with_capacity(16 << 10);
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?;
        Ok(out)
    }
}

/// The content type of [`Exposition::encode`]'s text.
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

type Labels = Vec<(&'static str, String)>;

/// One of a worker's published gauges.
type Field = fn(&WorkerStats) -> &std::sync::atomic::AtomicU64;

/// Per-bucket counts (not cumulative: the encoder sums them) of `h` at
/// [`BUCKETS`], the last one for everything above 1 s.
fn buckets(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    let mut b: Vec<(f64, u64)> = BUCKETS.iter().map(|&le| (le, 0)).collect();
    b.push((f64::INFINITY, 0));
    for v in h.iter_recorded() {
        // A bucket of values that compare equal: filed by its lowest.
        let ns = h.lowest_equivalent(v.value_iterated_to());
        let s = ns as f64 * 1e-9;
        let i = BUCKETS
            .iter()
            .position(|&le| s <= le)
            .unwrap_or(BUCKETS.len());
        b[i].1 += v.count_at_value();
    }
    b
}

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let requests: Vec<RequestMetrics> =
            self.workers.iter().map(|w| w.requests.snapshot()).collect();
        encode_operations(&mut enc, &requests)?;
        encode_durations(&mut enc, &requests)?;
        self.encode_worker_gauges(&mut enc)?;
        self.encode_disk(&mut enc)?;
        self.encode_setups(&mut enc)?;
        self.encode_cluster(&mut enc)?;
        self.encode_figures(&mut enc)?;
        self.encode_migration(&mut enc)?;
        self.encode_process(&mut enc)
    }
}

/// The `worker` label of worker `w`.
fn worker(w: usize) -> Labels {
    vec![("worker", w.to_string())]
}

/// A counter or gauge's current value.
fn load(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(std::sync::atomic::Ordering::Relaxed)
}

/// `kvs_operations`: the workers' answered requests by operation and result.
fn encode_operations(
    enc: &mut DescriptorEncoder,
    requests: &[RequestMetrics],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(
        "kvs_operations",
        "Requests answered, by worker, operation and result (the status of the answer).",
        None,
        MetricType::Counter,
    )?;
    for (w, r) in requests.iter().enumerate() {
        for (op, row) in r.counts.iter().enumerate() {
            for (st, &n) in row.iter().enumerate() {
                // Every op's `ok` is there from the start (rates work
                // from zero); other results once they happen.
                let real_op = u8::try_from(op).ok().and_then(Op::from_u8).is_some();
                if n == 0 && !(real_op && st == Status::Ok as usize) {
                    continue;
                }
                let mut l = worker(w);
                l.push(("op", OPS[op].to_string()));
                l.push(("result", result_name(st).to_string()));
                m.encode_family(&l)?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
    }
    Ok(())
}

/// `kvs_request_duration`: each worker's service-time histogram.
fn encode_durations(
    enc: &mut DescriptorEncoder,
    requests: &[RequestMetrics],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(
        "kvs_request_duration",
        "Time a worker takes to answer one request, from its bytes to the answer's \
             (not the network), to 1 % precision.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for (w, r) in requests.iter().enumerate() {
        m.encode_family(&worker(w))?
            .encode_histogram::<NoLabelSet>(
                r.sum_ns as f64 * 1e-9,
                r.hist.len(),
                &buckets(&r.hist),
                None,
            )?;
    }
    Ok(())
}

impl Exposition {
    /// The workers' gauges (keys, memory, connections, huge rings) and the
    /// memory cap.
    fn encode_worker_gauges(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauges: [(&str, &str, Option<&Unit>, Field); 4] = [
            ("kvs_keys", "Keys a worker holds.", None, |s| &s.keys),
            (
                "kvs_memory_used",
                "Heap a worker's records take, as max_memory counts it (keys twice, value \
                 buffers, malloc chunks, a per-record overhead).",
                Some(&Unit::Bytes),
                |s| &s.memory_used,
            ),
            (
                "kvs_connections",
                "Client connections a worker serves.",
                None,
                |s| &s.clients,
            ),
            (
                "kvs_huge_page_rings",
                "copyrpc rings (a send and a receive ring per client connection) a worker \
                 holds in 2 MiB huge pages (huge_pages; 0 without it, on the software device, \
                 or when the pool ran short).",
                None,
                |s| &s.huge_rings,
            ),
        ];
        for (name, help, unit, field) in gauges {
            let mut m = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
            for (w, s) in self.workers.iter().enumerate() {
                m.encode_family(&worker(w))?.encode_gauge(&load(field(s)))?;
            }
        }

        enc.encode_descriptor(
            "kvs_memory_limit",
            "max_memory: the heap the records may take, split evenly between the workers \
             (0: no cap).",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?
        .encode_gauge(&self.max_memory)?;
        Ok(())
    }

    /// Connection setup's outcomes and the setups pending.
    fn encode_setups(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = match self.setup.lock() {
            Ok(s) => *s,
            Err(p) => *p.into_inner(),
        };
        let r = s.reader;
        let admitted = r
            .ready
            .saturating_sub(s.refused_auth + s.refused_role + s.refused_hello);
        let mut m = enc.encode_descriptor(
            "kvs_setups",
            "Client connection setups by outcome: admitted (handed to a worker), refused_auth \
             (missing or wrong token), refused_role (the client token presented for control \
             operations), refused_hello (not a kvs client, or no such worker), \
             timed_out, evicted (too many pending), malformed, hung_up.",
            None,
            MetricType::Counter,
        )?;
        for (result, n) in [
            ("admitted", admitted),
            ("refused_auth", s.refused_auth),
            ("refused_role", s.refused_role),
            ("refused_hello", s.refused_hello),
            ("timed_out", r.timed_out),
            ("evicted", r.evicted),
            ("malformed", r.malformed),
            ("hung_up", r.hung_up),
        ] {
            let l: Labels = vec![("result", result.to_string())];
            m.encode_family(&l)?
                .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
        }
        enc.encode_descriptor(
            "kvs_setups_pending",
            "Connections whose setup record is still being read.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&s.pending)?;
        let refused: u64 = self
            .workers
            .iter()
            .map(|w| {
                w.refused_member_ops
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum();
        enc.encode_descriptor(
            "kvs_refused_member_ops",
            "Replication messages (a member's) refused on worker connections set up with \
             the client token.",
            None,
            MetricType::Counter,
        )?
        .encode_counter::<NoLabelSet, _, u64>(&refused, None)?;
        self.encode_copied(enc)
    }

    /// The copies of slots to backups this member's workers began, whole
    /// and caught up, and their bytes.
    fn encode_copied(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut c = crate::replication::Copied::default();
        for w in self.workers.iter() {
            let x = *w.copied.lock().unwrap_or_else(|e| e.into_inner());
            c.whole += x.whole;
            c.whole_bytes += x.whole_bytes;
            c.catch_ups += x.catch_ups;
            c.catch_up_bytes += x.catch_up_bytes;
        }
        for (name, help, whole, catch_up) in [
            (
                "kvs_backup_copies",
                "Copies of slots to backups this member began, whole or caught up from its \
                 history of writes.",
                c.whole,
                c.catch_ups,
            ),
            (
                "kvs_backup_copy_bytes",
                "Bytes of keys and values those copies sent.",
                c.whole_bytes,
                c.catch_up_bytes,
            ),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (kind, n) in [("whole", whole), ("catch_up", catch_up)] {
                let l: Labels = vec![("kind", kind.to_string())];
                m.encode_family(&l)?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        Ok(())
    }

    /// The member's place in the cluster: map version, member id, leader,
    /// term, lease.
    fn encode_cluster(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = &self.cluster;
        let ld = |a: &std::sync::atomic::AtomicU32| a.load(std::sync::atomic::Ordering::Relaxed);
        enc.encode_descriptor(
            "kvs_map_version",
            "The version of the shard map this member serves by.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&u64::from(ld(&c.version)))?;
        enc.encode_descriptor(
            "kvs_member",
            "This server's member id in the cluster (0: the member that started it).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&u64::from(c.member.0))?;
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        enc.encode_descriptor(
            "kvs_control_leader",
            "The member this one believes leads the control group, or -1 while none is known.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(i64::from(ld(&c.leader)) - 1))?;
        enc.encode_descriptor(
            "kvs_control_term",
            "The control group's Raft term as this member knows it.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&c.term.load(relaxed))?;
        enc.encode_descriptor(
            "kvs_lease",
            "1 while this member holds its lease from the control group (serves its slots), else 0.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&u64::from(c.leased.load(relaxed)))?;
        Ok(())
    }

    /// The slots held for their new owners and the migrations' and copies'
    /// totals.
    fn encode_migration(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = &self.cluster;
        let (held_slots, _, held_bytes) = self.source_slots.held();
        enc.encode_descriptor(
            "kvs_migration_held_slots",
            "Slots this member gave away and holds, frozen, until their new owner has pulled them.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(held_slots as u64))?;
        enc.encode_descriptor(
            "kvs_migration_held",
            "Bytes of keys and values in those slots.",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?
        .encode_gauge(&(held_bytes as u64))?;
        for (name, help, unit, v) in [
            (
                "kvs_migration_pulled_records",
                "Records this member pulled as a migration's target.",
                None,
                &c.pulled_records,
            ),
            (
                "kvs_migration_pulled",
                "Bytes of keys and values this member pulled as a migration's target.",
                Some(&Unit::Bytes),
                &c.pulled_bytes,
            ),
            (
                "kvs_migration_sent",
                "Bytes of keys and values this member sent as a migration's source.",
                Some(&Unit::Bytes),
                &c.export.sent_bytes,
            ),
            (
                "kvs_copy_sent",
                "Bytes of keys and values this member sent to new backups of its slots.",
                Some(&Unit::Bytes),
                &c.export.copy_sent_bytes,
            ),
            (
                "kvs_bulk_connections",
                "Bulk connections this member accepted as a migration's source or a copy's \
                 primary (a target keeps one across a migration's chunks).",
                None,
                &c.export.connections,
            ),
            (
                "kvs_bulk_pulls",
                "Pulls (migration chunks, backup copies) this member served over its bulk port.",
                None,
                &c.export.pulls,
            ),
        ] {
            enc.encode_descriptor(name, help, unit, MetricType::Counter)?
                .encode_counter::<NoLabelSet, _, u64>(&load(v), None)?;
        }
        Ok(())
    }

    /// The process's start time and the build's version.
    fn encode_process(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let start = self
            .started
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        enc.encode_descriptor(
            "process_start_time",
            "When the server started, in seconds since the Unix epoch.",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?
        .encode_gauge(&start)?;
        let l: Labels = vec![("version", env!("CARGO_PKG_VERSION").to_string())];
        enc.encode_descriptor(
            "kvs_build_info",
            "The kvs-server version (always 1).",
            None,
            MetricType::Gauge,
        )?
        .encode_family(&l)?
        .encode_gauge(&1u64)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_metrics::{Published, RESULTS};

    #[test]
    fn requests_are_counted_and_published() {
        let mut m = RequestMetrics::default();
        m.record(Op::Get as u8, Status::Ok as u8, 150);
        m.record(Op::Get as u8, Status::NotFound as u8, 300);
        m.record(Op::Put as u8, Status::OutOfMemory as u8, 2_000);
        m.record(99, Status::BadRequest as u8, 10);
        m.record(Op::Scan as u8, 200, u64::MAX);
        assert_eq!(m.count("get", Status::Ok), 1);
        assert_eq!(m.count("get", Status::NotFound), 1);
        assert_eq!(m.count("put", Status::OutOfMemory), 1);
        assert_eq!(m.count("unknown", Status::BadRequest), 1);
        assert_eq!(m.counts[Op::Scan as usize][RESULTS], 1);
        let p = Published::default();
        p.publish(&m);
        let s = p.snapshot();
        assert_eq!((s.counts, s.hist.len()), (m.counts, 5));
        // 10 ns and 150 ns below 250 ns; 300 ns below 500; 2 µs below
        // 2.5 µs; the saturated one above 1 s.
        let b = buckets(&s.hist);
        assert_eq!(b.len(), BUCKETS.len() + 1);
        let at = |le: f64| b.iter().find(|x| x.0 == le).unwrap().1;
        assert_eq!(
            (
                at(1e-7),
                at(2.5e-7),
                at(5e-7),
                at(2.5e-6),
                at(f64::INFINITY)
            ),
            (1, 1, 1, 1, 1)
        );
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), 5);
        for st in 0..RESULTS {
            assert_ne!(result_name(st), "unknown");
        }
        assert_eq!(result_name(RESULTS), "unknown");
    }
}
