//! How long a log's flushes take: a histogram of fdatasync times, kept in
//! atomics so that the writer and its sync handles record into it without
//! a lock, and read as a Prometheus histogram is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The histogram's upper bounds, in seconds (the last bucket, past them,
/// is +Inf): from a fast NVMe flush to a disk that stalls.
pub const FLUSH_BOUNDS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Flushes counted by how long they took: `counts[i]` took at most
/// `FLUSH_BOUNDS[i]` seconds and more than the bound before it; the last
/// count took longer than every bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushTimes {
    /// Per bucket (not cumulative).
    pub counts: [u64; FLUSH_BOUNDS.len() + 1],
    /// The flushes' times summed, in nanoseconds.
    pub sum_ns: u64,
}

impl FlushTimes {
    /// How many flushes.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `other`'s flushes added to these.
    pub fn add(&mut self, other: &FlushTimes) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.sum_ns += other.sum_ns;
    }
}

/// The shared, lock-free form of [`FlushTimes`].
#[derive(Debug, Default)]
pub(crate) struct FlushRecorder {
    counts: [AtomicU64; FLUSH_BOUNDS.len() + 1],
    sum_ns: AtomicU64,
}

impl FlushRecorder {
    /// One flush that took `d`.
    pub fn record(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = FLUSH_BOUNDS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(FLUSH_BOUNDS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// What was recorded so far.
    pub fn read(&self) -> FlushTimes {
        let mut t = FlushTimes {
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            ..FlushTimes::default()
        };
        for (c, a) in t.counts.iter_mut().zip(&self.counts) {
            *c = a.load(Ordering::Relaxed);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_fall_in_the_bucket_of_their_bound() {
        let r = FlushRecorder::default();
        r.record(Duration::from_micros(50));
        r.record(Duration::from_micros(100));
        r.record(Duration::from_micros(400));
        r.record(Duration::from_secs(30));
        let t = r.read();
        assert_eq!(t.count(), 4);
        assert_eq!((t.counts[0], t.counts[2], t.counts[16]), (2, 1, 1));
        assert_eq!(t.sum_ns, 30_000_550_000);
        let mut sum = t;
        sum.add(&t);
        assert_eq!((sum.count(), sum.sum_ns), (8, 2 * t.sum_ns));
    }
}
