//! The client: routes each key to the worker owning its slot (any member of
//! the cluster), writes calls into the endpoints' batches (sent by the next
//! `poll()`, one WRITE per endpoint), follows redirects and try-agains
//! itself, and completes requests through a callback, without async
//! machinery.
//!
//! This file holds the [`Client`] and what it is made of: its op slots (one
//! per request in flight or being chased; the slot's index is the call's
//! user data), taking and freeing them, [`Client::connect`], and the public
//! accessors. Its methods live beside it, one file per role:
//!
//! - [`submit`]: a request's way out, the hot path: `get`, `put`, `delete`,
//!   `update_range` → `submit` → an op slot → `Context::call`.
//! - [`answer`]: `poll` and `wait`: each answer as the context reads it
//!   (`Finish::answer`: a final one goes to the caller where it lies in the
//!   ring, any other is copied into the inbox), then `complete`: the
//!   liveness check (every 100 ms), `follow_inbox` → `answered` →
//!   `key_result` (or a scan part's, or the map fetch's), and `chase` when
//!   there is something to chase; request deadlines (`expire`).
//! - [`chase`]: redirects, try-agains and UNAVAILABLE (`follow` → the
//!   [`Chaser`]'s step → `resend`), and the slow path `chase`: requests that
//!   failed before they were sent, a fetched map to install, a map fetch to
//!   start, the re-sends that are due.
//! - [`map`]: the client's own map fetch: its answer, its failure, and
//!   installing the map it brings.
//! - [`peers`]: the members: connecting those a request needs (`reach_owner`
//!   → `reach`), losing those whose connections died (`lost_member`), the
//!   periodic liveness check.
//! - [`scan`]: a SCAN, one part per worker, and the parts' answers (the
//!   merging is [`crate::scan`]'s).

use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use copyrpc::conn::Connection;
use copyrpc::transport::{Mlx5, Transport};
use copyrpc::{Context, ContextBuilder, EndpointId};
use mlx5::device::Context as Device;

use crate::error::{ConnectError, KvError, SubmitError};
use crate::inbox::{self, Handler, Inbox};
use crate::map_fetch;
use crate::members::{self, Setup};
use crate::options::{ClientOptions, SETUP_TIMEOUT};
use crate::reach::Reach;
use crate::reply::OwnedReply;
use crate::retry::{Chase, Chaser, Target};
use crate::route::Routes;
use crate::scan::ScanAgg;
use kvs_proto::proto::{Op, REQUEST_HEADER, RESPONSE_HEADER};
use kvs_proto::{ClusterId, ShardMap};

mod answer;
mod chase;
mod map;
mod peers;
mod scan;
mod submit;

/// What an op slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A request on one key (GET, PUT, DELETE, UPDATE_RANGE).
    Key(Op),
    /// A SCAN: the caller's request, gathered from its parts.
    Scan,
    /// One worker's part of the SCAN in this slot.
    Part(u32),
    /// The client's own map fetch.
    Map,
}

/// One request in flight (or being chased); its index is the call's user
/// data.
#[derive(Debug)]
struct OpSlot<T> {
    /// The caller's tag (none: a scan part or a map fetch).
    tag: Option<T>,
    kind: Kind,
    /// The request's bytes, kept to be re-sent; written in place (reused:
    /// no allocation once warm).
    req: Vec<u8>,
    /// Its response allowance.
    allowance: usize,
    /// Where it was last sent.
    ep: EndpointId,
    chase: Chase,
    scan: Option<Box<ScanAgg>>,
    /// When the caller submitted it (the client's coarse clock).
    started: Instant,
    /// Its deadline passed and the caller was told: whatever answer still
    /// comes is dropped, and the slot freed then.
    abandoned: bool,
    /// A send of it may have been applied with no answer saying so: its
    /// connection died with it in flight, or its primary applied it and
    /// answered Unavailable (a backup did not take it). Later sends are
    /// marked as sent again (`FLAG_RESENT`), so the server applies it only
    /// if it can tell it did not already. A redirect or a try-again says
    /// that send was not applied, and leaves this as it was: a write
    /// answered only so is a first send wherever it goes next.
    maybe_applied: bool,
}

/// A member of the map in use, as the client knows it.
#[derive(Debug, Clone)]
struct Peer {
    /// Where the client connects to it (for a member it is connected to:
    /// where it did).
    addr: SocketAddr,
    /// Its connection attempts: whether a failed one holds it off.
    reach: Reach,
}

