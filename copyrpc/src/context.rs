//! The context: one SRQ, one receive CQ and one send CQ shared by all
//! endpoints, and `poll()`, which runs the protocol.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx5::device::{access, CompletionChannel, Context as Device, Cq, CqAttr, Pd, SrqHandle};

use crate::encoding::*;
use crate::endpoint::{copy_small, EndpointStats, Ep, Remote, State};
use crate::error::{CallError, CallFailed, CloseReason, ReplyError, SetupError, WaitError};
use crate::fifo::Fifo;
use crate::idle::{take_wake, IdlePolicy, SpinBudget, Waker};
use crate::info::{EndpointInfo, ENDPOINT_INFO_VERSION};
use crate::slab::Slab;
use crate::transport::{Mlx5, Objects, Sge, Transport, WorkCompletion};

/// How long an idle [`Context::wait`] spins before it starts yielding the
/// CPU between polls: longer than a round trip that is on its way.
const POLITE_AFTER: Duration = Duration::from_micros(10);

/// Empty polls between two clock reads of a spinning [`Context::wait`].
const CLOCK_EVERY: u32 = 16;

/// An endpoint of a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointId {
    idx: u32,
    gen: u32,
}

impl EndpointId {
    /// The endpoint's slot in its context (reused after `remove`, under a new id).
    pub fn index(&self) -> u32 {
        self.idx
    }
}

/// A received request: answer it with [`Context::reply`]. Its payload is
/// readable with [`Context::request`] until the next `poll()`.
#[derive(Debug)]
pub struct RecvHandle {
    ep: u32,
    gen: u32,
    call_id: u32,
    /// Its endpoint's tag when it was received ([`Context::set_tag`]).
    tag: u32,
    allowance: u64,
    pos: u64,
    len: u32,
    epoch: u64,
}

/// A received request waiting for `recv()`: what becomes its handle.
#[derive(Clone, Copy, Default)]
pub(crate) struct Arrived {
    ep: u32,
    gen: u32,
    call_id: u32,
    len: u32,
    allowance: u64,
    pos: u64,
}

impl RecvHandle {
    /// The endpoint the request came on.
    pub fn endpoint(&self) -> EndpointId {
        EndpointId {
            idx: self.ep,
            gen: self.gen,
        }
    }
    /// The tag its endpoint carried ([`Context::set_tag`]; 0 unless set):
    /// what the application decided about the peer at setup, read without
    /// a look-up per request.
    #[inline]
    pub fn tag(&self) -> u32 {
        self.tag
    }
    /// Largest response payload the caller allowed.
    pub fn max_response(&self) -> usize {
        max_payload(self.allowance)
    }
}

/// The largest payload a response allowance (in bytes, as carried) admits: the
/// allowance covers the message and a possible wrap marker.
fn max_payload(allowance: u64) -> usize {
    (allowance.saturating_sub(FLOW_METADATA_SIZE) as usize).saturating_sub(HEADER_SIZE)
}

/// Flow-control state of an endpoint (the quantities of docs/protocol.md, "Flow control").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowState {
    /// Bytes written towards the peer's ring and not known consumed.
    pub in_flight: u64,
    /// R: bytes reserved in the peer's ring for responses this side owes.
    pub resp_reservation: u64,
    /// C: the peer's ring size.
    pub ring_size: u64,
    /// Credit the peer granted for this side's requests.
    pub peer_credit: u64,
    /// Credit this side granted that the peer has not used.
    pub peer_unused_credit: u64,
}

impl FlowState {
    /// `in_flight + 2R <= C`.
    pub fn invariant_holds(&self) -> bool {
        self.in_flight + 2 * self.resp_reservation <= self.ring_size
    }
}

/// Context settings.
#[derive(Debug, Clone, Copy)]
pub struct ContextBuilder {
    ring_size: u64,
    max_resp_reservation: Option<u64>,
    srq_size: u32,
    cq_size: u32,
    sq_size: u32,
    max_endpoints: u32,
    compression: mlx5::cq::Compression,
    idle: IdlePolicy,
    huge_pages: bool,
    dci_streams: Option<mlx5::device::DciStreams>,
}

impl Default for ContextBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ContextBuilder {
    /// Defaults (docs/protocol.md): 1 MiB rings, SRQ of 1024, CQ of 4096, SQ of 256.
    pub fn new() -> Self {
        Self {
            ring_size: 1 << 20,
            max_resp_reservation: None,
            srq_size: 1024,
            cq_size: 4096,
            sq_size: 256,
            max_endpoints: 1024,
            compression: mlx5::cq::Compression::Off,
            idle: IdlePolicy::default(),
            huge_pages: false,
            dci_streams: None,
        }
    }
    /// Receive (and send) ring size per endpoint, a power of two.
    pub fn ring_size(mut self, n: u64) -> Self {
        self.ring_size = n;
        self
    }
    /// Largest response reservation R (default ring size / 4).
    pub fn max_resp_reservation(mut self, n: u64) -> Self {
        self.max_resp_reservation = Some(n);
        self
    }
    /// SRQ size (zero-length receives, refilled below 2/3).
    pub fn srq_size(mut self, n: u32) -> Self {
        self.srq_size = n;
        self
    }
    /// CQ size.
    pub fn cq_size(mut self, n: u32) -> Self {
        self.cq_size = n;
        self
    }
    /// Send queue size per endpoint, in basic blocks.
    pub fn sq_size(mut self, n: u32) -> Self {
        self.sq_size = n;
        self
    }
    /// Most endpoints the context will hold.
    pub fn max_endpoints(mut self, n: u32) -> Self {
        self.max_endpoints = n;
        self
    }
    /// CQE compression on both CQs (the receive side reads batch sizes from
    /// the CQE byte count, which mini CQEs keep).
    pub fn compression(mut self, c: mlx5::cq::Compression) -> Self {
        self.compression = c;
        self
    }

    /// What [`Context::wait`] does without work (default: spin 50 µs, then
    /// sleep on a completion channel).
    pub fn idle(mut self, p: IdlePolicy) -> Self {
        self.idle = p;
        self
    }

