//! The fabric registry: one shared-memory file per fabric holding every
//! object the simulated NICs know about — segments, memory regions, CQs, SRQs
//! and QPs — as fixed tables of atomics, so that any process of the fabric can
//! resolve a QPN, an rkey or a CQN exactly as a NIC resolves them from its own
//! context memory.
//!
//! Object numbers carry a generation in their high bits, so a stale number
//! (a QP destroyed and its slot reused) does not resolve to the new object.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::sync::ShmLock;

/// Magic number of a registry file ("mlx5sim" + layout version in the low
/// byte). Version 12: an SRQ entry describes a tag-matching SRQ too (its
/// tag list's place and size and its CQ, in what was padding; the list's
/// counters beside the consumer state), and a QP on it executes
/// tag-matching commands. Version 11: the same offsets, other rules: a CQ's consumer arms
/// it without its lock (an arm count above the command bits of
/// [`CqEntry::arm`], the arm's consumer index in [`CqEntry::arm_ci`], in
/// what was padding), and a QP's own RQ is claimed by compare-exchange on
/// [`QpEntry::rq_ci`], without a lock (a process of version 10 would take
/// the locks these processes skip). Version 10: one-way cuts between ports
/// (a mask per port, a count in the header) and the answer-lost state of a
/// QP's stalled WQE (version 9: tables of 65536 QPs and 131072 MRs, a claim
/// cursor per table in the header, and MRs and queues carved out of shared
/// segments; version 8: a QP entry has a kind (RC, DCI or DCT), a DC access
/// key and a DCI's stream counts; version 7: owners are fabric tokens,
/// `sim::member`, not pids).
pub const MAGIC: u64 = 0x6d6c_7835_7369_6d0c;
/// Simulated devices per fabric (`sim0` .. `sim7`).
pub const MAX_DEVS: usize = crate::types::error::SIM_DEVICES;
/// Shared-memory segments per fabric. Small memory regions and queues share
/// segments (`sim::pool`), so this bounds CQs, SRQs, large MRs and carving
/// segments; it also sizes each process's map of segments (8 bytes a slot).
pub const MAX_SEGS: usize = 16384;
/// Memory regions per fabric (keys are `slot << 8 | generation`: room for
/// 2^24 slots).
pub const MAX_MRS: usize = 131072;
/// CQs per fabric.
pub const MAX_CQS: usize = 4096;
/// SRQs per fabric.
pub const MAX_SRQS: usize = 1024;
/// QPs per fabric (QPNs are 24 bits: 16 bits of slot, 8 of generation).
pub const MAX_QPS: usize = 65536;
/// Completion channels per fabric.
pub const MAX_CHANS: usize = 1024;

/// Slot state: free.
pub const FREE: u32 = 0;
/// Slot state: being set up by its creator.
pub const CLAIMED: u32 = 1;
/// Slot state: live.
pub const LIVE: u32 = 2;

/// [`QpEntry::retry_wqe`] when no WQE has failed a try.
pub const NO_RETRY: u32 = u32::MAX;

/// `seg` value of a memory region registered from ordinary process memory.
pub const NO_SEG: u32 = u32::MAX;

/// QP states, as stored in [`QpEntry::qp_state`].
pub mod qp_state {
    /// RESET.
    pub const RESET: u32 = 0;
    /// INIT.
    pub const INIT: u32 = 1;
    /// RTR.
    pub const RTR: u32 = 2;
    /// RTS.
    pub const RTS: u32 = 3;
    /// ERR.
    pub const ERR: u32 = 4;
}

/// What a QP-table entry is, as stored in [`QpEntry::kind`]. DCT numbers
/// share the QP number space, as on a ConnectX.
pub mod qp_kind {
    /// A reliable connected QP.
    pub const RC: u32 = 0;
    /// A DC initiator: sends to any DCT its WQEs name.
    pub const DCI: u32 = 1;
    /// A DC target: receives from any DCI that names it with its key, into
    /// its SRQ.
    pub const DCT: u32 = 2;
}

