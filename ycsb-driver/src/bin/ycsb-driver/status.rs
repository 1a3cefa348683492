//! Java's status lines: operations so far, the interval's rate, and each
//! operation's interval latencies, on stderr while a phase runs.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ycsb_driver::measure::Measurements;
use ycsb_driver::report::{self, StatusInfo};
use ycsb_driver::runner::Progress;

/// Java's status thread: a line on stderr every `every` until the phase ends.
pub(crate) fn status_lines(p: &Progress, every: Duration, todo: u64) {
    let start = Instant::now();
    let mut last = start;
    let mut last_ops = 0;
    let mut interval = Measurements::new();
    loop {
        let finished = {
            let t = Instant::now() + every;
            loop {
                if p.finished.load(Ordering::Acquire) {
                    break true;
                }
                if Instant::now() >= t {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let now = Instant::now();
        // The threads add their intervals into the shared one; take it whole.
        if let Ok(mut g) = p.interval.lock() {
            std::mem::swap(&mut *g, &mut interval);
        }
        let total = p.done.load(Ordering::Relaxed);
        let info = StatusInfo {
            label: "",
            wall_clock: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            elapsed_ms: now.duration_since(start).as_millis() as u64,
            interval_ms: now.duration_since(last).as_millis().max(1) as u64,
            total_ops: total,
            last_total_ops: last_ops,
            todo_ops: todo.saturating_sub(total),
        };
        eprintln!("{}", report::status_line(&info, &interval));
        interval.clear();
        last = now;
        last_ops = total;
        if finished {
            break;
        }
    }
}
