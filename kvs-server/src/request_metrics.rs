//! A worker's request counters: plain counters its thread owns
//! ([`RequestMetrics`]: no atomics, no lock, no allocation per request),
//! copied into its [`Published`] snapshot every housekeeping turn (at least
//! every 50 ms) with a `try_lock`, so it never waits for a scrape
//! ([`crate::metrics`] reads the snapshots).

use std::sync::Mutex;

use hdrhistogram::Histogram;
use kvs_proto::proto::Op;

/// Op labels, indexed by the request's op code (0, and 8, a retired code:
/// not a known op; requests with them count under 0).
pub(crate) const OPS: [&str; 12] = [
    "unknown",
    "get",
    "put",
    "delete",
    "scan",
    "update_range",
    "map",
    "control",
    "unknown",
    "pull",
    "raft",
    "replicate",
];

/// Status codes are 0..RESULTS; column RESULTS counts any other.
pub(crate) const RESULTS: usize = 15;

/// Highest service time the histogram tells apart (60 s); longer ones count
/// as 60 s.
const HIST_MAX_NS: u64 = 60_000_000_000;

fn new_histogram() -> Histogram<u64> {
    // Two significant digits: 1 % resolution in about 32 KiB.
    Histogram::new_with_bounds(1, HIST_MAX_NS, 2).expect("constant bounds are valid")
}

/// One worker's request counters, owned by its thread.
#[derive(Debug, Clone)]
pub(crate) struct RequestMetrics {
    /// Requests by op code and status code.
    pub(crate) counts: [[u64; RESULTS + 1]; OPS.len()],
    /// Service time (ns) of each request: from the request's bytes to its
    /// answer's, in the worker (not the network).
    pub(crate) hist: Histogram<u64>,
    /// Their sum, exact.
    pub(crate) sum_ns: u64,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        RequestMetrics {
            counts: [[0; RESULTS + 1]; OPS.len()],
            hist: new_histogram(),
            sum_ns: 0,
        }
    }
}

impl RequestMetrics {
    /// Counts one request: its op code (untrusted: anything unknown counts
    /// as `unknown`), its answer's status code, and how long it took.
    #[inline]
    pub(crate) fn record(&mut self, op: u8, status: u8, ns: u64) {
        let op = match Op::from_u8(op) {
            Some(o) => o as usize,
            None => 0,
        };
        let st = usize::from(status).min(RESULTS);
        self.counts[op][st] += 1;
        self.hist.saturating_record(ns.max(1));
        self.sum_ns = self.sum_ns.wrapping_add(ns);
    }

    /// Requests counted for `op` (a label of [`OPS`]) and status.
    #[cfg(test)]
    pub(crate) fn count(&self, op: &str, st: kvs_proto::proto::Status) -> u64 {
        let o = OPS.iter().position(|n| *n == op).unwrap();
        self.counts[o][st as usize]
    }
}

/// A worker's requests as last published.
#[derive(Debug, Default)]
pub(crate) struct Published(Mutex<RequestMetrics>);

impl Published {
    /// Copies the worker's counters in, unless a scrape is reading them
    /// (then the next turn does): a worker never waits for the metrics
    /// thread. No allocation: the histograms have the same bounds.
    pub(crate) fn publish(&self, m: &RequestMetrics) {
        if let Ok(mut p) = self.0.try_lock() {
            p.counts = m.counts;
            p.sum_ns = m.sum_ns;
            p.hist.reset();
            // Same bounds, so this cannot fail.
            let _ = p.hist.add(&m.hist);
        }
    }

    /// The counters as last published.
    pub(crate) fn snapshot(&self) -> RequestMetrics {
        match self.0.lock() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_and_status_code_has_a_place() {
        let mut m = RequestMetrics::default();
        for op in 0..=u8::MAX {
            for st in [0, 9, 10, 11, u8::MAX] {
                m.record(op, st, 1);
            }
        }
        for op in 0..=u8::MAX {
            if let Some(o) = Op::from_u8(op) {
                assert_ne!(OPS[o as usize], "unknown");
            }
        }
    }
}
