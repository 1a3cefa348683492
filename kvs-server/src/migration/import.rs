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

use copyrpc::transport::Transport;
use copyrpc::Waker;
use kvs_client::ControlClient;
use kvs_proto::control::{ControlReply, ControlRequest, ImportStatus};
use kvs_proto::{AuthToken, Member, MemberId, Ticket};

use crate::bulk::pull_conn::{post_recv, wait_recv, PullConn};
use crate::bulk::wire::{Batch, PullSetup, Taken};
use crate::bulk::TransferError;
use crate::bulk::{all_rails, open_rails, DEPTH};
use crate::config::Config;
use crate::threads::to_worker::ToWorker;

/// Batches handed to the worker and not yet taken, at most.
const UNTAKEN: usize = 8;

/// What an import has done, for status.
#[derive(Debug)]
pub(crate) struct Progress {
    pub from: MemberId,
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
    /// Where the source is, as the newest map says: a source that restarts
    /// may listen on another bulk port (or address) and readdress itself.
    source: Mutex<Member>,
}

impl Progress {
    /// An import of `slots` slots from member `from`, at `source`, just
    /// started.
    pub fn new(from: MemberId, source: Member, slots: u32) -> Progress {
        Progress {
            from,
            source: Mutex::new(source),
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

    /// Where the source is now.
    pub fn source(&self) -> Member {
        *self.source.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest map puts the source at `m`.
    pub fn set_source(&self, m: Member) {
        *self.source.lock().unwrap_or_else(|e| e.into_inner()) = m;
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
    pub shared: Arc<crate::threads::cluster_view::Shared>,
    pub stop: Arc<AtomicBool>,
}

/// Why a pull over a connection ended early.
struct Cut {
    why: TransferError,
    /// A batch had come: the connection worked, and the failure is the
    /// pull's, not a kept connection's that the source closed.
    progressed: bool,
}

impl Cut {
    fn before_any(why: TransferError) -> Cut {
        Cut {
            why,
            progressed: false,
        }
    }
}

impl Importer {
    /// The slots still to pull from `mark` on, until the last batch; then
    /// tells the leader.
    ///
    /// A source that cannot be reached is tried again for as long as the
    /// import lasts: no record is given up on a timeout while the source may
    /// live. The import ends without every record only when the source says
    /// it lost them (it restarted after the handover: memory only), or when
    /// the group ends it (`kvs-admin forget --force` of the source).
    pub(super) fn run_with(
        &self,
        cc: &mut ControlClient<impl Transport>,
        conn: &mut Option<PullConn>,
    ) {
        let mut mark = self.first;
        let mut failures = 0u32;
        let mut waited = 0u32;
        let lost = loop {
            if self.stop.load(Ordering::Acquire) || self.progress.ended.load(Ordering::Acquire) {
                return;
            }
            let mask = rails_for(failures, &self.rails);
            match self.transfer(cc, conn, &mut mark, mask) {
                Ok(()) => break None,
                // The source no longer has the records: nothing more can
                // come.
                Err(TransferError::Lost(why)) => {
                    tracing::warn!(
                        "the import of slots {}..{} from member {} ends without \
                         the records not pulled yet: {}",
                        mark,
                        self.end,
                        self.progress.from,
                        why
                    );
                    break Some(why);
                }
                // Not frozen at the source yet: not a failure, ask again
                // at once.
                Err(TransferError::NotYet(why)) => {
                    waited += 1;
                    if waited % 2000 == 0 {
                        tracing::info!(
                            "import of slots {}..{}: member {} has not frozen them \
                             yet: {}",
                            mark,
                            self.end,
                            self.progress.from,
                            why
                        );
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                // A source that answered, or may have: try again.
                Err(f) => {
                    failures += 1;
                    self.progress.retries.store(failures, Ordering::Relaxed);
                    let why = format!(
                        "import of slots {}..{} from member {}: {} (attempt {failures})",
                        mark, self.end, self.progress.from, f
                    );
                    if failures == 1 || failures % 10 == 0 {
                        tracing::warn!("{why}");
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
            slots: std::iter::once(self.first..self.end).collect(),
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
                    self.pause(Duration::from_millis(1000));
                    continue;
                }
                Ok(ControlReply::Keeper { addr }) => {
                    to = addr;
                    continue;
                }
                Ok(other) if !logged => {
                    tracing::warn!("an import report was answered with {other:?}");
                    logged = true;
                }
                Err(e) if !logged => {
                    tracing::warn!("cannot report an import to the leader yet: {e}");
                    logged = true;
                }
                _ => {}
            }
            to = self.own;
            self.pause(Duration::from_millis(200));
        }
    }

    /// Sleeps `d`, or less once the import ended or the server stops: the
    /// session's next import waits for this one's report to end.
    fn pause(&self, d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d
            && !self.stop.load(Ordering::Acquire)
            && !self.progress.ended.load(Ordering::Acquire)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One pull: a ticket from the source's control endpoint, then batches
    /// until the last or a failure. `mark` follows the batches' progress
    /// marks.
    fn transfer(
        &self,
        cc: &mut ControlClient<impl Transport>,
        conn: &mut Option<PullConn>,
        mark: &mut u32,
        mask: u8,
    ) -> Result<(), TransferError> {
        let ticket = self.ticket(cc, *mark)?;
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
        self.pull(conn, &setup, mark)
    }

    /// A ticket for the slots from `mark` on, from the source's control
    /// endpoint.
    fn ticket(
        &self,
        cc: &mut ControlClient<impl Transport>,
        mark: u32,
    ) -> Result<Ticket, TransferError> {
        let open = ControlRequest::OpenPull {
            version: self.version,
            first: mark,
            end: self.end,
        };
        match cc.request(self.progress.source().addr, &open) {
            Ok(ControlReply::Ticket { ticket }) => Ok(ticket),
            // Not frozen there yet (the source has not applied the map that
            // gives the slots away): ask again.
            Ok(ControlReply::NotYet { message }) => Err(TransferError::NotYet(message)),
            Ok(ControlReply::Error { message }) => Err(TransferError::Lost(message)),
            Ok(other) => Err(TransferError::UnexpectedAnswer(Box::new(other))),
            Err(e) => Err(e.into()),
        }
    }

    /// The batches `setup` asks for, over the session's connection `conn`
    /// if it goes to the same port on the same rails, else over a new one,
    /// which `conn` keeps. A kept connection that fails before its first
    /// batch (the source closed it, idle) is replaced at once.
    fn pull(
        &self,
        conn: &mut Option<PullConn>,
        setup: &PullSetup,
        mark: &mut u32,
    ) -> Result<(), TransferError> {
        let source = self.progress.source();
        let bulk = SocketAddr::new(source.addr.ip(), source.bulk_port);
        if let Some(mut c) = conn
            .take()
            .filter(|c| c.to == bulk && c.mask == setup.rails)
        {
            let kept = c.ask(setup, &self.stop).map_err(Cut::before_any);
            match kept.and_then(|()| self.receive(&mut c, mark)) {
                Ok(()) => {
                    *conn = Some(c);
                    return Ok(());
                }
                Err(cut) => {
                    c.comm.close();
                    if cut.progressed {
                        return Err(cut.why);
                    }
                }
            }
        } else if let Some(mut old) = conn.take() {
            old.comm.close();
        }
        let rails = open_rails(&self.cfg, &self.rails, setup.rails)?;
        let mut c = PullConn::open(bulk, &rails, setup.rails, setup, &self.stop)?;
        match self.receive(&mut c, mark) {
            Ok(()) => {
                *conn = Some(c);
                Ok(())
            }
            Err(cut) => {
                c.comm.close();
                Err(cut.why)
            }
        }
    }

    /// Receives batches over `c` until the last, reposting each buffer's
    /// receive as soon as its batch is copied out, the last's too (for the
    /// session's next pull).
    fn receive(&self, c: &mut PullConn, mark: &mut u32) -> Result<(), Cut> {
        let first = *mark;
        let (ack_tx, ack_rx) = mpsc::channel::<()>();
        // The progress marks of batches the worker has not taken yet: `mark`
        // moves as it takes them (a batch sent twice is harmless, one lost
        // is not).
        let mut untaken: VecDeque<u32> = VecDeque::new();
        let mut any = false;
        let cut = |any: bool| {
            move |why: TransferError| Cut {
                why,
                progressed: any,
            }
        };
        loop {
            let seq = c.seq;
            let i = seq as usize % DEPTH;
            let len = wait_recv(&mut c.comm, &c.reqs[i], &self.stop).map_err(cut(any))?;
            any = true;
            let taken = c.bufs[i].fill(|buf| {
                let got = buf.get(..len).ok_or(TransferError::Overrun)?;
                Batch::take_checked(got, seq, first, self.end, self.slots, *mark)
                    .map_err(TransferError::SourceSent)
            });
            // Read in place: the buffer's receive goes back only now.
            c.reqs[i] = post_recv(&mut c.comm, &c.bufs[i], seq + DEPTH as u32, &self.stop)
                .map_err(cut(any))?;
            c.seq += 1;
            let Taken {
                ready,
                last,
                next_slot: next,
                payload_len,
            } = taken.map_err(cut(any))?;
            let n = ready.len() as u64;
            let b = payload_len as u64;
            // The worker takes it; at most UNTAKEN wait.
            while untaken.len() >= UNTAKEN {
                self.taken(&ack_rx, &mut untaken, mark).map_err(cut(any))?;
            }
            let msg = ToWorker::Records {
                batch: ready,
                taken: ack_tx.clone(),
            };
            self.worker
                .0
                .send(msg)
                .map_err(|_| cut(any)(TransferError::WorkerStopped))?;
            self.worker.1.wake();
            untaken.push_back(next);
            self.progress.records.fetch_add(n, Ordering::Relaxed);
            self.progress.bytes.fetch_add(b, Ordering::Relaxed);
            self.shared.pulled_records.fetch_add(n, Ordering::Relaxed);
            self.shared.pulled_bytes.fetch_add(b, Ordering::Relaxed);
            if last {
                while !untaken.is_empty() {
                    self.taken(&ack_rx, &mut untaken, mark).map_err(cut(any))?;
                }
                return Ok(());
            }
        }
    }

    /// Waits for the worker to take the oldest batch it was given; `mark`
    /// moves to that batch's progress mark.
    fn taken(
        &self,
        rx: &Receiver<()>,
        untaken: &mut VecDeque<u32>,
        mark: &mut u32,
    ) -> Result<(), TransferError> {
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => {
                    if let Some(m) = untaken.pop_front() {
                        *mark = m;
                    }
                    return Ok(());
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !self.stop.load(Ordering::Acquire) => {}
                Err(_) => return Err(TransferError::WorkerStopped),
            }
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
