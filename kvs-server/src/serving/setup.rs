//! Connection setup: the acceptor thread reads every client's setup record
//! at once (copyrpc's [`Acceptor`], a deadline each, a cap on how many wait),
//! checks its hello — the worker it names (or the control endpoint) and the
//! auth token it presents — and hands it to that worker or to the control
//! thread, or refuses it saying why.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use copyrpc::conn::{Acceptor, AcceptorStats, PendingConnection};
use copyrpc::Waker;
use kvs_proto::{parse_hello, AuthToken, CONTROL};

use crate::to_worker::ToWorker;

/// What connection setup has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetupStats {
    /// Connections whose setup record is still being read.
    pub pending: u64,
    /// The setup reader's counters: accepted, complete records, and the
    /// connections dropped (deadline, cap, malformed record, hung up).
    pub reader: AcceptorStats,
    /// Clients refused for a missing or wrong auth token.
    pub refused_auth: u64,
    /// Connections refused for a hello that is not a kvs-client's or names
    /// no worker of this server.
    pub refused_hello: u64,
}

/// Why a complete setup record is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The private data is not a kvs-client hello.
    NotKvs,
    /// The server requires a token and the hello carries none.
    NoToken,
    /// The hello's token is not the server's.
    WrongToken,
    /// The hello names a worker the server does not have (of how many).
    NoWorker(u16, usize),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotKvs => f.write_str("not a kvs-client hello"),
            Refusal::NoToken => f.write_str(
                "this server requires an auth token and none was given \
                 (kvs-client --auth-token-file or KVS_AUTH_TOKEN; \
                 ycsb-driver -p kvs.auth_token_file=...)",
            ),
            Refusal::WrongToken => f.write_str("wrong auth token"),
            Refusal::NoWorker(w, n) => write!(f, "no worker {w} (this server has {n})"),
        }
    }
}

/// Where an admitted connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// To a worker: a client's data connection.
    Worker(usize),
    /// To the control thread: a member's or kvs-admin's.
    Control,
}

/// Where a client's private data asks to go, if the server admits it.
pub(crate) fn admit(
    private_data: &[u8],
    auth: Option<&AuthToken>,
    workers: usize,
) -> Result<Target, Refusal> {
    let (w, token) = parse_hello(private_data).ok_or(Refusal::NotKvs)?;
    if let Some(auth) = auth {
        if token.is_empty() {
            return Err(Refusal::NoToken);
        }
        if !auth.matches(token) {
            return Err(Refusal::WrongToken);
        }
    }
    // A token sent to a server that requires none is ignored.
    if w == CONTROL {
        return Ok(Target::Control);
    }
    if usize::from(w) >= workers {
        return Err(Refusal::NoWorker(w, workers));
    }
    Ok(Target::Worker(usize::from(w)))
}

/// Refusals are logged at most once a second (a flood of bad clients must not
/// flood the log); the ones in between are counted in the next line.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    quiet: u64,
}

impl RefusalLog {
    fn refused(&mut self, peer: SocketAddr, why: Refusal) {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            self.quiet += 1;
            return;
        }
        self.last = Some(Instant::now());
        // The reason names the kind of failure, never the token.
        let more = match std::mem::take(&mut self.quiet) {
            0 => String::new(),
            n => format!(" ({n} more refused before it)"),
        };
        eprintln!("kvs-server: refused a client from {peer}: {why}{more}");
    }

    /// Reports refusals held back, once their second is over.
    fn tick(&mut self) {
        if self.quiet > 0
            && self
                .last
                .is_some_and(|t| t.elapsed() >= Duration::from_secs(1))
        {
            eprintln!(
                "kvs-server: refused {} more clients in the last second",
                self.quiet
            );
            self.quiet = 0;
            self.last = Some(Instant::now());
        }
    }
}

/// The acceptor thread: reads setup records, admits or refuses each, and
/// publishes its counters, until `stop` is set.
pub(crate) fn accept(
    mut acc: Acceptor,
    workers: Vec<(Sender<ToWorker>, Waker)>,
    control: (Sender<PendingConnection>, Waker),
    auth: Option<AuthToken>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<SetupStats>>,
) {
    let mut ready = Vec::new();
    let mut log = RefusalLog::default();
    let mut mine = SetupStats::default();
    let mut poll_failed = false;
    while !stop.load(Ordering::Acquire) {
        // The timeout bounds how late `stop` is seen.
        if let Err(e) = acc.poll(Duration::from_millis(50), &mut ready) {
            if !poll_failed {
                eprintln!("kvs-server: waiting for connections: {e}");
            }
            poll_failed = true;
            std::thread::sleep(Duration::from_millis(50));
        }
        for p in ready.drain(..) {
            match admit(p.private_data(), auth.as_ref(), workers.len()) {
                Ok(Target::Worker(w)) => {
                    // A worker that has stopped drops the connection; a
                    // sleeping one wakes to take it.
                    let (tx, waker) = &workers[w];
                    if tx.send(ToWorker::Connection(p)).is_ok() {
                        waker.wake();
                    }
                }
                Ok(Target::Control) => {
                    let (tx, waker) = &control;
                    if tx.send(p).is_ok() {
                        waker.wake();
                    }
                }
                Err(why) => {
                    match why {
                        Refusal::NoToken | Refusal::WrongToken => mine.refused_auth += 1,
                        Refusal::NotKvs | Refusal::NoWorker(..) => mine.refused_hello += 1,
                    }
                    log.refused(p.peer_addr(), why);
                    p.refuse(&why.to_string());
                }
            }
        }
        log.tick();
        mine.pending = acc.pending() as u64;
        mine.reader = acc.stats();
        if let Ok(mut s) = stats.lock() {
            *s = mine;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::hello;

    #[test]
    fn hellos_are_admitted_by_worker_and_token() {
        let t = AuthToken::new("the-token").unwrap();
        let other = AuthToken::new("the-tokeN").unwrap();
        assert_eq!(
            admit(&hello(1, Some(&t)), Some(&t), 2),
            Ok(Target::Worker(1))
        );
        assert_eq!(
            admit(&hello(CONTROL, Some(&t)), Some(&t), 2),
            Ok(Target::Control)
        );
        assert_eq!(
            admit(&hello(CONTROL, None), Some(&t), 2),
            Err(Refusal::NoToken)
        );
        assert_eq!(admit(&hello(1, None), Some(&t), 2), Err(Refusal::NoToken));
        assert_eq!(
            admit(&hello(1, Some(&other)), Some(&t), 2),
            Err(Refusal::WrongToken)
        );
        assert_eq!(
            admit(&hello(2, Some(&t)), Some(&t), 2),
            Err(Refusal::NoWorker(2, 2))
        );
        // A wrong token is refused before the worker is looked at.
        assert_eq!(
            admit(&hello(9, Some(&other)), Some(&t), 2),
            Err(Refusal::WrongToken)
        );
        assert_eq!(admit(b"GET / HTTP/1.1", Some(&t), 2), Err(Refusal::NotKvs));
        // Without a token configured, any hello naming a worker is admitted.
        assert_eq!(admit(&hello(0, None), None, 1), Ok(Target::Worker(0)));
        assert_eq!(admit(&hello(0, Some(&t)), None, 1), Ok(Target::Worker(0)));
        for r in [Refusal::NoToken, Refusal::WrongToken] {
            assert!(!r.to_string().contains("the-token"));
        }
    }
}