/// Registry header.
#[repr(C)]
#[derive(Debug)]
pub struct Header {
    /// [`MAGIC`] once initialised.
    pub magic: AtomicU64,
    /// 0: being initialised; 1: ready.
    pub ready: AtomicU32,
    /// Serialises slot allocation.
    pub alloc_lock: ShmLock,
    /// Generation counter for object numbers.
    pub gen: AtomicU32,
    /// Ports with a link model: while 0, the link model costs the engine
    /// nothing.
    pub modeled_ports: AtomicU32,
    /// Ports that are down: while 0 (and `cut_paths` too), port state costs
    /// the engine nothing.
    pub down_ports: AtomicU32,
    /// The last process token handed out (`sim::member`): a
    /// process joining the fabric takes the next with one `fetch_add`.
    pub next_token: AtomicU32,
    /// Where each table's next claim starts looking.
    pub hints: ClaimHints,
    /// One-way paths that are cut ([`PortEntry::cut_to`] bits set).
    pub cut_paths: AtomicU32,
    _pad: u32,
}

/// One cursor per table: the slot after the last one claimed, where the next
/// claim starts its scan (wrapping), so that claims cost O(1) amortised
/// instead of a scan from slot 0 past every live object.
#[repr(C)]
#[derive(Debug)]
pub struct ClaimHints {
    /// Segments.
    pub segs: AtomicU32,
    /// Memory regions.
    pub mrs: AtomicU32,
    /// CQs.
    pub cqs: AtomicU32,
    /// SRQs.
    pub srqs: AtomicU32,
    /// QPs (and DCTs).
    pub qps: AtomicU32,
    /// Completion channels.
    pub chans: AtomicU32,
}

/// A device's port: its link model and its state (all zero: no model, the
/// port is up and as fast as memory).
#[repr(C)]
#[derive(Debug, Default)]
pub struct PortEntry {
    /// Line rate in Mbit/s; 0: unlimited.
    pub rate_mbps: AtomicU64,
    /// One-way latency in ns.
    pub latency_ns: AtomicU64,
    /// When the port has sent everything queued on it so far (ns on the
    /// clock of the NICs that use it).
    pub busy_until_ns: AtomicU64,
    /// 1 while the port has a link model (rate or latency).
    pub modeled: AtomicU32,
    /// 1 while the port is down (a pulled cable, a failed switch port):
    /// nothing crosses a path with a port down.
    pub down: AtomicU32,
    /// One-way cuts: bit `d` set while packets from this port to device
    /// `d`'s are lost (the other way may still work).
    pub cut_to: AtomicU32,
    _pad: [u32; 7],
}

/// A shared-memory segment.
#[repr(C)]
#[derive(Debug)]
pub struct SegEntry {
    /// FREE / CLAIMED / LIVE.
    pub state: AtomicU32,
    /// Owner process: its fabric token (`sim::member`).
    pub owner: AtomicU32,
    /// Generation (part of the file name).
    pub gen: AtomicU32,
    _pad: u32,
    /// Length in bytes.
    pub len: AtomicU64,
}

/// A memory region.
#[repr(C)]
#[derive(Debug)]
pub struct MrEntry {
    /// FREE / CLAIMED / LIVE.
    pub state: AtomicU32,
    /// The key (`slot << 8 | generation`); lkey and rkey are equal.
    pub key: AtomicU32,
    /// Owner process: its fabric token (`sim::member`).
    pub owner: AtomicU32,
    /// Device.
    pub dev: AtomicU32,
    /// Protection domain number.
    pub pd: AtomicU32,
    /// Access flags ([`access`](crate::device::access)).
    pub access: AtomicU32,
    /// Backing segment, or [`NO_SEG`] for ordinary memory of the owner.
    pub seg: AtomicU32,
    _pad: u32,
    /// Offset of the region inside its segment.
    pub off: AtomicU64,
    /// Virtual address the owner registered (what keys are checked against).
    pub va: AtomicU64,
    /// Length in bytes.
    pub len: AtomicU64,
}

