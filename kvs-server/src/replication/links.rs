//! The links: a copyrpc connection from a primary worker's context to
//! each worker that backs up one of its slots (dialed off the worker's
//! thread, [`copyrpc::conn::dial`]), and the messages that wait in a
//! link's queue, in order, while its ring is full or it is being set up
//! (their buffers are reused: no allocation once warm).
//!
//! Call order: after a new map, [`want_link`](Forwarder::want_link) for
//! each backup of this worker's slots, then
//! [`drop_unwanted_links`](Forwarder::drop_unwanted_links); then
//! [`send`](Forwarder::send) for each message, as the write path and the
//! copies produce them; [`flush_queues`](Forwarder::flush_queues) each turn
//! something waits; [`tend_links`](Forwarder::tend_links) every few turns
//! (dials under way, dead connections, retries due). A link carries only
//! this worker's calls, never a reply (the backup sends no requests on
//! it): the worker's `Context::flush_unheld` at the turn's end sends them
//! before its log commit, so that the backups log the turn's writes while
//! it logs them itself.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use copyrpc::conn::{dial, Connection, Dial};
use copyrpc::transport::Transport;
use copyrpc::{CallFailed, Context};
use kvs_proto::{hello, ClusterId, MemberId, Owner, SetupAnswer, ShardMap};

use super::{Ack, Acks, Forwarder, ANSWER};

/// How long a link's setup may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest wait before a failed link is dialed again.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(super) enum LinkState {
    Down,
    Dialing(Dial),
    Up(Connection),
}

/// The connection to one backup worker.
#[derive(Debug)]
pub(super) struct Link {
    /// Names it in its writes' user data: links come and go (the vector
    /// is reordered), so an answer finds its link by id, not by place.
    pub(super) id: u16,
    pub(super) owner: Owner,
    pub(super) addr: SocketAddr,
    pub(super) state: LinkState,
    pub(super) retry_at: Instant,
    pub(super) backoff: Duration,
    /// Messages that did not fit the ring yet: user data and bytes.
    pub(super) queue: VecDeque<(u64, Vec<u8>)>,
    /// Still a backup of one of this worker's slots.
    pub(super) wanted: bool,
}

impl Forwarder {
    /// The index of the link to `owner`, if it is up.
    pub(super) fn link_of(&self, owner: Owner) -> Option<usize> {
        self.links
            .iter()
            .position(|l| l.owner == owner && matches!(l.state, LinkState::Up(_)))
    }

