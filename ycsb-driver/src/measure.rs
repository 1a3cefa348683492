//! Latency measurements, kept the way Java YCSB keeps them.
//!
//! Java YCSB (`site.ycsb.measurements`, default `measurementtype=hdrhistogram`)
//! keeps one HdrHistogram per *measurement name* and one counter per return
//! code. [`Measurements`] holds the same data for one driver thread, with no
//! locks; threads (and, through [`Measurements::to_bytes`], processes) are
//! combined with [`Measurements::merge`].
//!
//! # Which name a sample lands under
//!
//! Java's `DBWrapper` measures an operation under its name (`READ`) when the
//! binding returned `OK` or `BATCHED_OK`, and under `READ-FAILED` otherwise;
//! the return code is always counted under the plain name (`READ`), so the
//! `-FAILED` measurement has latencies but no `Return=` lines.
//! [`Measurements::record`] does exactly that. `CoreWorkload` measures
//! `READ-MODIFY-WRITE` itself, without a return code (the read and the update
//! inside it go through `DBWrapper` and count under `READ` and `UPDATE`): use
//! [`Measurements::record_latency`] for it. `DBWrapper.cleanup()` measures
//! `CLEANUP` once per thread, also without a return code:
//! [`Measurements::record_cleanup`].
//!
//! Not reproduced: the `reportlatencyforeacherror` / `latencytrackederrors`
//! properties (names such as `READ-NOT_FOUND`), `measurement.interval=intended`
//! (`Intended-READ`), and the `VERIFY` / `SCAN-LATENCY-PER-RECORD` measurements.
//!
//! # Histograms
//!
//! Every series has an HdrHistogram with 3 significant digits and a lowest
//! discernible value of 1 µs, the bucket layout of Java's `new Recorder(3)`, so
//! the statistics computed by [`hist_mean`], [`hist_min`], [`hist_max`] and
//! [`value_at_percentile`] (Java HdrHistogram 2.1.12 semantics) are the numbers
//! Java prints. Histograms are pre-sized to [`PRESIZED_HIGHEST_US`] so that
//! recording does not allocate; a larger latency resizes the histogram (one
//! allocation, as Java's auto-resizing histogram does) rather than being lost.
//!
//! # Intervals
//!
//! Every sample is recorded twice: into the run total and into an *interval*
//! part that [`Measurements::take_interval`] (or
//! [`Measurements::drain_interval_into`]) hands out and clears, for the
//! periodic status line (Java's `Recorder.getIntervalHistogram()`). A run
//! without status lines records once
//! ([`Measurements::without_intervals`]).

use std::fmt;

use hdrhistogram::Histogram;

/// Significant decimal digits of every histogram (Java: `new Recorder(3)`).
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Highest latency (µs) a fresh histogram holds without resizing: one second.
///
/// Each histogram then takes about 90 KiB (a [`Measurements`] holds 26 of
/// them: 2.3 MiB); a latency above this resizes it.
pub const PRESIZED_HIGHEST_US: u64 = 1_000_000;

/// A YCSB database operation, as Java YCSB names it in its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// `READ`: read one record.
    Read,
    /// `UPDATE`: overwrite fields of one record.
    Update,
    /// `INSERT`: insert one record.
    Insert,
    /// `SCAN`: read a range of records.
    Scan,
    /// `READ-MODIFY-WRITE`: a read then an update of the same record.
    ReadModifyWrite,
    /// `DELETE`: delete one record.
    Delete,
}

impl OpKind {
    /// Number of operation kinds.
    pub const COUNT: usize = 6;

    /// All operation kinds, in report order.
    pub const ALL: [OpKind; OpKind::COUNT] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
        OpKind::Delete,
    ];

    /// Position of this kind in [`OpKind::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The measurement name Java uses: `READ`, `UPDATE`, `INSERT`, `SCAN`,
    /// `READ-MODIFY-WRITE` or `DELETE`.
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Read => "READ",
            OpKind::Update => "UPDATE",
            OpKind::Insert => "INSERT",
            OpKind::Scan => "SCAN",
            OpKind::ReadModifyWrite => "READ-MODIFY-WRITE",
            OpKind::Delete => "DELETE",
        }
    }

    /// The name Java's `DBWrapper` measures failed operations under
    /// (`op + "-FAILED"`), e.g. `READ-FAILED`.
    pub const fn failed_name(self) -> &'static str {
        match self {
            OpKind::Read => "READ-FAILED",
            OpKind::Update => "UPDATE-FAILED",
            OpKind::Insert => "INSERT-FAILED",
            OpKind::Scan => "SCAN-FAILED",
            OpKind::ReadModifyWrite => "READ-MODIFY-WRITE-FAILED",
            OpKind::Delete => "DELETE-FAILED",
        }
    }

    /// The kind whose [`OpKind::name`] is `name`, if any.
    pub fn from_name(name: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|op| op.name() == name)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The result of a database operation: Java's `site.ycsb.Status` constants.
