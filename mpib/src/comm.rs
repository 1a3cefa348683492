//! The communicator: `isend`, `irecv`, `test`.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::Instant;

use mlx5::device::Context;
use mlx5::sq::Sge;
use mlx5::wr::{PostError, SendOp, SendWr, Wc, WcOpcode, WcStatus};

use crate::buffer::{Buffer, Span};
use crate::cts::{CtsBuffer, CtsEntry, ENTRY_LEN, MAX_BUFFERS};
use crate::error::{CloseReason, CtsError, Error, ProtocolError, SetupError};
use crate::imm::{self, Imm, SIZE_Q_SENTINEL};
use crate::info::{CommInfo, COMM_INFO_VERSION};
use crate::liveness::Liveness;
use crate::policy::{self, PolicyKind, RailMeter, SplitPolicy, Telemetry};
use crate::rail::{Rail, Sizing};
use crate::record::{self, Record, RECORD_LEN};
use crate::regcache::{RegCache, RegStats, Region};
use crate::request::{Kind, RecvSlot, Request, SendPool, Sizes, SlotState};

/// Most bytes one buffer of a transfer may have (the records carry 32-bit
/// sizes; one work request moves at most 2 GiB).
pub const MAX_SIZE: u64 = 1 << 31;
/// Most rails.
pub const MAX_RAILS: usize = 2;

/// `wr_id` bit of CTS writes (the rest: the slot); data signals carry the
/// send request index << 8 | rail.
const CTS_WR: u64 = 1 << 63;
/// Completions polled per call of `poll_cq`.
const POLL_BATCH: usize = 64;
/// The liveness channel is read every this many progress calls.
const LIVENESS_EVERY: u32 = 64;

/// How a communicator is built. Both sides must agree on `depth`,
/// `granularity`, the number of rails and `qps_per_rail`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Data QPs per rail (as `NCCL_IB_QPS_PER_CONNECTION`); requests take
    /// them round-robin, one QP per rail per request. Default 2.
    pub qps_per_rail: usize,
    /// FIFO slots: receives outstanding at once (2..=256). Default 32.
    pub depth: usize,
    /// Bytes per `size_q` unit in the immediate: a power of two. Default 128
    /// (sizes up to just under 512 MiB travel in the immediate).
    pub granularity: u32,
    /// The split policy (two rails only). Default `static` 50/50.
    pub policy: PolicyKind,
    /// The SRQ of each rail is refilled when fewer receives than this are
    /// posted (at least `depth`, so an honest peer never meets an empty SRQ).
    /// Default: `depth`.
    pub srq_low: Option<usize>,
    /// ... up to this many. Default: `2 * depth`.
    pub srq_high: Option<usize>,
    /// Sends outstanding at once (the send request pool). Default:
    /// `2 * depth`.
    pub send_requests: Option<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            qps_per_rail: 2,
            depth: 32,
            granularity: imm::DEFAULT_GRANULARITY,
            policy: PolicyKind::default(),
            srq_low: None,
            srq_high: None,
            send_requests: None,
        }
    }
}

/// A [`Config`] with every default filled in and checked.
#[derive(Debug, Clone, Copy)]
struct Resolved {
    depth: usize,
    granularity: u32,
    srq_low: usize,
    srq_high: usize,
    sizing: Sizing,
}

impl Config {
    fn resolve(&self, rails: usize) -> Result<Resolved, SetupError> {
        let bad = |s: String| Err(SetupError::Config(s));
        if rails == 0 || rails > MAX_RAILS {
            return bad(format!("{rails} rails (1 or 2)"));
        }
        if !(1..=64).contains(&self.qps_per_rail) {
            return bad(format!("{} QPs per rail (1..=64)", self.qps_per_rail));
        }
        if !(2..=256).contains(&self.depth) {
            return bad(format!("depth {} (2..=256)", self.depth));
        }
        if !self.granularity.is_power_of_two() || self.granularity > 1 << 20 {
            return bad(format!(
                "granularity {} (a power of two up to 1 MiB)",
                self.granularity
            ));
        }
        let srq_low = self.srq_low.unwrap_or(self.depth);
        let srq_high = self.srq_high.unwrap_or(2 * self.depth);
        if srq_low < self.depth || srq_high <= srq_low || srq_high > 1 << 15 {
            return bad(format!(
                "SRQ water marks {srq_low}..{srq_high} (depth <= low < high <= 32768)"
            ));
        }
        let send_requests = self.send_requests.unwrap_or(2 * self.depth);
        if !(1..=4096).contains(&send_requests) {
            return bad(format!("{send_requests} send requests (1..=4096)"));
        }
        Ok(Resolved {
            depth: self.depth,
            granularity: self.granularity,
            srq_low,
            srq_high,
            sizing: Sizing {
                depth: self.depth,
                qps: self.qps_per_rail,
                srq_high,
                send_requests,
            },
        })
    }
}

