//! Figures for people: byte sizes, rates, durations, slot ranges, and
//! aligned tables.

use std::io::Write;
use std::ops::Range;

/// Writes `text` to stdout now. A closed stdout does not change how a
/// command ends: what the servers do is what counts.
pub fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A byte count in binary units: `512 B`, `1.5 KiB`, `12.3 MiB`, `2.00 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{} {}", three_digits(v), UNITS[unit])
}

/// A transfer rate in MB/s (10^6 bytes a second); `-` without time.
pub fn rate(bytes: u64, seconds: f64) -> String {
    if !seconds.is_finite() || seconds <= 0.0 {
        return "-".to_string();
    }
    format!("{} MB/s", three_digits(bytes as f64 / seconds / 1e6))
}

/// About three significant digits: `0.00`, `1.23`, `12.3`, `123`.
fn three_digits(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A duration: `0.4s`, `12s`, `3m05s`, `1h02m`.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "-".to_string();
    }
    if seconds < 10.0 {
        return format!("{seconds:.1}s");
    }
    let s = seconds.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// Slot ranges (`[first, end)`) for people: sorted, adjacent ones merged,
/// inclusive, `0-255, 512-767`; a single slot as `17`; none as `-`. More
/// than `max` ranges end in `… (N more)`.
pub fn slot_ranges(ranges: &[Range<u32>], max: usize) -> String {
    let merged = merge(ranges);
    if merged.is_empty() {
        return "-".to_string();
    }
    let mut parts: Vec<String> = merged.iter().take(max).map(slot_range).collect();
    if merged.len() > max {
        parts.push(format!("… ({} more)", merged.len() - max));
    }
    parts.join(", ")
}

/// One `[first, end)` range, inclusive: `0-255` or `17`.
pub fn slot_range(r: &Range<u32>) -> String {
    match r.end.saturating_sub(r.start) {
        0 => "-".to_string(),
        1 => r.start.to_string(),
        _ => format!("{}-{}", r.start, r.end - 1),
    }
}

/// The ranges sorted, empty ones dropped, touching and overlapping ones
/// merged.
pub fn merge(ranges: &[Range<u32>]) -> Vec<Range<u32>> {
    let mut v: Vec<Range<u32>> = ranges.iter().filter(|r| r.start < r.end).cloned().collect();
    v.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u32>> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// How a column lines up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: to the left.
    Left,
    /// Numbers: to the right.
    Right,
}

/// A table with a header row, printed with its columns lined up.
#[derive(Debug)]
pub struct Table {
    head: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(head: &[(&'static str, Align)]) -> Table {
        Table {
            head: head.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are empty, extra ones dropped).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, each line starting with `indent` and ending in a newline.
    pub fn render(&self, indent: &str) -> String {
        let n = self.head.len();
        let cell = |row: &[String], i: usize| row.get(i).map_or("", String::as_str).to_string();
        let mut width: Vec<usize> = self.head.iter().map(|(h, _)| h.chars().count()).collect();
        for r in &self.rows {
            for (i, w) in width.iter_mut().enumerate() {
                *w = (*w).max(cell(r, i).chars().count());
            }
        }
        let line = |cells: Vec<String>| -> String {
            let mut s = String::from(indent);
            for (i, c) in cells.iter().enumerate() {
                let pad = width[i].saturating_sub(c.chars().count());
                let last = i + 1 == n;
                match self.head[i].1 {
                    Align::Right => {
                        s.push_str(&" ".repeat(pad));
                        s.push_str(c);
                    }
                    Align::Left => {
                        s.push_str(c);
                        if !last {
                            s.push_str(&" ".repeat(pad));
                        }
                    }
                }
                if !last {
                    s.push_str("  ");
                }
            }
            s.truncate(s.trim_end().len().max(indent.len()));
            s.push('\n');
            s
        };
        let mut out = line(self.head.iter().map(|(h, _)| h.to_string()).collect());
        for r in &self.rows {
            out.push_str(&line((0..n).map(|i| cell(r, i)).collect()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.00 KiB");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(12_900_000), "12.3 MiB");
        assert_eq!(bytes(500 << 20), "500 MiB");
        assert_eq!(bytes(3 << 30), "3.00 GiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn rates_are_megabytes_a_second() {
        assert_eq!(rate(12_300_000, 1.0), "12.3 MB/s");
        assert_eq!(rate(1_000_000, 2.0), "0.50 MB/s");
        assert_eq!(rate(0, 5.0), "0.00 MB/s");
        assert_eq!(rate(250_000_000, 1.0), "250 MB/s");
        assert_eq!(rate(1, 0.0), "-");
        assert_eq!(rate(1, f64::NAN), "-");
    }

    #[test]
    fn durations_read_short() {
        assert_eq!(duration(0.42), "0.4s");
        assert_eq!(duration(12.4), "12s");
        assert_eq!(duration(185.0), "3m05s");
        assert_eq!(duration(3720.0), "1h02m");
        assert_eq!(duration(-1.0), "-");
        assert_eq!(duration(f64::INFINITY), "-");
    }

    #[test]
    fn slot_ranges_compress() {
        assert_eq!(
            slot_ranges(&[0..128, 128..256, 512..768], 8),
            "0-255, 512-767"
        );
        assert_eq!(slot_ranges(std::slice::from_ref(&(17..18)), 8), "17");
        assert_eq!(slot_ranges(&[], 8), "-");
        assert_eq!(slot_ranges(std::slice::from_ref(&(5..5)), 8), "-");
        assert_eq!(slot_ranges(&[10..20, 0..5, 3..12], 8), "0-19");
        assert_eq!(
            slot_ranges(&[0..1, 2..3, 4..5, 6..7], 2),
            "0, 2, … (2 more)"
        );
    }

    #[test]
    fn tables_line_up() {
        let mut t = Table::new(&[
            ("ID", Align::Right),
            ("NAME", Align::Left),
            ("N", Align::Right),
        ]);
        t.row(vec!["0".into(), "alpha".into(), "10".into()]);
        t.row(vec!["12".into(), "b".into()]);
        assert_eq!(
            t.render("  "),
            "  ID  NAME    N\n   0  alpha  10\n  12  b\n"
        );
        let mut t = Table::new(&[("A", Align::Left), ("B", Align::Left)]);
        t.row(vec!["long".into(), "x".into()]);
        assert_eq!(t.render(""), "A     B\nlong  x\n");
    }
}
