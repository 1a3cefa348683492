//! The client: routes each key to the worker owning its slot (any member of
//! the cluster), writes calls into the endpoints' batches (sent by the next
//! `poll()`, one WRITE per endpoint), follows redirects and try-agains
//! itself, and completes requests through a callback, without async
//! machinery.

use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use copyrpc::conn::Connection;
use copyrpc::transport::{Mlx5, Transport};
use copyrpc::{CallError, CloseReason, Context, ContextBuilder, EndpointId, WaitError};
use mlx5::device::Context as Device;

use crate::error::{ConnectError, KvError, SubmitError};
use crate::inbox::{self, Handler, Inbox};
use crate::map_fetch::{self, MapAnswer};
use crate::members::{self, Setup};
use crate::options::{ClientOptions, SETUP_TIMEOUT};
use crate::reach::Reach;
use crate::reply::{OwnedReply, Reply};
use crate::retry::{Answer, Answered, Chase, Chaser, Step, Target};
use crate::route::Routes;
use crate::scan::ScanAgg;
use kvs_proto::proto::{
    self, Op, Redirect, Response, Status, FLAG_MAP_NEWER, REQUEST_HEADER, RESPONSE_HEADER,
};
use kvs_proto::{Owner, ShardMap};

/// Where a request carries the map version it was routed by.
const MAP_VERSION: std::ops::Range<usize> = 4..8;

/// One request's fields, as [`proto::write_request`] encodes them.
#[derive(Clone, Copy)]
struct Outgoing<'a> {
    op: Op,
    key: &'a [u8],
    value: &'a [u8],
    /// PUT / UPDATE_RANGE: the value's length.
    val_len: u32,
    /// UPDATE_RANGE: where the bytes go.
    offset: u32,
}