    /// Puts each endpoint's send and receive rings in 2 MiB huge pages
    /// (default false), from the pool the operator reserves
    /// (`vm.nr_hugepages`; see [`Pd::alloc_mr_huge`]).
    ///
    /// Why: the NIC reads every message out of a send ring and writes every
    /// message into a receive ring, translating ring addresses as it goes;
    /// in 2 MiB pages a ring needs one translation entry (MTT, IOTLB) per
    /// 2 MiB instead of one per 4 KiB, so the NIC's caches of them miss less,
    /// and so does the CPU's TLB as it fills and drains the rings.
    ///
    /// What it costs: while huge pages are used each ring is rounded up to
    /// whole 2 MiB pages, the rest of the last page unused: a ring of 1 MiB
    /// (the default) takes 2 MiB, one of 64 KiB takes 2 MiB too, so an
    /// endpoint takes `2 × max(ring_size, 2 MiB)` of the pool (reserve that
    /// per endpoint). When the pool runs short the rings of new endpoints are
    /// in normal pages, as without this setting, and no error is raised:
    /// [`Context::huge_page_rings`] counts the rings that got huge pages. On
    /// the software device there are no huge pages: the rings are allocated
    /// as usual. Read when an endpoint is created, never on the data path.
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = on;
        self
    }

    /// On DC ([`transport::Dc`](crate::transport::Dc)): the streams of each
    /// DC initiator, within what the device allows (default: up to 16
    /// streams, and as many errored streams kept apart as the device
    /// allows). `log_errored` 0 makes an error stop the whole DCI, which is
    /// then replaced, as on a device that keeps no errored stream apart.
    pub fn dci_streams(mut self, s: mlx5::device::DciStreams) -> Self {
        self.dci_streams = Some(s);
        self
    }

    /// Builds a context on `device` with the mlx5 direct data path;
    /// `on_response` receives every response (or the failure of a call whose
    /// endpoint closed) with the call's user data.
    pub fn build<U, F>(self, device: &Device, on_response: F) -> Result<Context<U, F>, SetupError>
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        self.build_on::<Mlx5, U, F>(device, on_response)
    }

    /// [`build`](Self::build) with transport `T` for the data path:
    /// `builder.build_on::<T, _, _>(&dev, on_response)`, or let the result's
    /// type pick it (`let ctx: Context<_, _, T> = builder.build_on(..)?`).
    pub fn build_on<T: Transport, U, F>(
        self,
        device: &Device,
        on_response: F,
    ) -> Result<Context<U, F, T>, SetupError>
    where
        F: FnMut(U, Result<&[u8], CallFailed>),
    {
        if !self.ring_size.is_power_of_two() || self.ring_size < 256 {
            return Err(SetupError::Invalid(format!(
                "ring size {} must be a power of two >= 256",
                self.ring_size
            )));
        }
        let max_resp = self.max_resp_reservation.unwrap_or(self.ring_size / 4) & !(ALIGNMENT - 1);
        if max_resp > self.ring_size / 4 || max_resp < 2 * ALIGNMENT {
            return Err(SetupError::Invalid(format!(
                "max response reservation {max_resp} must be in [64, ring/4]"
            )));
        }
        let pd = device.alloc_pd()?;
        let attr = CqAttr {
            cqe_cnt: self.cq_size,
            compression: self.compression,
            ..CqAttr::default()
        };
        // Sleeping needs CQs that can be armed: on a channel of their own.
        let chan = match self.idle {
            IdlePolicy::Spin => None,
            IdlePolicy::SpinThenSleep { .. } => Some(device.create_comp_channel()?),
        };
        let (rcq, scq) = match &chan {
            Some(ch) => (
                device.create_cq_on(&attr, ch)?,
                device.create_cq_on(&attr, ch)?,
            ),
            None => (device.create_cq(&attr)?, device.create_cq(&attr)?),
        };
        let srq_h = device.create_srq(&pd, self.srq_size, 1)?;
        // The receive CQ and the SRQ it completes, bound together.
        let mut recv_cq = T::recv_cq(&rcq, &srq_h)?;
        let mut posted = 0;
        while T::srq_post(&mut recv_cq) {
            posted += 1;
        }
        T::srq_ring(&mut recv_cq);
        let shared = T::shared(&Objects {
            device,
            pd: &pd,
            send_cq: &scq,
            recv_cq: &rcq,
            srq: &srq_h,
            sq_size: self.sq_size,
            max_endpoints: self.max_endpoints,
            compression: self.compression,
            dci_streams: self.dci_streams,
        })?;
        let n = self.max_endpoints as usize;
        let consumer_arena = pd.alloc_mr(8 * n, access::LOCAL_WRITE | access::REMOTE_READ)?;
        let read_arena = pd.alloc_mr(8 * n, access::LOCAL_WRITE)?;
        Ok(Context {
            recv_cq,
            send_cq: T::send_cq(&scq)?,
            cqs: (rcq, scq),
            chan,
            woken: Arc::new(AtomicBool::new(false)),
            sleeps: 0,
            spin: SpinBudget::new(self.idle),
            device: device.clone(),
            pd,
            _srq_h: srq_h,
            srq_posted: posted,
            strays: 0,
            srq_cap: posted,
            srq_low: posted * 2 / 3,
            eps: Vec::with_capacity(n),
            free_slots: Vec::new(),
            shared,
            consumer_arena,
            read_arena,
            dirty: Vec::with_capacity(n),
            reads: Vec::with_capacity(n),
            consumed: Vec::with_capacity(n),
            recvq: Fifo::with_capacity(1024),
            on_response,
            epoch: 0,
            cfg: self,
            max_resp,
        })
    }
}

