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
//!
//! A link dropped (its member forgotten, or reached at a new address)
//! sends nothing it still holds: a forgotten member's address may belong
//! to a new member by the time the link's backoff ends.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::group::BatchWriter;
use kvs_proto::{AuthToken, ClusterId, MemberId};
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
    me: MemberId,
    cluster_id: ClusterId,
    cfg: Config,
    cluster_token: Option<AuthToken>,
    stop: Arc<AtomicBool>,
    links: HashMap<MemberId, Link>,
    unreachable_tx: Sender<MemberId>,
    unreachable: Receiver<MemberId>,
}

struct Link {
    addr: SocketAddr,
    queue: SyncSender<Vec<u8>>,
    /// Messages dropped because the queue was full, not yet logged.
    dropped: u64,
    /// Set when the link is dropped: its thread sends nothing more.
    closed: Arc<AtomicBool>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
    }
}

impl Peers {
    /// No links yet; they are made on the first message to each peer.
    pub fn new(
        me: MemberId,
        cluster_id: ClusterId,
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
    pub fn send(&mut self, to: MemberId, addr: SocketAddr, msg: Vec<u8>) {
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
                    tracing::warn!(
                        "control group: member {to} at {addr} is behind; \
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
    pub fn retain(&mut self, keep: impl Fn(MemberId) -> bool) {
        self.links.retain(|&m, _| keep(m));
    }

    /// Peers found unreachable since the last call.
    pub fn take_unreachable(&self) -> Vec<MemberId> {
        self.unreachable.try_iter().collect()
    }

    fn link(&self, to: MemberId, addr: SocketAddr) -> Option<Link> {
        let (queue, rx) = mpsc::sync_channel(QUEUE);
        let closed = Arc::new(AtomicBool::new(false));
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
            closed: closed.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("kvs-peer-{to}"))
            .spawn(move || sender.start());
        match spawned {
            Ok(_) => Some(Link {
                addr,
                queue,
                dropped: 0,
                closed,
            }),
            Err(e) => {
                tracing::error!("control group: cannot start a link to member {to}: {e}");
                None
            }
        }
    }
}

/// One link's thread.
struct LinkThread {
    me: MemberId,
    to: MemberId,
    addr: SocketAddr,
    cluster_id: ClusterId,
    cfg: Config,
    cluster_token: Option<AuthToken>,
    queue: Receiver<Vec<u8>>,
    unreachable: Sender<MemberId>,
    stop: Arc<AtomicBool>,
    /// The [`Link`] is gone: what is queued is not sent.
    closed: Arc<AtomicBool>,
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
        tracing::error!(
            "control group: the link to member {} cannot open its device: {e}",
            l.to
        );
    }

    /// The next batch: waits for one message, then takes what else is
    /// queued, up to [`MAX_BATCH`] bytes (a message that would overflow it
    /// waits in `carry`). `None` once the server stops or the link is gone
    /// (what it still holds is not sent).
    fn next_batch(&self, carry: &mut Option<Vec<u8>>, out: &mut Vec<u8>) -> Option<()> {
        out.clear();
        let gone = || self.stop.load(Ordering::Acquire) || self.closed.load(Ordering::Acquire);
        let first = match carry.take() {
            Some(m) if !gone() => m,
            Some(_) => return None,
            None => loop {
                if gone() {
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
        (!gone()).then_some(())
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
                tracing::error!(
                    "control group: the link to member {} cannot start: {e}",
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
                        tracing::info!(
                            "control group: member {} at {} is reachable again",
                            self.to,
                            self.addr
                        );
                    }
                    failing = false;
                    backoff = Duration::ZERO;
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(
                            "control group: cannot reach member {} at {}: {e}",
                            self.to,
                            self.addr
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A link to member 4 and its thread's side, without the thread.
    fn link() -> (Link, LinkThread) {
        let (queue, rx) = mpsc::sync_channel(QUEUE);
        let (unreachable, _) = mpsc::channel();
        let closed = Arc::new(AtomicBool::new(false));
        let addr: SocketAddr = "127.0.0.1:7004".parse().expect("an address");
        let thread = LinkThread {
            me: MemberId(0),
            to: MemberId(4),
            addr,
            cluster_id: ClusterId::from_bytes([7; 16]),
            cfg: Config::default(),
            cluster_token: None,
            queue: rx,
            unreachable,
            stop: Arc::new(AtomicBool::new(false)),
            closed: closed.clone(),
        };
        let link = Link {
            addr,
            queue,
            dropped: 0,
            closed,
        };
        (link, thread)
    }

    #[test]
    fn a_link_dropped_sends_nothing_it_still_holds() {
        let (mut carry, mut batch) = (None, Vec::new());
        let (l, t) = link();
        l.queue.try_send(vec![1; 8]).expect("room");
        assert!(t.next_batch(&mut carry, &mut batch).is_some());
        // The member is forgotten while messages for it wait (the thread
        // backing off from a dead peer): a new member may be at its
        // address when the thread wakes.
        l.queue.try_send(vec![2; 8]).expect("room");
        drop(l);
        assert!(t.next_batch(&mut carry, &mut batch).is_none());
    }
}