    /// Sends what waits in the links' queues, in order, as far as their
    /// rings take it; a message a closed link cannot take is answered as
    /// a failure.
    pub(super) fn flush_queues<F, T>(&mut self, ctx: &mut Context<u64, F, T>)
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        for l in &mut self.links {
            let LinkState::Up(c) = &l.state else {
                continue;
            };
            while let Some((u, b)) = l.queue.pop_front() {
                match ctx.call(c.endpoint(), &b, ANSWER, u) {
                    Ok(()) => self.spare.push(b),
                    Err(e) if e.is_retryable() => {
                        l.queue.push_front((u, b));
                        break;
                    }
                    Err(_) => {
                        Self::lost(&self.acks, u, "the backup's connection closed");
                        self.spare.push(b);
                    }
                }
            }
        }
    }

    /// Sends `self.msg` on link `li`, or queues it behind what waits there
    /// (the ring is full, or the link is not up yet: the queue goes out
    /// once it is, and fails if its setup does); false if the link cannot
    /// take it.
    pub(super) fn send<F, T>(&mut self, ctx: &mut Context<u64, F, T>, li: usize, u: u64) -> bool
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let l = &mut self.links[li];
        if let LinkState::Up(c) = &l.state {
            if l.queue.is_empty() {
                match ctx.call(c.endpoint(), &self.msg, ANSWER, u) {
                    Ok(()) => return true,
                    Err(e) if e.is_retryable() => {}
                    Err(_) => return false,
                }
            }
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(&self.msg);
        l.queue.push_back((u, b));
        true
    }

    /// A message that will never be sent (its link closed): answered as a
    /// failure, so whatever waits for it does not wait forever.
    pub(super) fn lost(acks: &Acks, u: u64, why: &str) {
        let mut v = acks.0.take();
        v.push(Ack {
            user: u,
            refused: Some(why.to_string()),
            not_yet: false,
            value: 0,
        });
        acks.0.set(v);
    }

    /// The messages queued on link `l`, whose setup failed, are answered
    /// as failures (`why`).
    pub(super) fn fail_queue(acks: &Acks, spare: &mut Vec<Vec<u8>>, l: &mut Link, why: &str) {
        for (u, b) in l.queue.drain(..) {
            Self::lost(acks, u, &format!("the backup's connection: {why}"));
            spare.push(b);
        }
    }

    /// The map has `owner` back a slot of this worker's up: its link is
    /// wanted (a new one, down, if it had none).
    pub(super) fn want_link(&mut self, owner: Owner, map: &ShardMap, now: Instant) {
        match self.links.iter_mut().find(|l| l.owner == owner) {
            Some(l) => l.wanted = true,
            None => {
                let addr = map.members()[owner.member.index()].addr;
                self.next_link = self.next_link.wrapping_add(1);
                self.links.push(Link {
                    id: self.next_link,
                    owner,
                    addr,
                    state: LinkState::Down,
                    retry_at: now,
                    backoff: Duration::ZERO,
                    queue: VecDeque::new(),
                    wanted: true,
                });
            }
        }
    }

    /// Links no longer wanted go: the writes queued on them fail, their
    /// connections close.
    pub(super) fn drop_unwanted_links<F, T>(&mut self, ctx: &mut Context<u64, F, T>)
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let mut i = 0;
        while i < self.links.len() {
            if self.links[i].wanted {
                i += 1;
                continue;
            }
            let mut l = self.links.swap_remove(i);
            for (u, b) in l.queue.drain(..) {
                Self::lost(&self.acks, u, "the backup was dropped from the map");
                self.spare.push(b);
            }
            match l.state {
                LinkState::Up(c) => {
                    ctx.close(c.endpoint());
                    ctx.remove(c.endpoint());
                }
                LinkState::Dialing(d) => d.abandon(ctx),
                LinkState::Down => {}
            }
        }
    }

    /// Moves each link on: a dead connection goes down (its queued writes
    /// fail), a dial under way comes up or fails (backing off), a link down
    /// whose retry is due dials. Returns the backups whose connection died.
    pub(super) fn tend_links<F, T>(
        &mut self,
        ctx: &mut Context<u64, F, T>,
        now: Instant,
    ) -> Vec<Owner>
    where
        F: FnMut(u64, Result<&[u8], CallFailed>),
        T: Transport,
    {
        let mut broken: Vec<Owner> = Vec::new();
        for l in &mut self.links {
            match &mut l.state {
                LinkState::Up(c) => {
                    if !c.check(ctx) {
                        ctx.remove(c.endpoint());
                        l.state = LinkState::Down;
                        l.retry_at = now;
                        for (u, b) in l.queue.drain(..) {
                            Self::lost(&self.acks, u, "the backup's connection closed");
                            self.spare.push(b);
                        }
                        broken.push(l.owner);
                    }
                }
                LinkState::Dialing(d) => match d.poll(ctx) {
                    None => {}
                    Some(Ok(c)) => match check_answer(&c, l.owner, self.cluster) {
                        Ok(()) => {
                            l.backoff = Duration::ZERO;
                            l.state = LinkState::Up(c);
                        }
                        Err(why) => {
                            tracing::warn!(
                                "worker {}: backup link to member {} at {}: {why}",
                                self.me.worker,
                                l.owner.member,
                                l.addr
                            );
                            ctx.remove(c.endpoint());
                            l.state = LinkState::Down;
                            l.backoff =
                                (l.backoff * 2).clamp(Duration::from_millis(20), MAX_BACKOFF);
                            l.retry_at = now + l.backoff;
                            Self::fail_queue(&self.acks, &mut self.spare, l, "setup refused");
                        }
                    },
                    Some(Err(_)) => {
                        l.state = LinkState::Down;
                        l.backoff = (l.backoff * 2).clamp(Duration::from_millis(20), MAX_BACKOFF);
                        l.retry_at = now + l.backoff;
                        Self::fail_queue(&self.acks, &mut self.spare, l, "setup failed");
                    }
                },
                LinkState::Down if now >= l.retry_at => {
                    let hello = hello(l.owner.worker, self.token.as_ref());
                    match dial(l.addr, ctx, &hello, DIAL_TIMEOUT) {
                        Ok(d) => l.state = LinkState::Dialing(d),
                        Err(_) => {
                            l.backoff =
                                (l.backoff * 2).clamp(Duration::from_millis(20), MAX_BACKOFF);
                            l.retry_at = now + l.backoff;
                            Self::fail_queue(&self.acks, &mut self.spare, l, "cannot dial");
                        }
                    }
                }
                LinkState::Down => {}
            }
        }
        broken
    }
}

/// Why a link's peer is not the backup the map names.
#[derive(Debug, thiserror::Error)]
enum WrongPeer {
    /// Its setup answer does not parse.
    #[error("not a kvs-server worker (bad setup answer)")]
    NotAWorker,
    /// It is a member of another cluster.
    #[error("the server belongs to cluster {0}, not this one")]
    OtherCluster(ClusterId),
    /// It is another member of this cluster.
    #[error("the server says it is member {said}, the map says member {map}")]
    OtherMember { said: MemberId, map: MemberId },
}

/// Whether a link's setup answer is the backup's: its member, of this
/// cluster.
fn check_answer(c: &Connection, owner: Owner, cluster: ClusterId) -> Result<(), WrongPeer> {
    match SetupAnswer::parse(c.peer_private_data()) {
        None => Err(WrongPeer::NotAWorker),
        Some(a) if a.cluster != cluster => Err(WrongPeer::OtherCluster(a.cluster)),
        Some(a) if a.member != owner.member => Err(WrongPeer::OtherMember {
            said: a.member,
            map: owner.member,
        }),
        Some(_) => Ok(()),
    }
}