/// A copyrpc context: endpoints sharing one SRQ and two CQs, polled by one
/// thread. `U` is the user data of a call, handed back with its response; `F`
/// the response callback; `T` the [`Transport`] of the data path (the mlx5
/// direct path unless built with [`ContextBuilder::build_on`]).
pub struct Context<U, F, T: Transport = Mlx5> {
    device: Device,
    pd: Pd,
    recv_cq: T::RecvCq,
    send_cq: T::SendCq,
    cqs: (Cq, Cq),
    /// Where the CQs' events arrive (none under [`IdlePolicy::Spin`]).
    chan: Option<CompletionChannel>,
    /// Set by a [`Waker`].
    woken: Arc<AtomicBool>,
    /// Times [`wait`](Context::wait) slept.
    sleeps: u64,
    /// How long `wait` spins before it sleeps.
    spin: SpinBudget,
    _srq_h: SrqHandle,
    srq_posted: u32,
    /// Receive completions that named no endpoint.
    strays: u64,
    srq_cap: u32,
    /// Below this many posted receives the SRQ is refilled (2/3 of the cap).
    srq_low: u32,
    eps: Vec<Option<Ep<U, T>>>,
    /// Slots of removed endpoints, with the generation their next endpoint gets.
    free_slots: Vec<(u32, u32)>,
    /// The transport's send-side state, shared by the endpoints.
    shared: T::Shared,
    consumer_arena: mlx5::device::Mr,
    read_arena: mlx5::device::Mr,
    dirty: Vec<u32>,
    reads: Vec<u32>,
    consumed: Vec<u32>,
    recvq: Fifo<Arrived>,
    on_response: F,
    epoch: u64,
    cfg: ContextBuilder,
    max_resp: u64,
}

impl<U, F, T: Transport> std::fmt::Debug for Context<U, F, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("endpoints", &self.eps.len())
            .finish()
    }
}

/// The endpoint in slot `idx` if it is still generation `gen`.
fn live<U, T: Transport>(eps: &[Option<Ep<U, T>>], idx: u32, gen: u32) -> Option<&Ep<U, T>> {
    eps.get(idx as usize)?.as_ref().filter(|e| e.gen == gen)
}

/// [`live`], mutable.
fn live_mut<U, T: Transport>(
    eps: &mut [Option<Ep<U, T>>],
    idx: u32,
    gen: u32,
) -> Option<&mut Ep<U, T>> {
    eps.get_mut(idx as usize)?.as_mut().filter(|e| e.gen == gen)
}

impl<U, F, T: Transport> Context<U, F, T> {
    fn slot(&self, id: EndpointId) -> Option<&Ep<U, T>> {
        live(&self.eps, id.idx, id.gen)
    }
    fn slot_mut(&mut self, id: EndpointId) -> Option<&mut Ep<U, T>> {
        live_mut(&mut self.eps, id.idx, id.gen)
    }
}

impl<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport> Context<U, F, T> {
    /// Creates an endpoint; exchange its [`EndpointInfo`] with the peer, then
    /// [`connect`](Self::connect).
    pub fn create_endpoint(&mut self) -> Result<(EndpointId, EndpointInfo), SetupError> {
        let (idx, gen) = match self.free_slots.last() {
            Some(&(i, gen)) => (i as usize, gen),
            None if self.eps.len() < self.cfg.max_endpoints as usize => (self.eps.len(), 0),
            None => return Err(SetupError::TooManyEndpoints(self.eps.len())),
        };
        let c = self.cfg.ring_size;
        let objs = Objects {
            device: &self.device,
            pd: &self.pd,
            send_cq: &self.cqs.1,
            recv_cq: &self.cqs.0,
            srq: &self._srq_h,
            sq_size: self.cfg.sq_size,
            max_endpoints: self.cfg.max_endpoints,
            compression: self.cfg.compression,
            dci_streams: self.cfg.dci_streams,
        };
        let (sq, reach) = T::open(&mut self.shared, &mut self.send_cq, &objs, idx as u32, gen)?;
        let ring = |access| {
            if self.cfg.huge_pages {
                self.pd.alloc_mr_huge(c as usize, access)
            } else {
                self.pd.alloc_mr(c as usize, access)
            }
        };
        let send_mr = ring(access::LOCAL_WRITE)?;
        let recv_mr = ring(access::LOCAL_WRITE | access::REMOTE_WRITE)?;
        let ci = reach.conn;
        let info = EndpointInfo {
            version: ENDPOINT_INFO_VERSION,
            qpn: ci.qpn,
            lid: ci.lid,
            gid: ci.gid,
            psn: ci.psn,
            ring_addr: recv_mr.addr(),
            ring_rkey: recv_mr.rkey(),
            ring_size: c,
            consumer_addr: self.consumer_arena.addr() + 8 * idx as u64,
            consumer_rkey: self.consumer_arena.rkey(),
            max_resp_reservation: self.max_resp,
            dc: reach.dc,
        };
        let ep = Ep {
            gen,
            send_base: send_mr.as_ptr(),
            send_lkey: send_mr.lkey(),
            send_size: c,
            recv_base: recv_mr.as_ptr(),
            recv_size: c,
            send_mr,
            recv_mr,
            sq,
            remote: None,
            state: State::Idle,
            send_producer: 0,
            posted_pos: 0,
            meta_pos: None,
            batch_count: 0,
            ready: VecDeque::with_capacity(8),
            remote_consumer: 0,
            resp_reservation: 0,
            max_resp: self.max_resp,
            peer_credit: 0,
            peer_unused_credit: 0,
            recv_producer: 0,
            last_recv_pos: 0,
            queued: Fifo::with_capacity(64),
            pending: Slab::with_capacity(256),
            read_inflight: false,
            want_read: false,
            dirty: false,
            consumed_dirty: false,
            tag: 0,
            stats: EndpointStats::default(),
        };
        if idx == self.eps.len() {
            self.eps.push(Some(ep));
        } else {
            self.free_slots.pop();
            self.eps[idx] = Some(ep);
        }
        Ok((
            EndpointId {
                idx: idx as u32,
                gen,
            },
            info,
        ))
    }

    /// Connects an endpoint to the peer described by `remote`. No handshake:
    /// each side starts with the credit the other reserves for it.
    pub fn connect(&mut self, ep: EndpointId, remote: &EndpointInfo) -> Result<(), SetupError> {
        let e = live_mut(&mut self.eps, ep.idx, ep.gen)
            .ok_or(SetupError::Invalid("no such endpoint".into()))?;
        if remote.version != ENDPOINT_INFO_VERSION {
            return Err(SetupError::Invalid(format!(
                "endpoint info version {} (want {ENDPOINT_INFO_VERSION})",
                remote.version
            )));
        }
        if remote.ring_size != e.send_size {
            return Err(SetupError::Invalid(format!(
                "peer ring size {} differs from ours ({})",
                remote.ring_size, e.send_size
            )));
        }
        if e.state != State::Idle {
            return Err(SetupError::Invalid("endpoint already connected".into()));
        }
        T::connect(&mut self.shared, &mut e.sq, remote)?;
        e.remote = Some(Remote {
            ring_addr: remote.ring_addr,
            ring_rkey: remote.ring_rkey,
            consumer_addr: remote.consumer_addr,
            consumer_rkey: remote.consumer_rkey,
        });
        // We reserve R for the peer's requests; the peer reserves its share for ours.
        e.resp_reservation = e.max_resp.min(e.send_size / 4) & !(ALIGNMENT - 1);
        e.peer_unused_credit = e.resp_reservation;
        e.peer_credit = remote.max_resp_reservation.min(e.recv_size / 4) & !(ALIGNMENT - 1);
        e.state = State::Open;
        e.check_invariant();
        Ok(())
    }