/// A client of a kvs-server cluster: one endpoint per worker of every
/// member it has needed so far, in one copyrpc context; used from one
/// thread. `T` is the caller's tag for each request; `X` the copyrpc
/// transport (the mlx5 direct path unless the device needs
/// [`copyrpc::transport::Verbs`]: see [`mlx5::wr::DataPath::of`]).
///
/// Requests go to the worker that owns their key's slot under the client's
/// shard map. A server that no longer owns it answers with a redirect, which
/// the client follows (fetching the newer map when the redirect comes from
/// one); a server that has not yet seen the client's map says try again,
/// which the client does after a short backoff. The caller's callback sees
/// only each request's final answer, once.
///
/// The client connects to a member when a request first needs it (the first
/// request for one of its slots, a redirect to it, a scan), blocking for up
/// to [`ClientOptions::setup_timeout`]. A member that cannot be connected
/// fails only the requests for its slots, with [`KvError::Unreachable`];
/// it is tried again on a later request once a backoff has passed (100 ms
/// after the failure, doubling with each failure in a row to 5 s), and its
/// requests fail at once meanwhile.
pub struct Client<T, X: Transport = Mlx5> {
    ctx: Context<u32, Handler, X>,
    inbox: Rc<Inbox>,
    routes: Routes<EndpointId>,
    conns: Vec<Connection>,
    /// Per member id of the map in use: where it is reached, and its
    /// connection attempts.
    peers: Vec<Peer>,
    map: ShardMap,
    ops: Vec<OpSlot<T>>,
    free: Vec<u32>,
    // Boxed: an aggregate moves between the pool and an op slot by pointer.
    #[allow(clippy::vec_box)]
    scan_pool: Vec<Box<ScanAgg>>,
    chaser: Chaser<EndpointId>,
    /// A map fetched (and the endpoint it came from), installed once the
    /// answers at hand are handled.
    fetched: Option<(ShardMap, EndpointId)>,
    /// Why the last map fetch or install failed, for the errors of requests
    /// that could not be routed.
    map_error: Option<String>,
    /// The response allowance of a map fetch.
    map_allowance: usize,
    /// Scratch: the re-sends due.
    due: Vec<(u32, Target<EndpointId>)>,
    /// Requests that failed before they were sent (their owner could not be
    /// connected): completed by the next poll or wait.
    doomed: Vec<(T, KvError)>,
    opts: ClientOptions,
    /// The id of the cluster (the contact's): every member must be of it.
    cluster: ClusterId,
    /// A member's connections died since the last map was fetched.
    map_stale: bool,
    /// This client's random id, and its writes so far (their request ids).
    client_id: u64,
    requests: u64,
    /// A coarse clock: read once per poll or wait, and at each submit's
    /// slow path; requests are stamped with it.
    clock: Instant,
    in_flight: usize,
    polls: u32,
    last_check: Instant,
}

