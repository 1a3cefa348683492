//! One connection's state: the send ring that mirrors the peer's receive ring,
//! the receive ring the peer writes into, batching, and the flow-control
//! bookkeeping of docs/protocol.md (`in_flight + 2R <= C`).

use std::collections::VecDeque;

use mlx5::device::Mr;

use crate::encoding::*;
use crate::error::CloseReason;
use crate::fifo::Fifo;
use crate::slab::Slab;
use crate::transport::{QueueError, Sge, Transport};

/// How much of a received batch is prefetched before it is parsed.
const PREFETCH_BYTES: u64 = 4096;

/// Where the peer's receive ring and consumer word are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remote {
    pub ring_addr: u64,
    pub ring_rkey: u32,
    pub consumer_addr: u64,
    pub consumer_rkey: u32,
}

/// A closed range of the send ring, ready to be posted as one WRITE_IMM.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ready {
    /// Position of the range's first byte (virtual, monotonic).
    pub pos: u64,
    /// Bytes to write.
    pub len: u64,
    /// Immediate: the batch size in 32-byte blocks (a wrap marker counts to the
    /// ring's end).
    pub imm: u32,
}

/// Per-endpoint counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Batches (WRITE_IMMs) sent, wrap markers included.
    pub batches: u64,
    /// Wrap markers sent.
    pub wraps: u64,
    /// RDMA READs of the peer's consumer position (the fallback when piggybacked
    /// positions are stale).
    pub reads: u64,
    /// Requests sent and received, responses sent and received.
    pub calls: u64,
    /// See `calls`.
    pub requests: u64,
    /// See `calls`.
    pub replies: u64,
    /// See `calls`.
    pub responses: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// Created, waiting for `connect`.
    Idle,
    Open,
    Closed(CloseReason),
}

pub(crate) struct Ep<U, T: Transport> {
    /// Generation of the endpoint's slot (ids of removed endpoints do not match).
    pub gen: u32,
    pub sq: T::Sq,
    pub send_mr: Mr,
    pub send_base: *mut u8,
    pub send_lkey: u32,
    /// Size of the peer's receive ring (and of our send ring): C.
    pub send_size: u64,
    pub recv_mr: Mr,
    pub recv_base: *const u8,
    pub recv_size: u64,
    pub remote: Option<Remote>,
    pub state: State,

    // Producer side.
    pub send_producer: u64,
    pub posted_pos: u64,
    pub meta_pos: Option<u64>,
    pub batch_count: u32,
    pub ready: VecDeque<Ready>,
    pub remote_consumer: u64,
    /// R: bytes reserved in the peer's ring for responses we owe.
    pub resp_reservation: u64,
    pub max_resp: u64,
    /// Credit the peer granted us for requests.
    pub peer_credit: u64,
    /// Credit we granted the peer that it has not used yet.
    pub peer_unused_credit: u64,

    // Consumer side.
    /// End of the batches received (the peer's producer, as far as we know).
    pub recv_producer: u64,
    /// Consumer position published to the peer.
    pub last_recv_pos: u64,

    /// Header positions of received requests not yet taken by `recv()`:
    /// consumption is not released past the oldest.
    pub queued: Fifo<u64>,
    pub pending: Slab<U>,
    pub read_inflight: bool,
    pub want_read: bool,
    pub dirty: bool,
    /// A reply written while the context held replies
    /// ([`crate::Context::set_hold_replies`]) holds the endpoint back from
    /// [`crate::Context::flush_unheld`] until the poll after epoch
    /// `held_at - 1` (0: never held).
    pub held_at: u64,
    pub consumed_dirty: bool,
    /// The application's tag ([`crate::Context::set_tag`]).
    pub tag: u32,
    pub stats: EndpointStats,
}

// SAFETY: the raw ring pointers point into MRs the endpoint owns (`send_mr`,
// `recv_mr`), which move with it; the other fields are Send (the user data by
// `U: Send`, the send queue by the bound, the rest by their own types).
unsafe impl<U: Send, T: Transport> Send for Ep<U, T> where T::Sq: Send {}

impl<U, T: Transport> Ep<U, T> {
    #[inline(always)]
    pub fn in_flight(&self) -> u64 {
        self.send_producer - self.remote_consumer
    }

    #[inline(always)]
    fn send_off(&self, pos: u64) -> u64 {
        pos & (self.send_size - 1)
    }

    /// `in_flight + 2R <= C`, checked at every state change in debug builds.
    #[inline(always)]
    pub fn check_invariant(&self) {
        debug_assert!(
            self.in_flight() + 2 * self.resp_reservation <= self.send_size,
            "flow-control invariant violated: in_flight {} + 2R {} > C {}",
            self.in_flight(),
            2 * self.resp_reservation,
            self.send_size
        );
    }

