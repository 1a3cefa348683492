//! The client library: routes each key to the worker owning its shard, writes
//! calls into the endpoints' batches (sent by the next `poll()`, one WRITE per
//! endpoint), and completes requests through a callback, without async
//! machinery.

use std::cell::Cell;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use copyrpc::conn::{connect_within, ConnError, Connection};
use copyrpc::transport::{Mlx5, Transport};
use copyrpc::{
    CallError, CallFailed, CloseReason, Context, ContextBuilder, EndpointId, IdlePolicy, WaitError,
};
use mlx5::device::Context as Device;

use crate::error::{KvError, SubmitError};
use kvs_proto::proto::{
    self, Op, Response, ScanRecords, Status, FLAG_TRUNCATED, REQUEST_HEADER, RESPONSE_HEADER,
    SCAN_RECORD_HEADER,
};
use kvs_proto::shard::ShardMap;
use kvs_proto::{hello, AuthToken, SetupAnswer};

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

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// copyrpc ring size per endpoint (a power of two).
    pub ring_size: u64,
    /// Largest value a GET expects (the response allowance it reserves).
    /// Larger values come back as [`KvError::AllowanceTooSmall`].
    pub value_allowance: usize,
    /// Response allowance of each worker's part of a SCAN; a part that does
    /// not fit stops early and the scan reports itself incomplete.
    pub scan_allowance: usize,
    /// The token to present, for a server that requires one (see
    /// [`auth_token`](crate::auth_token)).
    pub auth_token: Option<AuthToken>,
    /// What [`Client::wait`] does while no answer is back: spin, then sleep
    /// (the default), or spin only.
    pub idle: IdlePolicy,
    /// How long [`Client::connect`] gives each connection's setup (TCP and
    /// the server's setup record) and the shard map's answer.
    pub setup_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            ring_size: 1 << 20,
            value_allowance: 4096,
            scan_allowance: 128 << 10,
            auth_token: None,
            idle: IdlePolicy::default(),
            setup_timeout: SETUP_TIMEOUT,
        }
    }
}

/// A completed request's answer, borrowed until the callback returns.
#[derive(Debug)]
pub enum Reply<'a> {
    /// GET: the value.
    Value(&'a [u8]),
    /// PUT, DELETE, UPDATE_RANGE: done.
    Done,
    /// GET, DELETE, UPDATE_RANGE: no such key.
    NotFound,
    /// SCAN: the records.
    Scan(ScanReply<'a>),
}

/// The records of a SCAN, in key order.
#[derive(Debug)]
pub struct ScanReply<'a> {
    buf: &'a [u8],
    recs: &'a [ScanRec],
    complete: bool,
}

