//! copyrpc over the Dynamically Connected transport: endpoints that cost no
//! QP each.
//!
//! A context owns one DC target (DCT) on its SRQ, with its receive CQ, and a
//! pool of DC initiators (DCIs) on its send CQ. Every peer writes into this
//! context through the one DCT; every endpoint sends through a *lane* — a
//! (DCI, stream) pair — that it borrows from the pool while it has work
//! outstanding and gives back when its last work request completes, as UCX's
//! `dc_mlx5` lends its DCIs. A lane serves one endpoint at a time, so an
//! endpoint's WRITE_IMMs and READs stay in order (a stream is ordered), and
//! an error (a dead or refusing peer) stops that lane's stream alone where
//! the device keeps errored streams apart.
//!
//! A receive completion on the shared DCT names its endpoint by the
//! immediate: the endpoint's slot in the low bits and a per-endpoint nonce
//! above, which the endpoint handed its peer in its [`DcInfo`]. A completion
//! whose immediate is not exactly an endpoint's is dropped, and a batch is
//! taken only at the ring position it says it lies at (`batch_pos`), so a
//! stray or guessed immediate never makes an endpoint read a stale lap.
//!
//! Every DCI work request is signaled: completions of different streams come
//! back in any order, and each retires its own WQE (the DCI's queue keeps an
//! unordered WQE table).
//!
//! This has run on the software device only, never on a ConnectX.

use std::hash::{BuildHasher, RandomState};

use mlx5::cq::{Completion as Cqe, CqRing, MonoCq};
use mlx5::device::{
    access, ConnInfo, Context as Device, Cq, DcDest, DciStreams, Dct, DctAttr, Pd, Qp, QpCaps,
    QpState, RtsAttr, SrqHandle,
};
use mlx5::prm::AddressVector;
use mlx5::rq::Srq;
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::wqe_table::{OrderedRecv, Unordered};

use super::rc::TRANSPORT_RETRIES;
use super::{Mlx5, Objects, Owner, QueueError, Reach, Transport};
use crate::error::{SetupError, WaitError};
use crate::info::{DcInfo, EndpointInfo};

/// DCIs in a context's pool.
const POOL_DCIS: usize = 4;
/// Streams used per DCI, at most (log2).
const LOG_STREAMS: u8 = 4;
/// A lane's owner when no endpoint holds it.
const NO_OWNER: u64 = u64::MAX;
/// An endpoint that holds no lane.
const NO_LANE: u32 = u32::MAX;
/// Marks a READ in a DCI WQE's table entry (the rest is the lane).
const READ: u32 = 1 << 31;

/// The mlx5 direct path over DC (see the module docs). Build a context on
/// it with [`ContextBuilder::build_on`](crate::ContextBuilder::build_on);
/// both sides of a connection must be on DC.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dc;

/// One DCI of the pool and the data path's queue on it.
struct Dci {
    qp: Qp,
    sq: SendQueue<Unordered<u32>>,
}

/// A (DCI, stream) pair, lent to one endpoint at a time.
#[derive(Debug, Clone, Copy)]
struct Lane {
    dci: u16,
    stream: u16,
    /// The holder: slot | generation << 32, or [`NO_OWNER`].
    owner: u64,
    /// Its holder's work requests not yet completed.
    outstanding: u32,
    /// A completion of its stream reported an error.
    errored: bool,
}

/// The DC side a context's endpoints share: the DCT, the DCI pool, and the
/// lanes.
pub struct DcPool {
    dct: Dct,
    conn: ConnInfo,
    dcis: Vec<Dci>,
    /// The DCIs' numbers, which their send completions carry.
    dci_qpns: [u32; POOL_DCIS],
    lanes: Vec<Lane>,
    /// Lanes no endpoint holds, ready to lend.
    free: Vec<u32>,
    /// Lanes of a DCI in ERR, waiting until none of its lanes is held.
    broken: Vec<u32>,
    /// The route to each peer device seen (its LID and GID): on a NIC the
    /// address vector of an address handle, made once per device.
    routes: Vec<(u16, [u8; 16], AddressVector)>,
    /// Bits of an immediate that carry the endpoint's slot.
    slot_mask: u32,
    /// The lane and kind of the completion [`Dc::send_owner`] retired last,
    /// for [`Dc::sq_complete`].
    retired: Option<(u32, bool)>,
    /// DCIs replaced after they went to ERR.
    replaced: u64,
    /// Errored streams reset.
    streams_reset: u64,
    hasher: RandomState,
    nonces: u64,
    // What a DCI is rebuilt from.
    device: Device,
    pd: Pd,
    send_cq: Cq,
    caps: QpCaps,
    streams: DciStreams,
}

