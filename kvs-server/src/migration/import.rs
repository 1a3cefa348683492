//! A target's importer: one thread per worker that gained slots from one
//! source, pulling their records over mpib and handing each batch to the
//! worker, which takes the records it has nothing newer for. When the last
//! batch is in, it tells the control group's leader, again and again until
//! the committed map ends the import (a report can be lost with a leader).
//! A failed transfer is set up again and resumes at the first slot not
//! complete.
//!
//! The worker serves the slots only once the source has frozen them: the
//! source issues a pull ticket only for slots it holds frozen (it applied
//! the map that gave them away, and serves them no more), so the first
//! ticket tells the worker to start serving. Members apply a map at their
//! own pace; this keeps the slots from having two owners that both take
//! writes.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use copyrpc::transport::{run_on_device, OnTransport, Transport};
use copyrpc::Waker;
use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::control::{ControlReply, ControlRequest, ImportStatus};
use kvs_proto::{AuthToken, Member};
use mlx5::device::Context as Device;
use mpib::{Buffer, Comm, Request};

use super::outgoing::from_hex;
use super::wire::{Batch, PullSetup};
use super::{all_rails, open_rails, DEPTH};
use crate::batch::BATCH;
use crate::config::Config;
use crate::to_worker::ToWorker;

/// Batches handed to the worker and not yet taken, at most.
const UNTAKEN: usize = 8;

/// What an import has done, for status.
#[derive(Debug)]
pub(crate) struct Progress {
    pub from: u16,
    pub slots: u32,
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub retries: AtomicU32,
    pub started: Instant,
    pub done: AtomicBool,
    /// Set by the control thread once the committed map no longer lists
    /// the import: the importer stops reporting.
    pub ended: AtomicBool,
    pub last_error: Mutex<Option<String>>,
}

impl Progress {
    /// An import of `slots` slots from member `from`, just started.
    pub fn new(from: u16, slots: u32) -> Progress {
        Progress {
            from,
            slots,
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            retries: AtomicU32::new(0),
            started: Instant::now(),
            done: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            last_error: Mutex::new(None),
        }
    }

    /// For `kvs-admin status`.
    pub fn status(&self) -> ImportStatus {
        ImportStatus {
            from: self.from,
            slots: self.slots,
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            seconds: self.started.elapsed().as_secs_f64(),
            retries: self.retries.load(Ordering::Relaxed),
        }
    }
}

/// One import, as started by the control thread.
pub(crate) struct Importer {
    pub version: u32,
    pub first: u32,
    pub end: u32,
    pub source: Member,
    /// This member's own control endpoint (reports go there, and on to
    /// the leader it names).
    pub own: SocketAddr,
    /// The map's slot count.
    pub slots: u32,
    pub worker: (Sender<ToWorker>, Waker),
    pub cfg: Config,
    pub rails: Vec<String>,
    pub cluster_token: Option<AuthToken>,
    pub progress: Arc<Progress>,
    /// Whether the worker was told the source froze the slots.
    pub frozen_told: AtomicBool,
    /// The member's totals (metrics).
    pub shared: Arc<crate::cluster_view::Shared>,
    pub stop: Arc<AtomicBool>,
}

/// Why a transfer ended early.
struct Failed {
    why: String,
    /// The source has not frozen the slots yet (it has not applied the
    /// map that hands them over): not a failure, ask again at once.
    not_yet: bool,
    /// The source says it no longer has the records (it restarted after
    /// the handover): nothing more can come.
    lost: bool,
}

impl Importer {
    /// Runs the import to its end.
    pub fn start(self) {
        match self.cfg.device_spec().open() {
            Ok(dev) => run_on_device(dev, self),
            Err(e) => eprintln!("kvs-server: import: cannot open the device: {e}"),
        }
    }