/// A completion queue: where its memory is, and the NIC's producer state.
/// The producer state (written by whichever process's NIC completes work into
/// the CQ) has a cache line of its own, apart from the read-mostly setup.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct CqEntry {
    /// FREE / CLAIMED / LIVE.
    pub state: AtomicU32,
    /// CQ number.
    pub cqn: AtomicU32,
    /// Owner process: its fabric token (`sim::member`).
    pub owner: AtomicU32,
    /// Device.
    pub dev: AtomicU32,
    /// Segment of the CQ buffer and doorbell record.
    pub seg: AtomicU32,
    /// Number of CQEs.
    pub cqe_cnt: AtomicU32,
    /// CQE size, 64 or 128.
    pub cqe_size: AtomicU32,
    /// 0 off, 1 enhanced, 2 basic.
    pub zip: AtomicU32,
    /// Offset of the CQE buffer in the segment.
    pub buf_off: AtomicU64,
    /// Offset of the doorbell record in the segment.
    pub dbrec_off: AtomicU64,
    /// [`CQ_SCATTER_TO_CQE`] and other flags.
    pub flags: AtomicU32,
    /// The completion channel the CQ's events go to: its slot + 1; 0: none.
    pub chan: AtomicU32,
    _pad0: [u32; 2],
    /// Serialises CQE production among producers (the NICs that complete
    /// work into the CQ). The CQ's consumer never takes it: arming is a
    /// handshake on `pi` and `arm` (see `sim::cqe_out`), so a consumer
    /// stopped anywhere holds up no producer.
    pub lock: ShmLock,
    /// NIC producer index.
    pub pi: AtomicU32,
    /// Set when the NIC found the CQ full (the CQ is then in error).
    pub overrun: AtomicU32,
    /// Enhanced compression: the producer index of the last plain CQE (the
    /// title), or `u32::MAX`.
    pub title: AtomicU32,
    /// Enhanced compression: mini CQEs written since the title.
    pub since_title: AtomicU32,
    /// The consumer index last read from the doorbell record: the NIC reads
    /// the record again only when this says the CQ may be full.
    pub ci_seen: AtomicU32,
    /// The arm word: in its low two bits [`ARMED_NEXT`], [`ARMED_SOLICITED`],
    /// or 0 (not armed); above them, the arms so far (wrapping). Only the
    /// consumer's arm sets it; a producer, or the arm itself, that raises the
    /// event clears the low bits with a compare-exchange. Read once per write
    /// of CQEs on a CQ that has a channel.
    pub arm: AtomicU32,
    /// Completion events raised so far.
    pub events: AtomicU32,
    /// The producer index just past the last solicited or error CQE: an arm
    /// for solicited events fires at once when that CQE is not consumed.
    pub notable_pi: AtomicU32,
    /// The arm sequence number of the last arm.
    pub arm_sn: AtomicU32,
    /// The consumer index of the last arm (written before the arm word): a
    /// producer that sees the arm raises its event only for a CQE that was
    /// not consumed as of this index.
    pub arm_ci: AtomicU32,
    _pad1: [u32; 5],
}

/// [`CqEntry::arm`]: an event at the next CQE.
pub const ARMED_NEXT: u32 = 1;
/// [`CqEntry::arm`]: an event at the next solicited or error CQE.
pub const ARMED_SOLICITED: u32 = 2;
/// Where a CQ's UAR page starts in its segment, after its doorbell record:
/// the CQ doorbell register is at this offset + [`CQ_DOORBELL`](crate::prm::CQ_DOORBELL).
pub const CQ_UAR_AFTER_DBREC: u64 = 64;

/// A completion channel: the word its waiters sleep on (a futex in shared
/// memory, so that a NIC in any process of the fabric wakes them).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ChanEntry {
    /// FREE / CLAIMED / LIVE.
    pub state: AtomicU32,
    /// Owner process: its fabric token (`sim::member`).
    pub owner: AtomicU32,
    /// Bumped at every event of one of its CQs; waiters sleep on it.
    pub seq: AtomicU32,
    _pad: [u32; 13],
}

/// CQ flag: small receives on QPs with their own RQ land in the CQE.
pub const CQ_SCATTER_TO_CQE: u32 = 1;