impl<'a> Outgoing<'a> {
    /// A request with a key and nothing else.
    fn keyed(op: Op, key: &'a [u8]) -> Self {
        Outgoing {
            op,
            key,
            value: &[],
            val_len: 0,
            offset: 0,
        }
    }
}

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
    cluster: [u8; 16],
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
        match map.members().get(usize::from(me)) {
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
        let contact_m = map.members()[usize::from(me)];
        for c in
            members::connect_workers(&mut ctx, contact, me, &contact_m, 1..answer.workers, setup)?
        {
            routes.push_worker(me, c.endpoint());
            conns.push(c);
        }
        let peers = (0u16..)
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
    pub fn cluster_id(&self) -> [u8; 16] {
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

    /// The context, and what takes the answers it reads ([`Finish`]),
    /// counting those handed over in `completed`.
    #[inline]
    fn finishing<'a>(
        &'a mut self,
        completed: &'a mut usize,
    ) -> (&'a mut Context<u32, Handler, X>, Finish<'a, T>) {
        let Client {
            ctx,
            ops,
            free,
            in_flight,
            inbox,
            ..
        } = self;
        let done = Finish {
            ops,
            free,
            in_flight,
            inbox,
            completed,
        };
        (ctx, done)
    }

    /// Frees an op slot (keeping its request buffer, and resetting its
    /// chase if it had one); returns its tag.
    #[inline]
    fn release(&mut self, i: u32) -> Option<T> {
        release(&mut self.ops, &mut self.free, i)
    }

    /// Sends one request to the owner of its key (queued until `poll()`),
    /// reserving `allowance` bytes for the response.
    #[inline]
    fn submit(&mut self, r: Outgoing<'_>, allowance: usize, tag: T) -> Result<(), SubmitError<T>> {
        let Outgoing {
            op,
            key,
            value,
            val_len,
            offset,
        } = r;
        if key.len() > u16::MAX as usize {
            return Err(SubmitError::TooLarge(tag, key.len()));
        }
        if value.len() > u32::MAX as usize {
            return Err(SubmitError::TooLarge(tag, value.len()));
        }
        let ep = match self.routes.of_key(key) {
            Some(ep) => ep,
            // Not connected to the owner yet.
            None => match self.reach_owner(self.map.owner(key)) {
                Ok(ep) => ep,
                // Its connection died, and the slot has a ready backup the
                // group can move it to (the map is fetched again while a
                // member is unreachable): the request waits, sent again by
                // the map in use, until its deadline. Without a backup it
                // fails now.
                Err(e @ KvError::Unreachable { .. }) if self.may_fail_over(key) => {
                    let Some(&any) = self.routes.all().first() else {
                        self.fail_soon(tag, e);
                        return Ok(());
                    };
                    let id = self.next_id(op);
                    let i = self.slot(Some(tag), Kind::Key(op), any, allowance);
                    let s = &mut self.ops[i as usize];
                    let version = self.routes.version();
                    proto::write_request(&mut s.req, op, version, key, value, val_len, offset);
                    if let Some((c, q)) = id {
                        proto::add_request_id(&mut s.req, c, q);
                    }
                    self.chaser
                        .later(i, &mut s.chase, Target::Route, Instant::now());
                    self.in_flight += 1;
                    return Ok(());
                }
                Err(e) => {
                    self.fail_soon(tag, e);
                    return Ok(());
                }
            },
        };
        let id = self.next_id(op);
        let i = self.slot(Some(tag), Kind::Key(op), ep, allowance);
        let s = &mut self.ops[i as usize];
        let version = self.routes.version();
        proto::write_request(&mut s.req, op, version, key, value, val_len, offset);
        if let Some((c, q)) = id {
            proto::add_request_id(&mut s.req, c, q);
        }
        match self.ctx.call(ep, &s.req, allowance, i) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            // The owner's connection died: the request waits for a map
            // and a connection, as one for a member not yet reached does.
            Err(CallError::Closed(..) | CallError::NoEndpoint(_)) => {
                if let Some(m) = self.routes.member_of(ep) {
                    self.lost_member(m);
                }
                let s = &mut self.ops[i as usize];
                let now = Instant::now();
                self.chaser.later(i, &mut s.chase, Target::Route, now);
                self.in_flight += 1;
                Ok(())
            }
            Err(e) => {
                let size = s.req.len();
                Err(self.refused(i, e, size))
            }
        }
    }

    /// Fails the requests whose deadline passed ([`ClientOptions::timeout`]):
    /// the caller is told now; the slot stays taken until its answer (if
    /// any still comes) is dropped. Returns how many completed.
    #[cold]
    fn expire(&mut self, f: &mut impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        let limit = self.opts.timeout;
        let mut n = 0;
        for i in 0..self.ops.len() {
            let s = &mut self.ops[i];
            if s.abandoned
                || !matches!(s.kind, Kind::Key(_))
                || self.clock.saturating_duration_since(s.started) < limit
            {
                continue;
            }
            let Some(tag) = s.tag.take() else { continue };
            s.abandoned = true;
            self.in_flight -= 1;
            n += 1;
            f(tag, Err(KvError::Timeout(limit)));
        }
        n
    }

    /// The connections to member `m` died (its process stopped or was
    /// killed): its endpoints go, it is connected again when a request
    /// needs it (after its backoff), and the map is fetched anew from
    /// another member (its slots may have moved to their backups).
    #[cold]
    #[inline(never)]
    fn lost_member(&mut self, m: u16) {
        let mine: Vec<EndpointId> = (0..self.routes.workers(m))
            .filter_map(|w| {
                self.routes.endpoint(Owner {
                    member: m,
                    worker: w,
                })
            })
            .collect();
        if mine.is_empty() {
            return;
        }
        self.routes.drop_member(m);
        self.routes.rebuild(&self.map);
        self.conns.retain(|c| !mine.contains(&c.endpoint()));
        for ep in mine {
            self.ctx.remove(ep);
        }
        if let Some(p) = self.peers.get_mut(usize::from(m)) {
            p.reach
                .failed(Instant::now(), "its connection closed".to_string());
        }
        self.map_stale = true;
    }

    /// A write's request id (this client's id and its next request number;
    /// kept on every re-send, so a server applies it once); none for reads.
    #[inline]
    fn next_id(&mut self, op: Op) -> Option<(u64, u64)> {
        if !matches!(op, Op::Put | Op::Delete | Op::UpdateRange) {
            return None;
        }
        self.requests += 1;
        Some((self.client_id, self.requests))
    }

    /// A call copyrpc refused: frees its op slot and hands the tag back with
    /// the reason (`size`: the bytes that could never fit).
    fn refused(&mut self, i: u32, e: CallError<u32>, size: usize) -> SubmitError<T> {
        let tag = self.release(i).expect("a fresh slot has its tag");
        match e {
            CallError::RingFull(_) | CallError::InsufficientCredit(_) => SubmitError::Busy(tag),
            CallError::TooLarge(..) => SubmitError::TooLarge(tag, size),
            CallError::Closed(_, why) => SubmitError::Closed(tag, why),
            CallError::NoEndpoint(_) => SubmitError::Closed(tag, CloseReason::Local),
        }
    }

    /// A request that fails with `e` before it is sent: it completes at the
    /// next poll or wait, as any other does.
    #[cold]
    fn fail_soon(&mut self, tag: T, e: KvError) {
        self.doomed.push((tag, e));
        self.in_flight += 1;
    }

    /// The endpoint of `owner`, connecting to its member first if the
    /// client lacks it ([`reach`](Self::reach)).
    #[cold]
    #[inline(never)]
    fn reach_owner(&mut self, owner: Owner) -> Result<EndpointId, KvError> {
        self.reach(owner.member)?;
        self.routes.endpoint(owner).ok_or_else(|| {
            KvError::NoRoute(format!(
                "member {} has no worker {} (map version {})",
                owner.member,
                owner.worker,
                self.map.version()
            ))
        })
    }

    /// Connects to the workers of member `id` the client lacks, unless a
    /// failed attempt holds the member off ([`Reach`]): blocking, for up to
    /// [`ClientOptions::setup_timeout`]. Then routes its slots to them.
    ///
    /// # Errors
    /// [`KvError::Unreachable`] when the attempt fails or the member is held
    /// off; [`KvError::NoRoute`] for a member the map does not name.
    #[cold]
    #[inline(never)]
    fn reach(&mut self, id: u16) -> Result<(), KvError> {
        let i = usize::from(id);
        let (Some(&m), Some(peer)) = (self.map.members().get(i), self.peers.get_mut(i)) else {
            return Err(KvError::NoRoute(format!(
                "member {id} is not in the shard map (version {})",
                self.map.version()
            )));
        };
        let have = self.routes.workers(id);
        if have >= m.workers {
            return Ok(());
        }
        let addr = peer.addr;
        if let Err(h) = peer.reach.may_try(Instant::now()) {
            return Err(KvError::Unreachable {
                member: id,
                addr,
                why: format!(
                    "{} ({} failed attempt(s) in a row; not tried again for {} ms)",
                    h.why,
                    h.failures,
                    h.left.as_millis()
                ),
            });
        }
        let setup = Setup {
            token: self.opts.auth_token.as_ref(),
            cluster: Some(self.cluster),
            within: self.opts.setup_timeout,
            deadline: Instant::now() + self.opts.setup_timeout,
        };
        match members::connect_workers(&mut self.ctx, addr, id, &m, have..m.workers, setup) {
            Ok(made) => {
                for c in made {
                    self.routes.push_worker(id, c.endpoint());
                    self.conns.push(c);
                }
                self.peers[i].reach.connected();
                self.routes.rebuild(&self.map);
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                let hold = self.peers[i].reach.failed(Instant::now(), why.clone());
                Err(KvError::Unreachable {
                    member: id,
                    addr,
                    why: format!("{why} (not tried again for {} ms)", hold.as_millis()),
                })
            }
        }
    }

    /// Connects to every member that owns slots under the map in use and
    /// that the client lacks ([`reach`](Self::reach)), for a scan.
    #[cold]
    #[inline(never)]
    fn reach_owners(&mut self) -> Result<(), KvError> {
        for id in 0..self.map.members().len() as u16 {
            if self.map.slots_of(id) > 0 {
                self.reach(id)?;
            }
        }
        Ok(())
    }

    /// Reads `key`. Busy (retryable after `poll()`) when the endpoint's ring or
    /// credit is used up.
    pub fn get(&mut self, key: &[u8], tag: T) -> Result<(), SubmitError<T>> {
        let a = RESPONSE_HEADER + self.opts.value_allowance;
        self.submit(Outgoing::keyed(Op::Get, key), a, tag)
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8], tag: T) -> Result<(), SubmitError<T>> {
        let r = Outgoing {
            value,
            val_len: value.len() as u32,
            ..Outgoing::keyed(Op::Put, key)
        };
        self.submit(r, RESPONSE_HEADER + 64, tag)
    }

    /// Removes `key`.
    pub fn delete(&mut self, key: &[u8], tag: T) -> Result<(), SubmitError<T>> {
        self.submit(Outgoing::keyed(Op::Delete, key), RESPONSE_HEADER + 64, tag)
    }

    /// Overwrites `bytes` of `key`'s value at `offset` (the value never grows:
    /// a range past its end is [`KvError::OutOfRange`]).
    pub fn update_range(
        &mut self,
        key: &[u8],
        offset: u32,
        bytes: &[u8],
        tag: T,
    ) -> Result<(), SubmitError<T>> {
        let r = Outgoing {
            value: bytes,
            val_len: bytes.len() as u32,
            offset,
            ..Outgoing::keyed(Op::UpdateRange, key)
        };
        self.submit(r, RESPONSE_HEADER + 64, tag)
    }

    /// Up to `count` records with keys from `start` on, in key order, gathered
    /// from every worker of every member the client is connected to, after
    /// connecting to every member that owns slots (one that cannot be
    /// connected fails the scan with [`KvError::Unreachable`]).
    pub fn scan(&mut self, start: &[u8], count: u32, tag: T) -> Result<(), SubmitError<T>> {
        if start.len() > u16::MAX as usize {
            return Err(SubmitError::TooLarge(tag, start.len()));
        }
        if !self.routes.complete() {
            if let Err(e) = self.reach_owners() {
                self.fail_soon(tag, e);
                return Ok(());
            }
        }
        // One part per worker, each its own op slot. Refused before anything
        // is sent, the scan is handed back (Busy); a later part refused as
        // busy is sent again by a later poll, one refused for good fails the
        // scan once the parts sent are back.
        let parts = self.routes.count();
        let allowance = RESPONSE_HEADER + self.opts.scan_allowance;
        let version = self.routes.version();
        let i = self.slot(Some(tag), Kind::Scan, self.routes.all()[0], allowance);
        let mut agg = self.scan_pool.pop().unwrap_or_default();
        agg.reset(count as usize, parts as u32);
        for k in 0..parts {
            let ep = self.routes.all()[k];
            let p = self.slot(None, Kind::Part(i), ep, allowance);
            let s = &mut self.ops[p as usize];
            proto::write_request(&mut s.req, Op::Scan, version, start, &[], count, 0);
            match self.ctx.call(ep, &s.req, allowance, p) {
                Ok(()) => {}
                Err(e) if k == 0 => {
                    self.release(p);
                    self.scan_pool.push(agg);
                    return Err(self.refused(i, e, allowance));
                }
                Err(e) if e.is_retryable() => self.chaser.busy(p, Target::To(ep)),
                Err(e) => {
                    self.release(p);
                    agg.fail(call_failed(e));
                }
            }
        }
        self.ops[i as usize].scan = Some(agg);
        self.in_flight += 1;
        Ok(())
    }

    /// Sends queued requests, reads answers, and calls `f` for every completed
    /// request. Returns how many completed.
    ///
    /// Redirects and try-agains are followed here, and re-sends whose time
    /// has come are sent. A re-send to a member the client is not connected
    /// to yet connects to it first, blocking for up to
    /// [`ClientOptions::setup_timeout`] (once per member, or once per
    /// backoff for a member that could not be connected).
    pub fn poll(&mut self, mut f: impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        let mut now = 0;
        let n = {
            let (ctx, mut done) = self.finishing(&mut now);
            ctx.poll_with(&mut |op, r| done.answer(op, r, &mut f))
        };
        now + self.complete(n, f)
    }

    /// [`poll`](Self::poll), and if nothing completed, waits for an answer
    /// up to `timeout` (never past the time a request being retried is
    /// due): spinning, then sleeping until one arrives, as
    /// [`ClientOptions::idle`] says ([`copyrpc::Context::wait`]). Returns
    /// how many completed (0: none within `timeout`).
    ///
    /// # Errors
    /// The device could not arm its CQs or wait on its completion channel;
    /// [`poll`](Self::poll) still works.
    pub fn wait(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> Result<usize, WaitError> {
        let timeout = match self.chaser.next_due() {
            _ if !self.doomed.is_empty() => Duration::ZERO,
            Some(due) => timeout.min(due.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        let mut now = 0;
        let n = {
            let (ctx, mut done) = self.finishing(&mut now);
            ctx.wait_with(timeout, &mut |op, r| done.answer(op, r, &mut f))?
        };
        Ok(now + self.complete(n, f))
    }

    /// Hands the answers the context received to `f`, following redirects
    /// and try-agains; `events` is what the context's poll or wait handled.
    /// The connections' liveness is looked at every 100 ms: under load every
    /// 1024 polls, and at every poll or wait that found nothing (a dead
    /// server sends nothing more).
    fn complete(
        &mut self,
        events: usize,
        mut f: impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        self.polls = self.polls.wrapping_add(1);
        self.clock = Instant::now();
        let mut n = 0;
        if (events == 0 || self.polls % 1024 == 0)
            && self.clock.duration_since(self.last_check) >= Duration::from_millis(100)
        {
            n += self.check_liveness(&mut f);
        }
        n += self.follow_inbox(&mut f);
        if self.fetched.is_some()
            || self.chaser.pending()
            || !self.doomed.is_empty()
            || self.map_stale
        {
            n += self.chase(&mut f);
        }
        n
    }

    /// The periodic check: expires requests past their deadline, marks the
    /// map stale while a member it names is unreachable, and treats the
    /// members of dead connections as lost. Returns how many of the
    /// caller's requests completed.
    fn check_liveness(&mut self, f: &mut impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        self.last_check = self.clock;
        let n = self.expire(f);
        // While a member the map names is unreachable, the map is
        // fetched again every check: the group may move its slots to
        // their backups (it marks it failed after member_timeout_ms).
        if self.peers.iter().any(|p| p.reach.failing()) {
            self.map_stale = true;
        }
        let mut dead: Vec<u16> = Vec::new();
        for c in &mut self.conns {
            if !c.check(&mut self.ctx) {
                if let Some(m) = self.routes.member_of(c.endpoint()) {
                    dead.push(m);
                }
            }
        }
        for m in dead {
            self.lost_member(m);
        }
        n
    }

    /// Follows the answers the poll copied into the inbox, and empties it.
    /// Returns how many of the caller's requests completed.
    #[inline(always)]
    fn follow_inbox(&mut self, f: &mut impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        let mut n = 0;
        let mut done = self.inbox.done.take();
        let mut arena = self.inbox.arena.take();
        for d in done.drain(..) {
            let bytes = d
                .result
                .map(|(s, len)| &arena[s as usize..(s + len) as usize]);
            n += self.answered(d.op, bytes, f);
        }
        self.inbox.done.set(done);
        arena.clear();
        self.inbox.arena.set(arena);
        n
    }

    /// One answer (`bytes`, or why the call failed) to op `i`, by the op's
    /// kind (a long `match` of small arms). Returns how many of the
    /// caller's requests completed.
    #[inline(always)]
    fn answered(
        &mut self,
        i: u32,
        bytes: Result<&[u8], CloseReason>,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        let Some(kind) = self.ops.get(i as usize).map(|s| s.kind) else {
            return 0;
        };
        // The caller was told its deadline passed.
        if self.ops[i as usize].abandoned {
            self.release(i);
            return 0;
        }
        // The flags byte of any answer (checked in full below).
        if let Ok([_, flags, ..]) = bytes {
            if flags & FLAG_MAP_NEWER != 0 {
                self.map_newer(i);
            }
        }
        match kind {
            Kind::Key(op) => {
                let Some(r) = self.key_result(i, op, bytes) else {
                    return 0;
                };
                let tag = self.release(i).expect("a request has its tag");
                self.in_flight -= 1;
                f(tag, r);
                1
            }
            Kind::Part(parent) => self.part_answered(i, parent, bytes, f),
            Kind::Map => {
                self.map_answered(i, bytes);
                0
            }
            Kind::Scan => 0,
        }
    }

    /// The caller's result of key request `i` (an `op`) from its answer
    /// `bytes`; `None` while the request is being chased (re-sent, queued
    /// or parked).
    #[inline(always)]
    fn key_result<'b>(
        &mut self,
        i: u32,
        op: Op,
        bytes: Result<&'b [u8], CloseReason>,
    ) -> Option<Result<Reply<'b>, KvError>> {
        let b = match bytes {
            // The member's connection died with the request on it: in a
            // cluster its slot may be served by a backup by now, so it is
            // sent again, by the next map, until its deadline.
            Err(CloseReason::PeerGone | CloseReason::Transport(_))
                if self.map.members().len() > 1 =>
            {
                let ep = self.ops[i as usize].ep;
                if let Some(m) = self.routes.member_of(ep) {
                    self.lost_member(m);
                }
                self.map_stale = true;
                let s = &mut self.ops[i as usize];
                s.maybe_applied = true;
                self.chaser
                    .later(i, &mut s.chase, Target::Route, self.clock);
                return None;
            }
            Err(why) => return Some(Err(KvError::Failed(why))),
            Ok(b) => b,
        };
        let resp = match Response::new_checked(b) {
            Err(e) => return Some(Err(KvError::Malformed(e))),
            Ok(resp) => resp,
        };
        Some(match resp.status() {
            Status::Ok => Ok(if op == Op::Get {
                Reply::Value(resp.payload())
            } else {
                Reply::Done
            }),
            Status::NotFound => Ok(Reply::NotFound),
            st @ (Status::Redirect | Status::TryAgain | Status::Unavailable) => {
                // Unavailable may come after the primary applied it.
                self.ops[i as usize].maybe_applied |= st == Status::Unavailable;
                Err(self.follow(i, st, resp.payload())?)
            }
            // A member of a cluster stopping: its slots moved (it handed
            // them over) or will once it is marked failed; asked again by
            // the next map.
            Status::ShuttingDown if self.map.members().len() > 1 => {
                self.stopping(i);
                self.follow(i, Status::Unavailable, resp.payload())?;
                Err(KvError::ShuttingDown)
            }
            st => Err(KvError::of_status(st, resp.payload())),
        })
    }

    /// The answer `bytes` to part `i` of scan `parent`: a redirect or
    /// try-again is followed, anything else goes into the scan. Returns
    /// how many of the caller's requests completed.
    #[inline(always)]
    fn part_answered(
        &mut self,
        i: u32,
        parent: u32,
        bytes: Result<&[u8], CloseReason>,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        if let Some(st) = chased_status(&bytes) {
            let payload = bytes.as_ref().map_or(&[][..], |b| &b[RESPONSE_HEADER..]);
            return match self.follow(i, st, payload) {
                None => 0,
                Some(e) => self.fail(i, e, f),
            };
        }
        self.release(i);
        self.part_done(parent, |agg| agg.add(bytes), f)
    }

    /// Follows a redirect or a try-again (`st`, `payload`) of op `i`: `None`
    /// while it is being chased (re-sent, queued or parked), else the error
    /// it ends with.
    #[cold]
    fn follow(&mut self, i: u32, st: Status, payload: &[u8]) -> Option<KvError> {
        let answer = match st {
            Status::TryAgain => Answer::TryAgain,
            Status::Unavailable => Answer::Unavailable,
            _ => match Redirect::parse(payload) {
                Ok(r) => Answer::Redirect(r),
                Err(e) => return Some(KvError::Malformed(e)),
            },
        };
        let fixed = !matches!(self.ops[i as usize].kind, Kind::Key(_));
        // To an owner the client's map names and the client is not connected
        // to: connected first. (One named by a newer map waits for that map,
        // which says where it is.)
        if let Answer::Redirect(r) = answer {
            if !fixed
                && r.map_version <= self.routes.version()
                && self.routes.endpoint(r.owner).is_none()
            {
                if let Err(e) = self.reach(r.owner.member) {
                    return Some(e);
                }
            }
        }
        let now = Instant::now();
        let s = &mut self.ops[i as usize];
        let routes = &self.routes;
        let reply = Answered {
            answer,
            from: s.ep,
            fixed,
        };
        let step = self.chaser.on_answer(
            i,
            &mut s.chase,
            reply,
            routes.version(),
            |o| routes.endpoint(o),
            now,
        );
        match step {
            Step::Send(ep, version) => {
                raise_version(&mut self.ops[i as usize].req, version);
                self.resend(i, Target::To(ep))
            }
            Step::Queued | Step::Parked => None,
            // Still without a lease when the chase ran out: the server's
            // word, which names the member and why.
            Step::Fail(why) if st == Status::Unavailable => Some(KvError::Unavailable(format!(
                "{} ({why})",
                String::from_utf8_lossy(payload)
            ))),
            Step::Fail(why) => Some(self.no_route(why)),
        }
    }

    /// Op `i` was answered by a member that is stopping: the map is fetched
    /// again from another member.
    #[cold]
    fn stopping(&mut self, i: u32) {
        let from = self.ops[i as usize].ep;
        let other = self.routes.member_of(from).and_then(|m| {
            self.routes
                .all()
                .iter()
                .copied()
                .find(|&e| self.routes.member_of(e) != Some(m))
        });
        if let Some(ep) = other {
            self.chaser.newer_map(ep);
        }
    }

    /// Op `i` was answered by a server with a newer map than the one it was
    /// routed by: if that was the client's newest, the client fetches the
    /// server's (so it learns of changes that moved none of its keys).
    #[cold]
    fn map_newer(&mut self, i: u32) {
        let s = &self.ops[i as usize];
        let version = self.routes.version();
        if proto::routed_by(&s.req) >= version {
            self.chaser.newer_map(s.ep);
        }
    }

    /// The error of a request that could not be routed, with the last map
    /// problem if there was one.
    fn no_route(&self, why: String) -> KvError {
        KvError::NoRoute(match &self.map_error {
            Some(m) => format!("{why} (the last map fetch failed: {m})"),
            None => why,
        })
    }

    /// Whether `key`'s slot has a ready backup in the client's map: the
    /// group moves it there when its owner fails.
    fn may_fail_over(&self, key: &[u8]) -> bool {
        let slot = kvs_proto::shard::slot_of(key, self.map.slots());
        self.map.backups(slot).iter().any(|b| b.ready)
    }

    /// Sends op `i`'s request again, to `to`, as routed by the client's map
    /// (or the newer one a redirect named): `None` when sent or queued as
    /// busy, else the error it ends with.
    fn resend(&mut self, i: u32, to: Target<EndpointId>) -> Option<KvError> {
        let ep = match to {
            Target::To(ep) => ep,
            Target::Route => {
                let key = request_key(&self.ops[i as usize].req);
                match self.routes.of_key(key) {
                    Some(ep) => ep,
                    None => match self.reach_owner(self.map.owner(key)) {
                        Ok(ep) => ep,
                        // Its owner's connection died and the group can
                        // move its slot to a ready backup: asked again
                        // later (by the map in use then), until its
                        // deadline.
                        Err(KvError::Unreachable { .. })
                            if self.may_fail_over(request_key(&self.ops[i as usize].req)) =>
                        {
                            let s = &mut self.ops[i as usize];
                            self.chaser
                                .later(i, &mut s.chase, Target::Route, Instant::now());
                            return None;
                        }
                        Err(e) => return Some(e),
                    },
                }
            }
        };
        let s = &mut self.ops[i as usize];
        raise_version(&mut s.req, self.routes.version());
        if s.maybe_applied {
            // The server may have applied an earlier send: it must not
            // apply this one unless it can tell it did not.
            proto::mark_resent(&mut s.req);
        }
        s.ep = ep;
        match self.ctx.call(ep, &s.req, s.allowance, i) {
            Ok(()) => None,
            Err(e) if e.is_retryable() => {
                self.chaser.busy(i, to);
                None
            }
            Err(e) => Some(call_failed(e)),
        }
    }

    /// Completes op `i` with `e`: a request's caller sees it; a scan part
    /// fails its scan; a map fetch counts as failed. Returns how many of the
    /// caller's requests completed.
    fn fail(
        &mut self,
        i: u32,
        e: KvError,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        if self.ops[i as usize].abandoned {
            self.release(i);
            return 0;
        }
        match self.ops[i as usize].kind {
            Kind::Key(_) => {
                let tag = self.release(i).expect("a request has its tag");
                self.in_flight -= 1;
                f(tag, Err(e));
                1
            }
            Kind::Part(parent) => {
                self.release(i);
                self.part_done(parent, |agg| agg.fail(e), f)
            }
            Kind::Map => {
                self.release(i);
                self.fetch_failed(e.to_string());
                0
            }
            Kind::Scan => 0,
        }
    }

    /// One part of scan `parent` is in (`add` adds it; true: it was the
    /// last): the scan completes once all are. Returns how many of the
    /// caller's requests completed.
    fn part_done(
        &mut self,
        parent: u32,
        add: impl FnOnce(&mut ScanAgg) -> bool,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        let Some(agg) = self.ops[parent as usize].scan.as_mut() else {
            return 0;
        };
        if !add(agg) {
            return 0;
        }
        let mut agg = self.ops[parent as usize].scan.take().expect("checked");
        let tag = self.release(parent).expect("a scan has its tag");
        self.in_flight -= 1;
        f(tag, agg.finish().map(Reply::Scan));
        self.scan_pool.push(agg);
        1
    }

    /// The answer to the client's map fetch (op `i`).
    fn map_answered(&mut self, i: u32, bytes: Result<&[u8], CloseReason>) {
        let from = self.ops[i as usize].ep;
        match map_fetch::read_answer(bytes) {
            MapAnswer::Map(m) => {
                self.release(i);
                self.fetched = Some((m, from));
            }
            MapAnswer::TooSmall(needed) => {
                let s = &mut self.ops[i as usize];
                match map_fetch::raised(needed, s.allowance, self.opts.ring_size) {
                    Ok(a) => {
                        s.allowance = a;
                        self.map_allowance = a;
                        if let Some(e) = self.resend(i, Target::To(from)) {
                            self.release(i);
                            self.fetch_failed(e.to_string());
                        }
                    }
                    Err(e) => {
                        self.release(i);
                        self.fetch_failed(e.to_string());
                    }
                }
            }
            MapAnswer::Bad(why) => {
                self.release(i);
                self.fetch_failed(why);
            }
        }
    }

    /// The map fetch failed: the requests waiting for it are retried later.
    fn fetch_failed(&mut self, why: String) {
        self.map_error = Some(why);
        let now = Instant::now();
        for op in self.chaser.fetch_failed() {
            let s = &mut self.ops[op as usize];
            self.chaser.later(op, &mut s.chase, Target::Route, now);
        }
    }

    /// The slow path: completes the requests that failed before they were
    /// sent, installs a fetched map, starts a wanted map fetch, sends the
    /// re-sends that are due. Returns how many of the caller's requests
    /// completed (failed).
    #[cold]
    fn chase(&mut self, f: &mut impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        let mut n = 0;
        let mut doomed = std::mem::take(&mut self.doomed);
        for (tag, e) in doomed.drain(..) {
            self.in_flight -= 1;
            n += 1;
            f(tag, Err(e));
        }
        self.doomed = doomed;
        if let Some((map, from)) = self.fetched.take() {
            self.install(map, from);
            self.map_error = None;
            self.map_stale = false;
            for op in self.chaser.installed() {
                if let Some(e) = self.resend(op, Target::Route) {
                    n += self.fail(op, e, f);
                }
            }
        }
        let now = Instant::now();
        // A member's connections died: until a map fetched since is in,
        // one is fetched (again, if the one in flight went to that member
        // and failed with it).
        if self.map_stale && !self.chaser.fetching() {
            if self.routes.all().is_empty() {
                // Connected to no member any more: any that answers gives
                // the map.
                for m in 0..self.map.members().len() as u16 {
                    if self.reach(m).is_ok() {
                        break;
                    }
                }
            }
            if let Some(&ep) = self.routes.all().first() {
                self.chaser.newer_map(ep);
            }
        }
        if let Some(from) = self.chaser.take_fetch() {
            let i = self.slot(None, Kind::Map, from, self.map_allowance);
            proto::write_request(&mut self.ops[i as usize].req, Op::Map, 0, &[], &[], 0, 0);
            if let Some(e) = self.resend(i, Target::To(from)) {
                self.release(i);
                self.fetch_failed(e.to_string());
            }
        }
        let mut due = std::mem::take(&mut self.due);
        self.chaser.due(now, &mut due);
        for (op, to) in due.drain(..) {
            let e = match self.ops[op as usize].chase.exhausted(now) {
                Some(why) => Some(self.no_route(why)),
                None => self.resend(op, to),
            };
            if let Some(e) = e {
                n += self.fail(op, e, f);
            }
        }
        self.due = due;
        n
    }

    /// Installs `map`, fetched from `from`, if it is newer than the one in
    /// use, and rebuilds the routes (without connecting to anyone: the
    /// slots of members the client lacks are connected when first needed).
    /// A member the client is not connected to is reached where the new map
    /// says (an unspecified IP: the IP `from`'s member was reached at); one
    /// whose address changed is tried at once, whatever its backoff.
    fn install(&mut self, map: ShardMap, from: EndpointId) {
        if map.version() <= self.routes.version() {
            return;
        }
        let sender = self.routes.member_of(from).and_then(|m| {
            let at = self.peers.get(usize::from(m))?.addr;
            Some((m, at))
        });
        for (id, m) in (0u16..).zip(map.members()) {
            let at = match sender {
                Some((s, sa)) => members::member_addr(m, id, s, sa),
                None => m.addr,
            };
            let connected = self.routes.workers(id) > 0;
            match self.peers.get_mut(usize::from(id)) {
                // Where it was reached.
                Some(_) if connected => {}
                Some(p) => {
                    if p.addr != at {
                        *p = Peer {
                            addr: at,
                            reach: Reach::default(),
                        };
                    }
                }
                None => self.peers.push(Peer {
                    addr: at,
                    reach: Reach::default(),
                }),
            }
        }
        self.routes.rebuild(&map);
        self.map = map;
    }
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

/// Raises the map version an encoded request was routed by to `v` (never
/// lowers it: a redirect may have routed it by a newer map than the
/// client's).
fn raise_version(req: &mut [u8], v: u32) {
    let b = &mut req[MAP_VERSION];
    let old = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    b.copy_from_slice(&old.max(v).to_le_bytes());
}

/// The key of an encoded request.
fn request_key(req: &[u8]) -> &[u8] {
    let n = usize::from(u16::from_le_bytes([req[2], req[3]]));
    &req[REQUEST_HEADER..REQUEST_HEADER + n]
}

/// A redirect or try-again answer's status, if it is one.
fn chased_status(bytes: &Result<&[u8], CloseReason>) -> Option<Status> {
    let resp = Response::new_checked(bytes.as_ref().ok()?).ok()?;
    matches!(
        resp.status(),
        Status::Redirect | Status::TryAgain | Status::Unavailable
    )
    .then(|| resp.status())
}

/// The error of a call refused for good.
fn call_failed(e: CallError<u32>) -> KvError {
    match e {
        CallError::Closed(_, why) => KvError::Failed(why),
        CallError::NoEndpoint(_) => KvError::Failed(CloseReason::Local),
        CallError::TooLarge(_, n) => {
            KvError::TooLarge(format!("a request of {n} bytes can never fit the rings"))
        }
        CallError::RingFull(_) | CallError::InsufficientCredit(_) => KvError::Busy,
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

/// Answers as the context reads them, where they lie in its receive ring:
/// a key request's final answer (OK or NOT_FOUND, from a member on the
/// client's map) goes to the caller at once, its value borrowed from the
/// ring; anything else is copied into the inbox for
/// [`Client::complete`](Client) to follow.
struct Finish<'a, T> {
    ops: &'a mut [OpSlot<T>],
    free: &'a mut Vec<u32>,
    in_flight: &'a mut usize,
    inbox: &'a Inbox,
    /// How many went to the caller.
    completed: &'a mut usize,
}

impl<T> Finish<'_, T> {
    #[inline]
    fn answer(
        &mut self,
        i: u32,
        r: Result<&[u8], copyrpc::CallFailed>,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) {
        if let (Ok(b), Some(s)) = (&r, self.ops.get(i as usize)) {
            if let Some(reply) = final_reply(s.kind, s.abandoned, b) {
                if let Some(tag) = release(self.ops, self.free, i) {
                    *self.in_flight -= 1;
                    *self.completed += 1;
                    f(tag, Ok(reply));
                }
                return;
            }
        }
        self.inbox.push(i, r);
    }
}

/// The caller's answer in `b`, if `b` ends an op of `kind` as it is: a
/// well-formed OK or NOT_FOUND from a member on the client's map, to a key
/// request whose caller still waits. The value is `b`'s payload, in place.
#[inline]
fn final_reply(kind: Kind, abandoned: bool, b: &[u8]) -> Option<Reply<'_>> {
    let (Kind::Key(op), false) = (kind, abandoned) else {
        return None;
    };
    let resp = Response::new_checked(b).ok()?;
    if resp.flags() & FLAG_MAP_NEWER != 0 {
        return None;
    }
    match resp.status() {
        Status::Ok if op == Op::Get => Some(Reply::Value(resp.payload())),
        Status::Ok => Some(Reply::Done),
        Status::NotFound => Some(Reply::NotFound),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::proto::{begin_response, finish_response, Request};

    fn get_answer(value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        begin_response(&mut b, Status::Ok, 0);
        b.extend_from_slice(value);
        finish_response(&mut b, 0);
        b
    }

    #[test]
    fn a_value_is_handed_over_where_it_lies_only_when_the_answer_is_whole() {
        let get = Kind::Key(Op::Get);
        let b = get_answer(b"the value");
        match final_reply(get, false, &b) {
            Some(Reply::Value(v)) => {
                assert_eq!(v, b"the value");
                assert_eq!(v.as_ptr(), b[RESPONSE_HEADER..].as_ptr(), "not copied");
            }
            other => panic!("{other:?}"),
        }
        // A header that declares more than the answer holds (the rest would
        // lie past the message, in the ring): not handed over. The copying
        // path then reports it as malformed.
        let mut long = b.clone();
        long[4..8].copy_from_slice(&1000u32.to_le_bytes());
        assert!(final_reply(get, false, &long).is_none());
        assert!(Response::new_checked(&long).is_err());
        let mut short = b.clone();
        short.truncate(RESPONSE_HEADER - 1);
        assert!(final_reply(get, false, &short).is_none());
        // Answers the client must act on, or whose caller was told already.
        let mut newer = b.clone();
        newer[1] |= FLAG_MAP_NEWER;
        assert!(final_reply(get, false, &newer).is_none());
        assert!(final_reply(get, true, &b).is_none());
        assert!(final_reply(Kind::Map, false, &b).is_none());
        let mut redirect = Vec::new();
        begin_response(&mut redirect, Status::TryAgain, 0);
        finish_response(&mut redirect, 0);
        assert!(final_reply(get, false, &redirect).is_none());
        assert!(matches!(
            final_reply(Kind::Key(Op::Put), false, &get_answer(b"")),
            Some(Reply::Done)
        ));
    }

    #[test]
    fn a_write_too_old_to_tell_is_an_error_never_a_success() {
        let mut b = Vec::new();
        begin_response(&mut b, Status::TooOld, 0);
        b.extend_from_slice(b"not applied now");
        finish_response(&mut b, 0);
        assert!(final_reply(Kind::Key(Op::Put), false, &b).is_none());
        let r = Response::new_checked(&b).unwrap();
        assert_eq!(
            KvError::of_status(r.status(), r.payload()),
            KvError::TooOld("not applied now".into())
        );
    }

    #[test]
    fn a_re_sent_request_keeps_its_key_and_never_goes_back_to_an_older_map() {
        let mut req = Vec::new();
        proto::write_request(&mut req, Op::Put, 3, b"user7", b"value", 5, 0);
        assert_eq!(request_key(&req), b"user7");
        // A redirect from map 6 routes it by 6; the client's map (4) does
        // not take it back.
        raise_version(&mut req, 6);
        raise_version(&mut req, 4);
        let r = Request::new_checked(&req).unwrap();
        assert_eq!(
            (r.map_version(), r.key(), r.value()),
            (6, &b"user7"[..], &b"value"[..])
        );
        raise_version(&mut req, 7);
        assert_eq!(Request::new_checked(&req).unwrap().map_version(), 7);
    }
}
