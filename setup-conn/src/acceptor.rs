//! Reading many peers' setup lines at once on one thread, so that no peer
//! can hold up another or pin a thread: the [`Acceptor`].

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::format::{printable, refuse, SetupFormat};
use crate::line::{Fill, LineReader};

/// Settings of an [`Acceptor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptorOptions {
    /// How long a peer has, from its TCP connection being accepted, to send
    /// its whole setup record (one deadline for the whole record, however
    /// the peer spreads its bytes).
    pub deadline: Duration,
    /// Most peers whose record is still being read; one more drops the
    /// oldest (at least 1).
    pub max_pending: usize,
}

impl Default for AcceptorOptions {
    /// A 5-second deadline and 1024 pending peers.
    fn default() -> Self {
        AcceptorOptions {
            deadline: Duration::from_secs(5),
            max_pending: 1024,
        }
    }
}

/// What an [`Acceptor`] has done with the peers it accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AcceptorStats {
    /// TCP connections accepted.
    pub accepted: u64,
    /// Complete, well-formed records handed out.
    pub ready: u64,
    /// Peers dropped at their deadline with no complete record.
    pub timed_out: u64,
    /// Peers dropped because `max_pending` others arrived after them.
    pub evicted: u64,
    /// Peers refused for a malformed or oversized record.
    pub malformed: u64,
    /// Peers that closed their connection (or whose socket failed) before
    /// their record was complete.
    pub hung_up: u64,
}

impl AcceptorStats {
    /// Peers dropped without a usable record, for whatever reason.
    pub fn dropped(&self) -> u64 {
        self.timed_out + self.evicted + self.malformed + self.hung_up
    }
}

/// Why an [`Acceptor`] dropped a peer before handing it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropReason {
    /// No complete record within the deadline.
    Deadline(Duration),
    /// `max_pending` newer peers were waiting (or the process ran out of
    /// descriptors).
    Evicted,
    /// The record was malformed, of another version, too long, or followed
    /// by more bytes (why, printable and at most 512 characters).
    Malformed(String),
    /// The peer closed its connection, or its socket failed, before its
    /// record was complete.
    HungUp,
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::Deadline(d) => write!(f, "no complete setup record within {d:?}"),
            DropReason::Evicted => {
                f.write_str("too many connections waiting to send their setup record")
            }
            DropReason::Malformed(why) => write!(f, "bad setup record: {why}"),
            DropReason::HungUp => f.write_str("closed before its setup record was complete"),
        }
    }
}

/// A peer whose setup record arrived whole and well-formed: answer it with
/// this side's record, or [`refuse`] it.
#[derive(Debug)]
pub struct Accepted<R> {
    /// The connection, non-blocking, with `TCP_NODELAY`; nothing after the
    /// record's newline has been read from it.
    pub stream: TcpStream,
    /// The peer's address.
    pub peer: SocketAddr,
    /// The parsed record.
    pub record: R,
}

/// Accepts TCP connections and reads their setup records concurrently, each
/// under one deadline, on the caller's thread.
///
/// It owns the listening socket and every connection whose record has not
/// arrived in full. One `poll(2)` waits on all of them; each readable one is
/// read without blocking, in whole chunks, into its own buffer bounded by
/// the format's [`MAX_LINE`](SetupFormat::MAX_LINE). A peer that sends
/// nothing, trickles its bytes, or sends garbage costs one descriptor and at
/// most a few KiB until its deadline, and no thread; a peer whose record is
/// complete is handed out at once, whatever the others do. When more than
/// `max_pending` peers are waiting, or the process runs out of descriptors,
/// the *oldest* waiting peer is dropped: an honest peer sends its record
/// with its connection, so it is the old ones that are most likely idle,
/// and refusing the new ones instead would let whoever keeps the table full
/// lock every honest peer out. Every peer dropped or refused is told why in
/// a refusal line (but one that hung up).
#[derive(Debug)]
pub struct Acceptor<F: SetupFormat> {
    tcp: TcpListener,
    format: F,
    opts: AcceptorOptions,
    /// Oldest first; deadlines in the same order.
    pending: VecDeque<Partial>,
    fds: Vec<libc::pollfd>,
    tally: Tally,
    /// After running out of descriptors with nobody left to drop, the
    /// listener sits out of `poll` until then (else it would spin).
    paused_until: Option<Instant>,
}

/// A peer whose record is being read.
#[derive(Debug)]
struct Partial {
    /// `None` once settled (handed out or dropped).
    stream: Option<TcpStream>,
    peer: SocketAddr,
    line: LineReader,
    deadline: Instant,
}

/// Where one read left a peer.
enum Step<R> {
    /// Nothing more to read now.
    Waiting,
    /// The record arrived.
    Record(R),
    /// Dropped (and told why, where it can be).
    Dropped(DropReason),
}

