//! Java `CounterGenerator` and `AcknowledgedCounterGenerator`: counters
//! shared by all driver threads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::NumberGenerator;
use crate::rng::Rng;

/// A thread-safe sequential counter (Java `CounterGenerator`): hands out
/// `start, start+1, …` to whichever thread asks. Share it with an `Arc`.
///
/// YCSB's load phase draws its insert key numbers from one such counter so
/// that the threads together insert every record exactly once.
#[derive(Debug)]
pub struct Counter {
    next: AtomicU64,
}

impl Counter {
    /// A counter whose first value is `start`.
    pub fn new(start: u64) -> Self {
        Counter {
            next: AtomicU64::new(start),
        }
    }

    /// Takes the next value.
    #[inline]
    pub fn fetch_next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The most recently handed-out value (Java `lastValue`: next − 1, which
    /// wraps to `u64::MAX` before the first value of a counter starting at 0,
    /// where Java returns −1).
    pub fn last(&self) -> u64 {
        self.next.load(Ordering::Relaxed).wrapping_sub(1)
    }
}

impl NumberGenerator for Counter {
    #[inline]
    fn next_value(&mut self, _rng: &mut Rng) -> u64 {
        self.fetch_next()
    }

    fn last_value(&self) -> u64 {
        self.last()
    }
}

/// Size of the window of outstanding (handed out, not yet acknowledged)
/// values an [`AcknowledgedCounter`] can track, as in Java: 2^20.
pub const ACK_WINDOW_SIZE: u64 = 1 << 20;

const WINDOW_WORDS: usize = (ACK_WINDOW_SIZE / 64) as usize;

/// Java `AcknowledgedCounterGenerator`: a shared counter for run-phase
/// inserts whose [`last_value`](AcknowledgedCounter::last_value) only
/// advances over values that have been acknowledged.
///
/// Threads take new key numbers with [`fetch_next`](Self::fetch_next), insert
/// the record, then call [`acknowledge`](Self::acknowledge). `last_value` is
/// the highest value `v` such that every value up to `v` (from the start) is
/// acknowledged, so readers never pick a key whose insert is still in flight.
///
/// Acknowledgements may arrive in any order. Out-of-order ones are kept in a
/// ring bitmap of [`ACK_WINDOW_SIZE`] slots under a mutex (Java uses a
/// boolean ring of the same size under a lock); taking numbers and reading
/// `last_value` are lock-free.
#[derive(Debug)]
pub struct AcknowledgedCounter {
    next: AtomicU64,
    /// Every value below this is acknowledged (Java's `limit` + 1).
    frontier: AtomicU64,
    /// Acknowledged values at or above the frontier, bit `v % window`.
    window: Mutex<Box<[u64]>>,
}

impl AcknowledgedCounter {
    /// A counter whose first value is `start`; `last_value` starts at
    /// `start − 1` (everything below `start` counts as acknowledged).
    pub fn new(start: u64) -> Self {
        AcknowledgedCounter {
            next: AtomicU64::new(start),
            frontier: AtomicU64::new(start),
            window: Mutex::new(vec![0u64; WINDOW_WORDS].into_boxed_slice()),
        }
    }

    /// Takes the next value to insert; acknowledge it when the insert is done.
    #[inline]
    pub fn fetch_next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Every value below the returned one has been acknowledged
    /// (`last_value() + 1`, without the wrap-around at 0).
    #[inline]
    pub fn acknowledged_below(&self) -> u64 {
        self.frontier.load(Ordering::Acquire)
    }

    /// The highest value such that it and every value below it (down to the
    /// start) are acknowledged. Before any acknowledgement this is
    /// `start − 1` (`u64::MAX` when `start` is 0, where Java returns −1).
    #[inline]
    pub fn last_value(&self) -> u64 {
        self.acknowledged_below().wrapping_sub(1)
    }

