//! Endpoints: creating and connecting them, closing and removing them.

use std::collections::VecDeque;

use mlx5::device::access;

use super::{live_mut, Context, EndpointId};
use crate::encoding::*;
use crate::endpoint::{EndpointStats, Ep, Remote, State};
use crate::error::{CallFailed, CloseReason, SetupError};
use crate::fifo::Fifo;
use crate::info::{EndpointInfo, ENDPOINT_INFO_VERSION};
use crate::slab::Slab;
use crate::transport::{Objects, Transport};

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
            held_at: 0,
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
}

pub(super) fn close<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport>(
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