/// Counters of one communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Sends posted.
    pub sends: u64,
    /// Receives posted (CTS entries written).
    pub recvs: u64,
    /// Sends that carried their size in the immediate, data and signal in
    /// one WR per active rail.
    pub fast_path: u64,
    /// Sends that wrote a completion record.
    pub record_path: u64,
    /// Payload bytes sent per rail.
    pub rail_bytes: [u64; 2],
    /// WRITE_WITH_IMMs sent per rail.
    pub signals: [u64; 2],
    /// Plain data WRITEs sent per rail.
    pub data_writes: [u64; 2],
    /// CTS entries written per rail, and how many of them were signaled.
    pub cts: [u64; 2],
    /// See `cts`.
    pub cts_signaled: [u64; 2],
    /// Receives posted on each rail's SRQ so far.
    pub srq_posted: [u64; 2],
    /// Receives consumed (immediates polled) on each rail.
    pub srq_consumed: [u64; 2],
    /// Fewest receives left on each rail's SRQ after an immediate was polled
    /// (never 0 while the water marks keep ahead of the peer).
    pub srq_min_outstanding: [u32; 2],
}

static NEXT_COMM_ID: AtomicU32 = AtomicU32::new(1);

/// A communicator whose resources exist but which is not connected yet: send
/// [`info`](Self::info) to the peer and [`connect`](Self::connect) with the
/// peer's.
#[derive(Debug)]
pub struct PendingComm {
    rails: Vec<Rail>,
    cfg: Config,
    res: Resolved,
    info: CommInfo,
}

impl PendingComm {
    /// Creates the resources on `devices` (rail 0 first; one or two) and posts
    /// the first receives.
    pub fn new(devices: &[Context], cfg: &Config) -> Result<PendingComm, SetupError> {
        let res = cfg.resolve(devices.len())?;
        let mut rails = Vec::with_capacity(devices.len());
        for d in devices {
            let mut rail = Rail::new(d, &res.sizing)?;
            // Receives may be posted before the QPs connect.
            for _ in 0..res.srq_high {
                rail.dom
                    .post_srq_recv(rail.srq, 0, &[])
                    .map_err(|e| SetupError::Config(format!("posting the first receives: {e}")))?;
                rail.srq_outstanding += 1;
            }
            rails.push(rail);
        }
        let info = CommInfo {
            version: COMM_INFO_VERSION,
            depth: res.depth as u32,
            granularity: res.granularity,
            rails: rails.iter().map(Rail::info).collect(),
        };
        Ok(PendingComm {
            rails,
            cfg: *cfg,
            res,
            info,
        })
    }

    /// What the peer needs to connect.
    pub fn info(&self) -> &CommInfo {
        &self.info
    }

    /// Connects to the peer described by `peer`.
    pub fn connect(self, peer: &CommInfo) -> Result<Comm, SetupError> {
        self.connect_with(peer, Liveness::None)
    }

    pub(crate) fn connect_with(
        mut self,
        peer: &CommInfo,
        liveness: Liveness,
    ) -> Result<Comm, SetupError> {
        self.info.check_peer(peer).map_err(SetupError::Peer)?;
        for (r, p) in self.rails.iter_mut().zip(&peer.rails) {
            r.connect(p)?;
        }
        let n = self.rails.len();
        let srq_posted = self.res.srq_high as u64;
        Ok(Comm {
            id: NEXT_COMM_ID.fetch_add(1, Ordering::Relaxed),
            rail_mask: if n == 2 { 0b11 } else { 0b01 },
            policy: self.cfg.policy.build(),
            meters: [RailMeter::default(); 2],
            send_pos: 0,
            sends: SendPool::new(self.res.sizing.send_requests),
            recv_pos: 0,
            slots: vec![RecvSlot::IDLE; self.res.depth],
            wcs: Vec::with_capacity(POLL_BATCH),
            regs: RegCache::default(),
            liveness,
            closed: None,
            calls: 0,
            stats: Stats {
                sends: 0,
                recvs: 0,
                fast_path: 0,
                record_path: 0,
                rail_bytes: [0; 2],
                signals: [0; 2],
                data_writes: [0; 2],
                cts: [0; 2],
                cts_signaled: [0; 2],
                srq_posted: [srq_posted, if n == 2 { srq_posted } else { 0 }],
                srq_consumed: [0; 2],
                srq_min_outstanding: [self.res.srq_high as u32; 2],
            },
            cfg: self.cfg,
            res: self.res,
            rails: self.rails,
        })
    }
}

