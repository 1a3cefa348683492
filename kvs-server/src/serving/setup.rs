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

use crate::config::Config;
use crate::role::Role;
use crate::start_error::StartError;
use crate::threads::to_worker::ToWorker;

/// What connection setup has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetupStats {
    /// Connections whose setup record is still being read.
    pub pending: u64,
    /// The setup reader's counters: accepted, complete records, and the
    /// connections dropped (deadline, cap, malformed record, hung up).
    pub reader: AcceptorStats,
    /// Connections refused for a missing or wrong token.
    pub refused_auth: u64,
    /// Connections to the control endpoint refused because they presented
    /// the client token: a client may not issue control operations.
    pub refused_role: u64,
    /// Connections refused for a hello that is not a kvs-client's or names
    /// no worker of this server.
    pub refused_hello: u64,
    /// Members' requests (replication messages) refused on a worker
    /// connection set up with the client token, summed over the workers
    /// (published with their counters, at least every 50 ms while busy).
    pub refused_member_ops: u64,
}

/// The secrets the server requires: the client token for its workers and
/// the cluster token for its control endpoint (see [`crate::config`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Tokens {
    /// `auth_token_file`'s: clients present it, for data operations.
    pub client: Option<AuthToken>,
    /// `cluster_token_file`'s: members and kvs-admin present it, for
    /// everything; the server presents it to other members.
    pub cluster: Option<AuthToken>,
}

impl Tokens {
    /// The configured tokens, each at least [`kvs_proto::auth::MIN_TOKEN`]
    /// bytes and the two different.
    pub(crate) fn read(cfg: &Config) -> Result<Tokens, StartError> {
        let read = |key: &'static str, file: &Option<std::path::PathBuf>| match file {
            None => Ok(None),
            Some(p) => AuthToken::from_file(p)
                .and_then(|t| t.check_strength().map(|()| t))
                .map(Some)
                .map_err(|source| StartError::Token { key, source }),
        };
        let t = Tokens {
            client: read("auth_token_file", &cfg.auth_token_file)?,
            cluster: read("cluster_token_file", &cfg.cluster_token_file)?,
        };
        if let (Some(a), Some(c)) = (&t.client, &t.cluster) {
            if a.matches(c.expose()) {
                return Err(StartError::SameTokens);
            }
        }
        Ok(t)
    }
}

/// Why a complete setup record is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The private data is not a kvs-client hello.
    NotKvs,
    /// The server requires a token and the hello carries none.
    NoToken,
    /// The control endpoint requires the cluster token and the hello
    /// carries none.
    NoClusterToken,
    /// The hello's token is not the server's.
    WrongToken,
    /// The client token, presented to the control endpoint.
    ClientToken,
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
            Refusal::NoClusterToken => f.write_str(
                "this server's control endpoint requires the cluster token and none was \
                 given (kvs-admin --cluster-token-file or KVS_CLUSTER_TOKEN)",
            ),
            Refusal::WrongToken => f.write_str("wrong auth token"),
            Refusal::ClientToken => f.write_str(
                "the client token cannot issue control operations: members and kvs-admin \
                 present the cluster token (kvs-admin --cluster-token-file)",
            ),
            Refusal::NoWorker(w, n) => write!(f, "no worker {w} (this server has {n})"),
        }
    }
}

/// Where an admitted connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// To a worker, in a role: a client's data connection, or a member's
    /// (which may also replicate).
    Worker(usize, Role),
    /// To the control thread: a member's or kvs-admin's.
    Control,
}

/// Where a client's private data asks to go, if the server admits it: a
/// worker takes the client token or the cluster token, the control endpoint
/// only the cluster token. A token sent to a server that requires none is
/// ignored. A worker connection's role is a member's only with the cluster
/// token, or on a server with no tokens at all (nothing tells the roles
/// apart there; see [`crate::role`]).
pub(crate) fn admit(
    private_data: &[u8],
    tokens: &Tokens,
    workers: usize,
) -> Result<Target, Refusal> {
    let (w, token) = parse_hello(private_data).ok_or(Refusal::NotKvs)?;
    let is = |t: &Option<AuthToken>| t.as_ref().is_some_and(|t| t.matches(token));
    if w == CONTROL {
        if tokens.cluster.is_some() {
            if token.is_empty() {
                return Err(Refusal::NoClusterToken);
            }
            if is(&tokens.client) {
                return Err(Refusal::ClientToken);
            }
            if !is(&tokens.cluster) {
                return Err(Refusal::WrongToken);
            }
        }
        return Ok(Target::Control);
    }
    if tokens.client.is_some() {
        if token.is_empty() {
            return Err(Refusal::NoToken);
        }
        if !is(&tokens.client) && !is(&tokens.cluster) {
            return Err(Refusal::WrongToken);
        }
    }
    if usize::from(w) >= workers {
        return Err(Refusal::NoWorker(w, workers));
    }
    let role = if is(&tokens.cluster) || (tokens.client.is_none() && tokens.cluster.is_none()) {
        Role::Member
    } else {
        Role::Client
    };
    Ok(Target::Worker(usize::from(w), role))
}

/// Refusals are logged at most once a second (a flood of bad clients must not
/// flood the log); the ones in between are counted in the next line.
#[derive(Debug, Default)]
pub(crate) struct RefusalLog {
    last: Option<Instant>,
    quiet: u64,
}

