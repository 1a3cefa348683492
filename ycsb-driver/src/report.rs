//! Java YCSB's text report and status lines, and a latency plot (SVG, CSV).
//!
//! [`write_text_report`] prints what Java's `TextMeasurementsExporter` prints at
//! the end of a run, [`status_line`] what Java's `StatusThread` prints every
//! status interval, with Java's number formatting ([`java_double_to_string`]
//! for `Double.toString`, [`java_decimal_format`] for `DecimalFormat("#.##")`).
//!
//! Differences from Java, all deliberate:
//! - no `[TOTAL_GCS_*]`, `[TOTAL_GC_TIME*]` lines (there is no JVM);
//! - measurements come in a fixed order ([`Series::ALL`]; Java iterates a
//!   `ConcurrentHashMap`) and return codes in `Status` declaration order;
//! - the status line's date is UTC (Java uses the JVM's time zone).

use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::Duration;

use crate::measure::{
    hist_max, hist_mean, hist_min, value_at_percentile, Measurements, Series, Status,
};

/// Java's default `hdrhistogram.percentiles`: `50,95,99`.
pub const DEFAULT_PERCENTILES: [f64; 3] = [50.0, 95.0, 99.0];

/// Percentiles the status line prints for each measurement.
pub const STATUS_PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];

// ---------------------------------------------------------------------------
// Java number formatting
// ---------------------------------------------------------------------------