/// Two connected communicators in one process: `a` on `a_devices`, `b` on
/// `b_devices` (the same number of rails), with a socket pair between them as
/// the liveness channel.
pub fn pair(
    a_devices: &[Context],
    b_devices: &[Context],
    cfg: &Config,
) -> Result<(Comm, Comm), SetupError> {
    let a = PendingComm::new(a_devices, cfg)?;
    let b = PendingComm::new(b_devices, cfg)?;
    let (ia, ib) = (a.info().clone(), b.info().clone());
    let (sa, sb) = std::os::unix::net::UnixStream::pair()?;
    let a = a.connect_with(&ib, Liveness::unix(sa)?)?;
    let b = b.connect_with(&ia, Liveness::unix(sb)?)?;
    Ok((a, b))
}

/// A dual-rail (or single-rail) communicator with one peer. See the crate
/// documentation for the protocol and the call order.
pub struct Comm {
    id: u32,
    rails: Vec<Rail>,
    cfg: Config,
    res: Resolved,
    rail_mask: u8,
    policy: Box<dyn SplitPolicy>,
    meters: [RailMeter; 2],
    send_pos: u64,
    sends: SendPool,
    recv_pos: u64,
    slots: Vec<RecvSlot>,
    wcs: Vec<Wc>,
    regs: RegCache,
    liveness: Liveness,
    closed: Option<CloseReason>,
    calls: u32,
    stats: Stats,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rails", &self.rails)
            .field("policy", &self.policy)
            .field("closed", &self.closed)
            .finish()
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.close();
    }
}

/// Checks the buffers of a send or receive.
fn check_spans(bufs: &[Span]) -> Result<(), Error> {
    if bufs.is_empty() || bufs.len() > MAX_BUFFERS {
        return Err(Error::Invalid("1 to 8 buffers"));
    }
    if bufs.iter().any(|b| b.len > MAX_SIZE) {
        return Err(Error::Invalid("a buffer larger than MAX_SIZE"));
    }
    Ok(())
}