impl RefusalLog {
    /// Logs that `peer` was refused for `why` (or counts it, within a
    /// second of the last line).
    pub(crate) fn refused(&mut self, peer: SocketAddr, why: Refusal) {
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
        tracing::warn!("refused a client from {peer}: {why}{more}");
    }

    /// Reports refusals held back, once their second is over.
    pub(crate) fn tick(&mut self) {
        if self.quiet > 0
            && self
                .last
                .is_some_and(|t| t.elapsed() >= Duration::from_secs(1))
        {
            tracing::warn!("refused {} more clients in the last second", self.quiet);
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
    tokens: Tokens,
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
                tracing::error!("waiting for connections: {e}");
            }
            poll_failed = true;
            std::thread::sleep(Duration::from_millis(50));
        }
        for p in ready.drain(..) {
            match admit(p.private_data(), &tokens, workers.len()) {
                Ok(Target::Worker(w, role)) => {
                    // A worker that has stopped drops the connection; a
                    // sleeping one wakes to take it.
                    let (tx, waker) = &workers[w];
                    if tx.send(ToWorker::Connection(p, role)).is_ok() {
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
                        Refusal::NoToken | Refusal::NoClusterToken | Refusal::WrongToken => {
                            mine.refused_auth += 1
                        }
                        Refusal::ClientToken => mine.refused_role += 1,
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

    fn tokens(client: Option<&AuthToken>, cluster: Option<&AuthToken>) -> Tokens {
        Tokens {
            client: client.cloned(),
            cluster: cluster.cloned(),
        }
    }

    #[test]
    fn hellos_are_admitted_by_worker_and_token() {
        let t = AuthToken::new("the-token").unwrap();
        let c = AuthToken::new("the-cluster-token").unwrap();
        let other = AuthToken::new("the-tokeN").unwrap();
        let both = tokens(Some(&t), Some(&c));
        let (client, member) = (Role::Client, Role::Member);
        assert_eq!(
            admit(&hello(1, Some(&t)), &both, 2),
            Ok(Target::Worker(1, client))
        );
        // Members and kvs-admin may use the data path too, as members.
        assert_eq!(
            admit(&hello(1, Some(&c)), &both, 2),
            Ok(Target::Worker(1, member))
        );
        assert_eq!(admit(&hello(1, None), &both, 2), Err(Refusal::NoToken));
        assert_eq!(
            admit(&hello(1, Some(&other)), &both, 2),
            Err(Refusal::WrongToken)
        );
        assert_eq!(
            admit(&hello(2, Some(&t)), &both, 2),
            Err(Refusal::NoWorker(2, 2))
        );
        // A wrong token is refused before the worker is looked at.
        assert_eq!(
            admit(&hello(9, Some(&other)), &both, 2),
            Err(Refusal::WrongToken)
        );
        assert_eq!(admit(b"GET / HTTP/1.1", &both, 2), Err(Refusal::NotKvs));
        // Without a token configured, any hello naming a worker is admitted,
        // and nothing tells a member from a client.
        let open = Tokens::default();
        assert_eq!(
            admit(&hello(0, None), &open, 1),
            Ok(Target::Worker(0, member))
        );
        assert_eq!(
            admit(&hello(0, Some(&t)), &open, 1),
            Ok(Target::Worker(0, member))
        );
        for r in [Refusal::NoToken, Refusal::WrongToken, Refusal::ClientToken] {
            assert!(!r.to_string().contains("the-token"));
        }
    }

    #[test]
    fn only_the_cluster_token_opens_the_control_endpoint() {
        let t = AuthToken::new("the-token").unwrap();
        let c = AuthToken::new("the-cluster-token").unwrap();
        let other = AuthToken::new("the-tokeN").unwrap();
        let both = tokens(Some(&t), Some(&c));
        assert_eq!(
            admit(&hello(CONTROL, Some(&c)), &both, 2),
            Ok(Target::Control)
        );
        assert_eq!(
            admit(&hello(CONTROL, Some(&t)), &both, 2),
            Err(Refusal::ClientToken)
        );
        assert_eq!(
            admit(&hello(CONTROL, None), &both, 2),
            Err(Refusal::NoClusterToken)
        );
        assert_eq!(
            admit(&hello(CONTROL, Some(&other)), &both, 2),
            Err(Refusal::WrongToken)
        );
        // A cluster token alone: open data, guarded control and
        // replication.
        let guarded = tokens(None, Some(&c));
        assert_eq!(
            admit(&hello(0, None), &guarded, 1),
            Ok(Target::Worker(0, Role::Client))
        );
        assert_eq!(
            admit(&hello(0, Some(&t)), &guarded, 1),
            Ok(Target::Worker(0, Role::Client))
        );
        assert_eq!(
            admit(&hello(0, Some(&c)), &guarded, 1),
            Ok(Target::Worker(0, Role::Member))
        );
        assert_eq!(
            admit(&hello(CONTROL, None), &guarded, 1),
            Err(Refusal::NoClusterToken)
        );
        assert_eq!(
            admit(&hello(CONTROL, Some(&c)), &guarded, 1),
            Ok(Target::Control)
        );
        // Neither: everything open (loopback, or allow_unauthenticated).
        let open = Tokens::default();
        assert_eq!(admit(&hello(CONTROL, None), &open, 1), Ok(Target::Control));
    }
}
