//! raft-rs's log, forwarded to `tracing`.
//!
//! raft-rs logs through slog. [`TracingDrain`] turns each of its records
//! into a `tracing` event with the target [`TARGET`], its key-values
//! appended to the message (`became leader at term 4 term=4 raft_id=2`).
//! raft-rs says at info what every election does (campaigns, votes, terms):
//! those lines are `debug` here, so a member is quiet by default and
//! `RUST_LOG=kvs_control::raft=debug` shows why an election happened.
//! Its warnings (a leader stepping down for want of a quorum) and errors
//! keep their level.

use std::fmt::{self, Write as _};

use tracing::Level;

/// The target of raft-rs's events.
pub(crate) const TARGET: &str = "kvs_control::raft";

/// A slog drain that forwards every record to `tracing` (see the module
/// docs for the levels).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TracingDrain;

impl TracingDrain {
    /// A logger for raft-rs whose records go to `tracing`.
    pub(crate) fn logger() -> slog::Logger {
        slog::Logger::root(TracingDrain, slog::o!())
    }
}

/// `tracing`'s macros want a constant level: one call per level, formatted
/// only when a subscriber wants the event.
macro_rules! forward {
    ($level:expr, $text:expr) => {
        if tracing::enabled!(target: TARGET, $level) {
            let text: String = $text;
            tracing::event!(target: TARGET, $level, "{text}");
        }
    };
}

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(
        &self,
        record: &slog::Record<'_>,
        values: &slog::OwnedKVList,
    ) -> Result<(), slog::Never> {
        // One step quieter below warnings (see the module docs).
        let text = || text_of(record, values);
        match record.level() {
            slog::Level::Critical | slog::Level::Error => forward!(Level::ERROR, text()),
            slog::Level::Warning => forward!(Level::WARN, text()),
            slog::Level::Info => forward!(Level::DEBUG, text()),
            slog::Level::Debug | slog::Level::Trace => forward!(Level::TRACE, text()),
        }
        Ok(())
    }
}

/// The record's message, then its key-values and the logger's, each as
/// ` key=value`.
fn text_of(record: &slog::Record<'_>, values: &slog::OwnedKVList) -> String {
    let mut s = Pairs(record.msg().to_string());
    // Serializing into a String cannot fail; a value whose Debug fails is
    // left out.
    let _ = slog::KV::serialize(&record.kv(), record, &mut s);
    let _ = slog::KV::serialize(values, record, &mut s);
    s.0
}

/// A slog serializer that appends ` key=value` to its text.
struct Pairs(String);

impl slog::Serializer for Pairs {
    fn emit_arguments(&mut self, key: slog::Key, val: &fmt::Arguments<'_>) -> slog::Result {
        write!(self.0, " {key}={val}").map_err(slog::Error::Fmt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};

    /// What a subscriber wrote.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The lines raft-rs's records make under a subscriber with `filter`.
    fn lines_under(filter: &str, log: impl FnOnce(&slog::Logger)) -> String {
        let buf = Buf::default();
        let w = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(move || w.clone())
            .with_ansi(false)
            .without_time()
            .finish();
        let logger = TracingDrain::logger().new(slog::o!("raft_id" => 2));
        tracing::subscriber::with_default(sub, || log(&logger));
        let out = buf.0.lock().unwrap().clone();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn records_reach_tracing_with_their_key_values() {
        let out = lines_under("kvs_control::raft=debug", |l| {
            slog::info!(l, "became leader at term {}", 4; "term" => 4);
            slog::warn!(l, "stepped down to follower since quorum is not active");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].ends_with("DEBUG kvs_control::raft: became leader at term 4 term=4 raft_id=2"),
            "{out}"
        );
        assert!(
            lines[1].ends_with(
                "WARN kvs_control::raft: stepped down to follower since quorum is not active \
                 raft_id=2"
            ),
            "{out}"
        );
    }

    #[test]
    fn elections_are_quiet_at_info() {
        let out = lines_under("info", |l| {
            slog::info!(l, "starting a new election"; "term" => 5);
            slog::error!(l, "a broken invariant");
        });
        assert!(!out.contains("election"), "{out}");
        assert!(
            out.contains("ERROR kvs_control::raft: a broken invariant"),
            "{out}"
        );
    }

    #[test]
    fn debug_records_are_trace() {
        let out = lines_under("kvs_control::raft=trace", |l| {
            slog::debug!(l, "sending a heartbeat"; "to" => 3);
        });
        assert!(
            out.contains("TRACE kvs_control::raft: sending a heartbeat to=3 raft_id=2"),
            "{out}"
        );
    }
}
