//! A source's bulk port: it accepts the targets' mpib connections, checks
//! each one's ticket, and streams the frozen records of the slots the
//! ticket names, batch after batch, into the buffers the target offers
//! (mpib's clear-to-send: the target pulls).

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpib::conn::{Listener, PendingConnection};
use mpib::{Buffer, Comm, Request};

use super::outgoing::{Held, Outgoing};
use super::wire::{BatchWriter, PullSetup, BATCH_HEADER, LAST};
use super::{open_rails, BATCH, DEPTH};
use crate::config::Config;

/// How long a transfer may make no progress before the source gives up on
/// it (the target sets up a new one).
const STALL: Duration = Duration::from_secs(30);

/// The bulk port's listener thread, as started.
pub(crate) struct BulkServer {
    pub listener: Listener,
    pub outgoing: Arc<Outgoing>,
    pub cfg: Config,
    pub rails: Vec<String>,
    /// The member's totals (metrics).
    pub shared: Arc<crate::cluster::Shared>,
    pub stop: Arc<AtomicBool>,
}

impl BulkServer {
    /// Accepts until the server stops; each connection gets a thread.
    pub fn run(self) {
        if let Err(e) = self.listener.set_nonblocking(true) {
            eprintln!("kvs-server: bulk port: {e}");
            return;
        }
        let me = Arc::new(self);
        while !me.stop.load(Ordering::Acquire) {
            match me.listener.accept_tcp() {
                Ok((stream, peer)) => {
                    let m = me.clone();
                    let spawned = std::thread::Builder::new()
                        .name("kvs-export".into())
                        .spawn(move || m.serve(stream, peer));
                    if let Err(e) = spawned {
                        eprintln!("kvs-server: bulk port: cannot start a transfer: {e}");
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => {
                    eprintln!("kvs-server: bulk port: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// One target's transfer.
    fn serve(&self, stream: std::net::TcpStream, peer: SocketAddr) {
        let p = match PendingConnection::read(stream, peer) {
            Ok(p) => p,
            Err(e) => return eprintln!("kvs-server: bulk setup from {peer}: {e}"),
        };
        // Dropping a pending connection refuses it.
        let Some(setup) = PullSetup::parse(p.private_data()) else {
            return eprintln!("kvs-server: bulk setup from {peer}: not a pull request");
        };
        let Some(held) = self.outgoing.redeem(&setup) else {
            return eprintln!(
                "kvs-server: bulk setup from {peer}: no open ticket for slots {}..{}",
                setup.first, setup.end
            );
        };
        let rails = match open_rails(&self.cfg, &self.rails, setup.rails) {
            Ok(r) => r,
            Err(e) => return eprintln!("kvs-server: bulk setup from {peer}: {e}"),
        };
        let mut comm = match p.establish(&rails, &mpib::Config::default(), &[]) {
            Ok(c) => c,
            Err(e) => return eprintln!("kvs-server: bulk setup from {peer}: {e}"),
        };
        if let Err(e) = send_all(&mut comm, &held, setup.end, &self.shared, &self.stop) {
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
    shared: &crate::cluster::Shared,
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
            let bytes = w.finish(*slot, 0).to_vec();
            post(comm, &bufs, &mut inflight, seq, &bytes, stop)?;
            shared
                .sent_bytes
                .fetch_add((bytes.len() - BATCH_HEADER) as u64, Ordering::Relaxed);
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
    let bytes = w.finish(end, LAST).to_vec();
    post(comm, &bufs, &mut inflight, seq, &bytes, stop)?;
    shared
        .sent_bytes
        .fetch_add((bytes.len() - BATCH_HEADER) as u64, Ordering::Relaxed);
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
            Ok(None) => idle(comm, t, stop)?,
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
            Ok(None) => idle(comm, t, stop)?,
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// One turn of waiting: progress, and give up on a stall or a stop.
fn idle(comm: &mut Comm, since: Instant, stop: &AtomicBool) -> Result<(), String> {
    comm.progress();
    if stop.load(Ordering::Acquire) {
        return Err("the server is stopping".into());
    }
    if since.elapsed() > STALL {
        return Err(format!("no progress in {STALL:?}"));
    }
    super::pause(since);
    Ok(())
}