/// Accepted connections per `poll` before the waiting ones are read again.
const ACCEPT_BATCH: usize = 64;

/// How long the listener rests after the process ran out of descriptors.
const DESCRIPTOR_PAUSE: Duration = Duration::from_millis(50);

impl<F: SetupFormat> Acceptor<F> {
    /// Takes over `tcp` (made non-blocking, and given the longest accept
    /// queue the system allows instead of std's 128, so that a burst of
    /// connections waits in the kernel rather than being dropped), to read
    /// records of `format`.
    pub fn new(tcp: TcpListener, format: F, opts: AcceptorOptions) -> io::Result<Acceptor<F>> {
        tcp.set_nonblocking(true)?;
        // SAFETY: listen(2) on a descriptor the listener owns; on a socket
        // that already listens, Linux only changes the queue's length (the
        // kernel caps it at net.core.somaxconn). Failing leaves the old one.
        unsafe {
            libc::listen(tcp.as_raw_fd(), libc::SOMAXCONN);
        }
        Ok(Acceptor {
            tcp,
            format,
            opts: AcceptorOptions {
                max_pending: opts.max_pending.max(1),
                ..opts
            },
            pending: VecDeque::new(),
            fds: Vec::new(),
            tally: Tally::default(),
            paused_until: None,
        })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// The record format.
    pub fn format(&self) -> &F {
        &self.format
    }

    /// Peers whose record is still being read.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// What has been done so far.
    pub fn stats(&self) -> AcceptorStats {
        self.tally.stats
    }

    /// The last peer dropped without a usable record, and why (for a log
    /// line; the counts are in [`stats`](Self::stats)).
    pub fn last_drop(&self) -> Option<(SocketAddr, &DropReason)> {
        self.tally.last_drop.as_ref().map(|(a, r)| (*a, r))
    }

    /// Waits up to `timeout` for something to happen, then accepts new peers,
    /// reads what the waiting ones sent, drops those past their deadline, and
    /// hands every peer whose record is now complete to `ready`. Returns
    /// early when there is work; call it in a loop. Fails only if `poll(2)`
    /// itself fails.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut(Accepted<F::Record>),
    ) -> io::Result<()> {
        let now = Instant::now();
        self.expire(now);
        let listening = match self.paused_until {
            Some(t) if now < t => false,
            _ => {
                self.paused_until = None;
                true
            }
        };
        let mut wait = timeout;
        if let Some(p) = self.pending.front() {
            wait = wait.min(p.deadline.saturating_duration_since(now));
        }
        if let Some(t) = self.paused_until {
            wait = wait.min(t.saturating_duration_since(now));
        }
        if self.wait(listening, wait)? == 0 {
            return Ok(());
        }
        // The waiting peers first (the descriptors are in their order), then
        // the new ones.
        for (i, p) in self.pending.iter_mut().enumerate() {
            if self.fds[i + 1].revents != 0 {
                let step = advance(&self.format, p);
                self.tally.settle(&self.format, p, step, &mut ready);
            }
        }
        self.pending.retain(|p| p.stream.is_some());
        if listening && self.fds[0].revents != 0 {
            self.accept_some(&mut ready);
        }
        Ok(())
    }