/// A shared receive queue: its memory and the NIC's consumer state (on a
/// cache line of its own: senders in other processes write it).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct SrqEntry {
    /// FREE / CLAIMED / LIVE.
    pub state: AtomicU32,
    /// SRQ number.
    pub srqn: AtomicU32,
    /// Owner process: its fabric token (`sim::member`).
    pub owner: AtomicU32,
    /// Device.
    pub dev: AtomicU32,
    /// Protection domain.
    pub pd: AtomicU32,
    /// Segment of buffer and doorbell record.
    pub seg: AtomicU32,
    /// Bytes per WQE.
    pub stride: AtomicU32,
    /// Number of WQEs.
    pub cnt: AtomicU32,
    /// Offset of the WQE buffer.
    pub buf_off: AtomicU64,
    /// Offset of the doorbell record.
    pub dbrec_off: AtomicU64,
    /// A tag-matching SRQ's tag-list entries ([`TagSlot`]s, `max_num_tags +
    /// 1`); 0: a plain SRQ.
    pub tm_slots: AtomicU32,
    /// A tag-matching SRQ's CQ: its receive completions and the CQEs of its
    /// list commands go there, whatever QP they came through.
    pub tm_cqn: AtomicU32,
    /// Offset of the tag list in the segment.
    pub tm_off: AtomicU64,
    /// Serialises consumption by many senders, and a tag-matching SRQ's list
    /// commands with the messages that match against the list.
    pub lock: ShmLock,
    /// Index of the next WQE the NIC consumes (follows the `next` links).
    pub head: AtomicU32,
    /// WQEs consumed (compared with the doorbell-record counter).
    pub consumed: AtomicU32,
    /// Tag matching: the entry the next append fills (the index the last
    /// append named; 0 at first).
    pub tm_next: AtomicU32,
    /// Tag matching: unexpected tagged messages the NIC delivered (16 bits,
    /// wrapping; the CQEs' `hw_phase_cnt`).
    pub tm_hw_cnt: AtomicU32,
    /// Tag matching: the count of them software last reported handled
    /// (`SW_CNT`). Entries appended while it differs from `tm_hw_cnt` do
    /// not match until a command brings the two level.
    pub tm_sw_cnt: AtomicU32,
    /// Tag matching: appends so far; an entry's `seq` orders the list.
    pub tm_seq: AtomicU32,
    _pad1: [u32; 9],
}

/// One entry of a tag-matching SRQ's tag list, in the SRQ's segment. Read
/// and written with the SRQ's lock held.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct TagSlot {
    /// [`TAG_FREE`] or [`TAG_POSTED`].
    pub state: AtomicU32,
    /// Whether the entry may match: software's count of handled unexpected
    /// messages equalled the NIC's when it was appended, or since.
    pub active: AtomicU32,
    /// The append's place in the list (earlier appends match first).
    pub seq: AtomicU64,
    /// The tag.
    pub tag: AtomicU64,
    /// The mask: the tag bits a message's tag must match.
    pub mask: AtomicU64,
    /// The buffer a matching message lands in.
    pub addr: AtomicU64,
    /// Its length.
    pub len: AtomicU32,
    /// Its lkey.
    pub lkey: AtomicU32,
    _pad: [u32; 4],
}

/// [`TagSlot::state`]: no tag.
pub const TAG_FREE: u32 = 0;
/// [`TagSlot::state`]: appended, waiting for a message.
pub const TAG_POSTED: u32 = 1;