    /// Queues a request of `payload` expecting a response of up to
    /// `max_response` bytes; `user` comes back with the response. Sent by the
    /// next `poll()`. `RingFull` and `InsufficientCredit` are retryable.
    pub fn call(
        &mut self,
        ep: EndpointId,
        payload: &[u8],
        max_response: usize,
        user: U,
    ) -> Result<(), CallError<U>> {
        let Some(e) = self.slot_mut(ep) else {
            return Err(CallError::NoEndpoint(user));
        };
        match &e.state {
            State::Open => {}
            State::Closed(r) => return Err(CallError::Closed(user, r.clone())),
            State::Idle => return Err(CallError::Closed(user, CloseReason::Local)),
        }
        let msg = padded_message_size(payload.len());
        let allowance = align_up(padded_message_size(max_response) + FLOW_METADATA_SIZE);
        // Never fits: a message (and the tail it may waste) must fit beside the
        // largest reservation; an allowance above the peer's maximum is never granted.
        if 2 * (msg + FLOW_METADATA_SIZE) > e.send_size - 2 * e.max_resp
            || allowance > e.recv_size / 4
        {
            return Err(CallError::TooLarge(user, payload.len().max(max_response)));
        }
        if e.peer_credit < allowance {
            return Err(CallError::InsufficientCredit(user));
        }
        if e.in_flight() + e.space_needed(msg) + 2 * e.resp_reservation > e.send_size {
            if !e.read_inflight && !e.want_read {
                e.want_read = true;
                self.reads.push(ep.idx);
            }
            return Err(CallError::RingFull(user));
        }
        let id = e.pending.insert(user);
        debug_assert!(id & RESPONSE_FLAG == 0);
        e.peer_credit -= allowance;
        e.write_message(id, (allowance / ALIGNMENT) as u32, payload);
        e.stats.calls += 1;
        if !e.dirty {
            e.dirty = true;
            self.dirty.push(ep.idx);
        }
        Ok(())
    }

    /// The next received request, in arrival order per endpoint. Its payload
    /// ([`request`](Self::request)) stays readable until the next `poll()`.
    pub fn recv(&mut self) -> Option<RecvHandle> {
        loop {
            let a = self.recvq.pop_front()?;
            let i = a.ep;
            // Requests of a removed endpoint are dropped.
            let Some(e) = live_mut(&mut self.eps, i, a.gen) else {
                continue;
            };
            e.queued.pop_front();
            if !e.consumed_dirty {
                e.consumed_dirty = true;
                self.consumed.push(i);
            }
            // Requests of an endpoint that closed since cannot be answered.
            if e.state != State::Open {
                continue;
            }
            return Some(RecvHandle {
                ep: a.ep,
                gen: a.gen,
                call_id: a.call_id,
                tag: e.tag,
                allowance: a.allowance,
                pos: a.pos,
                len: a.len,
                epoch: self.epoch,
            });
        }
    }

    /// The payload of a request received since the last `poll()` (`None` once a
    /// later poll has released it to the peer).
    pub fn request(&self, h: &RecvHandle) -> Option<&[u8]> {
        if h.epoch != self.epoch {
            return None;
        }
        let e = live(&self.eps, h.ep, h.gen)?;
        Some(e.recv_slice(h.pos, u64::from(h.len)))
    }

    /// Answers a request, in any order. Never `RingFull`: the caller's
    /// allowance was reserved when the credit was granted.
    #[inline]
    pub fn reply(&mut self, h: RecvHandle, payload: &[u8]) -> Result<(), ReplyError> {
        self.reply_with(h, payload.len(), |b| copy_small(b, payload))
    }

    /// Answers a request with a `len`-byte response that `fill` writes where
    /// it is sent from: the send ring, whose space the caller's allowance
    /// reserved. `fill` gets exactly `len` bytes and must write all of them
    /// (what it leaves is whatever the ring held). Nothing is written, and
    /// the request stays unanswered, when the reply is refused.
    ///
    /// ```no_run
    /// # fn f(ctx: &mut copyrpc::Context<u64, fn(u64, Result<&[u8], copyrpc::CallFailed>)>) {
    /// while let Some(req) = ctx.recv() {
    ///     let value = b"the stored value";
    ///     // The header and the value go into the ring; no buffer between.
    ///     let _ = ctx.reply_with(req, 2 + value.len(), |out| {
    ///         out[..2].copy_from_slice(&[0, 0]);
    ///         out[2..].copy_from_slice(value);
    ///     });
    /// }
    /// # }
    /// ```
    #[inline]
    pub fn reply_with(
        &mut self,
        h: RecvHandle,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), ReplyError> {
        let Some(e) = live_mut(&mut self.eps, h.ep, h.gen) else {
            return Err(ReplyError::Closed(CloseReason::Local));
        };
        if let State::Closed(r) = &e.state {
            return Err(ReplyError::Closed(r.clone()));
        }
        let max = max_payload(h.allowance);
        if len > max {
            return Err(ReplyError::TooLarge { len, max });
        }
        // The reservation turns into the response: the message, a batch's
        // metadata and a wrap's wasted tail cost at most twice the allowance,
        // which `2R` covered.
        e.resp_reservation -= h.allowance;
        e.write_message_with(h.call_id | RESPONSE_FLAG, 0, len, fill);
        e.stats.replies += 1;
        if !e.dirty {
            e.dirty = true;
            self.dirty.push(h.ep);
        }
        Ok(())
    }

