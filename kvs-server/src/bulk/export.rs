//! A source's bulk port: it accepts the targets' mpib connections, checks
//! each one's ticket, and streams the frozen records of the slots the
//! ticket names, batch after batch, into the buffers the target offers
//! (mpib's clear-to-send: the target pulls).
//!
//! The port has the setup port's protections: its one listener thread reads
//! every pending setup record at once (mpib's [`Acceptor`]: non-blocking
//! sockets under one `poll(2)`), each under one deadline for the whole
//! record, with a cap on how many wait. Only a connection whose record
//! parsed and whose ticket redeemed gets a thread, for its transfer; a peer
//! that connects and says nothing, or trickles its bytes, costs a
//! descriptor until its deadline, never a thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpib::conn::{Acceptor, AcceptorOptions, Listener, PendingConnection};
use mpib::{Buffer, Comm, Request, Span};

use super::pull_conn::{LINGER, SETUP_BYTES};
use super::source_slots::{Held, SourceSlots};
use super::wire::{BatchWriter, PullSetup, BATCH_HEADER, LAST};
use super::{open_rails, DEPTH};
use crate::bulk::TransferError;
use crate::bulk::BATCH;
use crate::config::Config;

mod refusals;

use refusals::RefusalLog;

/// How long the listener waits in `poll(2)` at most: how late it sees the
/// server stop.
const POLL: Duration = Duration::from_millis(50);

/// What this member sent as a source, for status and metrics.
#[derive(Debug, Default)]
pub(crate) struct ExportCounters {
    /// Bytes of keys and values sent to migrations' targets.
    pub sent_bytes: AtomicU64,
    /// Bytes of keys and values sent to new backups (copies of the slots
    /// this member is primary of).
    pub copy_sent_bytes: AtomicU64,
    /// Bulk connections accepted.
    pub connections: AtomicU64,
    /// Pulls served over them.
    pub pulls: AtomicU64,
}

/// The bulk port's listener thread, as started.
pub(crate) struct BulkServer {
    pub listener: Listener,
    pub source: Arc<SourceSlots>,
    pub cfg: Config,
    pub rails: Vec<String>,
    /// The member's totals.
    pub counters: Arc<ExportCounters>,
    pub stop: Arc<AtomicBool>,
}

/// What a transfer's thread needs of the server.
struct Exporter {
    source: Arc<SourceSlots>,
    cfg: Config,
    rails: Vec<String>,
    counters: Arc<ExportCounters>,
    stop: Arc<AtomicBool>,
}

/// The bulk port's setup reader: the setup port's settings.
///
/// The deadline is `setup_timeout_ms`, as a client's on the setup port: a
/// target sends its record as soon as its TCP connection is up
/// ([`mpib::conn::connect_with`] writes it before reading anything), so an
/// honest one needs a round trip, as a client does, and an operator who
/// lengthens it for a slow network wants it for both ports. The cap is
/// `max_pending_setups`; past it the *oldest* pending peer is dropped, not
/// the new one: an honest target's record arrives with its connection, so
/// the old ones are the idle ones, and refusing newcomers would let whoever
/// keeps the table full lock every target out until the deadlines pass.
fn acceptor_options(cfg: &Config) -> AcceptorOptions {
    AcceptorOptions {
        deadline: Duration::from_millis(cfg.setup_timeout_ms),
        max_pending: cfg.max_pending_setups,
    }
}

impl BulkServer {
    /// Reads setup records until the server stops; each connection whose
    /// ticket redeems gets a thread for its transfer.
    pub fn run(self) {
        let BulkServer {
            listener,
            source,
            cfg,
            rails,
            counters,
            stop,
        } = self;
        let mut acc = match Acceptor::new(listener, acceptor_options(&cfg)) {
            Ok(a) => a,
            Err(e) => return tracing::error!("bulk port: {e}"),
        };
        let ex = Arc::new(Exporter {
            source,
            cfg,
            rails,
            counters,
            stop,
        });
        let mut ready = Vec::new();
        let mut log = RefusalLog::default();
        while !ex.stop.load(Ordering::Acquire) {
            if let Err(e) = acc.poll(POLL, &mut ready) {
                log.poll_failed(&e);
                std::thread::sleep(POLL);
            }
            for p in ready.drain(..) {
                ex.admit(p, &mut log);
            }
            log.tick(&acc);
        }
    }
}