    /// Marks `value` (obtained from [`fetch_next`](Self::fetch_next)) as
    /// inserted. Values already covered by `last_value` are ignored, so a
    /// duplicate acknowledgement is harmless.
    ///
    /// # Panics
    /// If `value` is [`ACK_WINDOW_SIZE`] or more above the oldest
    /// unacknowledged value: more than 2^20 inserts outstanding at once, which
    /// Java reports as "Too many unacknowledged insertion keys".
    pub fn acknowledge(&self, value: u64) {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        let mut frontier = self.frontier.load(Ordering::Relaxed);
        if value < frontier {
            return;
        }
        assert!(
            value - frontier < ACK_WINDOW_SIZE,
            "too many unacknowledged insertion keys: {value} acknowledged while {frontier} \
             is still pending (window {ACK_WINDOW_SIZE})"
        );
        if value != frontier {
            let slot = (value % ACK_WINDOW_SIZE) as usize;
            window[slot / 64] |= 1u64 << (slot % 64);
            return;
        }
        // The oldest pending value is done: slide over the contiguous run of
        // acknowledged values that follows it.
        frontier += 1;
        loop {
            let slot = (frontier % ACK_WINDOW_SIZE) as usize;
            let bit = 1u64 << (slot % 64);
            let word = &mut window[slot / 64];
            if *word & bit == 0 {
                break;
            }
            *word &= !bit;
            frontier += 1;
        }
        self.frontier.store(frontier, Ordering::Release);
    }
}

impl NumberGenerator for AcknowledgedCounter {
    #[inline]
    fn next_value(&mut self, _rng: &mut Rng) -> u64 {
        self.fetch_next()
    }

    fn last_value(&self) -> u64 {
        AcknowledgedCounter::last_value(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counter_counts() {
        let c = Counter::new(5);
        assert_eq!(c.last(), 4);
        assert_eq!(c.fetch_next(), 5);
        assert_eq!(c.fetch_next(), 6);
        assert_eq!(c.last(), 6);
        let mut g = Counter::new(0);
        let mut rng = Rng::new(0);
        assert_eq!(g.last_value(), u64::MAX);
        assert_eq!(g.next_value(&mut rng), 0);
        assert_eq!(g.last_value(), 0);
    }

    #[test]
    fn counter_is_shared_between_threads() {
        let c = Arc::new(Counter::new(100));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || (0..1000).map(|_| c.fetch_next()).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (100..4100).collect::<Vec<_>>());
    }

    #[test]
    fn out_of_order_acknowledgements() {
        let c = AcknowledgedCounter::new(10);
        assert_eq!(c.last_value(), 9);
        let taken: Vec<u64> = (0..10).map(|_| c.fetch_next()).collect();
        assert_eq!(taken, (10..20).collect::<Vec<_>>());
        c.acknowledge(12);
        c.acknowledge(11);
        assert_eq!(c.last_value(), 9, "10 is still pending");
        c.acknowledge(10);
        assert_eq!(c.last_value(), 12);
        c.acknowledge(14);
        assert_eq!(c.last_value(), 12);
        c.acknowledge(13);
        assert_eq!(c.last_value(), 14);
        c.acknowledge(13); // duplicate: ignored
        assert_eq!(c.last_value(), 14);
        for v in [19, 17, 18, 16] {
            c.acknowledge(v);
        }
        assert_eq!(c.last_value(), 14);
        c.acknowledge(15);
        assert_eq!(c.last_value(), 19);
        assert_eq!(c.acknowledged_below(), 20);
        assert_eq!(NumberGenerator::last_value(&c), 19);
    }

    #[test]
    fn acknowledgements_wrap_around_the_window() {
        let c = AcknowledgedCounter::new(ACK_WINDOW_SIZE - 3);
        let vals: Vec<u64> = (0..8).map(|_| c.fetch_next()).collect();
        for &v in vals.iter().rev() {
            c.acknowledge(v);
        }
        assert_eq!(c.last_value(), ACK_WINDOW_SIZE + 4);
    }

    #[test]
    #[should_panic(expected = "too many unacknowledged")]
    fn too_many_outstanding_panics() {
        let c = AcknowledgedCounter::new(0);
        c.acknowledge(ACK_WINDOW_SIZE);
    }

    #[test]
    fn concurrent_acknowledgements() {
        let c = Arc::new(AcknowledgedCounter::new(1000));
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..5000u64 {
                        held.push(c.fetch_next());
                        // Acknowledge in bursts, newest first.
                        if (i + t) % 7 == 0 {
                            while let Some(v) = held.pop() {
                                c.acknowledge(v);
                            }
                        }
                        assert!(c.last_value() < c.next.load(Ordering::Relaxed));
                    }
                    while let Some(v) = held.pop() {
                        c.acknowledge(v);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(c.last_value(), 1000 + 4 * 5000 - 1);
    }
}