    /// Runs the protocol: publishes consumer positions, reads receive
    /// completions (batches) and send completions, refills the SRQ, posts
    /// pending batches and READs. Touches only endpoints with work. Returns the
    /// number of completions handled.
    pub fn poll(&mut self) -> usize {
        self.poll_via(&mut Stored)
    }

    /// [`poll`](Self::poll), handing this poll's responses (and failed
    /// calls) to `on_response` instead of the context's own callback. The
    /// response borrows the receive ring: a caller can use it where it lies
    /// while it holds state the context's callback cannot reach (its own
    /// fields beside the context), and copy only what it keeps. Calls that
    /// fail outside a poll ([`close`](Self::close)) still go to the
    /// context's callback.
    #[inline]
    pub fn poll_with<G: FnMut(U, Result<&[u8], CallFailed>)>(
        &mut self,
        on_response: &mut G,
    ) -> usize {
        self.poll_via(&mut Given(on_response))
    }

    /// One poll, its responses going where `resp` says: the steps in order.
    #[inline]
    fn poll_via<R: Respond<U, F>>(&mut self, resp: &mut R) -> usize {
        // Requests handed out by the previous poll are released to the peer.
        self.epoch += 1;
        self.publish_consumed();
        let mut n = self.poll_recv_completions(resp);
        self.refill_srq();
        n += self.poll_send_completions(resp);
        self.flush_dirty(resp);
        self.post_reads(resp);
        n
    }

    /// Publishes the consumer positions of the endpoints whose requests
    /// were consumed since the last poll.
    #[inline(always)]
    fn publish_consumed(&mut self) {
        for &i in &self.consumed {
            // Ring space is released up to the oldest request not yet taken by
            // `recv()`: a request's bytes stay until its handle's poll is over.
            let Some(e) = self.eps[i as usize].as_mut() else {
                continue;
            };
            e.consumed_dirty = false;
            let w = e.queued.front().copied().unwrap_or(e.recv_producer);
            if w > e.last_recv_pos {
                e.last_recv_pos = w;
                self.consumer_arena.write(8 * i as usize, &w.to_le_bytes());
            }
        }
        self.consumed.clear();
    }

    /// Reads the receive completions (one per batch) and delivers their
    /// batches; returns how many were read.
    #[inline(always)]
    fn poll_recv_completions<R: Respond<U, F>>(&mut self, resp: &mut R) -> usize {
        let Self {
            recv_cq,
            srq_posted,
            strays,
            eps,
            shared,
            on_response,
            recvq,
            consumed,
            ..
        } = self;
        let on_response = &mut |u: U, r: Result<&[u8], CallFailed>| resp.call(on_response, u, r);
        T::poll_recv(recv_cq, 256, |c, took| {
            let idx = T::recv_owner(shared, c);
            let e = idx
                .and_then(|i| eps.get_mut(i as usize)?.as_mut())
                .filter(|e| T::recv_from_peer(&e.sq, c));
            // The batch's lines were written by the peer's NIC (in the
            // software device: another core); they are on their way while
            // the endpoint's state is looked at.
            if let Some(e) = &e {
                e.prefetch_batch(u64::from(c.byte_len()));
            }
            if took {
                *srq_posted -= 1;
            }
            let (Some(i), Some(e)) = (idx, e) else {
                *strays += 1;
                return;
            };
            if let Some(code) = c.error() {
                close(e, shared, transport_error(code), on_response);
                return;
            }
            if e.state != State::Open {
                return;
            }
            match on_batch(e, i, c.byte_len(), on_response, recvq) {
                Ok(()) => {
                    if !e.consumed_dirty {
                        e.consumed_dirty = true;
                        consumed.push(i);
                    }
                }
                Err(why) => close(e, shared, CloseReason::Violation(why), on_response),
            }
        })
    }

    /// Keeps the SRQ above 2/3 full.
    #[inline(always)]
    fn refill_srq(&mut self) {
        if self.srq_posted < self.srq_low {
            while self.srq_posted < self.srq_cap && T::srq_post(&mut self.recv_cq) {
                self.srq_posted += 1;
            }
            T::srq_ring(&mut self.recv_cq);
        }
    }

    /// Reads the send completions: retires WQEs, and READ results update
    /// the peer's consumer position. Returns how many were read.
    #[inline(always)]
    fn poll_send_completions<R: Respond<U, F>>(&mut self, resp: &mut R) -> usize {
        let Self {
            send_cq,
            shared,
            eps,
            read_arena,
            on_response,
            dirty,
            ..
        } = self;
        let on_response = &mut |u: U, r: Result<&[u8], CallFailed>| resp.call(on_response, u, r);
        T::poll_send(send_cq, shared, 256, |sh, reg, c| {
            let Some(owner) = T::send_owner(sh, reg, c) else {
                return;
            };
            let i = owner.idx;
            let e = eps
                .get_mut(i as usize)
                .and_then(Option::as_mut)
                .filter(|e| owner.gen.is_none_or(|g| g == e.gen));
            let Some(e) = e else {
                // Work of a removed endpoint: retired, and nothing else.
                T::sq_complete(sh, None, c);
                return;
            };
            if let Some(code) = c.error() {
                T::sq_complete(sh, Some(&mut e.sq), c);
                if e.state == State::Open {
                    close(e, sh, transport_error(code), on_response);
                }
                return;
            }
            if T::sq_complete(sh, Some(&mut e.sq), c) {
                e.read_inflight = false;
                let mut w = [0u8; 8];
                read_arena.read(8 * i as usize, &mut w);
                if let Err(why) = e.update_remote_consumer(u64::from_le_bytes(w)) {
                    close(e, sh, CloseReason::Violation(why), on_response);
                } else if !e.dirty {
                    // Space may have opened for queued ranges.
                    e.dirty = true;
                    dirty.push(i);
                }
            }
        })
    }

