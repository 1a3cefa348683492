//! How a transfer is split between the two rails, and the per-rail telemetry
//! the split is decided from.
//!
//! The sender asks its [`SplitPolicy`] once per buffer, inside `isend`, right
//! before posting, with telemetry that includes every completion polled up to
//! that moment: the rail choice is as fresh as it can be (a split chosen by the
//! receiver when it posts the CTS could be stale by the time the data moves).
//!
//! Built-in policies ([`PolicyKind`]):
//! - `static`: a fixed fraction on rail 0 (50/50 by default);
//! - `rate`: proportional to configured rail rates, or, when none are
//!   configured, to the rates measured so far;
//! - `adaptive`: from the measured completion rate and the bytes outstanding
//!   on each rail, so that both rails drain at the same moment.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Telemetry of one rail.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RailTelemetry {
    /// Bytes posted on the rail whose completion has not been polled yet.
    pub outstanding_bytes: u64,
    /// Recent completion rate in bytes per second while the rail was busy
    /// (an exponentially weighted average); 0 until measured.
    pub rate: f64,
    /// Bytes completed on the rail so far.
    pub completed_bytes: u64,
}

/// Telemetry of both rails (rail 1 stays zero on a one-rail communicator).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Telemetry {
    /// Per rail.
    pub rails: [RailTelemetry; 2],
}

/// Decides how many bytes of a buffer go on rail 0; the rest goes on rail 1.
/// Only consulted on two-rail communicators.
pub trait SplitPolicy: fmt::Debug + Send {
    /// Bytes of a `len`-byte buffer for rail 0 (values above `len` count as
    /// `len`). `t` already counts the buffers of the same send split before
    /// this one.
    fn rail0_bytes(&mut self, len: u64, t: &Telemetry) -> u64;
}

/// A fixed fraction of every buffer on rail 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Static {
    fraction: f64,
}

impl Static {
    /// `fraction` of each buffer on rail 0 (clamped to 0..=1).
    pub fn new(fraction: f64) -> Static {
        let fraction = if fraction.is_nan() {
            0.5
        } else {
            fraction.clamp(0.0, 1.0)
        };
        Static { fraction }
    }
}

impl SplitPolicy for Static {
    fn rail0_bytes(&mut self, len: u64, _: &Telemetry) -> u64 {
        (len as f64 * self.fraction).round() as u64
    }
}

/// Proportional to rail rates: the configured ones, or the measured ones when
/// none are configured (an even split until both rails are measured).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    configured: Option<[f64; 2]>,
}

impl Rate {
    /// Proportional to `rates` (bytes/s or any common unit; `None`, or rates
    /// that are not positive: the measured ones).
    pub fn new(rates: Option<[f64; 2]>) -> Rate {
        Rate {
            configured: rates.filter(|r| r.iter().all(|&x| x > 0.0 && x.is_finite())),
        }
    }
}

impl SplitPolicy for Rate {
    fn rail0_bytes(&mut self, len: u64, t: &Telemetry) -> u64 {
        let [r0, r1] = self
            .configured
            .unwrap_or([t.rails[0].rate, t.rails[1].rate]);
        if r0 <= 0.0 || r1 <= 0.0 {
            return len / 2;
        }
        (len as f64 * r0 / (r0 + r1)).round() as u64
    }
}

/// Balances finishing times: rail `r` drains its outstanding bytes `o_r` plus
/// its share `x_r` at its measured rate `v_r`; the share is chosen so that
/// `(o_0 + x_0) / v_0 == (o_1 + x_1) / v_1` with `x_0 + x_1 = len`, clamped to
/// `0..=len`. A rail not measured yet counts as fast as the other (so it gets
/// traffic and a measurement); with neither measured, the rates count equal
/// and the split only evens out the outstanding bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Adaptive;

impl SplitPolicy for Adaptive {
    fn rail0_bytes(&mut self, len: u64, t: &Telemetry) -> u64 {
        let (mut v0, mut v1) = (t.rails[0].rate, t.rails[1].rate);
        match (v0 > 0.0, v1 > 0.0) {
            (true, true) => {}
            (true, false) => v1 = v0,
            (false, true) => v0 = v1,
            (false, false) => (v0, v1) = (1.0, 1.0),
        }
        let (o0, o1) = (
            t.rails[0].outstanding_bytes as f64,
            t.rails[1].outstanding_bytes as f64,
        );
        let x0 = (v0 * (o1 + len as f64) - v1 * o0) / (v0 + v1);
        x0.clamp(0.0, len as f64).round() as u64
    }
}

/// A built-in policy by name, as a command line gives it: `static`,
/// `static:0.3` (30 % on rail 0), `rate`, `rate:100:25` (rail rates),
/// `adaptive`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PolicyKind {
    /// [`Static`] with this fraction on rail 0.
    Static(f64),
    /// [`Rate`] with these rates (`None`: measured).
    Rate(Option<[f64; 2]>),
    /// [`Adaptive`].
    Adaptive,
}

