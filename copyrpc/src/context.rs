//! The context: one SRQ, one receive CQ and one send CQ shared by all
//! endpoints, and `poll()`, which runs the protocol.
//!
//! This module holds the context's types and its accessors; the rest is
//! in files by what it does: `builder` (settings, building a context),
//! `endpoints` (create, connect, close, remove), `calls` (call, recv,
//! reply), `poll` (the protocol's steps), `batch` (checking and delivering
//! a received batch), `wait` (spinning and sleeping) and `respond` (where
//! a poll's responses go).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use mlx5::device::{CompletionChannel, Context as Device, Cq, Pd, SrqHandle};

use crate::encoding::*;
use crate::endpoint::{EndpointStats, Ep, State};
use crate::error::{CallFailed, CloseReason};
use crate::fifo::Fifo;
use crate::idle::SpinBudget;
use crate::transport::{Mlx5, Transport};

mod batch;
mod builder;
mod calls;
mod endpoints;
mod poll;
mod respond;
mod wait;

pub use builder::ContextBuilder;

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
    /// Replies hold their endpoint back from `flush_unheld` (see
    /// [`Context::set_hold_replies`]).
    hold_replies: bool,
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