impl std::fmt::Debug for DcPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcPool")
            .field("dct", &self.conn.qpn)
            .field("dcis", &self.dcis.len())
            .field("lanes", &self.lanes.len())
            .field("free", &self.free.len())
            .finish_non_exhaustive()
    }
}

/// An endpoint's send side on DC: the lane it holds, if any, and where its
/// peer is.
#[derive(Debug)]
pub struct DcSq {
    /// slot | generation << 32.
    owner: u64,
    lane: u32,
    dest: Option<DcDest>,
    /// The peer device's entry in [`DcPool::routes`].
    route: u32,
    /// The immediate the peer asked for.
    peer_imm: u32,
    /// The immediate this endpoint's receive completions must carry.
    imm: u32,
}

impl DcPool {
    /// The DC target's number (what peers' WQEs name).
    pub fn dct_number(&self) -> u32 {
        self.conn.qpn
    }

    /// The DC initiators' numbers.
    pub fn dci_numbers(&self) -> &[u32] {
        &self.dci_qpns
    }

    /// Lanes (DCI streams) in the pool, and how many no endpoint holds now.
    pub fn lanes(&self) -> (usize, usize) {
        (self.lanes.len(), self.free.len())
    }

    /// DCIs replaced after an error moved them to ERR.
    pub fn dcis_replaced(&self) -> u64 {
        self.replaced
    }

    /// Errored DCI streams reset (their DCI ran on).
    pub fn streams_reset(&self) -> u64 {
        self.streams_reset
    }

    fn new(o: &Objects<'_>) -> Result<DcPool, SetupError> {
        if o.compression != mlx5::cq::Compression::Off {
            return Err(SetupError::Invalid(
                "DC needs full receive CQEs (the immediate names the endpoint): \
                 turn CQE compression off"
                    .into(),
            ));
        }
        let slot_bits = 32 - (o.max_endpoints.max(2) - 1).leading_zeros();
        if slot_bits > 24 {
            return Err(SetupError::Invalid(format!(
                "{} endpoints on DC: at most 2^24 (the immediate carries the slot)",
                o.max_endpoints
            )));
        }
        let hasher = RandomState::new();
        let key = hasher.hash_one(("dc key", std::process::id()));
        let dct = o.device.create_dct(
            o.pd,
            o.srq,
            o.recv_cq,
            &DctAttr {
                key,
                access: access::REMOTE_WRITE | access::REMOTE_READ,
                min_rnr_timer: 1,
            },
        )?;
        let conn = ConnInfo {
            qpn: dct.number(),
            lid: o.device.lid(),
            gid: o.device.gid(),
            psn: 0,
        };
        let caps = o.device.dci_stream_caps()?;
        let want = o.dci_streams.unwrap_or(DciStreams {
            log_concurrent: LOG_STREAMS,
            log_errored: LOG_STREAMS,
        });
        let streams = DciStreams {
            log_concurrent: want.log_concurrent.min(caps.log_concurrent),
            log_errored: want.log_errored.min(caps.log_errored),
        };
        // Each DC WRITE_IMM or READ takes two basic blocks.
        let caps = QpCaps {
            sq_wqe_cnt: (o.sq_size * 4).max(256),
            rq_wqe_cnt: 0,
            max_recv_sge: 0,
            max_inline: 0,
        };
        let mut pool = DcPool {
            dct,
            conn,
            dcis: Vec::with_capacity(POOL_DCIS),
            dci_qpns: [0; POOL_DCIS],
            lanes: Vec::new(),
            free: Vec::new(),
            broken: Vec::new(),
            routes: Vec::new(),
            slot_mask: ((1u64 << slot_bits) - 1) as u32,
            retired: None,
            replaced: 0,
            streams_reset: 0,
            hasher,
            nonces: 0,
            device: o.device.clone(),
            pd: o.pd.clone(),
            send_cq: o.send_cq.clone(),
            caps,
            streams,
        };
        for d in 0..POOL_DCIS {
            let dci = pool.new_dci()?;
            pool.dci_qpns[d] = dci.qp.qpn();
            pool.dcis.push(dci);
            for stream in 0..1u16 << streams.log_concurrent {
                pool.free.push(pool.lanes.len() as u32);
                pool.lanes.push(Lane {
                    dci: d as u16,
                    stream,
                    owner: NO_OWNER,
                    outstanding: 0,
                    errored: false,
                });
            }
        }
        // Lent from the end: the first lanes go first, spread over the DCIs.
        pool.free
            .sort_by_key(|&l| std::cmp::Reverse((pool.lanes[l as usize].stream, l)));
        Ok(pool)
    }