impl Exporter {
    /// Starts the transfer a complete setup record asks for, if it carries
    /// an open ticket; else refuses it, saying why.
    fn admit(self: &Arc<Self>, p: PendingConnection, log: &mut RefusalLog) {
        let peer = p.peer_addr();
        let Some(setup) = PullSetup::parse(p.private_data()) else {
            let why = "not a pull request";
            log.refused(peer, why);
            return p.refuse(why);
        };
        let Some((held, copy)) = self.source.redeem(&setup) else {
            let why = format!("no open ticket for slots {}..{}", setup.first, setup.end);
            log.refused(peer, &why);
            return p.refuse(&why);
        };
        let me = self.clone();
        // A thread that cannot start drops the connection: the target sets
        // up a new one.
        let spawned = std::thread::Builder::new()
            .name("kvs-export".into())
            .spawn(move || me.serve(p, setup, held, copy));
        if let Err(e) = spawned {
            tracing::error!("bulk port: cannot start a transfer for {peer}: {e}");
        }
    }

    /// One target's connection, on a thread of its own: the pull its setup
    /// asked for (a new backup's copy, if `copy`), then each pull the
    /// target asks for next over the same connection, until it closes it or
    /// leaves it idle for [`LINGER`].
    fn serve(&self, p: PendingConnection, setup: PullSetup, held: Held, copy: bool) {
        let peer = p.peer_addr();
        let rails = match open_rails(&self.cfg, &self.rails, setup.rails) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("bulk setup from {peer}: {e}");
                return p.refuse(&e.to_string());
            }
        };
        let mut comm = match p.establish(&rails, &mpib::Config::default(), &[]) {
            Ok(c) => c,
            Err(e) => return tracing::warn!("bulk setup from {peer}: {e}"),
        };
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
        let mut conn = match SendConn::new(&comm) {
            Ok(c) => c,
            Err(e) => {
                comm.close();
                return tracing::warn!("bulk setup from {peer}: {e}");
            }
        };
        let mask = setup.rails;
        let mut next = Some((setup, held, copy));
        while let Some((setup, held, copy)) = next.take() {
            let sent = if copy {
                &self.counters.copy_sent_bytes
            } else {
                &self.counters.sent_bytes
            };
            if let Err(e) = send_all(&mut comm, &mut conn, &held, setup.end, sent, &self.stop) {
                tracing::warn!(
                    "bulk transfer of slots {}..{} to {peer} failed: {e}",
                    setup.first,
                    setup.end
                );
                break;
            }
            self.counters.pulls.fetch_add(1, Ordering::Relaxed);
            // The slots may be freed while the connection waits.
            drop(held);
            next = self.next_pull(&mut comm, &mut conn, mask, peer);
        }
        comm.close();
    }

    /// Waits up to [`LINGER`] for the target's next setup on `comm` and
    /// redeems its ticket. `None` if none comes, the target closed the
    /// connection, or the setup is refused (said on stderr; the target
    /// asks again on a new connection, where the refusal reaches it).
    fn next_pull(
        &self,
        comm: &mut Comm,
        conn: &mut SendConn,
        mask: u8,
        peer: std::net::SocketAddr,
    ) -> Option<(PullSetup, Held, bool)> {
        let bytes = conn.next_setup(comm, &self.stop)?;
        let Some(setup) = PullSetup::parse(&bytes) else {
            tracing::warn!("bulk port: {peer} sent a malformed pull setup; closing");
            return None;
        };
        if setup.rails != mask {
            tracing::warn!(
                "bulk port: {peer} asked for rails {:#b} on a connection of rails \
                 {mask:#b}; closing",
                setup.rails
            );
            return None;
        }
        match self.source.redeem(&setup) {
            Some((held, copy)) => Some((setup, held, copy)),
            None => {
                tracing::warn!(
                    "bulk port: {peer} has no open ticket for slots {}..{}; closing",
                    setup.first,
                    setup.end
                );
                None
            }
        }
    }
}

/// A source's end of a bulk connection: its send buffers, and the numbers
/// of the next batch and setup, both counted over the connection's life.
struct SendConn {
    bufs: Vec<Buffer>,
    seq: u32,
    setup_buf: Buffer,
    setups: u32,
}