/// Java's `Double.toString(x)` (JDK 19 and later, which print the shortest
/// decimal that reads back as `x`): `1000.0`, `0.5`, `810.3727714748784`, and
/// computerized scientific notation outside `[1e-3, 1e7)`: `1.0E7`, `1.0E-4`.
/// `NaN`, `Infinity`, `-Infinity`, `0.0` and `-0.0` as Java spells them.
///
/// (JDKs before 19 occasionally printed a digit more than needed.)
pub fn java_double_to_string(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if x == 0.0 {
        return format!("{sign}0.0");
    }
    let a = x.abs();
    let (digits, exp) = shortest_digits(a);
    let n = digits.len() as i32;
    let mut out = String::from(sign);
    if (1e-3..1e7).contains(&a) {
        if exp >= 0 {
            let int_len = exp + 1;
            if n <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', (int_len - n) as usize));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len as usize]);
                out.push('.');
                out.push_str(&digits[int_len as usize..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        out.push('.');
        out.push_str(if n > 1 { &digits[1..] } else { "0" });
        let _ = write!(out, "E{exp}");
    }
    out
}

/// Shortest round-tripping significant digits of `a > 0` (no trailing zeros)
/// and the decimal exponent of the first one.
///
/// Java breaks a tie of one-digit candidates differently: when one digit is
/// enough it picks the closest *two*-digit decimal (`4.9E-324`, not `5e-324`);
/// that matters only for a few subnormals.
fn shortest_digits(a: f64) -> (String, i32) {
    let parse = |s: &str| -> (String, i32) {
        let (mantissa, exp) = s.split_once('e').unwrap_or((s, "0"));
        let mut digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        while digits.len() > 1 && digits.ends_with('0') {
            digits.pop();
        }
        (digits, exp.parse().unwrap_or(0))
    };
    let shortest = parse(&format!("{a:e}"));
    if shortest.0.len() == 1 {
        let two = format!("{a:.1e}");
        if two.parse::<f64>() == Ok(a) {
            return parse(&two);
        }
    }
    shortest
}

/// Java's `new DecimalFormat("#.##").format(x)`: at most two decimals,
/// rounded half-even on the exact binary value, trailing zeros and a bare
/// decimal point dropped, no grouping: `0.5`, `1234.57`, `0.12` (for 0.125),
/// `2`, `0`; `-0` for small negatives; `NaN` and `∞` as Java's default
/// symbols spell them.
pub fn java_decimal_format(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "\u{221e}" } else { "-\u{221e}" }.to_string();
    }
    let a = x.abs();
    // Java rounds the shortest digits of the double, resolving ties on the
    // exact value; below 2^53 that is rounding the exact value (what `{:.2}`
    // does), and above it the double is an integer whose shortest digits
    // Rust's `Display` prints, zero-padded like Java's.
    let fixed = if a < 9_007_199_254_740_992.0 {
        format!("{a:.2}")
    } else {
        format!("{a}")
    };
    let trimmed = if fixed.contains('.') {
        fixed.trim_end_matches('0').trim_end_matches('.')
    } else {
        &fixed
    };
    let mut out = String::with_capacity(trimmed.len() + 1);
    if x.is_sign_negative() {
        out.push('-');
    }
    out.push_str(trimmed);
    out
}

/// The percentile part of a report metric, as Java's
/// `OneMeasurementHdrHistogram.ordinal` makes it: `50th`, `1st`, `2nd`, `3rd`,
/// `11th`, `21st` for whole numbers, `Double.toString` otherwise (`99.9`).
pub fn percentile_label(p: f64) -> String {
    const SUFFIXES: [&str; 10] = ["th", "st", "nd", "rd", "th", "th", "th", "th", "th", "th"];
    if p % 1.0 == 0.0 {
        // Java's Double.intValue(): saturating, like `as`.
        let j = p as i32;
        let suffix = match j % 100 {
            11..=13 => "th",
            _ => SUFFIXES[(j % 10).unsigned_abs() as usize],
        };
        format!("{j}{suffix}")
    } else {
        java_double_to_string(p)
    }
}

// ---------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------

/// Writes Java YCSB's text report (`TextMeasurementsExporter`), one
/// `[NAME], metric, value` line each, `\n`-terminated:
///
/// ```text
/// [OVERALL], RunTime(ms), 1234
/// [OVERALL], Throughput(ops/sec), 810.3727714748784
/// [READ], Operations, 500
/// [READ], AverageLatency(us), 123.4
/// [READ], MinLatency(us), 10
/// [READ], MaxLatency(us), 999
/// [READ], 50thPercentileLatency(us), 100
/// [READ], Return=OK, 500
/// ```
///
/// Throughput is `1000.0 * total_ops / runtime_ms` as a Java double; each
/// existing measurement ([`Measurements::present_series`]) prints its
/// histogram's count, mean, min, max and one line per entry of `percentiles`
/// (Java's `hdrhistogram.percentiles`, e.g. [`DEFAULT_PERCENTILES`]), then,
/// for the plain operation names only, `Return=STATUS` counts.
pub fn write_text_report(
    w: &mut impl Write,
    runtime_ms: u64,
    total_ops: u64,
    m: &Measurements,
    percentiles: &[f64],
) -> io::Result<()> {
    writeln!(w, "[OVERALL], RunTime(ms), {runtime_ms}")?;
    let throughput = 1000.0 * total_ops as f64 / runtime_ms as f64;
    writeln!(
        w,
        "[OVERALL], Throughput(ops/sec), {}",
        java_double_to_string(throughput)
    )?;
    for series in m.present_series() {
        let name = series.name();
        let h = m.histogram(series);
        writeln!(w, "[{name}], Operations, {}", h.len())?;
        writeln!(
            w,
            "[{name}], AverageLatency(us), {}",
            java_double_to_string(hist_mean(h))
        )?;
        writeln!(w, "[{name}], MinLatency(us), {}", hist_min(h))?;
        writeln!(w, "[{name}], MaxLatency(us), {}", hist_max(h))?;
        for &p in percentiles {
            writeln!(
                w,
                "[{name}], {}PercentileLatency(us), {}",
                percentile_label(p),
                value_at_percentile(h, p)
            )?;
        }
        if let Series::Op(op) = series {
            for status in Status::ALL {
                let n = m.status_count(op, status);
                if n > 0 {
                    writeln!(w, "[{name}], Return={status}, {n}")?;
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Status lines
// ---------------------------------------------------------------------------

/// What Java's `StatusThread.computeStats` knows when it prints a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusInfo<'a> {
    /// Java's `status.label` property, printed right before the date (usually empty).
    pub label: &'a str,
    /// Wall-clock time of the line, since the Unix epoch; printed in UTC.
    pub wall_clock: Duration,
    /// Milliseconds since the run started.
    pub elapsed_ms: u64,
    /// Milliseconds since the previous status line (since the start for the first).
    pub interval_ms: u64,
    /// Operations completed by all threads so far.
    pub total_ops: u64,
    /// `total_ops` at the previous status line (0 for the first).
    pub last_total_ops: u64,
    /// Operations still to do (0 when the run is bounded by time only).
    pub todo_ops: u64,
}

/// Java's status line (without the line terminator):
///
/// ```text
/// 2026-11-22 04:50:01:123 10 sec: 12345 operations; 1234.5 current ops/sec; est completion in 1 minute [READ: Count=6000, Max=..., Min=..., Avg=..., 50=..., 90=..., 99=..., 99.9=..., 99.99=...] [UPDATE: ...]
/// ```
///
/// `interval` holds what was measured since the previous line (see
/// [`Measurements::take_interval`]); every measurement that exists there is
/// summarized, even with no samples in this interval, each summary followed
/// by a space, as Java does. The throughput part is left out while
/// `total_ops` is 0 and the estimate while `todo_ops` is 0. The estimate is
/// `ceil(todo_ops / overall throughput)` seconds in Java's
/// `RemainingFormatter` wording ([`format_remaining`]).
pub fn status_line(info: &StatusInfo<'_>, interval: &Measurements) -> String {
    let throughput = 1000.0 * (info.total_ops as f64 / info.elapsed_ms as f64);
    let done_in_interval = info.total_ops.wrapping_sub(info.last_total_ops) as i64;
    let current = 1000.0 * (done_in_interval as f64 / info.interval_ms as f64);
    // Java's (long) cast: saturating, NaN to 0; `as` does the same.
    let remaining = (info.todo_ops as f64 / throughput).ceil() as i64;

    let mut msg = String::with_capacity(256);
    msg.push_str(info.label);
    msg.push_str(&format_utc_timestamp(info.wall_clock));
    let _ = write!(
        msg,
        " {} sec: {} operations; ",
        info.elapsed_ms / 1000,
        info.total_ops
    );
    if info.total_ops != 0 {
        msg.push_str(&java_decimal_format(current));
        msg.push_str(" current ops/sec; ");
    }
    if info.todo_ops != 0 {
        msg.push_str("est completion in ");
        msg.push_str(&format_remaining(remaining));
    }
    msg.push_str(&measurement_summary(interval));
    msg
}

/// Java's `Measurements.getSummary()`: `[NAME: Count=.., Max=.., Min=..,
/// Avg=.., 50=.., 90=.., 99=.., 99.9=.., 99.99=..] ` for each existing
/// measurement, each followed by a space.
pub fn measurement_summary(m: &Measurements) -> String {
    let mut s = String::new();
    for series in m.present_series() {
        let h = m.histogram(series);
        let _ = write!(
            s,
            "[{}: Count={}, Max={}, Min={}, Avg={}",
            series.name(),
            h.len(),
            hist_max(h),
            hist_min(h),
            java_decimal_format(hist_mean(h))
        );
        for p in STATUS_PERCENTILES {
            let _ = write!(
                s,
                ", {}={}",
                java_double_label(p),
                value_at_percentile(h, p)
            );
        }
        s.push_str("] ");
    }
    s
}

/// `50`, `99.9`: the percentile keys of the status line.
fn java_double_label(p: f64) -> String {
    if p % 1.0 == 0.0 {
        format!("{}", p as i64)
    } else {
        java_double_to_string(p)
    }
}

/// Java's `RemainingFormatter.format(seconds)`, trailing space included:
/// `2 days 3 hours `, `1 hour 5 minutes `, `1 minute `, and below a minute
/// `7 second ` / `42 seconds ` (Java picks the plural by the length of the
/// text so far, so one-digit counts come out singular; reproduced).
pub fn format_remaining(seconds: i64) -> String {
    let mut secs = seconds;
    let mut t = String::new();
    let days = secs / 86_400;
    if days > 0 {
        let _ = write!(t, "{days}{}", if days == 1 { " day " } else { " days " });
        secs -= days * 86_400;
    }
    let hours = secs / 3_600;
    if hours > 0 {
        let _ = write!(
            t,
            "{hours}{}",
            if hours == 1 { " hour " } else { " hours " }
        );
        secs -= hours * 3_600;
    }
    if days < 1 {
        let minutes = secs / 60;
        if minutes > 0 {
            let _ = write!(
                t,
                "{minutes}{}",
                if minutes == 1 {
                    " minute "
                } else {
                    " minutes "
                }
            );
            // Java subtracts a wrong amount here, but never reads `seconds`
            // again once something was printed.
        }
    }
    if t.is_empty() {
        let _ = write!(t, "{secs}");
        t.push_str(if t.len() == 1 {
            " second "
        } else {
            " seconds "
        });
    }
    t
}

/// `yyyy-MM-dd HH:mm:ss:SSS` (Java `SimpleDateFormat`) of a time since the
/// Unix epoch, in UTC: `2026-11-22 04:50:01:123`.
pub fn format_utc_timestamp(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let millis = since_epoch.subsec_millis();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}:{millis:03}",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

// ---------------------------------------------------------------------------
// Latency plot
// ---------------------------------------------------------------------------

/// Percentiles at which [`write_csv`] and [`write_svg_plot`] sample each
/// latency curve. The plot's x axis runs over "nines" (see [`nines`]) from
/// 0 to 5, with ticks at 0, 90, 99, 99.9, 99.99 and 99.999.
pub const PLOT_PERCENTILES: [f64; 12] = [
    0.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999,
];

/// Position of a percentile on the "nines" axis: `-log10(1 - p/100)`, so
/// 0 → 0, 90 → 1, 99 → 2, 99.9 → 3.
pub fn nines(percentile: f64) -> f64 {
    if percentile <= 0.0 {
        0.0
    } else {
        -(1.0 - percentile / 100.0).log10()
    }
}

/// The series that get a latency curve: existing ones with samples, except
/// `CLEANUP` (one sample per thread, and unrelated to operation latency).
pub fn plotted_series(m: &Measurements) -> Vec<Series> {
    m.present_series()
        .filter(|&s| s != Series::Cleanup && !m.histogram(s).is_empty())
        .collect()
}

/// `(percentile, latency_us)` at each of [`PLOT_PERCENTILES`], Java semantics.
pub fn percentile_curve(m: &Measurements, series: Series) -> Vec<(f64, u64)> {
    let h = m.histogram(series);
    PLOT_PERCENTILES
        .iter()
        .map(|&p| (p, value_at_percentile(h, p)))
        .collect()
}

/// Writes the latency curves as CSV: header `operation,percentile,latency_us`,
/// then one row per [`plotted_series`] and [`PLOT_PERCENTILES`] entry, e.g.
/// `READ,99.9,1234` (percentiles printed in Rust's shortest form).
pub fn write_csv(w: &mut impl Write, m: &Measurements) -> io::Result<()> {
    writeln!(w, "operation,percentile,latency_us")?;
    for series in plotted_series(m) {
        for (p, v) in percentile_curve(m, series) {
            writeln!(w, "{},{p},{v}", series.name())?;
        }
    }
    Ok(())
}

const PALETTE: [&str; Series::COUNT] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31",
];

/// Escapes text for SVG (XML) content and attribute values.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

/// Writes a self-contained SVG plot of the latency curves: x is the
/// percentile on the nines axis (ticks 0, 90, 99, 99.9, 99.99, 99.999 %), y
/// the latency in µs on a log scale (whole decades; 0 µs drawn at the
/// bottom), one coloured polyline (`data-series="READ"`) with dots per
/// [`plotted_series`], a legend with sample counts, and `title` on top.
pub fn write_svg_plot(w: &mut impl Write, title: &str, m: &Measurements) -> io::Result<()> {
    let curves: Vec<(Series, Vec<(f64, u64)>)> = plotted_series(m)
        .iter()
        .map(|&s| (s, percentile_curve(m, s)))
        .collect();
    let frame = Frame::around(&curves);
    let mut s = String::with_capacity(8192);
    frame.header(&mut s, &xml_escape(title));
    frame.grid(&mut s);
    frame.labels(&mut s);
    if curves.is_empty() {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">no data</text>"#,
            (Frame::LEFT + Frame::RIGHT) / 2.0,
            (Frame::TOP + Frame::BOTTOM) / 2.0
        );
    }
    for (series, curve) in &curves {
        frame.curve(&mut s, *series, curve);
    }
    legend(&mut s, m, &curves);
    s.push_str("</svg>\n");
    w.write_all(s.as_bytes())
}

/// The plot's geometry: the page, the plotting area, and the decades the
/// latency axis spans.
struct Frame {
    lo_dec: i32,
    hi_dec: i32,
}

impl Frame {
    const WIDTH: f64 = 960.0;
    const HEIGHT: f64 = 520.0;
    const LEFT: f64 = 80.0;
    const RIGHT: f64 = 660.0;
    const TOP: f64 = 50.0;
    const BOTTOM: f64 = 450.0;
    /// The nines the x axis reaches.
    const X_MAX: f64 = 5.0;
    const X_TICKS: [(f64, &'static str); 6] = [
        (0.0, "0%"),
        (90.0, "90%"),
        (99.0, "99%"),
        (99.9, "99.9%"),
        (99.99, "99.99%"),
        (99.999, "99.999%"),
    ];

    /// Whole decades around every value of `curves` (at least one).
    fn around(curves: &[(Series, Vec<(f64, u64)>)]) -> Frame {
        let values = curves.iter().flat_map(|(_, c)| c.iter().map(|&(_, v)| v));
        let lo_val = values.clone().min().unwrap_or(1).max(1);
        let hi_val = values.max().unwrap_or(1000).max(1);
        let lo_dec = (lo_val as f64).log10().floor() as i32;
        let hi_dec = ((hi_val as f64).log10().ceil() as i32).max(lo_dec + 1);
        Frame { lo_dec, hi_dec }
    }

    fn x_of(&self, p: f64) -> f64 {
        Self::LEFT + (nines(p).min(Self::X_MAX) / Self::X_MAX) * (Self::RIGHT - Self::LEFT)
    }

    fn y_of(&self, v: u64) -> f64 {
        let l = (v.max(1) as f64).log10();
        let t = (l - f64::from(self.lo_dec)) / f64::from(self.hi_dec - self.lo_dec);
        Self::BOTTOM - t.clamp(0.0, 1.0) * (Self::BOTTOM - Self::TOP)
    }

    /// The y of decade `d`'s grid line.
    fn y_of_decade(&self, d: i32) -> f64 {
        let t = f64::from(d - self.lo_dec) / f64::from(self.hi_dec - self.lo_dec);
        Self::BOTTOM - t * (Self::BOTTOM - Self::TOP)
    }

    /// The XML declaration, the `<svg>` element, the background and the
    /// title (already escaped).
    fn header(&self, s: &mut String, title: &str) {
        let (w, h) = (Self::WIDTH, Self::HEIGHT);
        let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, "<title>{title}</title>");
        let _ = writeln!(
            s,
            r#"<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="28" text-anchor="middle" font-size="16">{title}</text>"#,
            (Self::LEFT + Self::RIGHT) / 2.0
        );
    }

    /// The grid lines at the ticks, and the axes.
    fn grid(&self, s: &mut String) {
        let (left, right, top, bottom) = (Self::LEFT, Self::RIGHT, Self::TOP, Self::BOTTOM);
        let _ = writeln!(s, r##"<g class="grid" stroke="#dddddd" stroke-width="1">"##);
        for (p, _) in Self::X_TICKS {
            let x = self.x_of(p);
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}"/>"#
            );
        }
        for d in self.lo_dec..=self.hi_dec {
            let y = self.y_of_decade(d);
            let _ = writeln!(
                s,
                r#"<line x1="{left:.1}" y1="{y:.1}" x2="{right:.1}" y2="{y:.1}"/>"#
            );
        }
        s.push_str("</g>\n");
        let _ = writeln!(s, r#"<g class="axes" stroke="black" stroke-width="1">"#);
        let _ = writeln!(
            s,
            r#"<line x1="{left:.1}" y1="{bottom:.1}" x2="{right:.1}" y2="{bottom:.1}"/>"#
        );
        let _ = writeln!(
            s,
            r#"<line x1="{left:.1}" y1="{top:.1}" x2="{left:.1}" y2="{bottom:.1}"/>"#
        );
        s.push_str("</g>\n");
    }

    /// The tick labels and the axis titles.
    fn labels(&self, s: &mut String) {
        let _ = writeln!(s, r#"<g class="tick-labels">"#);
        for (p, label) in Self::X_TICKS {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
                self.x_of(p),
                Self::BOTTOM + 18.0
            );
        }
        for d in self.lo_dec..=self.hi_dec {
            let label = 10_u128.pow(d.clamp(0, 38) as u32);
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#,
                Self::LEFT - 6.0,
                self.y_of_decade(d) + 4.0
            );
        }
        s.push_str("</g>\n");
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>"#,
            (Self::LEFT + Self::RIGHT) / 2.0,
            Self::BOTTOM + 42.0
        );
        let _ = writeln!(
            s,
            r#"<text x="20" y="{0:.1}" text-anchor="middle" transform="rotate(-90 20 {0:.1})">latency (us)</text>"#,
            (Self::TOP + Self::BOTTOM) / 2.0
        );
    }

    /// One series: its polyline, and a dot with a tooltip per point.
    fn curve(&self, s: &mut String, series: Series, curve: &[(f64, u64)]) {
        let color = PALETTE[series.index()];
        let name = series.name();
        let points: Vec<String> = curve
            .iter()
            .map(|&(p, v)| format!("{:.1},{:.1}", self.x_of(p), self.y_of(v)))
            .collect();
        let _ = writeln!(
            s,
            r#"<g class="series" data-series="{name}" fill="{color}">"#
        );
        let _ = writeln!(
            s,
            r#"<polyline data-series="{name}" points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            pts = points.join(" ")
        );
        for &(p, v) in curve {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5"><title>{name} p{p}: {v} us</title></circle>"#,
                self.x_of(p),
                self.y_of(v),
            );
        }
        s.push_str("</g>\n");
    }
}