    /// A DCI ready to send, with its queue.
    fn new_dci(&self) -> Result<Dci, SetupError> {
        let qp = self
            .device
            .create_dci(&self.pd, &self.send_cq, &self.caps, self.streams)?;
        qp.ready_dci(&RtsAttr {
            retry_cnt: TRANSPORT_RETRIES,
            ..RtsAttr::default()
        })?;
        let sq = qp.send_queue(SqConfig {
            max_inline: 0,
            ..SqConfig::default()
        })?;
        Ok(Dci { qp, sq })
    }

    /// A fresh immediate for the endpoint in `slot`: the slot, and a nonzero
    /// nonce above it.
    fn imm_for(&mut self, slot: u32) -> u32 {
        loop {
            self.nonces += 1;
            let nonce = self.hasher.hash_one(self.nonces) as u32 & !self.slot_mask;
            if nonce != 0 {
                return nonce | slot;
            }
        }
    }

    /// The index of the route to the device at `lid` / `gid`, made on
    /// first use.
    fn route(&mut self, lid: u16, gid: [u8; 16]) -> Result<u32, SetupError> {
        if let Some(i) = self.routes.iter().position(|r| r.0 == lid && r.1 == gid) {
            return Ok(i as u32);
        }
        let av = self.device.dc_route(&self.pd, lid, gid)?;
        self.routes.push((lid, gid, av));
        Ok(self.routes.len() as u32 - 1)
    }

    /// The lane `sq` holds, borrowing a free one if it holds none.
    #[inline(always)]
    fn lane(&mut self, sq: &mut DcSq) -> Result<u32, QueueError> {
        if sq.lane != NO_LANE && self.lanes[sq.lane as usize].owner == sq.owner {
            return Ok(sq.lane);
        }
        let l = self.free.pop().ok_or(QueueError::Full)?;
        self.lanes[l as usize].owner = sq.owner;
        sq.lane = l;
        Ok(l)
    }

    /// Gives lane `l` back once its holder's last work request completed.
    #[inline]
    fn release(&mut self, l: u32) {
        let lane = &mut self.lanes[l as usize];
        lane.owner = NO_OWNER;
        if lane.errored {
            self.recover(l);
        } else {
            self.free.push(l);
        }
    }

    /// A lane whose stream reported an error, now held by no endpoint. If
    /// its DCI runs on (the device kept the errored stream apart), the
    /// stream is reset and the lane lent again. If the DCI went to ERR (the
    /// device keeps no errored stream apart, or too many errored at once),
    /// none of its lanes is lent until no endpoint holds one; then the DCI
    /// is replaced.
    #[cold]
    fn recover(&mut self, l: u32) {
        let lane = self.lanes[l as usize];
        let d = lane.dci;
        let dci = &self.dcis[usize::from(d)];
        if dci.qp.state() != QpState::Err && dci.qp.reset_dci_stream(lane.stream).is_ok() {
            self.lanes[l as usize].errored = false;
            self.streams_reset += 1;
            self.free.push(l);
            return;
        }
        if dci.qp.state() != QpState::Err {
            // The stream could not be reset: the DCI is replaced.
            let _ = dci.qp.to_err();
        }
        self.broken.push(l);
        // No lane of the DCI is lent until it is replaced.
        let lanes = &self.lanes;
        self.free.retain(|&f| lanes[f as usize].dci != d);
        let busy = self.lanes.iter().any(|x| x.dci == d && x.owner != NO_OWNER);
        if busy {
            return;
        }
        let Ok(dci) = self.new_dci() else {
            // The device refused a new DCI: its lanes stay out of use.
            return;
        };
        self.dci_qpns[usize::from(d)] = dci.qp.qpn();
        self.dcis[usize::from(d)] = dci;
        self.replaced += 1;
        let lanes = &mut self.lanes;
        self.broken.retain(|&b| {
            let lane = &mut lanes[b as usize];
            if lane.dci != d {
                return true;
            }
            lane.errored = false;
            false
        });
        for (i, lane) in self.lanes.iter().enumerate() {
            if lane.dci == d {
                self.free.push(i as u32);
            }
        }
    }