impl<T, X: Transport> std::fmt::Debug for Client<T, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("members", &self.map.members().len())
            .field("workers", &self.routes.count())
            .field("map_version", &self.map.version())
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl<T, X: Transport> Client<T, X> {
    /// Connects to the cluster through any member of it, the server at
    /// `addr`: connects to its worker 0, fetches the shard map from it, then
    /// connects to its other workers, all within
    /// [`ClientOptions::setup_timeout`]. The other members are connected
    /// when a request first needs them (one at `addr`'s IP and its own port
    /// when the map names it with an unspecified IP): one that is down does
    /// not keep the client from the others.
    ///
    /// # Errors
    /// The contacted server's connection errors as they are; a map larger
    /// than a response the rings admit as [`ConnectError::MapTooLarge`].
    pub fn connect(
        addr: impl ToSocketAddrs,
        device: &Device,
        opts: ClientOptions,
    ) -> Result<Client<T, X>, ConnectError> {
        let mut setup = Setup {
            token: opts.auth_token.as_ref(),
            cluster: None,
            within: opts.setup_timeout,
            deadline: Instant::now() + opts.setup_timeout,
        };
        let inbox = Rc::new(Inbox::default());
        let mut ctx = ContextBuilder::new()
            .idle(opts.idle)
            .ring_size(opts.ring_size)
            .build_on::<X, _, _>(device, inbox::handler(inbox.clone()))?;
        let (contact, first, answer) = members::connect_contact(addr, &mut ctx, setup)?;
        // Every member connected later must be of the contact's cluster.
        setup.cluster = Some(answer.cluster);
        let map = map_fetch::fetch_blocking(
            &mut ctx,
            &inbox,
            first.endpoint(),
            opts.ring_size,
            setup.within,
            setup.deadline,
        )?;
        let me = answer.member;
        match map.members().get(me.index()) {
            None => {
                return Err(ConnectError::Protocol(format!(
                    "the server is member {me}, not in its map of {} members",
                    map.members().len()
                )))
            }
            Some(m) if m.workers != answer.workers || map.slots() != answer.slots => {
                return Err(ConnectError::Protocol(
                    "shard map and setup answer disagree (workers or slots)".into(),
                ))
            }
            Some(_) => {}
        }
        let mut routes = Routes::default();
        routes.push_worker(me, first.endpoint());
        let mut conns = vec![first];
        let contact_m = map.members()[me.index()];
        for c in
            members::connect_workers(&mut ctx, contact, me, &contact_m, 1..answer.workers, setup)?
        {
            routes.push_worker(me, c.endpoint());
            conns.push(c);
        }
        let peers = map
            .member_ids()
            .zip(map.members())
            .map(|(id, m)| Peer {
                addr: members::member_addr(m, id, me, contact),
                reach: Reach::default(),
            })
            .collect();
        routes.rebuild(&map);
        // Later fetches start with room for this map (it grows with the
        // cluster), within what the rings admit.
        let map_allowance = (RESPONSE_HEADER + map.encoded_len() + 4096)
            .max(map_fetch::first_allowance(opts.ring_size))
            .min(map_fetch::max_allowance(opts.ring_size));
        Ok(Client {
            ctx,
            inbox,
            routes,
            conns,
            peers,
            map,
            ops: Vec::new(),
            free: Vec::new(),
            scan_pool: Vec::new(),
            chaser: Chaser::default(),
            fetched: None,
            map_error: None,
            map_allowance,
            due: Vec::new(),
            doomed: Vec::new(),
            opts,
            cluster: answer.cluster,
            map_stale: false,
            client_id: random_id(),
            requests: 0,
            clock: Instant::now(),
            in_flight: 0,
            polls: 0,
            last_check: Instant::now(),
        })
    }

    /// The id of the cluster the client is connected to (its contact's); a
    /// member of any other cluster is refused.
    pub fn cluster_id(&self) -> ClusterId {
        self.cluster
    }

    /// The shard map in use.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// Requests sent or queued and not yet completed (a request being
    /// redirected or retried counts until its final answer).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// How many redirects and try-agains the client has followed.
    pub fn redirects(&self) -> u64 {
        self.chaser.followed()
    }

    /// The copyrpc context (statistics, flow state).
    pub fn context(&self) -> &Context<u32, Handler, X> {
        &self.ctx
    }

    /// An op slot for a request to `ep` with `allowance` (its bytes still to
    /// be written).
    #[inline(always)]
    fn slot(&mut self, tag: Option<T>, kind: Kind, ep: EndpointId, allowance: usize) -> u32 {
        match self.free.pop() {
            Some(i) => {
                let s = &mut self.ops[i as usize];
                s.tag = tag;
                s.kind = kind;
                s.allowance = allowance;
                s.ep = ep;
                s.started = self.clock;
                s.abandoned = false;
                s.maybe_applied = false;
                debug_assert!(s.chase.is_fresh(), "reset by release");
                i
            }
            None => self.new_slot(tag, kind, ep, allowance),
        }
    }

    /// [`slot`](Self::slot) when none is free (only until warm).
    #[cold]
    #[inline(never)]
    fn new_slot(&mut self, tag: Option<T>, kind: Kind, ep: EndpointId, allowance: usize) -> u32 {
        self.ops.push(OpSlot {
            tag,
            kind,
            req: Vec::with_capacity(REQUEST_HEADER + 256),
            allowance,
            ep,
            chase: Chase::default(),
            scan: None,
            started: self.clock,
            abandoned: false,
            maybe_applied: false,
        });
        (self.ops.len() - 1) as u32
    }

    /// Frees an op slot (keeping its request buffer, and resetting its
    /// chase if it had one); returns its tag.
    #[inline]
    fn release(&mut self, i: u32) -> Option<T> {
        release(&mut self.ops, &mut self.free, i)
    }
}

impl<X: Transport> Client<u64, X> {
    /// Submits with `submit` (retrying while busy) and polls until that
    /// request completes; other requests' completions are dropped. For tools
    /// and tests, not for speed.
    pub fn wait_for(
        &mut self,
        mut submit: impl FnMut(&mut Self, u64) -> Result<(), SubmitError<u64>>,
    ) -> Result<OwnedReply, KvError> {
        const TAG: u64 = u64::MAX;
        let t = Instant::now();
        loop {
            match submit(self, TAG) {
                Ok(()) => break,
                Err(SubmitError::Busy(_)) => {
                    self.poll(|_, _| {});
                }
                Err(e) => return Err(KvError::Submit(e.to_string())),
            }
            if t.elapsed() > SETUP_TIMEOUT {
                return Err(KvError::Busy);
            }
        }
        let mut out = None;
        while out.is_none() {
            let got = self.wait(Duration::from_millis(100), |tag, r| {
                if tag == TAG {
                    out = Some(r.map(OwnedReply::from));
                }
            });
            if let Err(e) = got {
                return Err(KvError::Submit(e.to_string()));
            }
        }
        out.expect("loop ends with an answer")
    }
}

/// Frees op slot `i`; its tag, if it had one.
fn release<T>(ops: &mut [OpSlot<T>], free: &mut Vec<u32>, i: u32) -> Option<T> {
    free.push(i);
    let s = &mut ops[i as usize];
    if !s.chase.is_fresh() {
        s.chase = Chase::default();
    }
    s.tag.take()
}

/// A random 64-bit id (std's random hash keys, which differ per call, mixed
/// with the clock and the process id); never 0.
fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish().max(1)
}