impl Comm {
    /// Number of rails.
    pub fn nrails(&self) -> usize {
        self.rails.len()
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The device of rail `r`.
    pub fn device(&self, r: usize) -> Option<&Context> {
        self.rails.get(r).map(|x| x.dom.context())
    }

    /// Replaces the split policy.
    pub fn set_policy(&mut self, p: Box<dyn SplitPolicy>) {
        self.policy = p;
    }

    /// The per-rail telemetry the split policy sees.
    pub fn telemetry(&self) -> Telemetry {
        Telemetry {
            rails: [self.meters[0].t, self.meters[1].t],
        }
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// What the registration cache did.
    pub fn reg_stats(&self) -> RegStats {
        self.regs.stats()
    }

    /// Why the communicator closed, if it did.
    pub fn closed(&self) -> Option<&CloseReason> {
        self.closed.as_ref()
    }

    /// Allocates `len` zeroed bytes registered on every rail.
    pub fn alloc_buffer(&self, len: usize) -> Result<Buffer, Error> {
        let pds: Vec<_> = self.rails.iter().map(|r| r.dom.pd()).collect();
        Buffer::alloc(&pds, len)
    }

    /// Registers `len` bytes of this process at `ptr` on every rail (or takes
    /// a reference on a live registration that covers them).
    ///
    /// # Safety
    /// The pages around the range must stay valid, and may be written by the
    /// NIC whenever a receive names them, until the region is given back to
    /// [`deregister`](Self::deregister) or the communicator is dropped.
    pub unsafe fn register(&mut self, ptr: *const u8, len: usize) -> Result<Region, Error> {
        let pds: Vec<_> = self.rails.iter().map(|r| r.dom.pd()).collect();
        // SAFETY: the caller's guarantee, forwarded.
        unsafe { self.regs.register(&pds, ptr as u64, len as u64) }
    }

    /// Gives a region back (the last reference drops the registration).
    pub fn deregister(&mut self, r: Region) -> Result<(), Error> {
        self.regs.deregister(r)
    }

    /// Closes the communicator (its QPs stop; the peer sees the liveness
    /// channel close). Later calls fail with [`CloseReason::Local`].
    pub fn close(&mut self) {
        self.shut(CloseReason::Local);
    }

    fn shut(&mut self, why: CloseReason) {
        if self.closed.is_some() {
            return;
        }
        self.closed = Some(why);
        for r in &self.rails {
            r.shut();
        }
        self.liveness.shutdown();
    }

    /// Closes with `why` and returns the error that says so.
    fn fail<T>(&mut self, why: impl Into<CloseReason>) -> Result<T, Error> {
        self.shut(why.into());
        Err(self.closed_err())
    }

    fn closed_err(&self) -> Error {
        Error::Closed(self.closed.clone().unwrap_or(CloseReason::Local))
    }

    fn usable(&self) -> Result<(), Error> {
        match self.closed {
            None => Ok(()),
            Some(_) => Err(self.closed_err()),
        }
    }

    /// Sends `bufs` (1 to 8) into the peer's next receive, whose tag must be
    /// `tag` and which must have as many buffers, each at least as large.
    /// `Ok(None)`: the peer's receive has not arrived yet, or every send
    /// request is in use; call again later (after `test`).
    ///
    /// The split between the rails is decided here, right before posting;
    /// the buffers must not change until `test` reports the request done.
    pub fn isend(&mut self, bufs: &[Span], tag: u32) -> Result<Option<Request>, Error> {
        self.usable()?;
        check_spans(bufs)?;
        // Completions first: the split sees the freshest telemetry.
        self.poll_sends();
        self.usable()?;
        if self.sends.in_use() == self.res.sizing.send_requests {
            return Ok(None);
        }
        let depth = self.res.depth as u64;
        let pos = self.send_pos;
        let slot = (pos % depth) as u8;
        let seq = pos + 1;
        let old = if pos >= depth { seq - depth } else { 0 };
        let cts_rail = usize::from(slot) % self.rails.len();
        let off = Rail::cts_off(slot);
        let mut raw = [0u8; ENTRY_LEN];
        let inbox = &self.rails[cts_rail].inbox;
        inbox.read(off, &mut raw[..8]);
        let head = u64::from_le_bytes([
            raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7],
        ]);
        if head == old {
            return Ok(None);
        }
        // The head changed: read the whole entry once, then judge the copy.
        fence(Ordering::Acquire);
        inbox.read(off, &mut raw);
        let Some(e) = CtsEntry::new_checked(&raw[..]) else {
            return Err(Error::Invalid("entry"));
        };
        if e.seq() == seq && e.seq_tail() == old {
            // Still being written.
            return Ok(None);
        }
        if let Err(c) = e.validate(seq, slot, tag) {
            return self.fail(ProtocolError::Cts(c));
        }
        let nreqs = usize::from(e.nreqs());
        if nreqs != bufs.len() {
            return self.fail(ProtocolError::Cts(CtsError::Count {
                posted: e.nreqs(),
                sent: bufs.len(),
            }));
        }
        let mut dst = [CtsBuffer::default(); MAX_BUFFERS];
        for (i, b) in bufs.iter().enumerate() {
            dst[i] = e.buffer(i);
            if b.len > u64::from(dst[i].size) {
                return self.fail(ProtocolError::Cts(CtsError::TooSmall {
                    index: i,
                    sent: b.len,
                    posted: dst[i].size,
                }));
            }
        }
        let Some((idx, _)) = self.sends.take() else {
            return Ok(None);
        };
        match self.post_send(idx, slot, bufs, &dst[..nreqs]) {
            Ok(r) => {
                self.send_pos += 1;
                Ok(Some(r))
            }
            Err(e) => {
                self.sends.release(idx);
                Err(e)
            }
        }
    }

    /// Splits and posts a send whose CTS entry was accepted.
    fn post_send(
        &mut self,
        idx: u16,
        slot: u8,
        bufs: &[Span],
        dst: &[CtsBuffer],
    ) -> Result<Request, Error> {
        let n = bufs.len();
        let nrails = self.rails.len();
        let now = Instant::now();
        // Per buffer: bytes on rail 0, bytes on rail 1.
        let mut share = [[0u64; 2]; MAX_BUFFERS];
        let mut mask = 0u8;
        let mut t = self.telemetry();
        for (i, b) in bufs.iter().enumerate() {
            let r0 = if nrails == 1 {
                b.len
            } else {
                policy::aligned(b.len, self.policy.rail0_bytes(b.len, &t))
            };
            share[i] = [r0, b.len - r0];
            for (r, (&bytes, tel)) in share[i].iter().zip(&mut t.rails).enumerate() {
                if bytes > 0 {
                    mask |= 1 << r;
                }
                tel.outstanding_bytes += bytes;
            }
        }
        if mask == 0 {
            // A 0-byte transfer: rail 0 carries the signal.
            mask = 1;
        }
        let leader = if mask & 1 != 0 { 0 } else { 1 };
        let g = self.res.granularity;
        let fast = if n == 1 {
            imm::exact_in_imm(bufs[0].len, g, u64::from(dst[0].size))
        } else {
            None
        };
        let imm = Imm {
            slot,
            mask,
            size_q: fast.unwrap_or(SIZE_Q_SENTINEL),
        }
        .encode();
        let mut sizes = [0u32; MAX_BUFFERS];
        for (s, b) in sizes.iter_mut().zip(bufs) {
            *s = b.len as u32;
        }
        if fast.is_none() {
            let mut rec = [0u8; RECORD_LEN];
            if let Some(mut v) = Record::new_checked(&mut rec[..]) {
                v.set(&sizes[..n]);
            }
            let lr = &self.rails[leader];
            lr.staging.write(lr.record_off(slot), &rec);
        }
        let mut rail_bytes = [0u64; 2];
        for r in 0..nrails {
            if mask & (1 << r) == 0 {
                continue;
            }
            rail_bytes[r] = share[..n].iter().map(|s| s[r]).sum();
            let posted = if fast.is_some() {
                self.post_fast(r, idx, imm, &bufs[0], &dst[0], share[0])
            } else {
                self.post_with_record(r, idx, imm, slot, r == leader, bufs, dst, &share[..n])
            };
            if let Err(why) = posted {
                return self.fail(CloseReason::Post {
                    rail: r,
                    why: why.to_string(),
                });
            }
            self.meters[r].posted(rail_bytes[r], now);
            self.stats.rail_bytes[r] += rail_bytes[r];
            self.stats.signals[r] += 1;
        }
        if fast.is_some() {
            self.stats.fast_path += 1;
        } else {
            self.stats.record_path += 1;
        }
        self.stats.sends += 1;
        let Some(req) = self.sends.get_mut(idx) else {
            return Err(Error::Invalid("send request"));
        };
        req.nreqs = n as u8;
        req.sizes = sizes;
        req.pending = mask;
        req.rail_bytes = rail_bytes;
        req.posted_at = Some(now);
        Ok(Request {
            comm: self.id,
            kind: Kind::Send,
            index: idx,
            gen: req.gen,
        })
    }

    /// The fast path: one WRITE_WITH_IMM on rail `r` carries the rail's part
    /// of the data, the slot, the mask and the size.
    fn post_fast(
        &mut self,
        r: usize,
        idx: u16,
        imm: u32,
        src: &Span,
        dst: &CtsBuffer,
        share: [u64; 2],
    ) -> Result<(), PostError> {
        let off = if r == 0 { 0 } else { share[0] };
        let len = share[r];
        let sge = [Sge {
            addr: src.addr + off,
            len: len as u32,
            lkey: src.lkeys[r],
        }];
        let rail = &mut self.rails[r];
        let qp = rail.next_data_qp();
        rail.dom.post_send(
            qp,
            &SendWr {
                wr_id: (u64::from(idx) << 8) | r as u64,
                op: SendOp::WriteImm(imm),
                sges: if len > 0 { &sge } else { &[] },
                remote: (dst.addr + off, dst.rkeys[r]),
                signaled: true,
                fence: false,
            },
        )
    }

    /// The record path on rail `r`: one WRITE per buffer part on one data QP,
    /// then the signal; the leader's signal also writes the record.
    #[allow(clippy::too_many_arguments)]
    fn post_with_record(
        &mut self,
        r: usize,
        idx: u16,
        imm: u32,
        slot: u8,
        leader: bool,
        bufs: &[Span],
        dst: &[CtsBuffer],
        share: &[[u64; 2]],
    ) -> Result<(), PostError> {
        let rail = &mut self.rails[r];
        let qp = rail.next_data_qp();
        for ((b, d), s) in bufs.iter().zip(dst).zip(share) {
            let len = s[r];
            if len == 0 {
                continue;
            }
            let off = if r == 0 { 0 } else { s[0] };
            let sge = [Sge {
                addr: b.addr + off,
                len: len as u32,
                lkey: b.lkeys[r],
            }];
            rail.dom.post_send(
                qp,
                &SendWr {
                    wr_id: (u64::from(idx) << 8) | r as u64,
                    op: SendOp::Write,
                    sges: &sge,
                    remote: (d.addr + off, d.rkeys[r]),
                    signaled: false,
                    fence: false,
                },
            )?;
            self.stats.data_writes[r] += 1;
        }
        let rec = [Sge {
            addr: rail.staging.addr() + rail.record_off(slot) as u64,
            len: record::wire_len(bufs.len()) as u32,
            lkey: rail.staging.lkey(),
        }];
        rail.dom.post_send(
            qp,
            &SendWr {
                wr_id: (u64::from(idx) << 8) | r as u64,
                op: SendOp::WriteImm(imm),
                sges: if leader { &rec } else { &[] },
                remote: (
                    rail.peer.records_addr + (usize::from(slot) * RECORD_LEN) as u64,
                    rail.peer.records_rkey,
                ),
                signaled: true,
                fence: false,
            },
        )
    }

    /// Posts a receive of `bufs` (1 to 8) with `tag`: writes its CTS entry
    /// into the peer's FIFO. `Ok(None)`: the next FIFO slot still holds a
    /// receive that was not tested done; call again later.
    pub fn irecv(&mut self, bufs: &[Span], tag: u32) -> Result<Option<Request>, Error> {
        self.usable()?;
        check_spans(bufs)?;
        // Retire finished CTS writes, keep the SRQs above the low mark.
        self.poll_sends();
        self.refill();
        self.usable()?;
        let depth = self.res.depth as u64;
        let pos = self.recv_pos;
        let slot = (pos % depth) as u8;
        let s = usize::from(slot);
        if self.slots[s].state != SlotState::Idle {
            return Ok(None);
        }
        let nrails = self.rails.len();
        let r = s % nrails;
        let mut desc = [CtsBuffer::default(); MAX_BUFFERS];
        let mut posted = [0u32; MAX_BUFFERS];
        for (i, b) in bufs.iter().enumerate() {
            desc[i] = CtsBuffer {
                addr: b.addr,
                size: b.len as u32,
                rkeys: b.rkeys,
            };
            posted[i] = b.len as u32;
        }
        let mut raw = [0u8; ENTRY_LEN];
        if let Some(mut e) = CtsEntry::new_checked(&mut raw[..]) {
            e.set(pos + 1, slot, tag, &desc[..bufs.len()]);
        }
        let rail = &mut self.rails[r];
        let off = Rail::cts_off(slot);
        rail.staging.write(off, &raw);
        // Device r's CTS QP signals at slots of its own parity (rail 0: even,
        // rail 1: odd). With two rails the CTS of slot s travels on rail
        // s % 2, so each is signaled; with one rail, every other CTS is, which
        // keeps at most one unsignaled WQE between signaled ones: the CTS send
        // queue (2 * depth + 16 WQEs) holds at most `depth` CTS in flight plus
        // the ones whose completion is polled at the next call.
        let signaled = s % 2 == r;
        let sge = [Sge {
            addr: rail.staging.addr() + off as u64,
            len: ENTRY_LEN as u32,
            lkey: rail.staging.lkey(),
        }];
        let wr = SendWr {
            wr_id: CTS_WR | u64::from(slot),
            op: SendOp::Write,
            sges: &sge,
            remote: (rail.peer.fifo_addr + off as u64, rail.peer.fifo_rkey),
            signaled,
            fence: false,
        };
        if let Err(why) = rail.dom.post_send(rail.cts_qp, &wr) {
            return self.fail(CloseReason::Post {
                rail: r,
                why: why.to_string(),
            });
        }
        let st = &mut self.slots[s];
        st.gen = st.gen.wrapping_add(1);
        st.state = SlotState::Active;
        st.nreqs = bufs.len() as u8;
        st.posted = posted;
        st.expected = 0;
        st.seen = 0;
        st.first_imm = 0;
        st.sizes = [0; MAX_BUFFERS];
        let gen = st.gen;
        self.recv_pos += 1;
        self.stats.recvs += 1;
        self.stats.cts[r] += 1;
        self.stats.cts_signaled[r] += u64::from(signaled);
        Ok(Some(Request {
            comm: self.id,
            kind: Kind::Recv,
            index: u16::from(slot),
            gen,
        }))
    }

    /// Makes progress and reports whether `req` is done: `Ok(Some(sizes))`
    /// once (the request is then released), `Ok(None)` while it is pending.
    /// A closed communicator fails every request not done before it closed.
    pub fn test(&mut self, req: &Request) -> Result<Option<Sizes>, Error> {
        if let Some(s) = self.finish(req)? {
            return Ok(Some(s));
        }
        self.usable()?;
        self.progress();
        if let Some(s) = self.finish(req)? {
            return Ok(Some(s));
        }
        self.usable()?;
        Ok(None)
    }

    /// Releases `req` if it is done.
    fn finish(&mut self, req: &Request) -> Result<Option<Sizes>, Error> {
        if req.comm != self.id {
            return Err(Error::UnknownRequest);
        }
        match req.kind {
            Kind::Send => {
                let Some(r) = self.sends.get_mut(req.index) else {
                    return Err(Error::UnknownRequest);
                };
                if !r.active || r.gen != req.gen {
                    return Err(Error::UnknownRequest);
                }
                if r.pending != 0 {
                    return Ok(None);
                }
                let s = Sizes::new(r.sizes, usize::from(r.nreqs));
                self.sends.release(req.index);
                Ok(Some(s))
            }
            Kind::Recv => {
                let Some(st) = self.slots.get_mut(usize::from(req.index)) else {
                    return Err(Error::UnknownRequest);
                };
                if st.gen != req.gen || st.state == SlotState::Idle {
                    return Err(Error::UnknownRequest);
                }
                if st.state != SlotState::Done {
                    return Ok(None);
                }
                st.state = SlotState::Idle;
                Ok(Some(Sizes::new(st.sizes, usize::from(st.nreqs))))
            }
        }
    }

    /// Polls every rail's completions, refills the SRQs and reads the
    /// liveness channel now and then. `test` does this; call it directly to
    /// make progress without a request at hand.
    pub fn progress(&mut self) {
        if self.closed.is_some() {
            return;
        }
        self.calls = self.calls.wrapping_add(1);
        self.poll_recvs();
        self.poll_sends();
        self.refill();
        if self.calls % LIVENESS_EVERY == 0 && self.closed.is_none() && self.liveness.peer_gone() {
            self.shut(CloseReason::PeerGone);
        }
    }

    fn poll_sends(&mut self) {
        let mut wcs = std::mem::take(&mut self.wcs);
        for r in 0..self.rails.len() {
            loop {
                wcs.clear();
                let rail = &mut self.rails[r];
                let n = match rail.dom.poll_cq(rail.scq, POLL_BATCH, &mut wcs) {
                    Ok(n) => n,
                    Err(e) => {
                        self.shut(CloseReason::Post {
                            rail: r,
                            why: e.to_string(),
                        });
                        break;
                    }
                };
                let now = Instant::now();
                for wc in &wcs {
                    self.on_send_completion(r, wc, now);
                }
                if n < POLL_BATCH || self.closed.is_some() {
                    break;
                }
            }
        }
        wcs.clear();
        self.wcs = wcs;
    }

    fn on_send_completion(&mut self, r: usize, wc: &Wc, now: Instant) {
        if wc.status != WcStatus::Success {
            self.shut(CloseReason::Transport {
                rail: r,
                status: wc.status,
                vendor_err: wc.vendor_err,
            });
            return;
        }
        if wc.wr_id & CTS_WR != 0 {
            return;
        }
        let idx = (wc.wr_id >> 8) as u16;
        let rail = (wc.wr_id & 0xff) as usize;
        let Some(req) = self.sends.get_mut(idx) else {
            return;
        };
        let bit = 1u8 << (rail & 1);
        if req.active && req.pending & bit != 0 {
            req.pending &= !bit;
            let bytes = req.rail_bytes[rail & 1];
            self.meters[rail & 1].completed(bytes, now, true);
        }
    }

    fn poll_recvs(&mut self) {
        let mut wcs = std::mem::take(&mut self.wcs);
        for r in 0..self.rails.len() {
            loop {
                wcs.clear();
                let rail = &mut self.rails[r];
                let n = match rail.dom.poll_cq(rail.rcq, POLL_BATCH, &mut wcs) {
                    Ok(n) => n,
                    Err(e) => {
                        self.shut(CloseReason::Post {
                            rail: r,
                            why: e.to_string(),
                        });
                        break;
                    }
                };
                for wc in &wcs {
                    if self.closed.is_some() {
                        break;
                    }
                    self.on_recv_completion(r, wc);
                }
                if n < POLL_BATCH || self.closed.is_some() {
                    break;
                }
            }
        }
        wcs.clear();
        self.wcs = wcs;
    }

    fn on_recv_completion(&mut self, r: usize, wc: &Wc) {
        let rail = &mut self.rails[r];
        rail.srq_outstanding = rail.srq_outstanding.saturating_sub(1);
        self.stats.srq_consumed[r] += 1;
        let m = &mut self.stats.srq_min_outstanding[r];
        *m = (*m).min(rail.srq_outstanding);
        if wc.status != WcStatus::Success {
            self.shut(CloseReason::Transport {
                rail: r,
                status: wc.status,
                vendor_err: wc.vendor_err,
            });
            return;
        }
        let res = match (wc.opcode, wc.imm) {
            (Some(WcOpcode::RecvRdmaWithImm), Some(imm)) => self.on_imm(r, imm),
            _ => Err(ProtocolError::UnexpectedCompletion { rail: r }),
        };
        if let Err(p) = res {
            self.shut(CloseReason::Protocol(p));
        }
    }

    /// One immediate from rail `rail`: mask learning and completion.
    ///
    /// The receiver knows a slot from the immediate alone. An immediate of an
    /// earlier use of the slot cannot come from an honest peer: the slot is
    /// reused only after its receive completed, i.e. after every signal of
    /// that use arrived, and each rail delivers in order. Anything that does
    /// not fit the slot's state (idle, completed, a rail already seen, a
    /// disagreeing mask or size) is a violation.
    fn on_imm(&mut self, rail: usize, imm: u32) -> Result<(), ProtocolError> {
        let i = Imm::decode(imm);
        let bit = 1u8 << rail;
        if i.mask == 0 || i.mask & !self.rail_mask != 0 || i.mask & bit == 0 {
            return Err(ProtocolError::BadMask {
                mask: i.mask,
                rail,
                rails: self.rail_mask,
            });
        }
        let slot = i.slot;
        let g = self.res.granularity;
        let Some(st) = self.slots.get_mut(usize::from(slot)) else {
            return Err(ProtocolError::UnknownSlot { slot });
        };
        match st.state {
            SlotState::Idle => return Err(ProtocolError::UnknownSlot { slot }),
            SlotState::Done => return Err(ProtocolError::LateImmediate { slot }),
            SlotState::Active => {}
        }
        if st.seen & bit != 0 {
            return Err(ProtocolError::DuplicateImmediate { slot, rail });
        }
        if st.expected == 0 {
            st.expected = i.mask;
            st.first_imm = imm;
        } else if imm != st.first_imm {
            return Err(ProtocolError::Inconsistent {
                slot,
                first: st.first_imm,
                got: imm,
            });
        }
        if !i.size_in_record() {
            if st.nreqs != 1 {
                return Err(ProtocolError::SizeInImmediate {
                    slot,
                    nreqs: st.nreqs,
                });
            }
            let posted = u64::from(st.posted[0]);
            match imm::decode_size(i.size_q, g, posted) {
                Some(s) => st.sizes[0] = s as u32,
                None => {
                    return Err(ProtocolError::SizeBeyondBuffer {
                        slot,
                        index: 0,
                        size: u64::from(i.size_q) * u64::from(g),
                        posted,
                    })
                }
            }
        }
        st.seen |= bit;
        if st.seen != st.expected {
            return Ok(());
        }
        if i.size_in_record() {
            // The leader rail's signal wrote the record before this (or an
            // earlier) completion of the slot.
            let leader = if st.expected & 1 != 0 { 0 } else { 1 };
            let mut rec = [0u8; RECORD_LEN];
            let lr = &self.rails[leader];
            lr.inbox.read(lr.record_off(slot), &mut rec);
            let Some(v) = Record::new_checked(&rec[..]) else {
                return Err(ProtocolError::UnexpectedCompletion { rail });
            };
            for k in 0..usize::from(st.nreqs) {
                let size = v.size(k);
                if size > st.posted[k] {
                    return Err(ProtocolError::SizeBeyondBuffer {
                        slot,
                        index: k,
                        size: u64::from(size),
                        posted: u64::from(st.posted[k]),
                    });
                }
                st.sizes[k] = size;
            }
        }
        st.state = SlotState::Done;
        Ok(())
    }

    /// Tops each rail's SRQ up to the high mark once it is below the low one.
    fn refill(&mut self) {
        let (low, high) = (self.res.srq_low as u32, self.res.srq_high as u32);
        for r in 0..self.rails.len() {
            let rail = &mut self.rails[r];
            if rail.srq_outstanding >= low {
                continue;
            }
            while rail.srq_outstanding < high {
                match rail.dom.post_srq_recv(rail.srq, 0, &[]) {
                    Ok(()) => {
                        rail.srq_outstanding += 1;
                        self.stats.srq_posted[r] += 1;
                    }
                    Err(PostError::Full) => break,
                    Err(e) => {
                        let why = e.to_string();
                        self.shut(CloseReason::Post { rail: r, why });
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_communicator_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<super::Comm>();
        send::<super::PendingComm>();
        send::<crate::Buffer>();
    }
}