impl Default for PolicyKind {
    fn default() -> Self {
        PolicyKind::Static(0.5)
    }
}

impl PolicyKind {
    /// The policy.
    pub fn build(&self) -> Box<dyn SplitPolicy> {
        match *self {
            PolicyKind::Static(f) => Box::new(Static::new(f)),
            PolicyKind::Rate(r) => Box::new(Rate::new(r)),
            PolicyKind::Adaptive => Box::new(Adaptive),
        }
    }
}

impl FromStr for PolicyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut it = s.split(':');
        let name = it.next().unwrap_or("");
        let nums: Result<Vec<f64>, _> = it.map(str::parse::<f64>).collect();
        let nums = nums.map_err(|e| format!("{s:?}: {e}"))?;
        match (name, nums.as_slice()) {
            ("static", []) => Ok(PolicyKind::Static(0.5)),
            ("static", [f]) if (0.0..=1.0).contains(f) => Ok(PolicyKind::Static(*f)),
            ("rate", []) => Ok(PolicyKind::Rate(None)),
            ("rate", [a, b]) if *a > 0.0 && *b > 0.0 => Ok(PolicyKind::Rate(Some([*a, *b]))),
            ("adaptive", []) => Ok(PolicyKind::Adaptive),
            _ => Err(format!(
                "{s:?}: expected static[:FRACTION], rate[:RATE0:RATE1] or adaptive"
            )),
        }
    }
}

/// Shares of a split are multiples of this (unless a rail takes all).
pub(crate) const SPLIT_ALIGN: u64 = 64;

/// The policy's answer made usable: at most `len`, and rail 0's share a
/// multiple of [`SPLIT_ALIGN`] unless it is the whole buffer.
pub(crate) fn aligned(len: u64, rail0: u64) -> u64 {
    if rail0 >= len {
        len
    } else {
        rail0 / SPLIT_ALIGN * SPLIT_ALIGN
    }
}

/// Completion rates are measured over windows of at least this long (or until
/// the rail runs dry).
const WINDOW: Duration = Duration::from_micros(200);
/// Weight of a new window's rate.
const EWMA: f64 = 0.25;

/// The sender's measurement of one rail.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RailMeter {
    pub t: RailTelemetry,
    window_start: Option<Instant>,
    window_bytes: u64,
}

impl RailMeter {
    /// `bytes` were posted on the rail.
    pub fn posted(&mut self, bytes: u64, now: Instant) {
        if bytes == 0 {
            return;
        }
        if self.t.outstanding_bytes == 0 {
            self.window_start = Some(now);
            self.window_bytes = 0;
        }
        self.t.outstanding_bytes += bytes;
    }

