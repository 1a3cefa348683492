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
use mpib::{Buffer, Comm, Request};

use super::outgoing::{Held, Outgoing};
use super::wire::{BatchWriter, PullSetup, BATCH_HEADER, LAST};
use super::{open_rails, DEPTH};
use crate::batch::BATCH;
use crate::config::Config;

mod refusals;

use refusals::RefusalLog;

/// How long the listener waits in `poll(2)` at most: how late it sees the
/// server stop.
const POLL: Duration = Duration::from_millis(50);

/// The bulk port's listener thread, as started.
pub(crate) struct BulkServer {
    pub listener: Listener,
    pub outgoing: Arc<Outgoing>,
    pub cfg: Config,
    pub rails: Vec<String>,
    /// The member's totals (metrics).
    pub shared: Arc<crate::cluster_view::Shared>,
    pub stop: Arc<AtomicBool>,
}

/// What a transfer's thread needs of the server.
struct Exporter {
    outgoing: Arc<Outgoing>,
    cfg: Config,
    rails: Vec<String>,
    shared: Arc<crate::cluster_view::Shared>,
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
            outgoing,
            cfg,
            rails,
            shared,
            stop,
        } = self;
        let mut acc = match Acceptor::new(listener, acceptor_options(&cfg)) {
            Ok(a) => a,
            Err(e) => return eprintln!("kvs-server: bulk port: {e}"),
        };
        let ex = Arc::new(Exporter {
            outgoing,
            cfg,
            rails,
            shared,
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
        let Some((held, copy)) = self.outgoing.redeem(&setup) else {
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
            eprintln!("kvs-server: bulk port: cannot start a transfer for {peer}: {e}");
        }
    }

    /// One target's transfer (a new backup's, if `copy`), on a thread of
    /// its own.
    fn serve(&self, p: PendingConnection, setup: PullSetup, held: Held, copy: bool) {
        let peer = p.peer_addr();
        let rails = match open_rails(&self.cfg, &self.rails, setup.rails) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("kvs-server: bulk setup from {peer}: {e}");
                return p.refuse(&e);
            }
        };
        let mut comm = match p.establish(&rails, &mpib::Config::default(), &[]) {
            Ok(c) => c,
            Err(e) => return eprintln!("kvs-server: bulk setup from {peer}: {e}"),
        };
        let sent = if copy {
            &self.shared.copy_sent_bytes
        } else {
            &self.shared.sent_bytes
        };
        if let Err(e) = send_all(&mut comm, &held, setup.end, sent, &self.stop) {
            eprintln!(
                "kvs-server: bulk transfer of slots {}..{} to {peer} failed: {e}",
                setup.first, setup.end
            );
        }
        comm.close();
    }
}

/// Streams `held` (slots in order, ending before `end`): each batch goes
/// into the target's next receive as soon as one of [`DEPTH`] buffers is
/// free.
fn send_all(
    comm: &mut Comm,
    held: &Held,
    end: u32,
    sent: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(), String> {
    let bufs: Vec<Buffer> = (0..DEPTH)
        .map(|_| comm.alloc_buffer(BATCH))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut inflight: Vec<Option<Request>> = (0..DEPTH).map(|_| None).collect();
    let mut w = BatchWriter::new(BATCH);
    let mut seq = 0u32;
    w.begin(seq);
    for (slot, recs) in held {
        for (k, v) in recs.iter() {
            if w.push(k, v) {
                continue;
            }
            // Full: every slot before this one is complete.
            let bytes = w.finish(*slot, 0);
            post(comm, &bufs, &mut inflight, seq, bytes, stop)?;
            sent.fetch_add((bytes.len() - BATCH_HEADER) as u64, Ordering::Relaxed);
            seq += 1;
            w.begin(seq);
            if !w.push(k, v) {
                return Err(format!(
                    "a record of {} bytes exceeds a batch",
                    k.len() + v.len()
                ));
            }
        }
    }
    let bytes = w.finish(end, LAST);
    post(comm, &bufs, &mut inflight, seq, bytes, stop)?;
    sent.fetch_add((bytes.len() - BATCH_HEADER) as u64, Ordering::Relaxed);
    // Every batch is in the target's memory once its send completes.
    for r in inflight.iter_mut() {
        if let Some(req) = r.take() {
            wait(comm, &req, stop)?;
        }
    }
    Ok(())
}

/// Sends batch `seq` from buffer `seq % DEPTH`, once that buffer's previous
/// send is done.
fn post(
    comm: &mut Comm,
    bufs: &[Buffer],
    inflight: &mut [Option<Request>],
    seq: u32,
    bytes: &[u8],
    stop: &AtomicBool,
) -> Result<(), String> {
    let i = seq as usize % DEPTH;
    if let Some(req) = inflight[i].take() {
        wait(comm, &req, stop)?;
    }
    bufs[i].write(0, bytes).map_err(|e| e.to_string())?;
    let span = bufs[i]
        .span(0, bytes.len() as u64)
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    loop {
        match comm.isend(&[span], seq) {
            Ok(Some(r)) => {
                inflight[i] = Some(r);
                return Ok(());
            }
            Ok(None) => super::idle(comm, t, stop)?,
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Waits for a send to complete.
fn wait(comm: &mut Comm, req: &Request, stop: &AtomicBool) -> Result<(), String> {
    let t = Instant::now();
    loop {
        match comm.test(req) {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => super::idle(comm, t, stop)?,
            Err(e) => return Err(e.to_string()),
        }
    }
}