/// A QP: its memory, attributes and the NIC's execution state. The setup
/// (read by every NIC), the requester state (written by the owner's NIC) and the
/// responder state (written by the peer's NIC) live on separate cache lines.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct QpEntry {
    /// FREE / CLAIMED / LIVE.
    pub state: AtomicU32,
    /// QP number.
    pub qpn: AtomicU32,
    /// Owner process: its fabric token (`sim::member`).
    pub owner: AtomicU32,
    /// Device.
    pub dev: AtomicU32,
    /// Protection domain.
    pub pd: AtomicU32,
    /// RESET / INIT / RTR / RTS / ERR ([`qp_state`]).
    pub qp_state: AtomicU32,
    /// Segment of the SQ, RQ and doorbell record.
    pub seg: AtomicU32,
    /// SQ size in BBs.
    pub sq_cnt: AtomicU32,
    /// RQ size in WQEs (0 with an SRQ).
    pub rq_cnt: AtomicU32,
    /// RQ stride.
    pub rq_stride: AtomicU32,
    /// SRQ number, or `u32::MAX`.
    pub srqn: AtomicU32,
    /// Send CQ number.
    pub send_cqn: AtomicU32,
    /// Receive CQ number.
    pub recv_cqn: AtomicU32,
    /// Remote QPN (from RTR).
    pub remote_qpn: AtomicU32,
    /// Remote device (from RTR).
    pub remote_dev: AtomicU32,
    /// Remote access the QP allows (REMOTE_WRITE / READ / ATOMIC).
    pub access: AtomicU32,
    /// RNR retry count (7: forever).
    pub rnr_retry: AtomicU32,
    /// Transport retry count.
    pub retry_cnt: AtomicU32,
    /// RNR delay the responder asks for, in microseconds.
    pub min_rnr_us: AtomicU32,
    /// Transport timeout per try, in microseconds.
    pub timeout_us: AtomicU32,
    /// Offset of the SQ buffer.
    pub sq_off: AtomicU64,
    /// Offset of the RQ buffer.
    pub rq_off: AtomicU64,
    /// Offset of the doorbell record.
    pub dbrec_off: AtomicU64,
    /// A DCT's access key: a DCI's WQE must carry it to reach the DCT.
    pub dc_key: AtomicU64,
    /// RC, DCI or DCT ([`qp_kind`]).
    pub kind: AtomicU32,
    /// A DCI's streams: log2 of the concurrent streams (low byte) and of
    /// the errored streams it survives (next byte).
    pub dci_streams: AtomicU32,
    /// A DCT's count of transport tries that named it with another key (a
    /// ConnectX DCT context's `dc_access_key_violation_count`).
    pub key_violations: AtomicU32,
    _pad0: u32,
    // Requester side: written by the owner's NIC as it runs the SQ.
    /// Serialises execution of the SQ.
    pub exec_lock: ShmLock,
    /// NIC consumer counter of the SQ (BBs executed).
    pub sq_ci: AtomicU32,
    /// RNR NAKs the WQE at the SQ head received.
    pub retry_tries: AtomicU32,
    /// SQ counter of the WQE the tries are for ([`NO_RETRY`]: none).
    pub retry_wqe: AtomicU32,
    /// Owner-process clock (ns) before which the head WQE is not retried.
    pub retry_due_ns: AtomicU64,
    /// When the peer process was last seen alive: the owner process's NIC
    /// clock (ns: logical in deferred mode, the coarse monotonic clock inline).
    pub peer_seen: AtomicU64,
    /// Tries of the WQE at the SQ head that no acknowledgement answered
    /// within the local ACK timeout (the first send and `retry_cnt`
    /// retries); more than `retry_cnt`: the last try's timer runs.
    pub ack_tries: AtomicU32,
    /// The WQE at the SQ head (`retry_wqe`) reached the responder and was
    /// executed there, but its answer was lost on the way back: its CQE's
    /// byte count + 1 (0: it was not executed). Its retries are duplicates
    /// that the responder answers without executing them again.
    pub answer_lost: AtomicU32,
    /// That WQE's result the responder keeps for a duplicate: an atomic's
    /// old value.
    pub replay: AtomicU64,
    _pad1: [u32; 4],
    // Responder side: written by the peer's NIC as it consumes receives.
    /// Unused since layout version 11 (it was the RQ's lock): kept so that
    /// the entry's bytes stay where they were.
    _retired_rq_lock: AtomicU32,
    /// RQ WQEs consumed by the NIC; the NIC that takes a WQE, or flushes it,
    /// claims it with a compare-exchange (no lock).
    pub rq_ci: AtomicU32,
    _pad2: [u32; 14],
}