///
/// Declared in the order of the Java source, which is also the order the
/// report prints `Return=` lines in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// `OK`: the operation completed successfully.
    Ok,
    /// `ERROR`: the operation failed.
    Error,
    /// `NOT_FOUND`: the requested record was not found.
    NotFound,
    /// `NOT_IMPLEMENTED`: the operation is not implemented for the binding.
    NotImplemented,
    /// `UNEXPECTED_STATE`: success was reported, but the result was not as expected.
    UnexpectedState,
    /// `BAD_REQUEST`: the request was not valid.
    BadRequest,
    /// `FORBIDDEN`: the operation is forbidden.
    Forbidden,
    /// `SERVICE_UNAVAILABLE`: a service the binding depends on is not available.
    ServiceUnavailable,
    /// `BATCHED_OK`: the operation was batched, to be executed later.
    BatchedOk,
}

impl Status {
    /// Number of statuses.
    pub const COUNT: usize = 9;

    /// All statuses, in Java declaration order.
    pub const ALL: [Status; Status::COUNT] = [
        Status::Ok,
        Status::Error,
        Status::NotFound,
        Status::NotImplemented,
        Status::UnexpectedState,
        Status::BadRequest,
        Status::Forbidden,
        Status::ServiceUnavailable,
        Status::BatchedOk,
    ];

    /// Position of this status in [`Status::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The name Java's `Status.getName()` returns, e.g. `NOT_FOUND`.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Error => "ERROR",
            Status::NotFound => "NOT_FOUND",
            Status::NotImplemented => "NOT_IMPLEMENTED",
            Status::UnexpectedState => "UNEXPECTED_STATE",
            Status::BadRequest => "BAD_REQUEST",
            Status::Forbidden => "FORBIDDEN",
            Status::ServiceUnavailable => "SERVICE_UNAVAILABLE",
            Status::BatchedOk => "BATCHED_OK",
        }
    }

    /// Java's `Status.getDescription()`.
    pub const fn description(self) -> &'static str {
        match self {
            Status::Ok => "The operation completed successfully.",
            Status::Error => "The operation failed.",
            Status::NotFound => "The requested record was not found.",
            Status::NotImplemented => "The operation is not implemented for the current binding.",
            Status::UnexpectedState => {
                "The operation reported success, but the result was not as expected."
            }
            Status::BadRequest => "The request was not valid.",
            Status::Forbidden => "The operation is forbidden.",
            Status::ServiceUnavailable => {
                "Dependant service for the current binding is not available."
            }
            Status::BatchedOk => {
                "The operation has been batched by the binding to be executed later."
            }
        }
    }

    /// Java's `Status.isOk()`: true for `OK` and `BATCHED_OK`.
    pub const fn is_ok(self) -> bool {
        matches!(self, Status::Ok | Status::BatchedOk)
    }

    /// The status whose [`Status::name`] is `name`, if any.
    pub fn from_name(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One measurement name: the unit Java keeps a histogram for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Series {
    /// Successful operations of a kind (`READ`); also carries the return codes.
    Op(OpKind),
    /// Failed operations of a kind (`READ-FAILED`).
    Failed(OpKind),
    /// `CLEANUP`: the per-thread cleanup of the database binding.
    Cleanup,
}

impl Series {
    /// Number of series.
    pub const COUNT: usize = 2 * OpKind::COUNT + 1;

    /// All series in report order: the six operations, their `-FAILED`
    /// counterparts, then `CLEANUP`. (Java iterates a `ConcurrentHashMap`, so
    /// its order is unspecified.)
    pub const ALL: [Series; Series::COUNT] = [
        Series::Op(OpKind::Read),
        Series::Op(OpKind::Update),
        Series::Op(OpKind::Insert),
        Series::Op(OpKind::Scan),
        Series::Op(OpKind::ReadModifyWrite),
        Series::Op(OpKind::Delete),
        Series::Failed(OpKind::Read),
        Series::Failed(OpKind::Update),
        Series::Failed(OpKind::Insert),
        Series::Failed(OpKind::Scan),
        Series::Failed(OpKind::ReadModifyWrite),
        Series::Failed(OpKind::Delete),
        Series::Cleanup,
    ];

    /// Position of this series in [`Series::ALL`].
    pub const fn index(self) -> usize {
        match self {
            Series::Op(op) => op.index(),
            Series::Failed(op) => OpKind::COUNT + op.index(),
            Series::Cleanup => 2 * OpKind::COUNT,
        }
    }

    /// The measurement name as printed: `READ`, `READ-FAILED`, `CLEANUP`.
    pub const fn name(self) -> &'static str {
        match self {
            Series::Op(op) => op.name(),
            Series::Failed(op) => op.failed_name(),
            Series::Cleanup => "CLEANUP",
        }
    }

    /// The series whose [`Series::name`] is `name`, if any.
    pub fn from_name(name: &str) -> Option<Series> {
        Series::ALL.into_iter().find(|s| s.name() == name)
    }

    const fn bit(self) -> u16 {
        1 << self.index()
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Exact statistics of one series, kept beside its histogram.
///
/// The histogram rounds values above 2047 µs to its 3 significant digits; these
/// do not. The Java report prints the histogram's numbers, not these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeriesStats {
    /// Number of samples.
    pub count: u64,
    /// Smallest latency (µs); 0 when there are no samples.
    pub min: u64,
    /// Largest latency (µs); 0 when there are no samples.
    pub max: u64,
    /// Sum of all latencies (µs), saturating.
    pub sum: u64,
}

impl SeriesStats {
    /// Exact mean latency (µs); 0.0 when there are no samples.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    fn add_sample(&mut self, latency_us: u64) {
        if self.count == 0 || latency_us < self.min {
            self.min = latency_us;
        }
        if latency_us > self.max {
            self.max = latency_us;
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(latency_us);
    }

    fn merge(&mut self, other: &SeriesStats) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 || other.min < self.min {
            self.min = other.min;
        }
        self.max = self.max.max(other.max);
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
    }
}