    /// Flushes the endpoints with data: closes their open batches and posts
    /// what their peers have room for.
    #[inline(always)]
    fn flush_dirty<R: Respond<U, F>>(&mut self, resp: &mut R) {
        let mut i = 0;
        while i < self.dirty.len() {
            let idx = self.dirty[i];
            let Some(e) = self.eps[idx as usize].as_mut() else {
                self.dirty.swap_remove(i);
                continue;
            };
            if e.state != State::Open {
                e.dirty = false;
                self.dirty.swap_remove(i);
                continue;
            }
            e.close_batch(true);
            match e.post_ready(&mut self.shared) {
                Ok(true) => {
                    e.dirty = false;
                    self.dirty.swap_remove(i);
                }
                Ok(false) => i += 1,
                Err(code) => {
                    let stored = &mut self.on_response;
                    close(
                        e,
                        &mut self.shared,
                        CloseReason::Refused(code),
                        &mut |u, r| resp.call(stored, u, r),
                    );
                    e.dirty = false;
                    self.dirty.swap_remove(i);
                }
            }
        }
    }

    /// Issues the READs of the peers' consumer positions that endpoints
    /// asked for.
    #[inline(always)]
    fn post_reads<R: Respond<U, F>>(&mut self, resp: &mut R) {
        let Self {
            reads,
            eps,
            shared,
            read_arena,
            on_response,
            ..
        } = self;
        let on_response = &mut |u: U, r: Result<&[u8], CallFailed>| resp.call(on_response, u, r);
        reads.retain(|&idx| {
            let Some(e) = eps[idx as usize].as_mut() else {
                return false;
            };
            if e.state != State::Open {
                e.want_read = false;
                return false;
            }
            let dst = Sge {
                addr: read_arena.addr() + 8 * u64::from(idx),
                len: 8,
                lkey: read_arena.lkey(),
            };
            match e.post_read(shared, dst) {
                Ok(true) => {
                    e.want_read = false;
                    false
                }
                Ok(false) => true,
                Err(code) => {
                    e.want_read = false;
                    close(e, shared, CloseReason::Refused(code), on_response);
                    false
                }
            }
        });
    }

    /// [`poll`](Self::poll)s until there is work, a [`Waker`] fires or
    /// `timeout` passes; returns the completions handled (0: none came).
    ///
    /// With work (completions, or requests `recv()` has not taken yet) it
    /// returns after one poll, so a loop of `wait` and `recv` under load runs
    /// at the rate of a loop of `poll` and `recv`. Without work it follows
    /// the builder's [`IdlePolicy`]: it spins, and under
    /// [`IdlePolicy::SpinThenSleep`] it then arms both CQs, polls once more
    /// (a completion may have landed between the last empty poll and the
    /// arms), and sleeps on the context's completion channel until an event,
    /// a wake or the timeout. Spurious returns (an event left by an earlier
    /// arm) are possible and harmless: the caller's loop waits again.
    ///
    /// # Errors
    /// Arming a CQ or waiting on the channel failed (the device is broken);
    /// the context is still usable with [`poll`](Self::poll).
    pub fn wait(&mut self, timeout: Duration) -> Result<usize, WaitError> {
        self.wait_via(timeout, &mut Stored)
    }

    /// [`wait`](Self::wait), handing the responses to `on_response` as
    /// [`poll_with`](Self::poll_with) does.
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    #[inline]
    pub fn wait_with<G: FnMut(U, Result<&[u8], CallFailed>)>(
        &mut self,
        timeout: Duration,
        on_response: &mut G,
    ) -> Result<usize, WaitError> {
        self.wait_via(timeout, &mut Given(on_response))
    }

    fn wait_via<R: Respond<U, F>>(
        &mut self,
        timeout: Duration,
        resp: &mut R,
    ) -> Result<usize, WaitError> {
        let n = self.poll_via(resp);
        if n > 0 || !self.recvq.is_empty() || self.take_wake() {
            return Ok(n);
        }
        let t0 = Instant::now();
        let spin = self.spin.now().min(timeout);
        let mut polls = 0u32;
        loop {
            let n = self.poll_via(resp);
            if n > 0 {
                return Ok(n);
            }
            if self.take_wake() {
                return Ok(0);
            }
            // The clock is read every few empty polls: a read costs more
            // than an empty poll, and a spin lasts microseconds at least.
            polls = polls.wrapping_add(1);
            if polls % CLOCK_EVERY != 0 {
                std::hint::spin_loop();
                continue;
            }
            let spun = t0.elapsed();
            if spun >= spin {
                break;
            }
            if spun < POLITE_AFTER {
                std::hint::spin_loop();
            } else {
                // Spin politely: a thread this one woke may have been placed
                // on this CPU (the scheduler puts a wakee near its waker),
                // and it may be the peer whose answer this spin waits for.
                // Yielding lets it run now rather than at the end of this
                // time slice, milliseconds away.
                std::thread::yield_now();
            }
        }
        let left = timeout.saturating_sub(t0.elapsed());
        if self.chan.is_none() || left.is_zero() {
            return Ok(0);
        }
        T::arm_recv(&mut self.recv_cq)?;
        T::arm_send(&mut self.send_cq)?;
        let n = self.poll_via(resp);
        if n > 0 {
            return Ok(n);
        }
        self.sleeps += 1;
        let slept = Instant::now();
        let event = match &self.chan {
            Some(ch) => ch.wait(left)?,
            None => None,
        };
        let slept = slept.elapsed();
        take_wake(&self.woken);
        let n = self.poll_via(resp);
        if n > 0 {
            self.spin.woke_to_work(slept);
        } else if event.is_none() && slept >= left {
            self.spin.timed_out();
        }
        Ok(n)
    }

    /// Takes a pending wake, and the channel's copy of it, so that it does
    /// not also end the next sleep.
    #[inline]
    fn take_wake(&self) -> bool {
        let woken = take_wake(&self.woken);
        if woken {
            if let Some(ch) = &self.chan {
                ch.take_wake();
            }
        }
        woken
    }

    /// A handle that ends this context's [`wait`](Self::wait) from another
    /// thread.
    pub fn waker(&self) -> Waker {
        Waker::new(
            self.woken.clone(),
            self.chan.as_ref().map(CompletionChannel::waker),
        )
    }

    /// How many times [`wait`](Self::wait) has slept.
    pub fn sleeps(&self) -> u64 {
        self.sleeps
    }

    /// Closes an endpoint: its QP goes to the error state and its pending calls
    /// fail (through the response callback).
    pub fn close(&mut self, ep: EndpointId) {
        self.close_as(ep, CloseReason::Local);
    }