    /// Ring bytes a message of `msg` padded bytes needs now, including a new
    /// batch's metadata and, when it would not fit before the ring's end, the
    /// wasted tail, the wrap marker and the next batch's metadata.
    #[inline]
    pub fn space_needed(&self, msg: u64) -> u64 {
        let off = self.send_off(self.send_producer);
        let head = if self.meta_pos.is_some() {
            0
        } else {
            FLOW_METADATA_SIZE
        };
        if off + head + msg < self.send_size {
            head + msg
        } else {
            // Close the batch, wrap marker at `off` (the tail counts as used),
            // new batch at the ring's start.
            (self.send_size - off) + FLOW_METADATA_SIZE + msg
        }
    }

    /// Credit to grant with the batch being closed (docs/protocol.md, "Credit"): bounded by the
    /// invariant and by the reservation policy, aligned down.
    fn take_grant(&mut self) -> u64 {
        let by_invariant =
            ((self.send_size - self.in_flight()) / 2).saturating_sub(self.resp_reservation);
        let by_policy = self.max_resp.saturating_sub(self.resp_reservation);
        let g = by_invariant.min(by_policy) & !(ALIGNMENT - 1);
        self.resp_reservation += g;
        self.peer_unused_credit += g;
        self.check_invariant();
        g
    }

    /// Writes a batch's metadata. A grant is computed only when `poll()` closes
    /// a batch: a batch closed in the middle of `call`/`reply` (at a wrap) must
    /// not reserve space the message being written was promised.
    fn write_meta(&mut self, pos: u64, count: u32, grant: bool) {
        let grant = if grant { self.take_grant() } else { 0 };
        let off = self.send_off(pos) as usize;
        // SAFETY: 32 bytes at an aligned offset inside the send ring.
        let b = unsafe {
            std::slice::from_raw_parts_mut(self.send_base.add(off), FLOW_METADATA_SIZE as usize)
        };
        FlowMetadata::new_checked(b)
            .expect("32 bytes")
            .set(self.last_recv_pos, grant, count, pos);
    }

    /// Closes the current batch, queueing it for posting; `grant` adds a credit
    /// grant (only from `poll()`).
    pub fn close_batch(&mut self, grant: bool) {
        if let Some(meta) = self.meta_pos.take() {
            let count = self.batch_count;
            self.write_meta(meta, count, grant);
            let len = self.send_producer - meta;
            self.ready.push_back(Ready {
                pos: meta,
                len,
                imm: encode_imm(len),
            });
            self.batch_count = 0;
        }
    }

    /// Closes the batch and writes a wrap marker at the current position; the
    /// producer moves to the ring's next start.
    fn wrap(&mut self) {
        self.close_batch(false);
        let pos = self.send_producer;
        let tail = self.send_size - self.send_off(pos);
        self.write_meta(pos, WRAP_MESSAGE_COUNT, false);
        self.ready.push_back(Ready {
            pos,
            len: FLOW_METADATA_SIZE,
            imm: encode_imm(tail),
        });
        self.send_producer += tail;
        self.stats.wraps += 1;
    }

    /// Appends a message to the current batch (starting one, and wrapping,
    /// as needed). The caller has checked ring space (requests) or holds a
    /// reservation (responses).
    #[inline]
    pub fn write_message(&mut self, call_id: u32, piggyback: u32, payload: &[u8]) {
        self.write_message_with(call_id, piggyback, payload.len(), |b| {
            copy_small(b, payload)
        });
    }

    /// [`write_message`](Self::write_message) of a `len`-byte payload that
    /// `fill` writes in place, into the ring (every byte of the slice it is
    /// given).
    #[inline]
    pub fn write_message_with(
        &mut self,
        call_id: u32,
        piggyback: u32,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) {
        let msg = padded_message_size(len);
        if self.meta_pos.is_some() {
            if self.send_off(self.send_producer) + msg >= self.send_size {
                self.wrap();
            }
        } else if self.send_off(self.send_producer) + FLOW_METADATA_SIZE + msg >= self.send_size {
            self.wrap();
        }
        if self.meta_pos.is_none() {
            self.meta_pos = Some(self.send_producer);
            self.send_producer += FLOW_METADATA_SIZE;
        }
        let off = self.send_off(self.send_producer) as usize;
        // SAFETY: `msg` bytes at `off` lie before the ring's end (checked above,
        // strict `<`), inside the send ring MR.
        let b = unsafe { std::slice::from_raw_parts_mut(self.send_base.add(off), msg as usize) };
        // The padding (under 32 bytes) is zeroed by clearing the last 32-byte
        // block first; header and payload then overwrite what they cover.
        let m = b.len();
        b[m - ALIGNMENT as usize..].fill(0);
        MessageHeader::new_checked(&mut b[..HEADER_SIZE])
            .expect("12 bytes")
            .set(call_id, piggyback, len as u32);
        fill(&mut b[HEADER_SIZE..HEADER_SIZE + len]);
        self.send_producer += msg;
        self.batch_count += 1;
        self.check_invariant();
    }