    /// Posts through `sq`'s lane: `post` writes the WQE on the lane's DCI
    /// queue towards `dest` and records `entry` (the lane, and [`READ`]).
    #[inline(always)]
    fn post(
        &mut self,
        sq: &mut DcSq,
        read: bool,
        post: impl FnOnce(
            &mut SendQueue<Unordered<u32>>,
            &AddressVector,
            &DcDest,
            u32,
        ) -> Result<(), QueueError>,
    ) -> Result<(), QueueError> {
        let Some(mut dest) = sq.dest else {
            return Err(QueueError::Full);
        };
        let l = self.lane(sq)?;
        let lane = self.lanes[l as usize];
        dest.stream = lane.stream;
        let entry = l | if read { READ } else { 0 };
        let q = &mut self.dcis[usize::from(lane.dci)].sq;
        let route = &self.routes[sq.route as usize].2;
        match post(q, route, &dest, entry) {
            Ok(()) => {
                self.lanes[l as usize].outstanding += 1;
                Ok(())
            }
            Err(e) => {
                if lane.outstanding == 0 {
                    // Nothing went out on the lane just borrowed.
                    self.release(l);
                    sq.lane = NO_LANE;
                }
                Err(e)
            }
        }
    }
}

impl Transport for Dc {
    type Cqe<'a> = Cqe<'a>;
    type Sq = DcSq;
    type RecvCq = MonoCq<Srq<OrderedRecv<()>>, ()>;
    type SendCq = CqRing;
    type Shared = DcPool;

    #[inline]
    fn recv_cq(cq: &Cq, srq: &SrqHandle) -> Result<Self::RecvCq, SetupError> {
        Mlx5::recv_cq(cq, srq)
    }

    #[inline]
    fn send_cq(cq: &Cq) -> Result<Self::SendCq, SetupError> {
        Ok(cq.ring()?)
    }

    fn shared(o: &Objects<'_>) -> Result<DcPool, SetupError> {
        DcPool::new(o)
    }

    fn open(
        sh: &mut DcPool,
        _: &mut CqRing,
        _: &Objects<'_>,
        idx: u32,
        gen: u32,
    ) -> Result<(DcSq, Reach), SetupError> {
        let imm = sh.imm_for(idx);
        let sq = DcSq {
            owner: u64::from(idx) | u64::from(gen) << 32,
            lane: NO_LANE,
            dest: None,
            route: 0,
            peer_imm: 0,
            imm,
        };
        let dc = DcInfo {
            key: sh.dct.key(),
            imm,
        };
        Ok((
            sq,
            Reach {
                conn: sh.conn,
                dc: Some(dc),
            },
        ))
    }

    fn connect(sh: &mut DcPool, sq: &mut DcSq, remote: &EndpointInfo) -> Result<(), SetupError> {
        let Some(dc) = remote.dc else {
            return Err(SetupError::Invalid(
                "the peer's endpoint is on RC, this context on DC: build both on one transport"
                    .into(),
            ));
        };
        sq.route = sh.route(remote.lid, remote.gid)?;
        sq.dest = Some(DcDest {
            dct: remote.qpn,
            key: dc.key,
            lid: remote.lid,
            gid: remote.gid,
            stream: 0,
        });
        sq.peer_imm = dc.imm;
        Ok(())
    }

    /// Nothing to stop: the endpoint posts no more, and its lane comes back
    /// when its work completes. The peer learns of the close when the
    /// endpoint is removed and its rings' keys stop working.
    fn close(_: &mut DcPool, _: &mut DcSq) {}

    fn remove(_: &mut DcPool, _: &mut CqRing, _: DcSq) {}

    #[inline(always)]
    fn srq_post(cq: &mut Self::RecvCq) -> bool {
        Mlx5::srq_post(cq)
    }

    #[inline(always)]
    fn srq_ring(cq: &mut Self::RecvCq) {
        Mlx5::srq_ring(cq)
    }