    /// [`close`](Self::close), recording `why` as the reason (for the
    /// liveness channel, which knows the peer is gone).
    pub(crate) fn close_as(&mut self, ep: EndpointId, why: CloseReason) {
        let Self {
            eps,
            shared,
            on_response,
            ..
        } = self;
        if let Some(e) = live_mut(eps, ep.idx, ep.gen) {
            if e.state == State::Open || e.state == State::Idle {
                close(e, shared, why, on_response);
            }
        }
    }

    /// Removes an endpoint (closing it first if it is open: its pending calls
    /// fail): its QP and rings are freed and its slot serves a later endpoint,
    /// under a new id. Requests of the endpoint not yet taken are dropped, and
    /// so are its completions still in the CQs (the CQs are ours, not
    /// rdma-core's: `mlx5dv_init_obj` marks them DV-owned, so destroying the
    /// QP does not clean them). The peer's endpoint closes when its QP gives
    /// up on this one (transport retries exhausted).
    /// Returns false for an unknown id.
    pub fn remove(&mut self, ep: EndpointId) -> bool {
        self.close(ep);
        if self.slot(ep).is_none() {
            return false;
        }
        if let Some(e) = self.eps[ep.idx as usize].take() {
            T::remove(&mut self.shared, &mut self.send_cq, e.sq);
        }
        // The work lists must not carry the slot over to its next endpoint.
        let idx = ep.idx;
        self.dirty.retain(|&i| i != idx);
        self.reads.retain(|&i| i != idx);
        self.consumed.retain(|&i| i != idx);
        self.free_slots.push((idx, ep.gen.wrapping_add(1)));
        true
    }

    /// Rings of the context's endpoints (two each: send and receive; removed
    /// endpoints' are freed) that lie in huge pages: those allocated under
    /// [`ContextBuilder::huge_pages`] while the pool had pages to give.
    pub fn huge_page_rings(&self) -> usize {
        self.eps
            .iter()
            .flatten()
            .map(|e| usize::from(e.send_mr.is_huge()) + usize::from(e.recv_mr.is_huge()))
            .sum()
    }

    /// Receive completions that named no endpoint of the context, and were
    /// dropped: a removed endpoint's, or on DC one whose immediate no
    /// endpoint carries (a stale peer's, or a guess).
    pub fn stray_completions(&self) -> u64 {
        self.strays
    }

    /// The transport's shared state (on DC: the [`DcPool`](crate::transport::DcPool)
    /// and its counters).
    pub fn transport(&self) -> &T::Shared {
        &self.shared
    }

    /// Endpoints in the context (open, idle or closed; not removed).
    pub fn endpoints(&self) -> usize {
        self.eps.iter().filter(|e| e.is_some()).count()
    }

    /// Why an endpoint is closed, if it is.
    pub fn closed(&self, ep: EndpointId) -> Option<&CloseReason> {
        match &self.slot(ep)?.state {
            State::Closed(r) => Some(r),
            _ => None,
        }
    }

    /// Calls waiting for their response on an endpoint.
    pub fn pending_calls(&self, ep: EndpointId) -> usize {
        self.slot(ep).map_or(0, |e| e.pending.len())
    }

    /// An endpoint's flow-control state.
    pub fn flow_state(&self, ep: EndpointId) -> Option<FlowState> {
        let e = self.slot(ep)?;
        Some(FlowState {
            in_flight: e.in_flight(),
            resp_reservation: e.resp_reservation,
            ring_size: e.send_size,
            peer_credit: e.peer_credit,
            peer_unused_credit: e.peer_unused_credit,
        })
    }

    /// Tags an endpoint with `tag`, which every request it receives from now
    /// on carries ([`RecvHandle::tag`]): what the application learned of the
    /// peer at setup (its role, say), for a branch per request instead of a
    /// look-up. A new endpoint's tag is 0. Returns false for an unknown id.
    pub fn set_tag(&mut self, ep: EndpointId, tag: u32) -> bool {
        match live_mut(&mut self.eps, ep.idx, ep.gen) {
            Some(e) => {
                e.tag = tag;
                true
            }
            None => false,
        }
    }

    /// An endpoint's counters.
    pub fn stats(&self, ep: EndpointId) -> EndpointStats {
        self.slot(ep).map(|e| e.stats).unwrap_or_default()
    }

    /// The response callback (to reach state it owns).
    pub fn handler(&mut self) -> &mut F {
        &mut self.on_response
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

/// The close reason of a transport error code (codes above 255, which neither
/// mlx5 syndromes nor `ibv_wc_status` values reach, read as 255).
fn transport_error(code: u32) -> CloseReason {
    CloseReason::Transport(u8::try_from(code).unwrap_or(u8::MAX))
}

/// Where a poll's responses go: the context's own callback ([`Stored`]) or
/// one given to [`Context::poll_with`] ([`Given`]). Both inline.
trait Respond<U, F> {
    fn call(&mut self, stored: &mut F, u: U, r: Result<&[u8], CallFailed>);
}

/// The context's own callback.
struct Stored;

impl<U, F: FnMut(U, Result<&[u8], CallFailed>)> Respond<U, F> for Stored {
    #[inline(always)]
    fn call(&mut self, stored: &mut F, u: U, r: Result<&[u8], CallFailed>) {
        stored(u, r)
    }
}

/// A callback given for one poll.
struct Given<'g, G>(&'g mut G);

impl<U, F, G: FnMut(U, Result<&[u8], CallFailed>)> Respond<U, F> for Given<'_, G> {
    #[inline(always)]
    fn call(&mut self, _: &mut F, u: U, r: Result<&[u8], CallFailed>) {
        (self.0)(u, r)
    }
}

fn close<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport>(
    e: &mut Ep<U, T>,
    sh: &mut T::Shared,
    why: CloseReason,
    on_response: &mut F,
) {
    if let State::Closed(_) = e.state {
        return;
    }
    e.state = State::Closed(why.clone());
    T::close(sh, &mut e.sq);
    for u in e.pending.drain() {
        on_response(u, Err(CallFailed(why.clone())));
    }
}

