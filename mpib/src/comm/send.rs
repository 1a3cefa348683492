//! The send side: `isend` splits each buffer between the rails from fresh
//! telemetry and posts the fast path (data and signal in one WR per rail) or
//! the record path; send completions feed the telemetry.

use std::sync::atomic::{fence, Ordering};
use std::time::Instant;

use mlx5::sq::Sge;
use mlx5::wr::{PostError, SendOp, SendWr, Wc, WcStatus};

use super::{check_spans, Comm, CTS_WR};
use crate::buffer::Span;
use crate::cts::{CtsBuffer, CtsEntry, ENTRY_LEN, MAX_BUFFERS};
use crate::error::{CloseReason, CtsError, Error, ProtocolError};
use crate::imm::{self, Imm, SIZE_Q_SENTINEL};
use crate::policy;
use crate::rail::Rail;
use crate::record::{self, Record, RECORD_LEN};
use crate::request::{Kind, Request};

/// A transfer's buffers as the rails carry them: each source, its
/// destination at the peer, and its bytes on each rail.
#[derive(Clone, Copy)]
struct Parts<'a> {
    bufs: &'a [Span],
    dst: &'a [CtsBuffer],
    share: &'a [[u64; 2]],
}

impl Comm {
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
        if self.is_eager(bufs) {
            return self.isend_eager(&bufs[0], tag);
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
        // With eager transfers, positions sent eagerly leave their slot's
        // last CTS older than `old` (or never replace it): any older head
        // is "not yet".
        if head == old || (self.eager > 0 && head < seq) {
            return Ok(None);
        }
        // The head changed: read the whole entry once, then judge the copy.
        fence(Ordering::Acquire);
        inbox.read(off, &mut raw);
        let Some(e) = CtsEntry::new_checked(&raw[..]) else {
            return Err(Error::Invalid("entry"));
        };
        if e.seq() == seq && (e.seq_tail() == old || (self.eager > 0 && e.seq_tail() < seq)) {
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
        let (share, mask) = self.split_over_rails(bufs);
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
            self.stage_record(leader, slot, &sizes[..n]);
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
                let parts = Parts {
                    bufs,
                    dst,
                    share: &share[..n],
                };
                self.post_with_record(r, idx, imm, slot, r == leader, parts)
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

    /// Splits each buffer between the rails, by the policy on fresh
    /// telemetry (each buffer's share counted as outstanding for the next
    /// one's decision). Returns, per buffer, its bytes on rail 0 and on
    /// rail 1, and the mask of the rails that carry bytes (rail 0 alone for
    /// a 0-byte transfer: it carries the signal).
    fn split_over_rails(&mut self, bufs: &[Span]) -> ([[u64; 2]; MAX_BUFFERS], u8) {
        let nrails = self.rails.len();
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
        (share, mask)
    }

    /// Writes the record of a transfer's buffer `sizes` into the staging
    /// area of rail `leader`, at `slot`'s place, for the record path.
    fn stage_record(&self, leader: usize, slot: u8, sizes: &[u32]) {
        let mut rec = [0u8; RECORD_LEN];
        if let Some(mut v) = Record::new_checked(&mut rec[..]) {
            v.set(sizes);
        }
        let lr = &self.rails[leader];
        lr.staging.write(lr.record_off(slot), &rec);
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
    fn post_with_record(
        &mut self,
        r: usize,
        idx: u16,
        imm: u32,
        slot: u8,
        leader: bool,
        parts: Parts<'_>,
    ) -> Result<(), PostError> {
        let Parts { bufs, dst, share } = parts;
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

    pub(super) fn poll_sends(&mut self) {
        self.drain(
            |rail| rail.scq,
            |c, r, wc| c.on_send_completion(r, wc, Instant::now()),
        );
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
}