    /// One `poll(2)` over the listener (when `listening`) and every waiting
    /// peer, up to `wait`; how many descriptors have events (0 on `EINTR`).
    fn wait(&mut self, listening: bool, wait: Duration) -> io::Result<usize> {
        self.fds.clear();
        self.fds.push(libc::pollfd {
            // A negative descriptor is skipped by poll(2).
            fd: if listening { self.tcp.as_raw_fd() } else { -1 },
            events: libc::POLLIN,
            revents: 0,
        });
        for p in &self.pending {
            self.fds.push(libc::pollfd {
                fd: p.stream.as_ref().map_or(-1, |s| s.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // Rounded up, so that a deadline less than a millisecond away is
        // waited for rather than spun on.
        let ms = wait.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is an initialized array of `fds.len()` pollfd structs
        // that is neither moved nor touched until poll(2) returns; every
        // descriptor in it is owned by a live socket of `self` (or is -1).
        let n = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        Ok(n as usize)
    }

    /// Accepts up to [`ACCEPT_BATCH`] peers and reads what each has sent.
    fn accept_some(&mut self, ready: &mut impl FnMut(Accepted<F::Record>)) {
        for _ in 0..ACCEPT_BATCH {
            match self.tcp.accept() {
                Ok((stream, peer)) => {
                    self.tally.stats.accepted += 1;
                    // Accepted sockets do not inherit O_NONBLOCK.
                    if stream.set_nonblocking(true).is_err() {
                        self.tally.dropped(peer, DropReason::HungUp);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let mut p = Partial {
                        stream: Some(stream),
                        peer,
                        line: LineReader::new(F::MAX_LINE),
                        deadline: Instant::now() + self.opts.deadline,
                    };
                    // An honest peer sent its record with its connection: it
                    // is usually here already.
                    let step = advance(&self.format, &mut p);
                    self.tally.settle(&self.format, &mut p, step, ready);
                    if p.stream.is_some() {
                        if self.pending.len() >= self.opts.max_pending {
                            self.evict_oldest();
                        }
                        self.pending.push_back(p);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: the oldest waiting peer makes room.
                    if !self.evict_oldest() {
                        self.paused_until = Some(Instant::now() + DESCRIPTOR_PAUSE);
                        break;
                    }
                }
                // A peer that reset before it was accepted.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
                // Anything else (ENOBUFS, ENOMEM, …): try again shortly.
                Err(_) => {
                    self.paused_until = Some(Instant::now() + DESCRIPTOR_PAUSE);
                    break;
                }
            }
        }
    }

    /// Drops the oldest waiting peer; false when none waits.
    fn evict_oldest(&mut self) -> bool {
        let Some(p) = self.pending.pop_front() else {
            return false;
        };
        if let Some(s) = &p.stream {
            refuse(s, &self.format, &DropReason::Evicted.to_string());
        }
        self.tally.dropped(p.peer, DropReason::Evicted);
        true
    }

    /// Drops the peers whose deadline has passed.
    fn expire(&mut self, now: Instant) {
        while self.pending.front().is_some_and(|p| p.deadline <= now) {
            if let Some(p) = self.pending.pop_front() {
                let why = DropReason::Deadline(self.opts.deadline);
                if let Some(s) = &p.stream {
                    refuse(s, &self.format, &why.to_string());
                }
                self.tally.dropped(p.peer, why);
            }
        }
    }
}

/// The counts, and the last peer dropped.
#[derive(Debug, Default)]
struct Tally {
    stats: AcceptorStats,
    last_drop: Option<(SocketAddr, DropReason)>,
}

impl Tally {
    /// Acts on a step of `p`: a complete record goes to `ready`, a dropped
    /// peer is told why; either settles `p` (takes its stream).
    fn settle<F: SetupFormat>(
        &mut self,
        format: &F,
        p: &mut Partial,
        step: Step<F::Record>,
        ready: &mut impl FnMut(Accepted<F::Record>),
    ) {
        match step {
            Step::Waiting => {}
            Step::Record(record) => {
                if let Some(stream) = p.stream.take() {
                    self.stats.ready += 1;
                    ready(Accepted {
                        stream,
                        peer: p.peer,
                        record,
                    });
                }
            }
            Step::Dropped(why) => {
                if let Some(s) = p.stream.take() {
                    if why != DropReason::HungUp {
                        refuse(&s, format, &why.to_string());
                    }
                }
                self.dropped(p.peer, why);
            }
        }
    }

    /// Counts a peer dropped without a usable record.
    fn dropped(&mut self, peer: SocketAddr, why: DropReason) {
        let n = match why {
            DropReason::Deadline(_) => &mut self.stats.timed_out,
            DropReason::Evicted => &mut self.stats.evicted,
            DropReason::Malformed(_) => &mut self.stats.malformed,
            DropReason::HungUp => &mut self.stats.hung_up,
        };
        *n += 1;
        self.last_drop = Some((peer, why));
    }
}

/// Reads what the peer has sent, without blocking, up to the end of its
/// record or the format's bound.
fn advance<F: SetupFormat>(format: &F, p: &mut Partial) -> Step<F::Record> {
    let Some(s) = &p.stream else {
        return Step::Waiting;
    };
    // Each turn takes at least one byte, and a record is bounded: the loop
    // ends within MAX_LINE bytes.
    loop {
        return match p.line.fill(s) {
            Ok(Fill::More) => continue,
            Ok(Fill::Waiting) => Step::Waiting,
            // The peer waits for our answer before it sends anything more:
            // bytes after its record are not ours to drop, nor to keep.
            Ok(Fill::Line) if p.line.trailing() => {
                Step::Dropped(DropReason::Malformed("bytes after the setup record".into()))
            }
            Ok(Fill::Line) => match format.parse(p.line.line()) {
                Ok(r) => Step::Record(r),
                // The reason may quote the peer: made printable and short.
                Err(why) => Step::Dropped(DropReason::Malformed(printable(&why))),
            },
            Ok(Fill::TooLong) => Step::Dropped(DropReason::Malformed(format!(
                "no end of line within {} bytes",
                F::MAX_LINE
            ))),
            Ok(Fill::Closed) | Err(_) => Step::Dropped(DropReason::HungUp),
        };
    }
}
