//! A target's import sessions: one thread per (worker, source) that runs
//! the worker's imports from that source one after another, the chunks of a
//! migration, keeping what they share: its device, its control client, and
//! its bulk connection to the source
//! ([`PullConn`](crate::bulk::pull_conn::PullConn)). A migration moves its
//! slots in chunks, and setting each one's connection up again cost 10 to
//! 25 milliseconds (a TCP handshake, queue pairs on both rails, fresh
//! registered buffers to fault in) of a chunk that moves in about 100.
//!
//! The control thread hands each import to its session
//! ([`Sessions::start`]) and drops the session when the map lists no import
//! of that worker from that source any more; the session then ends once its
//! queued imports are done, and closes its connection. A source keeps its
//! end of a connection open for [`LINGER`](crate::bulk::pull_conn::LINGER) after
//! a pull, waiting for the next setup on it ([`crate::bulk::export`]).

use kvs_proto::MemberId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use kvs_client::{ControlClient, ControlOptions};
use mlx5::device::Context as Device;

use super::import::Importer;

/// The control thread's handles on the import sessions, by (worker,
/// source member).
#[derive(Default)]
pub(crate) struct Sessions {
    running: HashMap<(u16, MemberId), Sender<Importer>>,
}

impl Sessions {
    /// Runs `imp` in `worker`'s session with its source, starting one if
    /// none runs; in a session of its own if not `shared`.
    ///
    /// A session runs its imports one after another, and an import ends
    /// only when the map ends it, once its whole chunk is in. So two imports
    /// the map lists at once for one worker from one source (a chunk whose
    /// slots that worker holds in two runs) must not share a session: the
    /// second would wait for the first, which waits for the second.
    pub fn start(&mut self, worker: u16, imp: Importer, shared: bool) -> std::io::Result<()> {
        let key = (worker, imp.progress.from);
        let running = if shared { self.running.get(&key) } else { None };
        let imp = match running {
            Some(tx) => match tx.send(imp) {
                Ok(()) => return Ok(()),
                // The session ended (its thread failed to open a device):
                // start another.
                Err(mpsc::SendError(imp)) => imp,
            },
            None => imp,
        };
        let (tx, rx) = mpsc::channel();
        let stop = imp.stop.clone();
        // Cannot fail: `rx` is alive.
        let _ = tx.send(imp);
        std::thread::Builder::new()
            .name(format!("kvs-import-{worker}"))
            .spawn(move || run(rx, stop))?;
        if shared {
            self.running.insert(key, tx);
        }
        Ok(())
    }

    /// Ends the sessions `keep` rejects, once their queued imports are done.
    pub fn retain(&mut self, keep: impl Fn(u16, MemberId) -> bool) {
        self.running.retain(|&(w, from), _| keep(w, from));
    }
}

/// The session thread: the first import's settings open the device.
fn run(jobs: Receiver<Importer>, stop: std::sync::Arc<AtomicBool>) {
    let Some(first) = next_job(&jobs, &stop) else {
        return;
    };
    let wire = first.cfg.transport;
    let e = match first.cfg.device_spec().open() {
        Ok(dev) => match run_on_device_as(dev, wire, Session { jobs, first, stop }) {
            Ok(()) => return,
            Err((_, e)) => e,
        },
        Err(e) => e,
    };
    tracing::error!("import: cannot open the device: {e}");
}

/// The next import, or `None` once the control thread dropped the session
/// and every queued import is done, or the server stops.
fn next_job(jobs: &Receiver<Importer>, stop: &AtomicBool) -> Option<Importer> {
    loop {
        match jobs.recv_timeout(Duration::from_millis(100)) {
            Ok(j) => return Some(j),
            Err(RecvTimeoutError::Timeout) if !stop.load(Ordering::Acquire) => {}
            Err(_) => return None,
        }
    }
}

struct Session {
    jobs: Receiver<Importer>,
    first: Importer,
    stop: std::sync::Arc<AtomicBool>,
}

impl OnTransport for Session {
    type Output = ();

    fn run<T: Transport>(self, dev: Device) {
        let Session { jobs, first, stop } = self;
        let opts = ControlOptions {
            cluster_token: first.cluster_token.clone(),
            setup_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(10),
            ..ControlOptions::default()
        };
        let mut cc = match ControlClient::<T>::new(&dev, opts) {
            Ok(c) => c,
            Err(e) => return tracing::error!("import: {e}"),
        };
        let mut conn = None;
        let mut job = Some(first);
        while let Some(imp) = job.take() {
            imp.run_with(&mut cc, &mut conn);
            job = next_job(&jobs, &stop);
        }
        if let Some(mut c) = conn {
            c.comm.close();
        }
    }
}