    /// `bytes` posted earlier completed (or failed: `ok` false).
    pub fn completed(&mut self, bytes: u64, now: Instant, ok: bool) {
        if bytes == 0 {
            return;
        }
        self.t.outstanding_bytes = self.t.outstanding_bytes.saturating_sub(bytes);
        if !ok {
            return;
        }
        self.t.completed_bytes += bytes;
        self.window_bytes += bytes;
        let Some(start) = self.window_start else {
            return;
        };
        let dt = now.saturating_duration_since(start);
        if dt >= WINDOW || self.t.outstanding_bytes == 0 {
            let secs = dt.as_secs_f64();
            if secs > 0.0 {
                let sample = self.window_bytes as f64 / secs;
                self.t.rate = if self.t.rate > 0.0 {
                    self.t.rate + EWMA * (sample - self.t.rate)
                } else {
                    sample
                };
            }
            self.window_start = (self.t.outstanding_bytes > 0).then_some(now);
            self.window_bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tel(o: [u64; 2], r: [f64; 2]) -> Telemetry {
        let mut t = Telemetry::default();
        for i in 0..2 {
            t.rails[i].outstanding_bytes = o[i];
            t.rails[i].rate = r[i];
        }
        t
    }

    #[test]
    fn static_fractions() {
        let t = Telemetry::default();
        assert_eq!(Static::new(0.5).rail0_bytes(1000, &t), 500);
        assert_eq!(Static::new(1.0).rail0_bytes(1000, &t), 1000);
        assert_eq!(Static::new(0.0).rail0_bytes(1000, &t), 0);
        assert_eq!(Static::new(7.0).rail0_bytes(1000, &t), 1000, "clamped");
        assert_eq!(Static::new(0.3).rail0_bytes(1000, &t), 300);
    }

    #[test]
    fn rate_configured_then_learned() {
        let t = tel([0, 0], [300.0, 100.0]);
        assert_eq!(Rate::new(Some([1.0, 3.0])).rail0_bytes(4000, &t), 1000);
        assert_eq!(Rate::new(None).rail0_bytes(4000, &t), 3000, "learned");
        assert_eq!(
            Rate::new(None).rail0_bytes(4000, &Telemetry::default()),
            2000,
            "even until measured"
        );
        assert_eq!(Rate::new(Some([0.0, 1.0])).rail0_bytes(4000, &t), 3000);
    }

    /// With rails of unequal speed, the adaptive split makes both rails finish
    /// together: after the split, outstanding / rate is equal on both.
    #[test]
    fn adaptive_equalizes_finishing_times() {
        for (o, r, len) in [
            ([0u64, 0u64], [3e9, 1e9], 1 << 20),
            ([1 << 20, 0], [3e9, 1e9], 1 << 20),
            ([0, 1 << 18], [1e9, 2e9], 1 << 22),
            ([123_456, 654_321], [5e9, 7e9], 1 << 21),
        ] {
            let t = tel(o, r);
            let x0 = Adaptive.rail0_bytes(len, &t);
            assert!(x0 <= len);
            let f0 = (o[0] + x0) as f64 / r[0];
            let f1 = (o[1] + len - x0) as f64 / r[1];
            assert!(
                (f0 - f1).abs() <= 2.0 / r[0].min(r[1]),
                "{o:?} {r:?}: {f0} vs {f1}"
            );
        }
        // A backlog bigger than the buffer: everything on the idle rail.
        let t = tel([10 << 20, 0], [1e9, 1e9]);
        assert_eq!(Adaptive.rail0_bytes(1 << 20, &t), 0);
        // Unmeasured: evens out the outstanding bytes.
        let t = tel([1000, 0], [0.0, 0.0]);
        assert_eq!(Adaptive.rail0_bytes(3000, &t), 1000);
        // One rail measured: the other counts as fast as it.
        let t = tel([0, 0], [0.0, 5e9]);
        assert_eq!(Adaptive.rail0_bytes(3000, &t), 1500);
    }

    /// Driven by a simulated pair of rails at 3:1, the adaptive policy's
    /// shares converge to 3:1 and the measured rates to the true ones.
    #[test]
    fn adaptive_converges_on_simulated_rails() {
        let speed = [3e9f64, 1e9];
        let mut m = [RailMeter::default(), RailMeter::default()];
        let mut clock = Instant::now();
        let mut p = Adaptive;
        let len = 1u64 << 20;
        let mut last = 0;
        for _ in 0..200 {
            let t = Telemetry {
                rails: [m[0].t, m[1].t],
            };
            let x0 = aligned(len, p.rail0_bytes(len, &t));
            last = x0;
            m[0].posted(x0, clock);
            m[1].posted(len - x0, clock);
            // Each rail drains its backlog at its speed; both complete after
            // the longer of the two.
            let d0 = Duration::from_secs_f64(m[0].t.outstanding_bytes as f64 / speed[0]);
            let d1 = Duration::from_secs_f64(m[1].t.outstanding_bytes as f64 / speed[1]);
            let (o0, o1) = (m[0].t.outstanding_bytes, m[1].t.outstanding_bytes);
            m[0].completed(o0, clock + d0, true);
            m[1].completed(o1, clock + d1, true);
            clock += d0.max(d1);
        }
        let share = last as f64 / len as f64;
        assert!((share - 0.75).abs() < 0.02, "share {share}");
        assert!((m[0].t.rate / 3e9 - 1.0).abs() < 0.05, "{}", m[0].t.rate);
        assert!((m[1].t.rate / 1e9 - 1.0).abs() < 0.05, "{}", m[1].t.rate);
    }

    #[test]
    fn names() {
        assert_eq!("static".parse(), Ok(PolicyKind::Static(0.5)));
        assert_eq!("static:0.25".parse(), Ok(PolicyKind::Static(0.25)));
        assert_eq!("rate".parse(), Ok(PolicyKind::Rate(None)));
        assert_eq!("rate:2:1".parse(), Ok(PolicyKind::Rate(Some([2.0, 1.0]))));
        assert_eq!("adaptive".parse(), Ok(PolicyKind::Adaptive));
        assert!("static:2".parse::<PolicyKind>().is_err());
        assert!("rate:1".parse::<PolicyKind>().is_err());
        assert!("fastest".parse::<PolicyKind>().is_err());
        assert!("adaptive:x".parse::<PolicyKind>().is_err());
    }

    #[test]
    fn alignment() {
        assert_eq!(aligned(1000, 5000), 1000);
        assert_eq!(aligned(1000, 1000), 1000);
        assert_eq!(aligned(1000, 999), 960);
        assert_eq!(aligned(1000, 63), 0);
        assert_eq!(aligned(0, 0), 0);
    }
}