impl QpEntry {
    /// Makes a claimed entry a fresh one of `kind`: number `qpn`, owned by
    /// fabric token `owner`, on device `dev` and PD `pd`, in RESET, with no
    /// queues, peer, access, key, counters or retries left from the slot's
    /// last user. The creator then sets what its kind has, and `state`.
    pub fn clear(&self, qpn: u32, kind: u32, owner: u32, dev: u32, pd: u32) {
        let r = Ordering::Relaxed;
        self.qpn.store(qpn, r);
        self.kind.store(kind, r);
        self.owner.store(owner, r);
        self.dev.store(dev, r);
        self.pd.store(pd, r);
        self.qp_state.store(qp_state::RESET, r);
        self.seg.store(NO_SEG, r);
        for c in [&self.sq_cnt, &self.rq_cnt, &self.rq_stride] {
            c.store(0, r);
        }
        self.srqn.store(u32::MAX, r);
        for c in [
            &self.send_cqn,
            &self.recv_cqn,
            &self.remote_qpn,
            &self.remote_dev,
        ] {
            c.store(0, r);
        }
        for c in [
            &self.access,
            &self.rnr_retry,
            &self.retry_cnt,
            &self.min_rnr_us,
            &self.timeout_us,
        ] {
            c.store(0, r);
        }
        for o in [&self.sq_off, &self.rq_off, &self.dbrec_off, &self.dc_key] {
            o.store(0, r);
        }
        self.dci_streams.store(0, r);
        self.key_violations.store(0, r);
        self.sq_ci.store(0, r);
        self.retry_tries.store(0, r);
        self.retry_wqe.store(NO_RETRY, r);
        self.retry_due_ns.store(0, r);
        self.peer_seen.store(u64::MAX, r);
        self.ack_tries.store(0, r);
        self.answer_lost.store(0, r);
        self.replay.store(0, r);
        self.rq_ci.store(0, r);
    }
}

/// The whole registry.
#[repr(C)]
#[derive(Debug)]
pub struct Registry {
    /// Header.
    pub header: Header,
    /// Devices that were opened at least once (1) or not (0).
    pub devs: [AtomicU32; MAX_DEVS],
    /// Each device's port: its link model and when it is next free.
    pub ports: [PortEntry; MAX_DEVS],
    /// Segments.
    pub segs: [SegEntry; MAX_SEGS],
    /// Memory regions.
    pub mrs: [MrEntry; MAX_MRS],
    /// CQs.
    pub cqs: [CqEntry; MAX_CQS],
    /// SRQs.
    pub srqs: [SrqEntry; MAX_SRQS],
    /// QPs.
    pub qps: [QpEntry; MAX_QPS],
    /// Completion channels.
    pub chans: [ChanEntry; MAX_CHANS],
}

/// Bits of an object number that select its slot, per table.
pub const fn slot_bits(max: usize) -> u32 {
    max.trailing_zeros()
}

/// Builds an object number from a slot and a generation (24 bits in all;
/// never 0).
pub fn object_number(slot: usize, max: usize, gen: u32) -> u32 {
    let bits = slot_bits(max);
    let g = (gen % ((1 << (24 - bits)) - 1)) + 1;
    (g << bits) | slot as u32
}

/// The slot an object number names.
#[inline(always)]
pub fn slot_of(n: u32, max: usize) -> usize {
    (n as usize) & (max - 1)
}

impl Registry {
    /// Bumps and returns the generation counter.
    pub fn next_gen(&self) -> u32 {
        self.header.gen.fetch_add(1, Ordering::Relaxed)
    }

    /// Claims a free segment slot.
    pub fn claim_seg(&self) -> Option<usize> {
        claim(&self.segs[..], &self.header.hints.segs, |e| &e.state)
    }

    /// Claims a free memory-region slot.
    pub fn claim_mr(&self) -> Option<usize> {
        claim(&self.mrs[..], &self.header.hints.mrs, |e| &e.state)
    }

    /// Claims a free CQ slot.
    pub fn claim_cq(&self) -> Option<usize> {
        claim(&self.cqs[..], &self.header.hints.cqs, |e| &e.state)
    }

    /// Claims a free SRQ slot.
    pub fn claim_srq(&self) -> Option<usize> {
        claim(&self.srqs[..], &self.header.hints.srqs, |e| &e.state)
    }

    /// Claims a free QP slot (QPs, DCIs and DCTs).
    pub fn claim_qp(&self) -> Option<usize> {
        claim(&self.qps[..], &self.header.hints.qps, |e| &e.state)
    }

    /// Claims a free completion-channel slot.
    pub fn claim_chan(&self) -> Option<usize> {
        claim(&self.chans[..], &self.header.hints.chans, |e| &e.state)
    }
}