/// The legend: each series' colour, name and sample count.
fn legend(s: &mut String, m: &Measurements, curves: &[(Series, Vec<(f64, u64)>)]) {
    let _ = writeln!(s, r#"<g class="legend">"#);
    for (i, (series, _)) in curves.iter().enumerate() {
        let y = Frame::TOP + 10.0 + 20.0 * i as f64;
        let color = PALETTE[series.index()];
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{color}" stroke-width="3"/>"#,
            Frame::RIGHT + 15.0,
            Frame::RIGHT + 40.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{} ({} ops)</text>"#,
            Frame::RIGHT + 46.0,
            y + 4.0,
            series.name(),
            m.histogram(*series).len()
        );
    }
    s.push_str("</g>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::OpKind;

    #[test]
    fn java_double_formatting() {
        // Expected strings are what JDK 25 prints for Double.toString (JDK 17
        // differs only for 1.0E23, which it prints as 9.999999999999999E22).
        let cases: [(f64, &str); 22] = [
            (1000.0, "1000.0"),
            (0.5, "0.5"),
            (123.456, "123.456"),
            (1.0e7, "1.0E7"),
            (1.0e-4, "1.0E-4"),
            (810.3727714748784, "810.3727714748784"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.001, "0.001"),
            (9_999_999.0, "9999999.0"),
            (12_345_678.9, "1.23456789E7"),
            (1.0e23, "1.0E23"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.0 / 3.0, "0.3333333333333333"),
            (25.0, "25.0"),
            (2.0e-3, "0.002"),
            (5.0e-324, "4.9E-324"),
            (f64::MAX, "1.7976931348623157E308"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (x, want) in cases {
            assert_eq!(java_double_to_string(x), want, "{x:e}");
        }
        assert_eq!(java_double_to_string(f64::INFINITY), "Infinity");
    }

    #[test]
    fn java_decimal_formatting() {
        // Java: new DecimalFormat("#.##").format(x)
        // Expected strings are what JDK 17 and 25 print.
        let cases: [(f64, &str); 15] = [
            (0.0, "0"),
            (0.5, "0.5"),
            (1234.5, "1234.5"),
            (1234.5678, "1234.57"),
            (0.125, "0.12"),
            (0.375, "0.38"),
            (-0.001, "-0"),
            (1.2345678901234567e20, "123456789012345670000"),
            (f64::NAN, "NaN"),
            (2.0, "2"),
            (0.001, "0"),
            (1.005, "1"),
            (99.999, "100"),
            (123456789.0, "123456789"),
            (7.255, "7.25"),
        ];
        for (x, want) in cases {
            assert_eq!(java_decimal_format(x), want, "{x}");
        }
        assert_eq!(java_decimal_format(f64::INFINITY), "\u{221e}");
    }

    #[test]
    fn percentile_labels_follow_java_ordinal() {
        let cases: [(f64, &str); 9] = [
            (50.0, "50th"),
            (95.0, "95th"),
            (99.0, "99th"),
            (1.0, "1st"),
            (2.0, "2nd"),
            (3.0, "3rd"),
            (11.0, "11th"),
            (21.0, "21st"),
            (99.9, "99.9"),
        ];
        for (p, want) in cases {
            assert_eq!(percentile_label(p), want);
        }
        assert_eq!(percentile_label(99.99), "99.99");
    }

    fn small_measurements() -> Measurements {
        let mut m = Measurements::new();
        for v in [10, 20, 30, 40] {
            m.record(OpKind::Read, Status::Ok, v);
        }
        m.record(OpKind::Read, Status::NotFound, 5);
        for v in [100, 100, 100, 2500] {
            m.record(OpKind::Update, Status::Ok, v);
        }
        m.record_latency(OpKind::ReadModifyWrite, 77);
        m.record_cleanup(3);
        m
    }

    #[test]
    fn text_report_exact() {
        let m = small_measurements();
        let mut out = Vec::new();
        write_text_report(&mut out, 1234, 10, &m, &[50.0, 95.0, 99.0, 99.9]).unwrap();
        let expected = "\
[OVERALL], RunTime(ms), 1234
[OVERALL], Throughput(ops/sec), 8.103727714748784
[READ], Operations, 4
[READ], AverageLatency(us), 25.0
[READ], MinLatency(us), 10
[READ], MaxLatency(us), 40
[READ], 50thPercentileLatency(us), 20
[READ], 95thPercentileLatency(us), 40
[READ], 99thPercentileLatency(us), 40
[READ], 99.9PercentileLatency(us), 40
[READ], Return=OK, 4
[READ], Return=NOT_FOUND, 1
[UPDATE], Operations, 4
[UPDATE], AverageLatency(us), 700.25
[UPDATE], MinLatency(us), 100
[UPDATE], MaxLatency(us), 2501
[UPDATE], 50thPercentileLatency(us), 100
[UPDATE], 95thPercentileLatency(us), 2501
[UPDATE], 99thPercentileLatency(us), 2501
[UPDATE], 99.9PercentileLatency(us), 2501
[UPDATE], Return=OK, 4
[READ-MODIFY-WRITE], Operations, 1
[READ-MODIFY-WRITE], AverageLatency(us), 77.0
[READ-MODIFY-WRITE], MinLatency(us), 77
[READ-MODIFY-WRITE], MaxLatency(us), 77
[READ-MODIFY-WRITE], 50thPercentileLatency(us), 77
[READ-MODIFY-WRITE], 95thPercentileLatency(us), 77
[READ-MODIFY-WRITE], 99thPercentileLatency(us), 77
[READ-MODIFY-WRITE], 99.9PercentileLatency(us), 77
[READ-FAILED], Operations, 1
[READ-FAILED], AverageLatency(us), 5.0
[READ-FAILED], MinLatency(us), 5
[READ-FAILED], MaxLatency(us), 5
[READ-FAILED], 50thPercentileLatency(us), 5
[READ-FAILED], 95thPercentileLatency(us), 5
[READ-FAILED], 99thPercentileLatency(us), 5
[READ-FAILED], 99.9PercentileLatency(us), 5
[CLEANUP], Operations, 1
[CLEANUP], AverageLatency(us), 3.0
[CLEANUP], MinLatency(us), 3
[CLEANUP], MaxLatency(us), 3
[CLEANUP], 50thPercentileLatency(us), 3
[CLEANUP], 95thPercentileLatency(us), 3
[CLEANUP], 99thPercentileLatency(us), 3
[CLEANUP], 99.9PercentileLatency(us), 3
";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn text_report_overall_only_and_failed_only() {
        let mut out = Vec::new();
        write_text_report(
            &mut out,
            1000,
            1000,
            &Measurements::new(),
            &DEFAULT_PERCENTILES,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[OVERALL], RunTime(ms), 1000\n[OVERALL], Throughput(ops/sec), 1000.0\n"
        );
        // A kind whose operations all failed: Java still prints the plain
        // name, with an empty histogram, because the return codes live there.
        let mut m = Measurements::new();
        m.record(OpKind::Insert, Status::Error, 9);
        let mut out = Vec::new();
        write_text_report(&mut out, 0, 0, &m, &[99.0]).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\
[OVERALL], RunTime(ms), 0
[OVERALL], Throughput(ops/sec), NaN
[INSERT], Operations, 0
[INSERT], AverageLatency(us), 0.0
[INSERT], MinLatency(us), 0
[INSERT], MaxLatency(us), 0
[INSERT], 99thPercentileLatency(us), 0
[INSERT], Return=ERROR, 1
[INSERT-FAILED], Operations, 1
[INSERT-FAILED], AverageLatency(us), 9.0
[INSERT-FAILED], MinLatency(us), 9
[INSERT-FAILED], MaxLatency(us), 9
[INSERT-FAILED], 99thPercentileLatency(us), 9
"
        );
    }

    #[test]
    fn utc_timestamps() {
        // 2026-11-22 04:50:01 UTC is 1795323001 s after the epoch.
        let t = Duration::from_millis(1_795_323_001_123);
        assert_eq!(format_utc_timestamp(t), "2026-11-22 04:50:01:123");
        assert_eq!(
            format_utc_timestamp(Duration::ZERO),
            "1970-01-01 00:00:00:000"
        );
        // 2024-02-29 23:59:59.999 (leap day) and 2000-03-01.
        assert_eq!(
            format_utc_timestamp(Duration::from_millis(1_709_251_199_999)),
            "2024-02-29 23:59:59:999"
        );
        assert_eq!(
            format_utc_timestamp(Duration::from_secs(951_868_800)),
            "2000-03-01 00:00:00:000"
        );
    }

    #[test]
    fn remaining_time_wording() {
        assert_eq!(format_remaining(0), "0 second ");
        assert_eq!(format_remaining(7), "7 second ");
        assert_eq!(format_remaining(42), "42 seconds ");
        assert_eq!(format_remaining(60), "1 minute ");
        assert_eq!(format_remaining(125), "2 minutes ");
        assert_eq!(format_remaining(3_600 + 61), "1 hour 1 minute ");
        assert_eq!(
            format_remaining(2 * 86_400 + 3 * 3_600 + 120),
            "2 days 3 hours "
        );
        assert_eq!(format_remaining(i64::MAX), "106751991167300 days 15 hours ");
    }

    #[test]
    fn status_line_exact() {
        let mut m = Measurements::new();
        for v in [10, 20, 30, 40] {
            m.record(OpKind::Read, Status::Ok, v);
        }
        m.record(OpKind::Update, Status::Ok, 3);
        m.record(OpKind::Update, Status::Ok, 4);
        let interval = m.take_interval();
        let info = StatusInfo {
            label: "",
            wall_clock: Duration::from_millis(1_795_323_001_123),
            elapsed_ms: 10_004,
            interval_ms: 10_000,
            total_ops: 12_345,
            last_total_ops: 0,
            todo_ops: 100_000,
        };
        assert_eq!(
            status_line(&info, &interval),
            "2026-11-22 04:50:01:123 10 sec: 12345 operations; 1234.5 current ops/sec; \
             est completion in 1 minute \
             [READ: Count=4, Max=40, Min=10, Avg=25, 50=20, 90=40, 99=40, 99.9=40, 99.99=40] \
             [UPDATE: Count=2, Max=4, Min=3, Avg=3.5, 50=3, 90=4, 99=4, 99.9=4, 99.99=4] "
        );
        // The first line of a run: nothing done yet, nothing measured.
        let first = StatusInfo {
            label: "lbl ",
            wall_clock: Duration::ZERO,
            elapsed_ms: 0,
            interval_ms: 0,
            total_ops: 0,
            last_total_ops: 0,
            todo_ops: 1000,
        };
        assert_eq!(
            status_line(&first, &Measurements::new()),
            "lbl 1970-01-01 00:00:00:000 0 sec: 0 operations; est completion in 0 second "
        );
        // A time-bounded run (nothing to do) with an empty interval: the
        // existing series still print, with zero counts.
        let quiet = StatusInfo {
            todo_ops: 0,
            total_ops: 12_345,
            last_total_ops: 12_345,
            ..info
        };
        assert_eq!(
            status_line(&quiet, &m.take_interval()),
            "2026-11-22 04:50:01:123 10 sec: 12345 operations; 0 current ops/sec; \
             [READ: Count=0, Max=0, Min=0, Avg=0, 50=0, 90=0, 99=0, 99.9=0, 99.99=0] \
             [UPDATE: Count=0, Max=0, Min=0, Avg=0, 50=0, 90=0, 99=0, 99.9=0, 99.99=0] "
        );
    }

    /// Checks that every tag is closed in order and there is one root; returns
    /// the number of elements.
    fn check_balanced(xml: &str) -> usize {
        let mut stack: Vec<String> = Vec::new();
        let mut elements = 0;
        let mut roots = 0;
        let mut rest = xml;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unterminated tag") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            }
            assert_eq!(
                tag.matches('"').count() % 2,
                0,
                "unbalanced quotes in <{tag}>"
            );
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(
                    stack.pop().as_deref(),
                    Some(name.trim()),
                    "bad close </{name}>"
                );
                continue;
            }
            elements += 1;
            if stack.is_empty() {
                roots += 1;
            }
            let name = tag.split_whitespace().next().unwrap().trim_end_matches('/');
            if !tag.ends_with('/') {
                stack.push(name.to_string());
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        assert_eq!(roots, 1);
        elements
    }

    #[test]
    fn svg_plot_is_well_formed_and_has_the_series() {
        let m = small_measurements();
        let mut out = Vec::new();
        write_svg_plot(&mut out, "workload <a> & \"b\"", &m).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(check_balanced(&svg) > 20);
        assert!(svg.contains("workload &lt;a&gt; &amp; &quot;b&quot;"));
        for name in ["READ", "UPDATE", "READ-MODIFY-WRITE", "READ-FAILED"] {
            let poly = format!("<polyline data-series=\"{name}\" points=\"");
            let at = svg
                .find(&poly)
                .unwrap_or_else(|| panic!("no curve for {name}"));
            let pts = &svg[at + poly.len()..];
            let pts = &pts[..pts.find('"').unwrap()];
            assert_eq!(pts.split(' ').count(), PLOT_PERCENTILES.len());
            for pair in pts.split(' ') {
                let (x, y) = pair.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!((80.0..=660.0).contains(&x) && (50.0..=450.0).contains(&y));
            }
            assert!(svg.contains(&format!(">{name} (")), "no legend for {name}");
        }
        assert!(!svg.contains("data-series=\"CLEANUP\""));
        assert!(!svg.contains("data-series=\"INSERT\""));
        for tick in ["99.999%", "99.9%", "90%"] {
            assert!(svg.contains(&format!(">{tick}</text>")));
        }
        // An empty plot is still a valid document.
        let mut out = Vec::new();
        write_svg_plot(&mut out, "empty", &Measurements::new()).unwrap();
        let svg = String::from_utf8(out).unwrap();
        check_balanced(&svg);
        assert!(svg.contains(">no data</text>"));
    }

    #[test]
    fn csv_parses_back() {
        let m = small_measurements();
        let mut out = Vec::new();
        write_csv(&mut out, &m).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("operation,percentile,latency_us"));
        let rows: Vec<(String, f64, u64)> = lines
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                assert_eq!(f.len(), 3, "{l}");
                (
                    f[0].to_string(),
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                )
            })
            .collect();
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        let mut distinct = names.clone();
        distinct.dedup();
        assert_eq!(
            distinct,
            ["READ", "UPDATE", "READ-MODIFY-WRITE", "READ-FAILED"]
        );
        assert_eq!(rows.len(), 4 * PLOT_PERCENTILES.len());
        let update: Vec<(f64, u64)> = rows
            .iter()
            .filter(|r| r.0 == "UPDATE")
            .map(|r| (r.1, r.2))
            .collect();
        assert_eq!(update[0], (0.0, 100));
        assert_eq!(update[1], (50.0, 100));
        assert_eq!(*update.last().unwrap(), (99.999, 2501));
        let read_999 = rows.iter().find(|r| r.0 == "READ" && r.1 == 99.9).unwrap();
        assert_eq!(read_999.2, 40);
        // Latencies never decrease along a curve.
        for name in distinct {
            let vals: Vec<u64> = rows.iter().filter(|r| r.0 == name).map(|r| r.2).collect();
            assert!(vals.windows(2).all(|w| w[0] <= w[1]), "{name}: {vals:?}");
        }
    }

    #[test]
    fn nines_axis() {
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(90.0) - 1.0).abs() < 1e-9);
        assert!((nines(99.9) - 3.0).abs() < 1e-9);
        assert!((nines(99.999) - 5.0).abs() < 1e-6);
    }
}
