//! The server's logs: the `tracing` subscriber a process installs.
//!
//! The library logs through `tracing`, each event's target its module path
//! (`kvs_server::cluster::control`), raft-rs's records under
//! `kvs_control::raft`. Nothing is written until a subscriber is installed:
//! the kvs-server binary installs one with [`init`] (config keys `log` and
//! `log_format`), and so do programs that embed the server.
//!
//! - The filter is an `EnvFilter` (`RUST_LOG` syntax): a default level and
//!   levels per target, `info,kvs_server::cluster=debug`. `RUST_LOG`, when
//!   set, overrides the configured one.
//! - [`LogFormat::Plain`]: a line per event on stderr, `time level target:
//!   message`, with colours only when stderr is a terminal. When stderr is
//!   the systemd journal (`JOURNAL_STREAM` names it), which stamps every
//!   line itself, the time is left out and each line starts with its
//!   syslog priority (`<4>` for a warning), so `journalctl -p warning`
//!   picks the warnings out.
//! - [`LogFormat::Json`]: one JSON object per line for log shippers:
//!   `timestamp`, `level`, `target`, `message` and the event's fields.

use std::fmt;
use std::str::FromStr;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// The filter when neither the config nor `RUST_LOG` gives one.
pub const DEFAULT_FILTER: &str = "info";

/// How log lines look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Text lines for people and journald.
    #[default]
    Plain,
    /// One JSON object per line, for log shippers.
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Plain => "plain",
            LogFormat::Json => "json",
        })
    }
}

/// A log format that is neither `plain` nor `json` (the text given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("log format {0:?}: plain or json")]
pub struct UnknownLogFormat(pub String);

impl FromStr for LogFormat {
    type Err = UnknownLogFormat;
    fn from_str(s: &str) -> Result<LogFormat, UnknownLogFormat> {
        match s {
            "plain" => Ok(LogFormat::Plain),
            "json" => Ok(LogFormat::Json),
            _ => Err(UnknownLogFormat(s.to_string())),
        }
    }
}

/// A log filter that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("log filter {filter:?}{from}: {why}")]
pub struct BadFilter {
    /// The filter.
    pub filter: String,
    /// Where it came from (empty: the configuration).
    pub from: &'static str,
    /// Why it does not parse.
    pub why: String,
}

/// Checks that `filter` parses as a log filter.
pub fn check_filter(filter: &str) -> Result<(), BadFilter> {
    parse(filter, "").map(drop)
}

/// Installs the process's subscriber: events that pass `filter` (or
/// `RUST_LOG`, when set) go to stderr in `format`. Once per process: a
/// second call (a subscriber is installed already) changes nothing and
/// returns `Ok`. Fails only when the filter does not parse.
pub fn init(filter: &str, format: LogFormat) -> Result<(), BadFilter> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => parse(&env, " (RUST_LOG)")?,
        _ => parse(filter, "")?,
    };
    let journal = stderr_is_journal();
    let ansi = !journal && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let sub: Box<dyn Subscriber + Send + Sync> = match format {
        LogFormat::Json => Box::new(builder.json().flatten_event(true).finish()),
        LogFormat::Plain if journal => Box::new(
            builder
                .with_ansi(false)
                .event_format(Priority(
                    tracing_subscriber::fmt::format()
                        .with_ansi(false)
                        .without_time(),
                ))
                .finish(),
        ),
        LogFormat::Plain => Box::new(builder.with_ansi(ansi).finish()),
    };
    // Already installed (a second call, or the embedding program's own):
    // that one stays.
    let _ = tracing::subscriber::set_global_default(sub);
    Ok(())
}

/// For a test process: events that pass `RUST_LOG` (default
/// [`DEFAULT_FILTER`]) go to the test harness's captured output, shown
/// when a test fails. Changes nothing when a subscriber is installed
/// already.
pub fn init_for_tests() {
    let filter = std::env::var("RUST_LOG").unwrap_or_default();
    let filter = parse(&filter, " (RUST_LOG)").unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let sub = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .finish();
    let _ = tracing::subscriber::set_global_default(sub);
}

/// `filter` as an `EnvFilter` (empty: [`DEFAULT_FILTER`]); `from` says
/// where it came from, for the error.
fn parse(filter: &str, from: &'static str) -> Result<EnvFilter, BadFilter> {
    let f = if filter.trim().is_empty() {
        DEFAULT_FILTER
    } else {
        filter
    };
    EnvFilter::try_new(f).map_err(|e| BadFilter {
        filter: f.to_string(),
        from,
        why: e.to_string(),
    })
}

/// Whether stderr is the systemd journal's stream: systemd sets
/// `JOURNAL_STREAM` to its `device:inode`, which a redirected stderr no
/// longer matches.
fn stderr_is_journal() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Ok(want) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    let Ok(m) = std::fs::File::from(fd).metadata() else {
        return false;
    };
    want == format!("{}:{}", m.dev(), m.ino())
}

/// A line format preceded by the event's syslog priority (`<3>` error,
/// `<4>` warning, `<6>` info, `<7>` debug and trace), which journald
/// reads as the line's priority and strips: `<4>WARN target: message`.
struct Priority<F>(F);

impl<S, N, F> FormatEvent<S, N> for Priority<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // The format pads the level (` INFO`): the line starts at the word.
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let p = priority(*event.metadata().level());
        write!(writer, "<{p}>{}", line.trim_start())
    }
}

/// The syslog priority of `level`.
fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_and_print_back() {
        for f in [LogFormat::Plain, LogFormat::Json] {
            assert_eq!(f.to_string().parse::<LogFormat>(), Ok(f));
        }
        let e = "yaml".parse::<LogFormat>().unwrap_err();
        assert_eq!(e.to_string(), r#"log format "yaml": plain or json"#);
    }

    #[test]
    fn filters_are_checked() {
        check_filter("info").unwrap();
        check_filter("warn,kvs_server::cluster=debug,kvs_control::raft=trace").unwrap();
        check_filter("").unwrap();
        let e = check_filter("kvs_server=loud").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("log filter \"kvs_server=loud\": "),
            "{e}"
        );
    }

    #[test]
    fn priorities_are_syslogs() {
        assert_eq!(priority(Level::ERROR), 3);
        assert_eq!(priority(Level::WARN), 4);
        assert_eq!(priority(Level::INFO), 6);
        assert_eq!(priority(Level::TRACE), 7);
    }
}