impl SendConn {
    fn new(comm: &Comm) -> Result<SendConn, TransferError> {
        Ok(SendConn {
            bufs: (0..DEPTH)
                .map(|_| comm.alloc_buffer(BATCH))
                .collect::<Result<_, _>>()?,
            seq: 0,
            setup_buf: comm.alloc_buffer(SETUP_BYTES)?,
            setups: 0,
        })
    }

    /// The bytes of the target's next setup, or `None` if none arrives
    /// within [`LINGER`], the connection fails or the server stops.
    fn next_setup(&mut self, comm: &mut Comm, stop: &AtomicBool) -> Option<Vec<u8>> {
        let t = Instant::now();
        let req = loop {
            match comm.irecv(&[self.setup_buf.all()], self.setups) {
                Ok(Some(r)) => break r,
                Ok(None) => super::idle(comm, t, stop).ok()?,
                Err(_) => return None,
            }
        };
        self.setups += 1;
        let t = Instant::now();
        loop {
            match comm.test(&req) {
                Ok(Some(sizes)) => return self.setup_buf.to_vec(0, sizes.total() as usize).ok(),
                Ok(None) if t.elapsed() < LINGER && !stop.load(Ordering::Acquire) => {
                    comm.progress();
                    std::thread::sleep(Duration::from_micros(200));
                }
                _ => return None,
            }
        }
    }
}

/// Streams `held` (slots in order, ending before `end`): each batch is
/// built in the next of [`DEPTH`] send buffers as soon as that buffer's
/// previous send is done, and goes into the target's next receive.
/// Batches are numbered on from `conn`'s count.
fn send_all(
    comm: &mut Comm,
    conn: &mut SendConn,
    held: &Held,
    end: u32,
    sent: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(), TransferError> {
    let mut inflight: Vec<Option<Request>> = (0..DEPTH).map(|_| None).collect();
    let mut recs = held
        .iter()
        .flat_map(|(slot, r)| r.iter().map(move |(k, v)| (*slot, k, v)))
        .peekable();
    loop {
        let seq = conn.seq;
        let i = seq as usize % DEPTH;
        if let Some(req) = inflight[i].take() {
            wait(comm, &req, stop)?;
        }
        let (len, last) = conn.bufs[i].fill(|b| fill_batch(b, seq, &mut recs, end))?;
        let span = conn.bufs[i].span(0, len as u64)?;
        inflight[i] = Some(send(comm, span, seq, stop)?);
        conn.seq += 1;
        sent.fetch_add((len - BATCH_HEADER) as u64, Ordering::Relaxed);
        if last {
            break;
        }
    }
    // Every batch is in the target's memory once its send completes.
    for r in inflight.iter_mut() {
        if let Some(req) = r.take() {
            wait(comm, &req, stop)?;
        }
    }
    Ok(())
}

/// Builds batch `seq` in `buf` from the records `recs` yields (slot, key,
/// value) while they fit; its length, and whether it is the last (every
/// record is in, and its progress mark is `end`).
fn fill_batch<'r>(
    buf: &mut [u8],
    seq: u32,
    recs: &mut std::iter::Peekable<impl Iterator<Item = (u32, &'r [u8], &'r [u8])>>,
    end: u32,
) -> Result<(usize, bool), TransferError> {
    let mut w = BatchWriter::over(buf);
    w.begin(seq);
    while let Some(&(slot, k, v)) = recs.peek() {
        if !w.push(k, v) {
            if w.records() == 0 {
                return Err(TransferError::RecordTooLarge(k.len() + v.len()));
            }
            // Full: every slot before this one is complete.
            return Ok((w.finish(slot, 0).len(), false));
        }
        recs.next();
    }
    Ok((w.finish(end, LAST).len(), true))
}

/// Sends `span` as batch `seq`, once the target's receive for it is posted.
fn send(
    comm: &mut Comm,
    span: Span,
    seq: u32,
    stop: &AtomicBool,
) -> Result<Request, TransferError> {
    let t = Instant::now();
    loop {
        match comm.isend(&[span], seq) {
            Ok(Some(r)) => return Ok(r),
            Ok(None) => super::idle(comm, t, stop)?,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits for a send to complete.
fn wait(comm: &mut Comm, req: &Request, stop: &AtomicBool) -> Result<(), TransferError> {
    let t = Instant::now();
    loop {
        match comm.test(req) {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => super::idle(comm, t, stop)?,
            Err(e) => return Err(e.into()),
        }
    }
}