    #[inline(always)]
    fn poll_recv(cq: &mut Self::RecvCq, max: usize, f: impl FnMut(&Cqe<'_>, bool)) -> usize {
        Mlx5::poll_recv(cq, max, f)
    }

    #[inline(always)]
    fn recv_owner(sh: &DcPool, c: &Cqe<'_>) -> Option<u32> {
        Some(c.imm() & sh.slot_mask)
    }

    /// The immediate must be exactly the one this endpoint handed its peer.
    #[inline(always)]
    fn recv_from_peer(sq: &DcSq, c: &Cqe<'_>) -> bool {
        c.imm() == sq.imm
    }

    #[inline(always)]
    fn poll_send(
        cq: &mut CqRing,
        sh: &mut DcPool,
        max: usize,
        mut f: impl FnMut(&mut DcPool, u32, &Cqe<'_>),
    ) -> usize {
        cq.poll(max, |c| {
            let qpn = c.qpn();
            // A replaced DCI's late completions match no number here.
            if let Some(d) = sh.dci_qpns.iter().position(|&q| q == qpn) {
                f(sh, d as u32, c);
            }
        })
    }

    /// Retires the WQE `c` names on DCI `reg`; its lane's holder owns it.
    #[inline(always)]
    fn send_owner(sh: &mut DcPool, reg: u32, c: &Cqe<'_>) -> Option<Owner> {
        let mut entry = None;
        sh.dcis[reg as usize].sq.complete(c, |e, _| entry = Some(e));
        // The queue's own padding (a NOP) has no entry.
        let e = entry?;
        let l = e & !READ;
        let lane = &mut sh.lanes[l as usize];
        if c.is_error() {
            lane.errored = true;
        }
        sh.retired = Some((l, e & READ != 0));
        let owner = lane.owner;
        Some(Owner {
            idx: owner as u32,
            gen: Some((owner >> 32) as u32),
        })
    }

    #[inline]
    fn arm_recv(cq: &mut Self::RecvCq) -> Result<(), WaitError> {
        Mlx5::arm_recv(cq)
    }

    #[inline]
    fn arm_send(cq: &mut CqRing) -> Result<(), WaitError> {
        Ok(cq.arm(false)?)
    }

    /// Writes with the immediate the peer asked for, not `imm`: on DC it
    /// names the peer's endpoint (the batch size is the completion's byte
    /// count).
    #[inline(always)]
    fn post_write_imm(
        sh: &mut DcPool,
        sq: &mut DcSq,
        local: Sge,
        raddr: u64,
        rkey: u32,
        _imm: u32,
    ) -> Result<(), QueueError> {
        let imm = sq.peer_imm;
        sh.post(sq, false, |q, route, dest, entry| {
            let w = q.dc_via(route, dest);
            match w.write_imm(raddr, rkey, imm, Payload::Sges(&[local])) {
                Ok(b) => {
                    b.post(entry);
                    Ok(())
                }
                // One SGE and no inline data: the only error is a full queue.
                Err(_) => Err(QueueError::Full),
            }
        })
    }

    #[inline(always)]
    fn post_read(
        sh: &mut DcPool,
        sq: &mut DcSq,
        local: Sge,
        raddr: u64,
        rkey: u32,
    ) -> Result<(), QueueError> {
        sh.post(sq, true, |q, route, dest, entry| {
            match q.dc_via(route, dest).read(raddr, rkey, &[local]) {
                Ok(b) => {
                    b.post(entry);
                    Ok(())
                }
                Err(_) => Err(QueueError::Full),
            }
        })
    }

    #[inline(always)]
    fn ring(sh: &mut DcPool, sq: &mut DcSq) {
        if let Some(lane) = sh.lanes.get(sq.lane as usize) {
            sh.dcis[usize::from(lane.dci)].sq.ring_doorbell();
        }
    }

    /// Counts the completion [`send_owner`](Self::send_owner) retired
    /// against its lane, giving the lane back after its holder's last.
    #[inline(always)]
    fn sq_complete(sh: &mut DcPool, _: Option<&mut DcSq>, _: &Cqe<'_>) -> bool {
        let Some((l, read)) = sh.retired.take() else {
            return false;
        };
        let lane = &mut sh.lanes[l as usize];
        // Each completion retires one WQE its lane's holder posted.
        debug_assert!(lane.outstanding > 0);
        lane.outstanding = lane.outstanding.saturating_sub(1);
        if lane.outstanding == 0 {
            sh.release(l);
        }
        read
    }
}