/// Processes one received batch of `delta` bytes (from the CQE byte count):
/// validates every byte of it and delivers its messages.
fn on_batch<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport>(
    e: &mut Ep<U, T>,
    idx: u32,
    delta: u32,
    on_response: &mut F,
    recvq: &mut Fifo<Arrived>,
) -> Result<(), &'static str> {
    let pos = e.recv_producer;
    let delta = u64::from(delta);
    let Some(count) = accept_metadata(e, pos, delta)? else {
        return Ok(());
    };
    let end = pos + delta;
    // The whole batch is checked before anything in it is delivered.
    check_messages(e, pos, end, count)?;
    deliver_messages(e, idx, pos, count, on_response, recvq)?;
    e.recv_producer = end;
    Ok(())
}

/// Checks where a batch of `delta` bytes at `pos` lies and applies its flow
/// metadata (the peer's consumer position, its credit grant). Returns the
/// batch's message count, or `None` for a wrap marker, which it has applied
/// (the rest of the ring is skipped).
#[inline(always)]
fn accept_metadata<U, T: Transport>(
    e: &mut Ep<U, T>,
    pos: u64,
    delta: u64,
) -> Result<Option<u32>, &'static str> {
    let off = pos & (e.recv_size - 1);
    if delta < FLOW_METADATA_SIZE || delta % ALIGNMENT != 0 {
        return Err("batch size not a positive multiple of 32");
    }
    if off + delta > e.recv_size {
        return Err("batch crosses the ring's end");
    }
    if pos + delta - e.last_recv_pos > e.recv_size {
        return Err("batch overruns unconsumed data");
    }
    let meta =
        FlowMetadata::new_checked(e.recv_slice(pos, FLOW_METADATA_SIZE)).ok_or("short batch")?;
    if meta.batch_pos() != pos {
        return Err("batch position is not where the next batch goes");
    }
    let (consumer, grant, count) = (
        meta.consumer_pos(),
        meta.credit_grant(),
        meta.message_count(),
    );
    e.update_remote_consumer(consumer)?;
    if grant % ALIGNMENT != 0 || e.peer_credit + grant > e.recv_size / 2 {
        return Err("credit grant beyond what the peer can reserve");
    }
    e.peer_credit += grant;
    if count == WRAP_MESSAGE_COUNT {
        if delta != FLOW_METADATA_SIZE {
            return Err("wrap marker with a body");
        }
        // The rest of the ring is skipped.
        e.recv_producer = pos + (e.recv_size - off);
        return Ok(None);
    }
    if count == 0 {
        return Err("empty batch");
    }
    Ok(Some(count))
}

/// Pass 1 over a batch (`pos..end`, `count` messages): every header lies
/// within it, every response answers a pending call, every request carries
/// the credit for its response, and the messages fill the batch exactly.
#[inline(always)]
fn check_messages<U, T: Transport>(
    e: &Ep<U, T>,
    pos: u64,
    end: u64,
    count: u32,
) -> Result<(), &'static str> {
    let mut cur = pos + FLOW_METADATA_SIZE;
    let mut credit_used = 0u64;
    for _ in 0..count {
        cur += check_message(e, cur, end, &mut credit_used)?;
    }
    if cur != end {
        return Err("batch longer than its messages");
    }
    Ok(())
}

/// Checks the message at `cur` of a batch ending at `end`, adding a
/// request's allowance to `credit_used`; returns its padded size.
#[inline(always)]
fn check_message<U, T: Transport>(
    e: &Ep<U, T>,
    cur: u64,
    end: u64,
    credit_used: &mut u64,
) -> Result<u64, &'static str> {
    if cur + HEADER_SIZE as u64 > end {
        return Err("message header beyond the batch");
    }
    let h =
        MessageHeader::new_checked(e.recv_slice(cur, HEADER_SIZE as u64)).ok_or("short header")?;
    let (call_id, piggyback, len) = (h.call_id(), h.piggyback(), h.len());
    let size = padded_message_size(len as usize);
    if len as u64 > e.recv_size || cur + size > end {
        return Err("message length beyond the batch");
    }
    if call_id & RESPONSE_FLAG != 0 {
        if !e.pending.contains(call_id & !RESPONSE_FLAG) {
            return Err("response to no pending call");
        }
    } else {
        let allowance = u64::from(piggyback) * ALIGNMENT;
        *credit_used += allowance;
        if allowance < 2 * ALIGNMENT || *credit_used > e.peer_unused_credit {
            return Err("request without the credit for its response");
        }
    }
    Ok(size)
}

/// Pass 2 over a checked batch at `pos` of `count` messages: responses go
/// to `on_response`, requests to `recvq`. (A response id repeated within
/// the batch is caught here.)
#[inline(always)]
fn deliver_messages<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport>(
    e: &mut Ep<U, T>,
    idx: u32,
    pos: u64,
    count: u32,
    on_response: &mut F,
    recvq: &mut Fifo<Arrived>,
) -> Result<(), &'static str> {
    let mut cur = pos + FLOW_METADATA_SIZE;
    for _ in 0..count {
        cur += deliver_message(e, idx, cur, on_response, recvq)?;
    }
    Ok(())
}

/// Delivers the checked message at `cur`; returns its padded size.
#[inline(always)]
fn deliver_message<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport>(
    e: &mut Ep<U, T>,
    idx: u32,
    cur: u64,
    on_response: &mut F,
    recvq: &mut Fifo<Arrived>,
) -> Result<u64, &'static str> {
    let h =
        MessageHeader::new_checked(e.recv_slice(cur, HEADER_SIZE as u64)).ok_or("short header")?;
    let (call_id, piggyback, len) = (h.call_id(), h.piggyback(), h.len());
    let data = cur + HEADER_SIZE as u64;
    if call_id & RESPONSE_FLAG != 0 {
        let Some(u) = e.pending.remove(call_id & !RESPONSE_FLAG) else {
            return Err("two responses to one call");
        };
        e.stats.responses += 1;
        on_response(u, Ok(e.recv_slice(data, u64::from(len))));
    } else {
        let allowance = u64::from(piggyback) * ALIGNMENT;
        e.peer_unused_credit -= allowance;
        e.stats.requests += 1;
        e.queued.push_back(cur);
        recvq.push_back(Arrived {
            ep: idx,
            gen: e.gen,
            call_id,
            allowance,
            pos: data,
            len,
        });
    }
    Ok(padded_message_size(len as usize))
}
