//! Context settings, and building a context from them: its CQs, SRQ,
//! transport state and arenas.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use mlx5::device::{access, Context as Device, CqAttr};

use super::Context;
use crate::encoding::*;
use crate::error::{CallFailed, SetupError};
use crate::fifo::Fifo;
use crate::idle::{IdlePolicy, SpinBudget};
use crate::transport::{Mlx5, Objects, Transport};

/// Context settings.
#[derive(Debug, Clone, Copy)]
pub struct ContextBuilder {
    pub(super) ring_size: u64,
    pub(super) max_resp_reservation: Option<u64>,
    pub(super) srq_size: u32,
    pub(super) cq_size: u32,
    pub(super) sq_size: u32,
    pub(super) max_endpoints: u32,
    pub(super) compression: mlx5::cq::Compression,
    pub(super) idle: IdlePolicy,
    pub(super) huge_pages: bool,
    pub(super) dci_streams: Option<mlx5::device::DciStreams>,
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
    /// (`vm.nr_hugepages`; see
    /// [`Pd::alloc_mr_huge`](mlx5::device::Pd::alloc_mr_huge)).
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
            hold_replies: false,
            cfg: self,
            max_resp,
        })
    }
}