    /// The slots still to pull from `mark` on, until the last batch; then
    /// tells the leader.
    ///
    /// A source that cannot be reached is tried again for as long as the
    /// import lasts: no record is given up on a timeout while the source may
    /// live. The import ends without every record only when the source says
    /// it lost them (it restarted after the handover: memory only), or when
    /// the group ends it (`kvs-admin forget --force` of the source).
    fn run_with(&self, cc: &mut ControlClient<impl Transport>) {
        let mut mark = self.first;
        let mut failures = 0u32;
        let mut waited = 0u32;
        let lost = loop {
            if self.stop.load(Ordering::Acquire) || self.progress.ended.load(Ordering::Acquire) {
                return;
            }
            let mask = rails_for(failures, &self.rails);
            match self.transfer(cc, &mut mark, mask) {
                Ok(()) => break None,
                Err(f) if f.lost => {
                    eprintln!(
                        "kvs-server: the import of slots {}..{} from member {} ends without \
                         the records not pulled yet: {}",
                        mark, self.end, self.progress.from, f.why
                    );
                    break Some(f.why);
                }
                Err(f) if f.not_yet => {
                    waited += 1;
                    if waited % 2000 == 0 {
                        eprintln!(
                            "kvs-server: import of slots {}..{}: member {} has not frozen them \
                             yet: {}",
                            mark, self.end, self.progress.from, f.why
                        );
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(f) => {
                    failures += 1;
                    self.progress.retries.store(failures, Ordering::Relaxed);
                    let why = format!(
                        "import of slots {}..{} from member {}: {} (attempt {failures})",
                        mark, self.end, self.progress.from, f.why
                    );
                    if failures == 1 || failures % 10 == 0 {
                        eprintln!("kvs-server: {why}");
                    }
                    *self
                        .progress
                        .last_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(why);
                    let back = Duration::from_millis(50u64 << failures.min(5));
                    std::thread::sleep(back);
                }
            }
        };
        self.progress.done.store(true, Ordering::Release);
        self.report(cc, lost);
    }

    /// Tells the leader the slots are in, every second until the committed
    /// map ends the import.
    fn report(&self, cc: &mut ControlClient<impl Transport>, lost: Option<String>) {
        let req = ControlRequest::ImportDone {
            version: self.version,
            slots: vec![(self.first, self.end)],
            records: self.progress.records.load(Ordering::Relaxed),
            bytes: self.progress.bytes.load(Ordering::Relaxed),
            lost,
        };
        let mut logged = false;
        let mut to = self.own;
        while !self.stop.load(Ordering::Acquire) && !self.progress.ended.load(Ordering::Acquire) {
            match cc.request(to, &req) {
                Ok(ControlReply::Ok) => {
                    to = self.own;
                    std::thread::sleep(Duration::from_millis(1000));
                    continue;
                }
                Ok(ControlReply::Keeper { addr }) => {
                    to = addr;
                    continue;
                }
                Ok(other) if !logged => {
                    eprintln!("kvs-server: an import report was answered with {other:?}");
                    logged = true;
                }
                Err(e) if !logged => {
                    eprintln!("kvs-server: cannot report an import to the leader yet: {e}");
                    logged = true;
                }
                _ => {}
            }
            to = self.own;
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One bulk connection: a ticket from the source's control endpoint,
    /// then batches until the last or a failure. `mark` follows the batches'
    /// progress marks.
    fn transfer(
        &self,
        cc: &mut ControlClient<impl Transport>,
        mark: &mut u32,
        mask: u8,
    ) -> Result<(), Failed> {
        let unreached = |why: String| Failed {
            why,
            not_yet: false,
            lost: false,
        };
        let open = ControlRequest::OpenPull {
            version: self.version,
            first: *mark,
            end: self.end,
        };
        let ticket = match cc.request(self.source.addr, &open) {
            Ok(ControlReply::Ticket { ticket }) => from_hex(&ticket).ok_or_else(|| Failed {
                why: "a malformed ticket".into(),
                not_yet: false,
                lost: false,
            })?,
            // Not frozen there yet (the source has not applied the map that
            // gives the slots away): ask again.
            Ok(ControlReply::NotYet { message }) => {
                return Err(Failed {
                    why: message,
                    not_yet: true,
                    lost: false,
                })
            }
            Ok(ControlReply::Error { message }) => {
                return Err(Failed {
                    why: message,
                    not_yet: false,
                    lost: true,
                })
            }
            Ok(other) => {
                return Err(Failed {
                    why: format!("unexpected answer {other:?}"),
                    not_yet: false,
                    lost: false,
                })
            }
            Err(e) => return Err(unreached(e.to_string())),
        };
        let reached = |why: String| Failed {
            why,
            not_yet: false,
            lost: false,
        };
        // The source holds the slots frozen: the worker may serve them.
        if !self.frozen_told.swap(true, Ordering::AcqRel) {
            let (tx, waker) = &self.worker;
            let _ = tx.send(ToWorker::SourceFrozen {
                first: self.first,
                end: self.end,
            });
            waker.wake();
        }
        let setup = PullSetup {
            version: self.version,
            first: *mark,
            end: self.end,
            ticket,
            rails: mask,
        };
        let rails = open_rails(&self.cfg, &self.rails, mask).map_err(reached)?;
        let bulk = SocketAddr::new(self.source.addr.ip(), self.source.bulk_port);
        let (mut comm, _) =
            mpib::conn::connect_with(bulk, &rails, &mpib::Config::default(), &setup.encode())
                .map_err(|e| reached(format!("bulk connection to {bulk}: {e}")))?;
        let r = self.receive(&mut comm, mark);
        comm.close();
        r.map_err(reached)
    }

    /// Receives batches into [`DEPTH`] buffers until the last.
    fn receive(&self, comm: &mut Comm, mark: &mut u32) -> Result<(), String> {
        let first = *mark;
        let bufs: Vec<Buffer> = (0..DEPTH)
            .map(|_| comm.alloc_buffer(BATCH))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let mut reqs: Vec<Request> = Vec::with_capacity(DEPTH);
        for (i, b) in bufs.iter().enumerate() {
            reqs.push(self.post(comm, b, i as u32)?);
        }
        let (ack_tx, ack_rx) = mpsc::channel::<()>();
        // The progress marks of batches the worker has not taken yet: `mark`
        // moves as it takes them (a batch sent twice is harmless, one lost
        // is not).
        let mut untaken: VecDeque<u32> = VecDeque::new();
        let mut seq = 0u32;
        loop {
            let i = seq as usize % DEPTH;
            let len = self.wait(comm, &reqs[i])?;
            let bytes = bufs[i].to_vec(0, len).map_err(|e| e.to_string())?;
            let batch = Batch::new_checked(&bytes, seq, first, self.end, self.slots, *mark)
                .map_err(|e| format!("the source sent {e}"))?;
            let (last, next) = (batch.last(), batch.next_slot());
            let n = batch.records().count() as u64;
            let b = batch.payload_len() as u64;
            // The worker takes it; at most UNTAKEN wait.
            while untaken.len() >= UNTAKEN {
                self.taken(&ack_rx, &mut untaken, mark)?;
            }
            let msg = ToWorker::Records {
                batch: bytes,
                taken: ack_tx.clone(),
            };
            self.worker
                .0
                .send(msg)
                .map_err(|_| "the worker stopped".to_string())?;
            self.worker.1.wake();
            untaken.push_back(next);
            self.progress.records.fetch_add(n, Ordering::Relaxed);
            self.progress.bytes.fetch_add(b, Ordering::Relaxed);
            self.shared.pulled_records.fetch_add(n, Ordering::Relaxed);
            self.shared.pulled_bytes.fetch_add(b, Ordering::Relaxed);
            if last {
                while !untaken.is_empty() {
                    self.taken(&ack_rx, &mut untaken, mark)?;
                }
                return Ok(());
            }
            reqs[i] = self.post(comm, &bufs[i], seq + DEPTH as u32)?;
            seq += 1;
        }
    }

    /// Waits for the worker to take the oldest batch it was given; `mark`
    /// moves to that batch's progress mark.
    fn taken(
        &self,
        rx: &Receiver<()>,
        untaken: &mut VecDeque<u32>,
        mark: &mut u32,
    ) -> Result<(), String> {
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => {
                    if let Some(m) = untaken.pop_front() {
                        *mark = m;
                    }
                    return Ok(());
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !self.stop.load(Ordering::Acquire) => {}
                Err(_) => return Err("the worker stopped".into()),
            }
        }
    }

    fn post(&self, comm: &mut Comm, buf: &Buffer, seq: u32) -> Result<Request, String> {
        post_recv(comm, buf, seq, &self.stop)
    }

    fn wait(&self, comm: &mut Comm, req: &Request) -> Result<usize, String> {
        wait_recv(comm, req, &self.stop)
    }
}

/// Posts the receive of batch `seq` into `buf`.
pub(super) fn post_recv(
    comm: &mut Comm,
    buf: &Buffer,
    seq: u32,
    stop: &AtomicBool,
) -> Result<Request, String> {
    let t = Instant::now();
    loop {
        match comm.irecv(&[buf.all()], seq) {
            Ok(Some(r)) => return Ok(r),
            Ok(None) => super::idle(comm, t, stop)?,
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Waits for a receive; its size.
pub(super) fn wait_recv(
    comm: &mut Comm,
    req: &Request,
    stop: &AtomicBool,
) -> Result<usize, String> {
    let t = Instant::now();
    loop {
        match comm.test(req) {
            Ok(Some(sizes)) => return Ok(sizes.total() as usize),
            Ok(None) => super::idle(comm, t, stop)?,
            Err(e) => return Err(e.to_string()),
        }
    }
}

impl OnTransport for Importer {
    type Output = ();

    fn run<T: Transport>(self, dev: Device) {
        let opts = ControlOptions {
            cluster_token: self.cluster_token.clone(),
            setup_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(10),
            ..ControlOptions::default()
        };
        match ControlClient::<T>::new(&dev, opts) {
            Ok(mut cc) => self.run_with(&mut cc),
            Err(e) => eprintln!("kvs-server: import: {e}"),
        }
    }
}

/// The rails of attempt `failures`: all of them first, then, while failures
/// go on, each rail alone in turn and all again (a rail that went down
/// fails every transfer that uses it).
fn rails_for(failures: u32, names: &[String]) -> u8 {
    let all = all_rails(names);
    if all != 0b11 || failures == 0 {
        return all;
    }
    [0b01, 0b10, 0b11][(failures as usize - 1) % 3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_try_each_rail_alone() {
        let two = ["sim2".to_string(), "sim3".to_string()];
        let seq: Vec<u8> = (0..5).map(|f| rails_for(f, &two)).collect();
        assert_eq!(seq, [0b11, 0b01, 0b10, 0b11, 0b01]);
        assert_eq!(rails_for(3, &two[..1]), 0b01);
    }
}
