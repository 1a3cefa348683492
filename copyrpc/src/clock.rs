//! A clock for timing RPCs: the CPU's time-stamp counter where it ticks at a
//! constant rate (as UCX's perftest reads time), calibrated once (5 ms) against
//! the monotonic clock; `Instant` elsewhere. A vDSO clock read costs about 40 ns
//! and some 90 instructions, a TSC read about 10 ns and two, and a timed
//! round trip takes two reads.

use std::time::{Duration, Instant};

/// Timestamps ([`Clock::ticks`]) and the time between two of them.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    /// (TSC at `origin`, ns per tick in 32.32 fixed point) when the TSC is
    /// used: a tick count becomes ns with one multiply and a shift, where a
    /// float would take two conversions as well.
    tsc: Option<(u64, u64)>,
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

impl Clock {
    /// A clock whose time starts now. Calibrating the TSC takes 5 ms: make
    /// one and copy it where it is needed.
    pub fn new() -> Clock {
        let origin = Instant::now();
        Clock {
            origin,
            tsc: tsc::calibrate(origin).map(|(t0, per_tick)| (t0, fixed(per_tick))),
        }
    }

    /// A clock that reads the monotonic clock only (no calibration): for
    /// where timing is rare, or as a default until a calibrated clock is
    /// handed over.
    pub fn monotonic() -> Clock {
        Clock {
            origin: Instant::now(),
            tsc: None,
        }
    }

    /// Whether the TSC is read (otherwise the monotonic clock).
    pub fn uses_tsc(&self) -> bool {
        self.tsc.is_some()
    }

    /// A timestamp, to hand to [`Clock::ns_between`]: TSC ticks, or ns since
    /// the clock was made.
    #[inline(always)]
    pub fn ticks(&self) -> u64 {
        match self.tsc {
            Some(_) => tsc::read(),
            None => self.origin.elapsed().as_nanos() as u64,
        }
    }

    /// Nanoseconds from timestamp `from` to `to` (0 if `to` is earlier).
    #[inline(always)]
    pub fn ns_between(&self, from: u64, to: u64) -> u64 {
        let d = to.saturating_sub(from);
        match self.tsc {
            Some((_, per_tick)) => scale(d, per_tick),
            None => d,
        }
    }

    /// Nanoseconds since the clock was made.
    #[inline(always)]
    pub fn ns(&self) -> u64 {
        match self.tsc {
            Some((t0, per_tick)) => scale(tsc::read().wrapping_sub(t0), per_tick),
            None => self.origin.elapsed().as_nanos() as u64,
        }
    }
}

/// `x` in 32.32 fixed point (rounded; saturating).
fn fixed(x: f64) -> u64 {
    (x * (1u64 << 32) as f64).round() as u64
}

/// `ticks` times `per_tick` (32.32 fixed point), in whole units, saturating.
#[inline(always)]
fn scale(ticks: u64, per_tick: u64) -> u64 {
    let p = (u128::from(ticks) * u128::from(per_tick)) >> 32;
    u64::try_from(p).unwrap_or(u64::MAX)
}

#[cfg(target_arch = "x86_64")]
mod tsc {
    use super::{Duration, Instant};

    #[inline(always)]
    pub fn read() -> u64 {
        // SAFETY: RDTSC has no preconditions on x86-64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// (TSC at `origin`, ns per tick), measured over 5 ms (the two clocks are
    /// read back to back, tens of ns apart: an error of 1e-5); `None` where the
    /// kernel does not report an invariant TSC.
    pub fn calibrate(origin: Instant) -> Option<(u64, f64)> {
        let flags = std::fs::read_to_string("/proc/cpuinfo").ok()?;
        let invariant = flags
            .lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| {
                let has = |want: &str| l.split_whitespace().any(|x| x == want);
                has("constant_tsc") && has("nonstop_tsc")
            });
        if !invariant {
            return None;
        }
        let (i0, t0) = (Instant::now(), read());
        while i0.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        let (ns, ticks) = (i0.elapsed().as_nanos() as f64, read().wrapping_sub(t0));
        if ticks == 0 {
            return None;
        }
        let per_tick = ns / ticks as f64;
        let since_origin = (i0 - origin).as_nanos() as f64 / per_tick;
        Some((t0.wrapping_sub(since_origin as u64), per_tick))
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tsc {
    use super::Instant;

    pub fn read() -> u64 {
        0
    }

    pub fn calibrate(_: Instant) -> Option<(u64, f64)> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_between_stamps_follows_the_monotonic_clock() {
        let c = Clock::new();
        let (i0, a) = (Instant::now(), c.ticks());
        std::thread::sleep(Duration::from_millis(30));
        let (b, i1) = (c.ticks(), Instant::now());
        let ns = c.ns_between(a, b) as f64;
        let want = (i1 - i0).as_nanos() as f64;
        assert!(
            (ns - want).abs() < want * 0.05 + 200_000.0,
            "{ns} vs {want}"
        );
        assert_eq!(c.ns_between(b, a), 0, "an earlier end is no time");
        assert!(c.ns() >= 30_000_000);
    }

    #[test]
    fn fixed_point_scaling_matches_the_float_product() {
        for per_tick in [0.25, 0.3571, 1.0, 2.5] {
            let f = fixed(per_tick);
            for ticks in [0u64, 1, 7, 1_000, 3_000_000_000, 1 << 50] {
                let want = ticks as f64 * per_tick;
                let got = scale(ticks, f) as f64;
                assert!(
                    (got - want).abs() <= 1.0 + want * 1e-9,
                    "{ticks} ticks at {per_tick}: {got}, not {want}"
                );
            }
        }
        assert_eq!(scale(u64::MAX, fixed(4.0)), u64::MAX, "saturates");
    }
}