impl<'a> ScanReply<'a> {
    /// How many records.
    pub fn len(&self) -> usize {
        self.recs.len()
    }
    /// No records.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }
    /// False when some worker's part did not fit its response allowance and
    /// fewer records than asked are returned although more may exist (scan
    /// again from after the last key).
    pub fn complete(&self) -> bool {
        self.complete
    }
    /// The records, as (key, value).
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + '_ {
        let buf = self.buf;
        self.recs.iter().map(move |r| {
            (
                &buf[r.key as usize..(r.key + r.key_len) as usize],
                &buf[r.val as usize..(r.val + r.val_len) as usize],
            )
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct ScanRec {
    key: u32,
    key_len: u32,
    val: u32,
    val_len: u32,
}

/// A scan being gathered from the workers.
#[derive(Debug, Default)]
struct ScanAgg {
    want: usize,
    parts_left: u16,
    buf: Vec<u8>,
    recs: Vec<ScanRec>,
    /// The smallest last key of a part that stopped early.
    bound: Option<(u32, u32)>,
    error: Option<KvError>,
}

#[derive(Debug)]
struct OpSlot<T> {
    tag: Option<T>,
    op: Op,
    scan: Option<Box<ScanAgg>>,
}

/// One finished call, its response bytes in the arena.
#[derive(Debug)]
struct Done {
    op: u32,
    result: Result<(u32, u32), CloseReason>,
}

/// Where copyrpc's response callback leaves completions: plain cells, moved
/// out and back (no borrow flag, no lock, no allocation once warm).
#[derive(Default)]
struct Inbox {
    done: Cell<Vec<Done>>,
    arena: Cell<Vec<u8>>,
}

type Handler = Box<dyn FnMut(u32, Result<&[u8], CallFailed>)>;

/// A client of one kvs-server: one endpoint per server worker, in one copyrpc
/// context; used from one thread. `T` is the caller's tag for each request;
/// `X` the copyrpc transport (the mlx5 direct path unless the device needs
/// [`copyrpc::transport::Verbs`]: see [`mlx5::wr::DataPath::of`]).
pub struct Client<T, X: Transport = Mlx5> {
    ctx: Context<u32, Handler, X>,
    inbox: Rc<Inbox>,
    eps: Vec<EndpointId>,
    conns: Vec<Connection>,
    map: ShardMap,
    ops: Vec<OpSlot<T>>,
    free: Vec<u32>,
    // Boxed: an aggregate moves between the pool and an op slot by pointer.
    #[allow(clippy::vec_box)]
    scan_pool: Vec<Box<ScanAgg>>,
    req: Vec<u8>,
    opts: ClientOptions,
    in_flight: usize,
    polls: u32,
    last_check: Instant,
}

impl<T, X: Transport> std::fmt::Debug for Client<T, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("workers", &self.eps.len())
            .field("map_version", &self.map.version())
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

/// Why a client could not connect.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Connection setup failed.
    #[error(transparent)]
    Conn(#[from] ConnError),
    /// The server refused the connection, saying why (a missing or wrong
    /// auth token, …).
    #[error("the server refused the connection: {0}")]
    Refused(String),
    /// The context could not be made.
    #[error(transparent)]
    Setup(#[from] copyrpc::SetupError),
    /// The server is not a kvs-server or answered nonsense.
    #[error("not a kvs-server: {0}")]
    Protocol(String),
    /// The server did not answer in time.
    #[error("the server did not answer within {0:?}")]
    Timeout(Duration),
    /// The device could not wait for the answer (arming its CQs, or its
    /// completion channel, failed).
    #[error(transparent)]
    Wait(#[from] WaitError),
}

const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

impl<T, X: Transport> Client<T, X> {
    /// Connects to the kvs-server at `addr` through `device`: one endpoint per
    /// worker, and the server's shard map.
    pub fn connect(
        addr: impl ToSocketAddrs + Clone,
        device: &Device,
        opts: ClientOptions,
    ) -> Result<Client<T, X>, ConnectError> {
        let inbox = Rc::new(Inbox::default());
        let ib = inbox.clone();
        let handler: Handler = Box::new(move |op: u32, r: Result<&[u8], CallFailed>| {
            let mut done = ib.done.take();
            let result = match r {
                Ok(b) => {
                    let mut arena = ib.arena.take();
                    let start = arena.len() as u32;
                    arena.extend_from_slice(b);
                    ib.arena.set(arena);
                    Ok((start, b.len() as u32))
                }
                Err(CallFailed(why)) => Err(why),
            };
            done.push(Done { op, result });
            ib.done.set(done);
        });
        let mut ctx = ContextBuilder::new()
            .idle(opts.idle)
            .ring_size(opts.ring_size)
            .build_on::<X, _, _>(device, handler)?;
        let token = opts.auth_token.as_ref();
        let refused = |e: ConnError| match e {
            ConnError::Refused(why) => ConnectError::Refused(why),
            e => ConnectError::Conn(e),
        };
        let within = opts.setup_timeout;
        let first =
            connect_within(addr.clone(), &mut ctx, &hello(0, token), within).map_err(refused)?;
        let (workers, slots) = match SetupAnswer::parse(first.peer_private_data()) {
            Some(a) => (a.workers, a.slots),
            None => return Err(ConnectError::Protocol("bad setup answer".into())),
        };
        if workers == 0 {
            return Err(ConnectError::Protocol("a server with no workers".into()));
        }
        let mut conns = vec![first];
        for w in 1..workers {
            conns.push(
                connect_within(addr.clone(), &mut ctx, &hello(w, token), within)
                    .map_err(refused)?,
            );
        }
        let eps = conns.iter().map(|c| c.endpoint()).collect();
        let mut c = Client {
            ctx,
            inbox,
            eps,
            conns,
            // Replaced by the server's below.
            map: ShardMap::single(SocketAddr::from(([0, 0, 0, 0], 0)), 1, workers)
                .map_err(|e| ConnectError::Protocol(e.to_string()))?,
            ops: Vec::new(),
            free: Vec::new(),
            scan_pool: Vec::new(),
            req: Vec::with_capacity(REQUEST_HEADER + 256),
            opts,
            in_flight: 0,
            polls: 0,
            last_check: Instant::now(),
        };
        c.fetch_map(slots)?;
        Ok(c)
    }

    /// Asks worker 0 for the shard map, waiting for the answer.
    fn fetch_map(&mut self, slots: u32) -> Result<(), ConnectError> {
        proto::write_request(&mut self.req, Op::Map, 0, &[], &[], 0, 0);
        let _ = slots;
        let allowance = (self.opts.ring_size / 8).min(64 << 10) as usize;
        self.ctx
            .call(self.eps[0], &self.req, allowance, u32::MAX)
            .map_err(|e| ConnectError::Protocol(e.to_string()))?;
        let t = Instant::now();
        loop {
            self.ctx.wait(Duration::from_millis(100))?;
            let mut done = self.inbox.done.take();
            let arena = self.inbox.arena.take();
            let mut r = None;
            for d in done.drain(..) {
                if d.op == u32::MAX {
                    r = Some(match d.result {
                        Ok((s, n)) => Response::new_checked(&arena[s as usize..(s + n) as usize])
                            .map_err(|e| e.to_string())
                            .and_then(|resp| {
                                ShardMap::decode(resp.payload()).map_err(|e| e.to_string())
                            }),
                        Err(why) => Err(why.to_string()),
                    });
                }
            }
            self.inbox.done.set(done);
            self.inbox.arena.set(Vec::new());
            if let Some(r) = r {
                let m = r.map_err(ConnectError::Protocol)?;
                if m.members()[0].workers as usize != self.eps.len() {
                    return Err(ConnectError::Protocol(
                        "shard map and worker count disagree".into(),
                    ));
                }
                self.map = m;
                return Ok(());
            }
            if t.elapsed() > self.opts.setup_timeout {
                return Err(ConnectError::Timeout(self.opts.setup_timeout));
            }
        }
    }

    /// The shard map in use.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// Requests sent or queued and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The copyrpc context (statistics, flow state).
    pub fn context(&self) -> &Context<u32, Handler, X> {
        &self.ctx
    }

    fn slot(&mut self, tag: T, op: Op) -> u32 {
        let s = OpSlot {
            tag: Some(tag),
            op,
            scan: None,
        };
        match self.free.pop() {
            Some(i) => {
                self.ops[i as usize] = s;
                i
            }
            None => {
                self.ops.push(s);
                (self.ops.len() - 1) as u32
            }
        }
    }

    fn release(&mut self, i: u32) -> OpSlot<T> {
        let s = std::mem::replace(
            &mut self.ops[i as usize],
            OpSlot {
                tag: None,
                op: Op::Get,
                scan: None,
            },
        );
        self.free.push(i);
        s
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
        let w = self.map.owner(key).worker as usize;
        proto::write_request(
            &mut self.req,
            op,
            self.map.version(),
            key,
            value,
            val_len,
            offset,
        );
        let i = self.slot(tag, op);
        match self.ctx.call(self.eps[w], &self.req, allowance, i) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            Err(e) => Err(self.refused(i, e, self.req.len())),
        }
    }

    /// A call copyrpc refused: frees its op slot and hands the tag back with
    /// the reason (`size`: the bytes that could never fit).
    fn refused(&mut self, i: u32, e: CallError<u32>, size: usize) -> SubmitError<T> {
        let tag = self.release(i).tag.expect("a fresh slot has its tag");
        match e {
            CallError::RingFull(_) | CallError::InsufficientCredit(_) => SubmitError::Busy(tag),
            CallError::TooLarge(..) => SubmitError::TooLarge(tag, size),
            CallError::Closed(_, why) => SubmitError::Closed(tag, why),
            CallError::NoEndpoint(_) => SubmitError::Closed(tag, CloseReason::Local),
        }
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
    /// from every worker.
    pub fn scan(&mut self, start: &[u8], count: u32, tag: T) -> Result<(), SubmitError<T>> {
        if start.len() > u16::MAX as usize {
            return Err(SubmitError::TooLarge(tag, start.len()));
        }
        // One part per worker. Refused before anything is sent, the scan is
        // handed back (Busy); a later part refused fails the scan once the
        // parts sent are back.
        proto::write_request(
            &mut self.req,
            Op::Scan,
            self.map.version(),
            start,
            &[],
            count,
            0,
        );
        let i = self.slot(tag, Op::Scan);
        let mut agg = self.scan_pool.pop().unwrap_or_default();
        agg.want = count as usize;
        agg.parts_left = self.eps.len() as u16;
        agg.buf.clear();
        agg.recs.clear();
        agg.bound = None;
        agg.error = None;
        let allowance = RESPONSE_HEADER + self.opts.scan_allowance;
        for w in 0..self.eps.len() {
            if let Err(e) = self.ctx.call(self.eps[w], &self.req, allowance, i) {
                if w == 0 {
                    self.scan_pool.push(agg);
                    return Err(self.refused(i, e, allowance));
                }
                // A part that cannot be sent now fails the scan (reported when
                // the parts already sent are back).
                agg.parts_left -= 1;
                agg.error = Some(KvError::Busy);
            }
        }
        self.ops[i as usize].scan = Some(agg);
        self.in_flight += 1;
        Ok(())
    }

    /// Sends queued requests, reads answers, and calls `f` for every completed
    /// request. Returns how many completed.
    pub fn poll(&mut self, f: impl FnMut(T, Result<Reply<'_>, KvError>)) -> usize {
        let n = self.ctx.poll();
        self.complete(n, f)
    }

    /// [`poll`](Self::poll), and if nothing completed, waits for an answer
    /// up to `timeout`: spinning, then sleeping until one arrives, as
    /// [`ClientOptions::idle`] says ([`copyrpc::Context::wait`]). Returns
    /// how many completed (0: none within `timeout`).
    ///
    /// # Errors
    /// The device could not arm its CQs or wait on its completion channel;
    /// [`poll`](Self::poll) still works.
    pub fn wait(
        &mut self,
        timeout: Duration,
        f: impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> Result<usize, WaitError> {
        let n = self.ctx.wait(timeout)?;
        Ok(self.complete(n, f))
    }

    /// Hands the answers the context received to `f`; `events` is what the
    /// context's poll or wait handled. The connections' liveness is looked
    /// at every 100 ms: under load every 1024 polls, and at every poll or
    /// wait that found nothing (a dead server sends nothing more).
    fn complete(
        &mut self,
        events: usize,
        mut f: impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        self.polls = self.polls.wrapping_add(1);
        if (events == 0 || self.polls % 1024 == 0)
            && self.last_check.elapsed() >= Duration::from_millis(100)
        {
            self.last_check = Instant::now();
            for c in &mut self.conns {
                c.check(&mut self.ctx);
            }
        }
        let mut done = self.inbox.done.take();
        let arena = self.inbox.arena.take();
        let mut n = 0;
        for d in done.drain(..) {
            let Some(slot) = self.ops.get_mut(d.op as usize) else {
                continue;
            };
            let bytes = d
                .result
                .map(|(s, len)| &arena[s as usize..(s + len) as usize]);
            if slot.op == Op::Scan {
                let Some(agg) = slot.scan.as_mut() else {
                    continue;
                };
                add_scan_part(agg, bytes);
                agg.parts_left -= 1;
                if agg.parts_left > 0 {
                    continue;
                }
                let s = self.release(d.op);
                let mut agg = s.scan.expect("checked above");
                let tag = s.tag.expect("a live slot has its tag");
                self.in_flight -= 1;
                n += 1;
                match agg.error.take() {
                    Some(e) => f(tag, Err(e)),
                    None => {
                        finish_scan(&mut agg);
                        f(
                            tag,
                            Ok(Reply::Scan(ScanReply {
                                buf: &agg.buf,
                                recs: &agg.recs,
                                complete: agg.bound.is_none() || agg.recs.len() >= agg.want,
                            })),
                        );
                    }
                }
                self.scan_pool.push(agg);
                continue;
            }
            let s = self.release(d.op);
            let tag = s.tag.expect("a live slot has its tag");
            self.in_flight -= 1;
            n += 1;
            let r = match bytes {
                Err(why) => Err(KvError::Failed(why)),
                Ok(b) => match Response::new_checked(b) {
                    Err(e) => Err(KvError::Malformed(e)),
                    Ok(resp) => match resp.status() {
                        Status::Ok => Ok(if s.op == Op::Get {
                            Reply::Value(resp.payload())
                        } else {
                            Reply::Done
                        }),
                        Status::NotFound => Ok(Reply::NotFound),
                        st => Err(self.error_of(st, resp.payload())),
                    },
                },
            };
            f(tag, r);
        }
        self.inbox.done.set(done);
        let mut arena = arena;
        arena.clear();
        self.inbox.arena.set(arena);
        n
    }

    /// The error for a non-OK status; a redirect installs the newer map.
    fn error_of(&mut self, st: Status, payload: &[u8]) -> KvError {
        match st {
            Status::Redirect => {
                let _ = payload;
                KvError::Redirected
            }
            other => error_of_status(other, payload),
        }
    }
}

fn error_of_status(st: Status, payload: &[u8]) -> KvError {
    let msg = || String::from_utf8_lossy(payload).into_owned();
    match st {
        Status::TooLarge => KvError::TooLarge(msg()),
        Status::BadRequest => KvError::BadRequest(msg()),
        Status::ShuttingDown => KvError::ShuttingDown,
        Status::OutOfRange => KvError::OutOfRange,
        Status::OutOfMemory => KvError::OutOfMemory(msg()),
        Status::AllowanceTooSmall => KvError::AllowanceTooSmall(match payload {
            [a, b, c, d] => u32::from_le_bytes([*a, *b, *c, *d]) as usize,
            _ => 0,
        }),
        Status::Redirect | Status::TryAgain => KvError::Redirected,
        Status::Ok | Status::NotFound => KvError::BadRequest("unexpected status".into()),
    }
}

/// Adds one worker's part of a scan.
fn add_scan_part(agg: &mut ScanAgg, part: Result<&[u8], CloseReason>) {
    if agg.error.is_some() {
        return;
    }
    let b = match part {
        Ok(b) => b,
        Err(why) => {
            agg.error = Some(KvError::Failed(why));
            return;
        }
    };
    let resp = match Response::new_checked(b) {
        Ok(r) => r,
        Err(e) => {
            agg.error = Some(KvError::Malformed(e));
            return;
        }
    };
    if resp.status() != Status::Ok {
        agg.error = Some(error_of_status(resp.status(), resp.payload()));
        return;
    }
    let mut last = None;
    for r in ScanRecords::new(resp.payload()) {
        let (k, v) = match r {
            Ok(kv) => kv,
            Err(e) => {
                agg.error = Some(KvError::Malformed(e));
                return;
            }
        };
        let key = agg.buf.len() as u32;
        agg.buf.extend_from_slice(k);
        let val = agg.buf.len() as u32;
        agg.buf.extend_from_slice(v);
        agg.recs.push(ScanRec {
            key,
            key_len: k.len() as u32,
            val,
            val_len: v.len() as u32,
        });
        last = Some((key, k.len() as u32));
    }
    if resp.flags() & FLAG_TRUNCATED != 0 {
        // Keys past this part's last one may be missing from it.
        let Some((lk, ll)) = last else {
            agg.error = Some(KvError::AllowanceTooSmall(
                resp.payload().len() + SCAN_RECORD_HEADER,
            ));
            return;
        };
        let new = &agg.buf[lk as usize..(lk + ll) as usize];
        let tighter = match agg.bound {
            None => true,
            Some((bk, bl)) => new < &agg.buf[bk as usize..(bk + bl) as usize],
        };
        if tighter {
            agg.bound = Some((lk, ll));
        }
    }
}

/// Merges the parts: key order, nothing past a truncated part's last key, at
/// most `want` records.
fn finish_scan(agg: &mut ScanAgg) {
    let buf = &agg.buf;
    let key = |r: &ScanRec| &buf[r.key as usize..(r.key + r.key_len) as usize];
    agg.recs.sort_unstable_by(|a, b| key(a).cmp(key(b)));
    if let Some((bk, bl)) = agg.bound {
        let bound = &buf[bk as usize..(bk + bl) as usize];
        let keep = agg.recs.partition_point(|r| key(r) <= bound);
        agg.recs.truncate(keep);
    }
    agg.recs.truncate(agg.want);
}

/// A completed request's answer, owned (for the blocking helpers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedReply {
    /// GET: the value.
    Value(Vec<u8>),
    /// Done.
    Done,
    /// No such key.
    NotFound,
    /// SCAN: the records, and whether the scan is complete.
    Scan(Vec<(Vec<u8>, Vec<u8>)>, bool),
}

impl From<Reply<'_>> for OwnedReply {
    fn from(r: Reply<'_>) -> Self {
        match r {
            Reply::Value(v) => OwnedReply::Value(v.to_vec()),
            Reply::Done => OwnedReply::Done,
            Reply::NotFound => OwnedReply::NotFound,
            Reply::Scan(s) => OwnedReply::Scan(
                s.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect(),
                s.complete(),
            ),
        }
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