/// Claims a free slot of a table (`state` FREE → CLAIMED, a compare-exchange),
/// scanning from the slot `hint` names and wrapping, and moves `hint` past
/// the slot claimed. Slots are freed in any order, but the cursor keeps
/// moving on, so a claim passes few live slots: O(1) amortised while the table
/// is not nearly full. `hint` is only a starting point; a stale or racing
/// value costs a longer scan, never a wrong claim.
pub fn claim<T>(table: &[T], hint: &AtomicU32, state: impl Fn(&T) -> &AtomicU32) -> Option<usize> {
    let n = table.len();
    if n == 0 {
        return None;
    }
    let start = hint.load(Ordering::Relaxed) as usize % n;
    let take = |i: usize| {
        state(&table[i])
            .compare_exchange(FREE, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    };
    let slot = (start..n).chain(0..start).find(|&i| take(i))?;
    hint.store(((slot + 1) % n) as u32, Ordering::Relaxed);
    Some(slot)
}

// The groups above start on cache lines of their own.
const _: () = {
    assert!(std::mem::offset_of!(CqEntry, lock) == 64);
    assert!(std::mem::size_of::<Header>() == 64);
    assert!(std::mem::size_of::<PortEntry>() == 64);
    assert!(std::mem::size_of::<CqEntry>() == 128);
    assert!(std::mem::size_of::<ChanEntry>() == 64);
    assert!(std::mem::offset_of!(SrqEntry, lock) == 64);
    assert!(std::mem::size_of::<SrqEntry>() == 128);
    assert!(std::mem::size_of::<TagSlot>() == 64);
    assert!(std::mem::offset_of!(QpEntry, exec_lock) == 128);
    assert!(std::mem::offset_of!(QpEntry, _retired_rq_lock) == 192);
    assert!(std::mem::offset_of!(QpEntry, rq_ci) == 196);
    assert!(std::mem::size_of::<QpEntry>() == 256);
    // Slots fit the numbering: MR keys keep 8 bits of generation in 32, and
    // object numbers (QPNs, CQNs, SRQNs) keep at least 8 of 24.
    assert!(MAX_MRS <= 1 << 24 && MAX_MRS.is_power_of_two());
    assert!(MAX_QPS <= 1 << 16 && MAX_QPS.is_power_of_two());
    assert!(MAX_CQS <= 1 << 16 && MAX_SRQS <= 1 << 16);
    assert!(MAX_SEGS < NO_SEG as usize);
};

#[cfg(test)]
mod tests {
    use super::*;

    fn table(n: usize) -> Vec<AtomicU32> {
        (0..n).map(|_| AtomicU32::new(FREE)).collect()
    }

    /// Claims go on from the last one, wrap, and find the one free slot of
    /// a full table; a full table has none.
    #[test]
    fn claims_follow_the_cursor_and_wrap() {
        let t = table(4);
        let hint = AtomicU32::new(0);
        let c = || claim(&t[..], &hint, |e| e);
        assert_eq!((c(), c(), c()), (Some(0), Some(1), Some(2)));
        t[0].store(FREE, Ordering::Relaxed);
        // Slot 3 is next, even though slot 0 is free again.
        assert_eq!(c(), Some(3));
        assert_eq!(c(), Some(0));
        assert_eq!(c(), None);
        t[2].store(FREE, Ordering::Relaxed);
        assert_eq!(c(), Some(2));
        // A stale hint past the end still works.
        hint.store(1000, Ordering::Relaxed);
        t[1].store(FREE, Ordering::Relaxed);
        assert_eq!(c(), Some(1));
    }

    /// The numbering still tells slots apart at the new table sizes.
    #[test]
    fn numbers_round_trip_at_full_tables() {
        for slot in [0, 1, MAX_QPS / 2, MAX_QPS - 1] {
            for gen in [0, 7, 254, 255, 1 << 20] {
                let n = object_number(slot, MAX_QPS, gen);
                assert!(n != 0 && n < 1 << 24);
                assert_eq!(slot_of(n, MAX_QPS), slot);
            }
        }
        let key = ((MAX_MRS as u32 - 1) << 8) | 255;
        assert_eq!(slot_of(key >> 8, MAX_MRS), MAX_MRS - 1);
    }
}
