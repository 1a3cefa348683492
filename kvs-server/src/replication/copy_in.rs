//! A backup's side of a copy to it: the pull of the snapshot a primary's
//! copy begin names, over mpib on both rails from the primary's bulk port,
//! on a thread of its own; and the copies arriving, for status.
//!
//! The worker that received the begin starts the pull
//! ([`crate::replication::slot_state::PullStart`]); the thread hands each checked
//! batch to that worker ([`ToWorker::CopyRecords`]), which takes the records
//! for keys the stream of writes did not set or delete since the begin, and
//! says at the end whether every record came ([`ToWorker::CopyPulled`]). A
//! pull is not resumed: its ticket is used up, so a failed one fails the
//! copy and the primary starts it over from a new snapshot.

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use copyrpc::Waker;
use kvs_proto::control::CopyStatus;
use kvs_proto::replica::CopyBegin;
use mpib::{Buffer, Comm, Request};

use crate::bulk::pull_conn::post_recv;
use crate::bulk::pull_conn::wait_recv;
use crate::bulk::wire::{Batch, PullSetup, Taken};
use crate::bulk::TransferError;
use crate::bulk::BATCH;
use crate::bulk::{all_rails, open_rails, DEPTH};
use crate::config::Config;
use crate::threads::to_worker::ToWorker;

/// Batches handed to the worker and not yet taken, at most.
const UNTAKEN: usize = 8;

/// One copy arriving: what it has pulled.
#[derive(Debug)]
pub(crate) struct CopyProgress {
    from: MemberId,
    begin: CopyBegin,
    records: AtomicU64,
    bytes: AtomicU64,
    started: Instant,
}

impl CopyProgress {
    fn status(&self) -> CopyStatus {
        CopyStatus {
            from: self.from,
            first: self.begin.first,
            end: self.begin.end,
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            total_bytes: self.begin.bytes,
            seconds: self.started.elapsed().as_secs_f64(),
        }
    }
}

/// The copies arriving at this member (shared by its workers' pulls and
/// its control thread's status).
#[derive(Debug, Default)]
pub(crate) struct Copies {
    running: Mutex<Vec<Arc<CopyProgress>>>,
}

impl Copies {
    fn add(&self, p: Arc<CopyProgress>) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(p);
    }

    fn remove(&self, p: &Arc<CopyProgress>) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|x| !Arc::ptr_eq(x, p));
    }

    /// For `kvs-admin status`.
    pub fn status(&self) -> Vec<CopyStatus> {
        let g = self.running.lock().unwrap_or_else(|p| p.into_inner());
        g.iter().map(|p| p.status()).collect()
    }
}

/// One pull, as its worker starts it.
pub(crate) struct CopyPull {
    pub begin: CopyBegin,
    /// The primary's member id and its bulk port's address.
    pub from: MemberId,
    pub bulk: SocketAddr,
    /// The map's slot count.
    pub slots: u32,
    pub worker: (Sender<ToWorker>, Waker),
    pub cfg: Config,
    pub rails: Vec<String>,
    pub copies: Arc<Copies>,
    pub stop: Arc<AtomicBool>,
}

impl CopyPull {
    /// Runs the pull on a thread of its own; the worker hears how it
    /// ended.
    pub fn spawn(self) {
        let (tx, waker) = self.worker.clone();
        let ticket = self.begin.ticket;
        let spawned = std::thread::Builder::new()
            .name("kvs-copy-in".into())
            .spawn(move || {
                let progress = Arc::new(CopyProgress {
                    from: self.from,
                    begin: self.begin,
                    records: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                    started: Instant::now(),
                });
                self.copies.add(progress.clone());
                let result = self.run(&progress);
                self.copies.remove(&progress);
                if let Err(why) = &result {
                    tracing::warn!(
                        "copy of slots {}..{} from member {}: {why}",
                        self.begin.first,
                        self.begin.end,
                        self.from
                    );
                }
                let (tx, waker) = &self.worker;
                let _ = tx.send(ToWorker::CopyPulled { ticket, result });
                waker.wake();
            });
        if let Err(e) = spawned {
            let _ = tx.send(ToWorker::CopyPulled {
                ticket,
                result: Err(TransferError::Spawn(e)),
            });
            waker.wake();
        }
    }

    fn run(&self, progress: &CopyProgress) -> Result<(), TransferError> {
        let mask = all_rails(&self.rails);
        let setup = PullSetup {
            version: 0,
            first: self.begin.first,
            end: self.begin.end,
            ticket: self.begin.ticket,
            rails: mask,
        };
        let rails = open_rails(&self.cfg, &self.rails, mask)?;
        let (mut comm, _) =
            mpib::conn::connect_with(self.bulk, &rails, &mpib::Config::default(), &setup.encode())
                .map_err(|source| TransferError::Connect {
                    to: self.bulk,
                    source,
                })?;
        let r = self.receive(&mut comm, progress);
        comm.close();
        r
    }

    /// Receives batches into [`DEPTH`] buffers until the last, each handed
    /// to the worker; returns once the worker took them all.
    fn receive(&self, comm: &mut Comm, progress: &CopyProgress) -> Result<(), TransferError> {
        let (first, end) = (self.begin.first, self.begin.end);
        let mut bufs: Vec<Buffer> = (0..DEPTH)
            .map(|_| comm.alloc_buffer(BATCH))
            .collect::<Result<_, _>>()?;
        let mut reqs: Vec<Request> = Vec::with_capacity(DEPTH);
        for (i, b) in bufs.iter().enumerate() {
            reqs.push(post_recv(comm, b, i as u32, &self.stop)?);
        }
        let (ack_tx, ack_rx) = mpsc::channel::<()>();
        let mut untaken = 0usize;
        let mut mark = first;
        let mut seq = 0u32;
        loop {
            let i = seq as usize % DEPTH;
            let len = wait_recv(comm, &reqs[i], &self.stop)?;
            let taken = bufs[i].fill(|buf| {
                let got = buf.get(..len).ok_or(TransferError::Overrun)?;
                Batch::take_checked(got, seq, first, end, self.slots, mark)
                    .map_err(TransferError::PrimarySent)
            })?;
            let Taken {
                ready,
                last,
                next_slot,
                payload_len,
            } = taken;
            let (n, b) = (ready.len() as u64, payload_len as u64);
            mark = next_slot;
            while untaken >= UNTAKEN {
                self.taken(&ack_rx, &mut untaken)?;
            }
            let msg = ToWorker::CopyRecords {
                ticket: self.begin.ticket,
                batch: ready,
                taken: ack_tx.clone(),
            };
            self.worker
                .0
                .send(msg)
                .map_err(|_| TransferError::WorkerStopped)?;
            self.worker.1.wake();
            untaken += 1;
            progress.records.fetch_add(n, Ordering::Relaxed);
            progress.bytes.fetch_add(b, Ordering::Relaxed);
            if last {
                while untaken > 0 {
                    self.taken(&ack_rx, &mut untaken)?;
                }
                return Ok(());
            }
            reqs[i] = post_recv(comm, &bufs[i], seq + DEPTH as u32, &self.stop)?;
            seq += 1;
        }
    }

    /// Waits for the worker to take the oldest batch it was given.
    fn taken(&self, rx: &Receiver<()>, untaken: &mut usize) -> Result<(), TransferError> {
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => {
                    *untaken -= 1;
                    return Ok(());
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !self.stop.load(Ordering::Acquire) => {}
                Err(_) => return Err(TransferError::WorkerStopped),
            }
        }
    }
}
