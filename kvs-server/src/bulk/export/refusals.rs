//! The bulk port's log of connections it would not serve: refused records
//! (no pull request, no open ticket) and connections its setup reader
//! dropped (deadline, cap, malformed record, hung up). At most one line a
//! second for each kind, so a flood of bad peers cannot flood the log; the
//! ones held back are counted in the next line.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mpib::conn::{Acceptor, AcceptorStats};

/// The shortest time between two lines of one kind.
const QUIET: Duration = Duration::from_secs(1);

/// Refusals and drops reported so far.
#[derive(Debug, Default)]
pub(super) struct RefusalLog {
    /// When the last refusal line was printed.
    last_refusal: Option<Instant>,
    /// Refusals since that line, not printed.
    quiet: u64,
    /// The setup reader's counts as of the last drop line, and when it was.
    reported: AcceptorStats,
    last_drops: Option<Instant>,
    /// Whether `poll(2)` failing was reported (once is enough).
    poll_failed: bool,
}

fn recent(t: Option<Instant>) -> bool {
    t.is_some_and(|t| t.elapsed() < QUIET)
}

impl RefusalLog {
    /// A complete record refused (the reason names the kind of failure,
    /// never the ticket).
    pub fn refused(&mut self, peer: SocketAddr, why: &str) {
        if recent(self.last_refusal) {
            self.quiet += 1;
            return;
        }
        self.last_refusal = Some(Instant::now());
        let more = match std::mem::take(&mut self.quiet) {
            0 => String::new(),
            n => format!(" ({n} more refused before it)"),
        };
        tracing::warn!("bulk port: refused a connection from {peer}: {why}{more}");
    }

    /// The setup reader's `poll(2)` failed.
    pub fn poll_failed(&mut self, e: &std::io::Error) {
        if !std::mem::replace(&mut self.poll_failed, true) {
            tracing::error!("bulk port: waiting for connections: {e}");
        }
    }

    /// Reports the refusals held back and the connections the setup reader
    /// dropped, once their second is over.
    pub fn tick(&mut self, acc: &Acceptor) {
        if self.quiet > 0 && !recent(self.last_refusal) {
            tracing::warn!(
                "bulk port: refused {} more connections in the last second",
                std::mem::take(&mut self.quiet)
            );
            self.last_refusal = Some(Instant::now());
        }
        let now = acc.stats();
        if now.dropped() == self.reported.dropped() || recent(self.last_drops) {
            return;
        }
        let was = self.reported;
        let last = match acc.last_drop() {
            Some((peer, why)) => format!("; the last from {peer}: {why}"),
            None => String::new(),
        };
        tracing::warn!(
            "bulk port: dropped {} connections without a usable setup record \
             (timed out {}, over the pending cap {}, malformed {}, hung up {}){last}",
            now.dropped() - was.dropped(),
            now.timed_out - was.timed_out,
            now.evicted - was.evicted,
            now.malformed - was.malformed,
            now.hung_up - was.hung_up,
        );
        self.reported = now;
        self.last_drops = Some(Instant::now());
    }
}