// ---------------------------------------------------------------------------
// Java HdrHistogram (2.1.12) statistics
// ---------------------------------------------------------------------------

/// `getMean()` of Java's HdrHistogram: the count-weighted mean of each
/// recorded bucket's median-equivalent value; 0.0 when empty.
///
/// (The Rust crate's `Histogram::mean` divides term by term and can differ in
/// the last digit.)
pub fn hist_mean(h: &Histogram<u64>) -> f64 {
    let total = h.len();
    if total == 0 {
        return 0.0;
    }
    let mut sum = 0.0_f64;
    for v in h.iter_recorded() {
        sum += h.median_equivalent(v.value_iterated_to()) as f64 * v.count_at_value() as f64;
    }
    sum / total as f64
}

/// `getMinValue()` of Java's HdrHistogram: the lowest value equivalent to the
/// smallest sample; 0 when empty.
pub fn hist_min(h: &Histogram<u64>) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.min()
    }
}

/// `getMaxValue()` of Java's HdrHistogram: the highest value equivalent to the
/// largest sample; 0 when empty.
pub fn hist_max(h: &Histogram<u64>) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.max()
    }
}

/// `getValueAtPercentile(percentile)` of Java's HdrHistogram 2.1.12
/// (`percentile` in 0..=100): the percentile is lowered by one ulp, the rank
/// is `ceil(p * count / 100)` (at least 1), and the answer is the highest
/// value equivalent to the bucket reaching that rank (the lowest for
/// percentile 0). Returns 0 when empty.
pub fn value_at_percentile(h: &Histogram<u64>, percentile: f64) -> u64 {
    let total = h.len();
    if total == 0 {
        return 0;
    }
    let requested = next_down(percentile).clamp(0.0, 100.0);
    let fp_count = (requested * total as f64) / 100.0;
    let rank = (fp_count.ceil() as u64).max(1);
    let mut running = 0_u64;
    for v in h.iter_recorded() {
        running += v.count_at_value();
        if running >= rank {
            let value = v.value_iterated_to();
            return if percentile == 0.0 {
                h.lowest_equivalent(value)
            } else {
                h.highest_equivalent(value)
            };
        }
    }
    0
}

/// Java's `Math.nextAfter(x, Double.NEGATIVE_INFINITY)`.
fn next_down(x: f64) -> f64 {
    if x.is_nan() || x == f64::NEG_INFINITY {
        x
    } else if x == 0.0 {
        -f64::from_bits(1)
    } else if x > 0.0 {
        f64::from_bits(x.to_bits() - 1)
    } else {
        f64::from_bits(x.to_bits() + 1)
    }
}

// ---------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------

fn new_histogram(highest_us: u64) -> Histogram<u64> {
    let highest = highest_us.clamp(2, u64::MAX / 2);
    let mut h = Histogram::new_with_bounds(1, highest, SIGNIFICANT_DIGITS)
        .or_else(|_| Histogram::new_with_bounds(1, 2, SIGNIFICANT_DIGITS))
        .expect("1..2 with 3 significant digits is a valid histogram");
    h.auto(true);
    h
}

/// Histograms and counters of one part (the run total or the current interval).
#[derive(Debug, Clone)]
struct Part {
    hists: [Histogram<u64>; Series::COUNT],
    stats: [SeriesStats; Series::COUNT],
    status: [[u64; Status::COUNT]; OpKind::COUNT],
}

impl Part {
    fn new(highest_us: u64) -> Part {
        Part {
            hists: std::array::from_fn(|_| new_histogram(highest_us)),
            stats: [SeriesStats::default(); Series::COUNT],
            status: [[0; Status::COUNT]; OpKind::COUNT],
        }
    }

    #[inline]
    fn record(&mut self, series: Series, latency_us: u64) {
        let i = series.index();
        if self.hists[i].record(latency_us).is_err() {
            // Only for values beyond u64::MAX / 2, which cannot be tracked.
            self.hists[i].saturating_record(latency_us);
        }
        self.stats[i].add_sample(latency_us);
    }