    /// Posts every ready range as a WRITE_IMM and rings once. Ranges the SQ has
    /// no room for stay queued. Returns false when something is left, or the
    /// device's code when it refused a request (the endpoint must close).
    /// Inlined into the context's flush: called out of line, its loop's
    /// branches predicted worse (+5 % per RPC at depth 1 in the step bench).
    #[inline(always)]
    pub fn post_ready(&mut self, sh: &mut T::Shared) -> Result<bool, u32> {
        let Some(remote) = self.remote else {
            return Ok(true);
        };
        let mut failed = None;
        let mut posted = 0;
        while let Some(r) = self.ready.front().copied() {
            let off = self.send_off(r.pos);
            let sge = Sge {
                addr: self.send_base as u64 + off,
                len: r.len as u32,
                lkey: self.send_lkey,
            };
            match T::post_write_imm(
                sh,
                &mut self.sq,
                sge,
                remote.ring_addr + off,
                remote.ring_rkey,
                r.imm,
            ) {
                Ok(()) => {}
                Err(QueueError::Full) => break,
                Err(QueueError::Failed(code)) => {
                    failed = Some(code);
                    break;
                }
            }
            self.ready.pop_front();
            self.posted_pos = r.pos + r.len;
            self.stats.batches += 1;
            posted += 1;
        }
        if posted > 0 {
            T::ring(sh, &mut self.sq);
        }
        match failed {
            Some(code) => Err(code),
            None => Ok(self.ready.is_empty()),
        }
    }

    /// Posts the RDMA READ of the peer's consumer word into `dst`: false when
    /// the SQ has no room, the device's code when it refused the request.
    pub fn post_read(&mut self, sh: &mut T::Shared, dst: Sge) -> Result<bool, u32> {
        let Some(remote) = self.remote else {
            return Ok(false);
        };
        match T::post_read(
            sh,
            &mut self.sq,
            dst,
            remote.consumer_addr,
            remote.consumer_rkey,
        ) {
            Ok(()) => {
                T::ring(sh, &mut self.sq);
                self.read_inflight = true;
                self.stats.reads += 1;
                Ok(true)
            }
            Err(QueueError::Full) => Ok(false),
            Err(QueueError::Failed(code)) => Err(code),
        }
    }

    /// Takes a consumer position the peer reported (piggybacked or read).
    pub fn update_remote_consumer(&mut self, pos: u64) -> Result<(), &'static str> {
        if pos % ALIGNMENT != 0 {
            return Err("consumer position not aligned");
        }
        if pos > self.posted_pos {
            return Err("consumer position beyond what was sent");
        }
        if pos > self.remote_consumer {
            self.remote_consumer = pos;
        }
        self.check_invariant();
        Ok(())
    }

    /// Asks for the cache lines of a batch of `delta` bytes that starts at the
    /// receive producer (its first few KiB), before it is validated and
    /// parsed, so they arrive together instead of one miss per header.
    #[inline]
    pub fn prefetch_batch(&self, delta: u64) {
        let off = self.recv_producer & (self.recv_size - 1);
        let len = delta.min(PREFETCH_BYTES).min(self.recv_size - off);
        for line in (0..len).step_by(64) {
            mlx5::prefetch(self.recv_base.wrapping_add((off + line) as usize));
        }
    }

    /// Bytes of the receive ring at position `pos` (`len` bytes, not crossing
    /// the ring's end).
    #[inline(always)]
    pub fn recv_slice(&self, pos: u64, len: u64) -> &[u8] {
        let off = (pos & (self.recv_size - 1)) as usize;
        debug_assert!(off as u64 + len <= self.recv_size);
        // SAFETY: inside the receive ring MR; the peer writes only beyond our
        // published consumer position, and we read only completed batches.
        unsafe { std::slice::from_raw_parts(self.recv_base.add(off), len as usize) }
    }
}

/// Copies `src` to the start of `dst` (`dst.len() >= src.len()`). Payloads up
/// to 64 bytes move as two overlapping fixed-size copies instead of a call
/// into the C library's `memcpy`, which costs more than the copy at RPC sizes.
#[inline(always)]
pub(crate) fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    let dst = &mut dst[..n];
    match n {
        8..=16 => {
            dst[..8].copy_from_slice(&src[..8]);
            dst[n - 8..].copy_from_slice(&src[n - 8..]);
        }
        17..=32 => {
            dst[..16].copy_from_slice(&src[..16]);
            dst[n - 16..].copy_from_slice(&src[n - 16..]);
        }
        33..=64 => {
            dst[..32].copy_from_slice(&src[..32]);
            dst[n - 32..].copy_from_slice(&src[n - 32..]);
        }
        _ => dst.copy_from_slice(src),
    }
}

#[cfg(test)]
mod copy_tests {
    use super::copy_small;

    #[test]
    fn copy_small_copies_exactly_the_source_at_every_length() {
        let src: Vec<u8> = (0..200u8).collect();
        for n in 0..=130 {
            let mut dst = [0xeeu8; 160];
            copy_small(&mut dst, &src[..n]);
            assert_eq!(&dst[..n], &src[..n], "length {n}");
            assert!(dst[n..].iter().all(|&b| b == 0xee), "length {n}: beyond");
        }
    }
}
