//! The control group's transport: one sender thread per peer, each with its
//! own control client, carrying batches of Raft messages to the peer's
//! control endpoint ([`kvs_proto::group`]).
//!
//! The control thread hands messages over without waiting: each link has a
//! bounded queue, and a message that finds it full is dropped (Raft sends
//! again what matters). A peer that cannot be reached costs only its own
//! link's thread: it drops what is queued, reports the peer unreachable
//! (Raft then probes it gently) and tries again after a backoff of 20 ms
//! doubling to 1 s. So a dead, slow or partitioned member never holds up the
//! group's traffic to the others.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::group::BatchWriter;
use kvs_proto::AuthToken;
use mlx5::device::Context as Device;

use crate::config::Config;

/// Messages a link holds for its peer before it drops new ones.
const QUEUE: usize = 1024;
/// The largest batch in one request: well under what a control endpoint's
/// 1 MiB ring carries in one message.
const MAX_BATCH: usize = 96 << 10;
/// How long a link has to set a connection up, and a batch to be answered.
const SETUP: Duration = Duration::from_millis(1000);
const ANSWER: Duration = Duration::from_millis(2000);

/// The links to the peers.
pub(crate) struct Peers {
    me: u16,
    cluster_id: [u8; 16],
    cfg: Config,
    cluster_token: Option<AuthToken>,
    stop: Arc<AtomicBool>,
    links: HashMap<u16, Link>,
    unreachable_tx: Sender<u16>,
    unreachable: Receiver<u16>,
}

struct Link {
    addr: SocketAddr,
    queue: SyncSender<Vec<u8>>,
    /// Messages dropped because the queue was full, not yet logged.
    dropped: u64,
}

impl Peers {
    /// No links yet; they are made on the first message to each peer.
    pub fn new(
        me: u16,
        cluster_id: [u8; 16],
        cfg: Config,
        cluster_token: Option<AuthToken>,
        stop: Arc<AtomicBool>,
    ) -> Peers {
        let (unreachable_tx, unreachable) = mpsc::channel();
        Peers {
            me,
            cluster_id,
            cfg,
            cluster_token,
            stop,
            links: HashMap::new(),
            unreachable_tx,
            unreachable,
        }
    }

    /// Queues `msg` for member `to`, reached at `addr` (a new link if there
    /// is none, or the peer's address changed).
    pub fn send(&mut self, to: u16, addr: SocketAddr, msg: Vec<u8>) {
        if self.links.get(&to).is_none_or(|l| l.addr != addr) {
            match self.link(to, addr) {
                Some(l) => {
                    self.links.insert(to, l);
                }
                None => return,
            }
        }
        let Some(l) = self.links.get_mut(&to) else {
            return;
        };
        match l.queue.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                l.dropped += 1;
                if l.dropped == 1 || l.dropped % 1000 == 0 {
                    eprintln!(
                        "kvs-server: control group: member {to} at {addr} is behind; \
                         {} messages to it dropped",
                        l.dropped
                    );
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                self.links.remove(&to);
            }
        }
    }

    /// Drops the links to members not in `keep`.
    pub fn retain(&mut self, keep: impl Fn(u16) -> bool) {
        self.links.retain(|&m, _| keep(m));
    }

    /// Peers found unreachable since the last call.
    pub fn take_unreachable(&self) -> Vec<u16> {
        self.unreachable.try_iter().collect()
    }

    fn link(&self, to: u16, addr: SocketAddr) -> Option<Link> {
        let (queue, rx) = mpsc::sync_channel(QUEUE);
        let sender = LinkThread {
            me: self.me,
            to,
            addr,
            cluster_id: self.cluster_id,
            cfg: self.cfg.clone(),
            cluster_token: self.cluster_token.clone(),
            queue: rx,
            unreachable: self.unreachable_tx.clone(),
            stop: self.stop.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("kvs-peer-{to}"))
            .spawn(move || sender.start());
        match spawned {
            Ok(_) => Some(Link {
                addr,
                queue,
                dropped: 0,
            }),
            Err(e) => {
                eprintln!("kvs-server: control group: cannot start a link to member {to}: {e}");
                None
            }
        }
    }
}

/// One link's thread.
struct LinkThread {
    me: u16,
    to: u16,
    addr: SocketAddr,
    cluster_id: [u8; 16],
    cfg: Config,
    cluster_token: Option<AuthToken>,
    queue: Receiver<Vec<u8>>,
    unreachable: Sender<u16>,
    stop: Arc<AtomicBool>,
}

impl LinkThread {
    fn start(self) {
        let wire = self.cfg.transport;
        let (l, e) = match self.cfg.device_spec().open() {
            Ok(dev) => match run_on_device_as(dev, wire, self) {
                Ok(()) => return,
                Err(refused) => refused,
            },
            Err(e) => (self, e),
        };
        eprintln!(
            "kvs-server: control group: the link to member {} cannot open its device: {e}",
            l.to
        );
    }

    /// The next batch: waits for one message, then takes what else is
    /// queued, up to [`MAX_BATCH`] bytes (a message that would overflow it
    /// waits in `carry`). `None` once the server stops or the link is gone.
    fn next_batch(&self, carry: &mut Option<Vec<u8>>, out: &mut Vec<u8>) -> Option<()> {
        out.clear();
        let first = match carry.take() {
            Some(m) => m,
            None => loop {
                if self.stop.load(Ordering::Acquire) {
                    return None;
                }
                match self.queue.recv_timeout(Duration::from_millis(250)) {
                    Ok(m) => break m,
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return None,
                }
            },
        };
        let mut w = BatchWriter::new(out, self.cluster_id, self.me);
        w.push(&first);
        while let Ok(m) = self.queue.try_recv() {
            if w.len() + m.len() + 4 > MAX_BATCH || !w.push(&m) {
                *carry = Some(m);
                break;
            }
        }
        Some(())
    }
}

impl OnTransport for LinkThread {
    type Output = ();

    fn run<T: Transport>(self, dev: Device) {
        let opts = ControlOptions {
            cluster_token: self.cluster_token.clone(),
            cluster_id: Some(self.cluster_id),
            setup_timeout: SETUP,
            call_timeout: ANSWER,
        };
        let mut cc = match ControlClient::<T>::new(&dev, opts) {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "kvs-server: control group: the link to member {} cannot start: {e}",
                    self.to
                );
                return;
            }
        };
        let mut carry = None;
        let mut batch = Vec::new();
        let mut backoff = Duration::ZERO;
        let mut failing = false;
        while self.next_batch(&mut carry, &mut batch).is_some() {
            match cc.raft(self.addr, &batch) {
                Ok(()) => {
                    if failing {
                        eprintln!(
                            "kvs-server: control group: member {} at {} is reachable again",
                            self.to, self.addr
                        );
                    }
                    failing = false;
                    backoff = Duration::ZERO;
                }
                Err(e) => {
                    if !failing {
                        eprintln!(
                            "kvs-server: control group: cannot reach member {} at {}: {e}",
                            self.to, self.addr
                        );
                    }
                    failing = true;
                    let _ = self.unreachable.send(self.to);
                    // What waited is stale by the time the peer is back.
                    while self.queue.try_recv().is_ok() {}
                    carry = None;
                    backoff =
                        (backoff * 2).clamp(Duration::from_millis(20), Duration::from_secs(1));
                    std::thread::sleep(backoff);
                }
            }
        }
    }
}