    fn merge(&mut self, other: &Part) {
        for i in 0..Series::COUNT {
            // An empty histogram adds nothing; its counts are not read.
            if other.hists[i].is_empty() {
                continue;
            }
            add_histogram(&mut self.hists[i], &other.hists[i]);
            self.stats[i].merge(&other.stats[i]);
        }
        for (mine, theirs) in self.status.iter_mut().zip(other.status.iter()) {
            for (a, b) in mine.iter_mut().zip(theirs.iter()) {
                *a += b;
            }
        }
    }

    fn clear(&mut self) {
        // Resetting zeroes all of a histogram's counts (90 KiB each): only
        // the ones that hold something.
        for h in self.hists.iter_mut().filter(|h| !h.is_empty()) {
            h.reset();
        }
        self.stats = [SeriesStats::default(); Series::COUNT];
        self.status = [[0; Status::COUNT]; OpKind::COUNT];
    }
}

/// Adds `src` into `dst`; both have the same bucket layout and auto-resize,
/// so this only fails for values no histogram can hold, which are then
/// clamped bucket by bucket.
fn add_histogram(dst: &mut Histogram<u64>, src: &Histogram<u64>) {
    if dst.add(src).is_err() {
        for v in src.iter_recorded() {
            dst.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
}

/// The latency measurements of one driver thread (or, merged, of a run).
///
/// Recording takes no lock and, below [`PRESIZED_HIGHEST_US`], allocates
/// nothing. See the [module documentation](self) for which name each sample
/// is kept under.
#[derive(Debug, Clone)]
pub struct Measurements {
    total: Part,
    /// What was recorded since the interval was last taken; `None` when no
    /// one takes intervals ([`Measurements::without_intervals`]).
    interval: Option<Box<Part>>,
    /// Bit `Series::index()`: the series exists, as Java's measurement map
    /// entry would (something was measured or a return code reported).
    seen: u16,
    highest_us: u64,
}

impl Default for Measurements {
    fn default() -> Self {
        Measurements::new()
    }
}

impl Measurements {
    /// Empty measurements, histograms pre-sized to [`PRESIZED_HIGHEST_US`].
    pub fn new() -> Measurements {
        Measurements::with_presize(PRESIZED_HIGHEST_US)
    }

    /// Empty measurements whose histograms hold latencies up to `highest_us`
    /// without resizing (larger ones still fit, after a resize).
    pub fn with_presize(highest_us: u64) -> Measurements {
        Measurements {
            total: Part::new(highest_us),
            interval: Some(Box::new(Part::new(highest_us))),
            seen: 0,
            highest_us,
        }
    }

    /// The same, keeping run totals only: each sample is recorded once
    /// instead of twice, for a run without status lines. Intervals taken
    /// from it are empty.
    pub fn without_intervals(mut self) -> Measurements {
        self.interval = None;
        self
    }

    /// Records one database operation as Java's `DBWrapper` does: the latency
    /// under `op` when `status.is_ok()`, else under `op`-FAILED; the status is
    /// counted under `op` either way.
    #[inline]
    pub fn record(&mut self, op: OpKind, status: Status, latency_us: u64) {
        let series = if status.is_ok() {
            Series::Op(op)
        } else {
            Series::Failed(op)
        };
        self.record_series(series, latency_us);
        self.record_status(op, status);
    }

    /// Records a latency under `op` without a return code, as Java's
    /// `CoreWorkload` does for `READ-MODIFY-WRITE`.
    #[inline]
    pub fn record_latency(&mut self, op: OpKind, latency_us: u64) {
        self.record_series(Series::Op(op), latency_us);
    }

    /// Counts a return code under `op` without a latency (Java's
    /// `Measurements.reportStatus`).
    #[inline]
    pub fn record_status(&mut self, op: OpKind, status: Status) {
        let (o, s) = (op.index(), status.index());
        self.total.status[o][s] += 1;
        if let Some(i) = &mut self.interval {
            i.status[o][s] += 1;
        }
        self.seen |= Series::Op(op).bit();
    }

    /// Records the latency of one thread's database cleanup (`CLEANUP`).
    pub fn record_cleanup(&mut self, latency_us: u64) {
        self.record_series(Series::Cleanup, latency_us);
    }

    /// Records a latency under any series, without a return code.
    #[inline]
    pub fn record_series(&mut self, series: Series, latency_us: u64) {
        self.total.record(series, latency_us);
        if let Some(i) = &mut self.interval {
            i.record(series, latency_us);
        }
        self.seen |= series.bit();
    }

    /// Whether the series exists: it has a latency or (for [`Series::Op`]) a
    /// return code. Java prints a measurement exactly when it exists.
    pub fn has_series(&self, series: Series) -> bool {
        self.seen & series.bit() != 0
    }

    /// The series that exist, in report order.
    pub fn present_series(&self) -> impl Iterator<Item = Series> + '_ {
        Series::ALL.into_iter().filter(|s| self.has_series(*s))
    }

    /// The run-total histogram of a series (µs).
    pub fn histogram(&self, series: Series) -> &Histogram<u64> {
        &self.total.hists[series.index()]
    }

    /// Exact run-total statistics of a series.
    pub fn stats(&self, series: Series) -> SeriesStats {
        self.total.stats[series.index()]
    }

    /// Number of latencies recorded under a series.
    pub fn operations(&self, series: Series) -> u64 {
        self.total.stats[series.index()].count
    }

    /// How many operations of kind `op` returned `status`.
    pub fn status_count(&self, op: OpKind, status: Status) -> u64 {
        self.total.status[op.index()][status.index()]
    }

    /// Java-semantics percentile (see [`value_at_percentile`]) of a series'
    /// run-total histogram.
    pub fn percentile(&self, series: Series, percentile: f64) -> u64 {
        value_at_percentile(self.histogram(series), percentile)
    }

    /// Adds everything in `other` (run totals, interval parts, existing series)
    /// to `self`: aggregates threads or processes.
    pub fn merge(&mut self, other: &Measurements) {
        self.total.merge(&other.total);
        if let (Some(mine), Some(theirs)) = (&mut self.interval, &other.interval) {
            mine.merge(theirs);
        }
        self.seen |= other.seen;
    }

    /// Hands out what was recorded since the previous call (as a
    /// `Measurements` whose run totals are that interval and which knows the
    /// same series as `self`) and starts a new interval.
    pub fn take_interval(&mut self) -> Measurements {
        let mut out = Measurements::with_presize(self.highest_us);
        self.drain_interval_into(&mut out);
        out
    }

    /// Like [`Measurements::take_interval`], but adds the interval to the run
    /// totals of `dst` (marking the series of `self` as existing there), so a
    /// status thread can reuse one `dst` without allocating.
    pub fn drain_interval_into(&mut self, dst: &mut Measurements) {
        if let Some(i) = &mut self.interval {
            dst.total.merge(i);
            i.clear();
        }
        dst.seen |= self.seen;
    }

    /// Forgets everything, keeping the histograms' allocations.
    pub fn clear(&mut self) {
        self.total.clear();
        if let Some(i) = &mut self.interval {
            i.clear();
        }
        self.seen = 0;
    }

    /// Serializes the run totals (not the current interval) into the
    /// format described at [`Measurements::from_bytes`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.push(SIGNIFICANT_DIGITS);
        out.push(Series::COUNT as u8);
        out.push(OpKind::COUNT as u8);
        out.push(Status::COUNT as u8);
        out.extend_from_slice(&self.seen.to_le_bytes());
        out.extend_from_slice(&self.highest_us.to_le_bytes());
        for i in 0..Series::COUNT {
            let s = &self.total.stats[i];
            for x in [s.count, s.min, s.max, s.sum] {
                out.extend_from_slice(&x.to_le_bytes());
            }
            let h = &self.total.hists[i];
            let buckets = h.iter_recorded().count() as u64;
            out.extend_from_slice(&buckets.to_le_bytes());
            for v in h.iter_recorded() {
                out.extend_from_slice(&v.value_iterated_to().to_le_bytes());
                out.extend_from_slice(&v.count_at_value().to_le_bytes());
            }
        }
        for row in &self.total.status {
            for c in row {
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        out
    }

    /// Decodes what [`Measurements::to_bytes`] wrote; the interval part of the
    /// result is empty.
    ///
    /// Format (version 1, integers little-endian; the `hdrhistogram` V2
    /// serializer needs the crate's `serialization` feature, which this
    /// workspace leaves off):
    ///
    /// | bytes | content |
    /// |---|---|
    /// | 8 | magic `YCSBMEAS` |
    /// | 4 | format version, u32 = 1 |
    /// | 1 | significant digits (3) |
    /// | 3 | series count (13), op kind count (6), status count (9), u8 each |
    /// | 2 | existing-series bit set, u16 (bit = index in [`Series::ALL`]) |
    /// | 8 | pre-size of the histograms, µs |
    /// | per series, in [`Series::ALL`] order | count, min, max, sum (u64 each); bucket count `n` (u64); `n` × (value, count) (u64 each), value = highest value equivalent to a recorded bucket |
    /// | 8 × 6 × 9 | status counts, u64, by [`OpKind::ALL`] then [`Status::ALL`] |
    ///
    /// Nothing may follow. Input that does not follow this format (including
    /// bucket counts that disagree with the series count) is an error, never a
    /// panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<Measurements, DecodeError> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(MAGIC.len())? != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = u32::from_le_bytes(r.array()?);
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let [sig, n_series, n_ops, n_status] = r.array::<4>()?;
        if sig != SIGNIFICANT_DIGITS
            || usize::from(n_series) != Series::COUNT
            || usize::from(n_ops) != OpKind::COUNT
            || usize::from(n_status) != Status::COUNT
        {
            return Err(DecodeError::Layout);
        }
        let seen = u16::from_le_bytes(r.array()?);
        if seen >> Series::COUNT != 0 {
            return Err(DecodeError::Layout);
        }
        let highest_us = r.u64()?;
        // The pre-size only decides the initial allocation; cap what the input
        // can make us allocate up front.
        let mut m = Measurements::with_presize(highest_us.min(MAX_DECODED_PRESIZE_US));
        m.highest_us = highest_us;
        m.seen = seen;
        for series in Series::ALL {
            let i = series.index();
            let stats = SeriesStats {
                count: r.u64()?,
                min: r.u64()?,
                max: r.u64()?,
                sum: r.u64()?,
            };
            let buckets = r.u64()?;
            // Each bucket takes 16 bytes: refuse counts the input cannot hold
            // before looping on them.
            if buckets > (r.remaining() / 16) as u64 {
                return Err(DecodeError::Truncated(bytes.len()));
            }
            let h = &mut m.total.hists[i];
            for _ in 0..buckets {
                let value = r.u64()?;
                let count = r.u64()?;
                h.record_n(value, count)
                    .map_err(|_| DecodeError::BadValue(value))?;
            }
            if h.len() != stats.count {
                return Err(DecodeError::Inconsistent(series.name()));
            }
            m.total.stats[i] = stats;
        }
        for row in &mut m.total.status {
            for c in row.iter_mut() {
                *c = r.u64()?;
            }
        }
        if r.remaining() != 0 {
            return Err(DecodeError::TrailingBytes(r.remaining()));
        }
        Ok(m)
    }
}

impl PartialEq for Measurements {
    /// Equal when the run totals hold the same samples (bucket by bucket),
    /// statistics, return codes and existing series; interval parts and
    /// histogram sizes are not compared.
    fn eq(&self, other: &Measurements) -> bool {
        let same_hists = self
            .total
            .hists
            .iter()
            .zip(other.total.hists.iter())
            .all(|(a, b)| {
                a.len() == b.len()
                    && a.iter_recorded()
                        .map(|v| (v.value_iterated_to(), v.count_at_value()))
                        .eq(b
                            .iter_recorded()
                            .map(|v| (v.value_iterated_to(), v.count_at_value())))
            });
        same_hists
            && self.seen == other.seen
            && self.total.stats == other.total.stats
            && self.total.status == other.total.status
    }
}

const MAGIC: &[u8; 8] = b"YCSBMEAS";
const FORMAT_VERSION: u32 = 1;
/// Largest pre-size [`Measurements::from_bytes`] allocates for (about 18 min).
const MAX_DECODED_PRESIZE_US: u64 = 1 << 30;

/// Why [`Measurements::from_bytes`] refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input does not start with `YCSBMEAS`.
    #[error("not serialized measurements (bad magic)")]
    BadMagic,
    /// The format version is not 1.
    #[error("unsupported measurements format version {0}")]
    UnsupportedVersion(u32),
    /// Significant digits, series, op kind or status counts differ from this build.
    #[error("measurements were written with a different layout")]
    Layout,
    /// The input ends early; the payload is the input length.
    #[error("serialized measurements truncated ({0} bytes)")]
    Truncated(usize),
    /// Bytes are left after the last status count.
    #[error("{0} trailing bytes after serialized measurements")]
    TrailingBytes(usize),
    /// A histogram value that no histogram can hold.
    #[error("histogram value {0} out of range")]
    BadValue(u64),
    /// A series' histogram count differs from its sample count.
    #[error("series {0}: histogram and sample counts disagree")]
    Inconsistent(&'static str),
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated(self.bytes.len()));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_values() -> Vec<(OpKind, Status, u64)> {
        let mut v = Vec::new();
        let mut x: u64 = 12345;
        for i in 0..5000u64 {
            // xorshift: a spread of latencies, some above 2048 µs and some
            // above the pre-size, to exercise rounding and resizing.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let op = OpKind::ALL[(x % 6) as usize];
            let status = if i % 17 == 0 {
                Status::NotFound
            } else if i % 23 == 0 {
                Status::Error
            } else {
                Status::Ok
            };
            let latency = match i % 100 {
                0 => 5_000_000 + x % 1000,
                1..=10 => 2_000 + x % 100_000,
                _ => x % 2_000,
            };
            v.push((op, status, latency));
        }
        v
    }

    #[test]
    fn names_match_java() {
        assert_eq!(OpKind::ReadModifyWrite.name(), "READ-MODIFY-WRITE");
        assert_eq!(
            OpKind::ReadModifyWrite.failed_name(),
            "READ-MODIFY-WRITE-FAILED"
        );
        assert_eq!(OpKind::Read.failed_name(), "READ-FAILED");
        assert_eq!(Status::ServiceUnavailable.name(), "SERVICE_UNAVAILABLE");
        assert_eq!(Status::BatchedOk.to_string(), "BATCHED_OK");
        assert!(Status::BatchedOk.is_ok() && Status::Ok.is_ok());
        assert!(!Status::NotFound.is_ok());
        for op in OpKind::ALL {
            assert_eq!(OpKind::from_name(op.name()), Some(op));
            assert_eq!(OpKind::ALL[op.index()], op);
        }
        for s in Status::ALL {
            assert_eq!(Status::from_name(s.name()), Some(s));
            assert_eq!(Status::ALL[s.index()], s);
        }
        for s in Series::ALL {
            assert_eq!(Series::ALL[s.index()], s);
            assert_eq!(Series::from_name(s.name()), Some(s));
        }
        assert_eq!(Series::Cleanup.name(), "CLEANUP");
    }

    #[test]
    fn failed_ops_go_to_failed_series_and_status_to_plain_name() {
        let mut m = Measurements::new();
        m.record(OpKind::Read, Status::Ok, 10);
        m.record(OpKind::Read, Status::NotFound, 20);
        m.record(OpKind::Update, Status::BatchedOk, 30);
        assert_eq!(m.operations(Series::Op(OpKind::Read)), 1);
        assert_eq!(m.operations(Series::Failed(OpKind::Read)), 1);
        assert_eq!(m.operations(Series::Op(OpKind::Update)), 1);
        assert_eq!(m.status_count(OpKind::Read, Status::Ok), 1);
        assert_eq!(m.status_count(OpKind::Read, Status::NotFound), 1);
        assert_eq!(m.status_count(OpKind::Update, Status::BatchedOk), 1);
        let present: Vec<_> = m.present_series().collect();
        assert_eq!(
            present,
            vec![
                Series::Op(OpKind::Read),
                Series::Op(OpKind::Update),
                Series::Failed(OpKind::Read)
            ]
        );
        // A kind that only failed still exists under its plain name.
        let mut f = Measurements::new();
        f.record(OpKind::Delete, Status::Error, 7);
        assert!(f.has_series(Series::Op(OpKind::Delete)));
        assert_eq!(f.operations(Series::Op(OpKind::Delete)), 0);
    }

    #[test]
    fn java_histogram_statistics() {
        let mut h = new_histogram(PRESIZED_HIGHEST_US);
        for v in [10, 20, 30, 40] {
            h.record(v).unwrap();
        }
        assert_eq!(hist_mean(&h), 25.0);
        assert_eq!(value_at_percentile(&h, 50.0), 20);
        assert_eq!(value_at_percentile(&h, 75.0), 30);
        assert_eq!(value_at_percentile(&h, 95.0), 40);
        assert_eq!(value_at_percentile(&h, 0.0), 10);
        assert_eq!(value_at_percentile(&h, 100.0), 40);
        // Above 2047 µs buckets are 2 wide: 2500 lies in [2500, 2501].
        h.record(2500).unwrap();
        assert_eq!(hist_max(&h), 2501);
        assert_eq!(hist_mean(&h), (10.0 + 20.0 + 30.0 + 40.0 + 2501.0) / 5.0);
        // The one-ulp nudge: 99.9 % of 1000 samples is rank 999, not 1000.
        let mut g = new_histogram(PRESIZED_HIGHEST_US);
        for v in 1..=1000 {
            g.record(v).unwrap();
        }
        assert_eq!(value_at_percentile(&g, 99.9), 999);
        assert_eq!(value_at_percentile(&g, 99.0), 990);
        assert_eq!(value_at_percentile(&g, 50.0), 500);
        let empty = new_histogram(PRESIZED_HIGHEST_US);
        assert_eq!(
            (hist_min(&empty), hist_max(&empty), hist_mean(&empty)),
            (0, 0, 0.0)
        );
        assert_eq!(value_at_percentile(&empty, 99.0), 0);
    }

    #[test]
    fn totals_without_intervals_are_the_same() {
        let mut with = Measurements::new();
        let mut without = Measurements::new().without_intervals();
        for &(op, st, lat) in &sample_values() {
            with.record(op, st, lat);
            without.record(op, st, lat);
        }
        assert_eq!(with, without);
        let (iw, io) = (with.take_interval(), without.take_interval());
        assert_eq!(
            iw.operations(Series::Op(OpKind::Read)),
            with.operations(Series::Op(OpKind::Read))
        );
        assert!(iw.operations(Series::Op(OpKind::Read)) > 0);
        assert_eq!(
            io.operations(Series::Op(OpKind::Read)),
            0,
            "no interval was kept"
        );
        // The series still exist in the (empty) interval, as Java prints them.
        assert_eq!(
            io.present_series().count(),
            without.present_series().count()
        );
    }

    #[test]
    fn merge_of_threads_equals_single_recorder() {
        let samples = sample_values();
        let mut single = Measurements::new();
        let mut a = Measurements::new();
        let mut b = Measurements::with_presize(100);
        for (i, &(op, st, lat)) in samples.iter().enumerate() {
            single.record(op, st, lat);
            if i % 3 == 0 {
                a.record(op, st, lat);
            } else {
                b.record(op, st, lat);
            }
        }
        single.record_cleanup(77);
        b.record_cleanup(77);
        let mut merged = Measurements::new();
        merged.merge(&a);
        merged.merge(&b);
        assert_eq!(merged, single);
        for s in Series::ALL {
            assert_eq!(merged.stats(s), single.stats(s), "{s}");
            assert_eq!(
                hist_mean(merged.histogram(s)),
                hist_mean(single.histogram(s))
            );
            for p in [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0] {
                assert_eq!(merged.percentile(s, p), single.percentile(s, p), "{s} {p}");
            }
        }
        // The merged intervals match too.
        assert_eq!(merged.take_interval(), single.take_interval());
        // And something actually differs when a sample is missing.
        a.record(OpKind::Read, Status::Ok, 1);
        let mut merged2 = Measurements::new();
        merged2.merge(&a);
        merged2.merge(&b);
        assert_ne!(merged2, single);
    }

    #[test]
    fn exact_stats_beside_histogram() {
        let mut m = Measurements::new();
        for v in [2500, 3001, 7] {
            m.record(OpKind::Scan, Status::Ok, v);
        }
        let s = m.stats(Series::Op(OpKind::Scan));
        assert_eq!(
            s,
            SeriesStats {
                count: 3,
                min: 7,
                max: 3001,
                sum: 5508
            }
        );
        assert_eq!(s.mean(), 1836.0);
        assert_eq!(hist_max(m.histogram(Series::Op(OpKind::Scan))), 3001);
    }

    #[test]
    fn serialization_round_trip() {
        let mut m = Measurements::new();
        for (op, st, lat) in sample_values() {
            m.record(op, st, lat);
        }
        m.record_latency(OpKind::ReadModifyWrite, 1234);
        m.record_cleanup(99);
        let bytes = m.to_bytes();
        let back = Measurements::from_bytes(&bytes).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.to_bytes(), bytes);
        for s in Series::ALL {
            assert_eq!(back.percentile(s, 99.9), m.percentile(s, 99.9));
            assert_eq!(hist_max(back.histogram(s)), hist_max(m.histogram(s)));
            assert_eq!(hist_min(back.histogram(s)), hist_min(m.histogram(s)));
        }
        // An empty one too.
        let e = Measurements::new();
        assert_eq!(Measurements::from_bytes(&e.to_bytes()).unwrap(), e);
    }

    #[test]
    fn malformed_input_is_an_error() {
        let mut m = Measurements::new();
        m.record(OpKind::Read, Status::Ok, 5);
        let bytes = m.to_bytes();
        // Every cut in the header and first series, then a sample of the rest
        // (each decode allocates fresh histograms, which is slow unoptimized).
        for cut in (0..100).chain((100..bytes.len()).step_by(29)) {
            assert!(
                Measurements::from_bytes(&bytes[..cut]).is_err(),
                "cut {cut}"
            );
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert_eq!(
            Measurements::from_bytes(&extra),
            Err(DecodeError::TrailingBytes(1))
        );
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert_eq!(Measurements::from_bytes(&bad), Err(DecodeError::BadMagic));
        let mut v2 = bytes.clone();
        v2[8] = 2;
        assert_eq!(
            Measurements::from_bytes(&v2),
            Err(DecodeError::UnsupportedVersion(2))
        );
        // Series READ: its sample count sits right after the 26-byte header.
        let mut wrong = bytes.clone();
        wrong[26] = 2;
        assert_eq!(
            Measurements::from_bytes(&wrong),
            Err(DecodeError::Inconsistent("READ"))
        );
        // A huge bucket count must not be trusted.
        let mut huge = bytes;
        huge[26 + 32..26 + 40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Measurements::from_bytes(&huge).is_err());
    }

    #[test]
    fn intervals() {
        let mut m = Measurements::new();
        m.record(OpKind::Read, Status::Ok, 10);
        m.record(OpKind::Read, Status::NotFound, 11);
        let i1 = m.take_interval();
        assert_eq!(i1.operations(Series::Op(OpKind::Read)), 1);
        assert_eq!(i1.operations(Series::Failed(OpKind::Read)), 1);
        assert_eq!(i1.status_count(OpKind::Read, Status::NotFound), 1);
        m.record(OpKind::Read, Status::Ok, 30);
        m.record(OpKind::Read, Status::Ok, 40);
        let i2 = m.take_interval();
        assert_eq!(i2.operations(Series::Op(OpKind::Read)), 2);
        assert_eq!(i2.percentile(Series::Op(OpKind::Read), 0.0), 30);
        // The failed series still exists, with no samples in this interval.
        assert!(i2.has_series(Series::Failed(OpKind::Read)));
        assert_eq!(i2.operations(Series::Failed(OpKind::Read)), 0);
        // Run totals are untouched.
        assert_eq!(m.operations(Series::Op(OpKind::Read)), 3);
        let i3 = m.take_interval();
        assert_eq!(i3.operations(Series::Op(OpKind::Read)), 0);
        // Draining several threads into one reused snapshot.
        let mut t1 = Measurements::new();
        let mut t2 = Measurements::new();
        t1.record(OpKind::Update, Status::Ok, 5);
        t2.record(OpKind::Update, Status::Ok, 6);
        let mut snap = Measurements::new();
        t1.drain_interval_into(&mut snap);
        t2.drain_interval_into(&mut snap);
        assert_eq!(snap.operations(Series::Op(OpKind::Update)), 2);
        snap.clear();
        assert_eq!(snap.operations(Series::Op(OpKind::Update)), 0);
        assert!(!snap.has_series(Series::Op(OpKind::Update)));
    }
}
