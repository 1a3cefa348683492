//! The receive side: `irecv` writes CTS entries into the peer's FIFO;
//! immediates arriving on the rails' SRQs complete receives once every rail of
//! their mask has signaled; `test` reports sizes; the SRQs are refilled.

use mlx5::sq::Sge;
use mlx5::wr::{PostError, SendOp, SendWr, Wc, WcOpcode, WcStatus};

use super::{check_spans, Comm, CTS_WR};
use crate::buffer::Span;
use crate::cts::{CtsBuffer, CtsEntry, ENTRY_LEN, MAX_BUFFERS};
use crate::error::{CloseReason, Error, ProtocolError};
use crate::imm::{self, Imm};
use crate::rail::Rail;
use crate::record::{Record, RECORD_LEN};
use crate::request::{Kind, Request, Sizes, SlotState};

impl Comm {
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
        let eager = self.is_eager_recv(bufs);
        // A buffer within the threshold needs no CTS: no sender takes the
        // CTS path into it.
        if eager && bufs[0].len <= self.eager {
            return self.irecv_eager_only(bufs, tag, slot, pos);
        }
        let nrails = self.rails.len();
        let r = s % nrails;
        let mut desc = [CtsBuffer::default(); MAX_BUFFERS];
        for (i, b) in bufs.iter().enumerate() {
            desc[i] = CtsBuffer {
                addr: b.addr,
                size: b.len as u32,
                rkeys: b.rkeys,
            };
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
        let gen = self.activate(bufs, tag, slot, pos);
        self.stats.cts[r] += 1;
        self.stats.cts_signaled[r] += u64::from(signaled);
        if eager {
            // A sender may still send it eagerly: its tag too.
            self.recv_eager(s, pos)?;
        }
        Ok(Some(Request {
            comm: self.id,
            kind: Kind::Recv,
            index: u16::from(slot),
            gen,
        }))
    }

    /// Whether a receive of `bufs` may take an eager message.
    fn is_eager_recv(&self, bufs: &[Span]) -> bool {
        self.eager > 0 && bufs.len() == 1
    }

    /// `irecv` of one buffer no larger than the eager threshold: only a tag
    /// (or a message that came first), no CTS.
    fn irecv_eager_only(
        &mut self,
        bufs: &[Span],
        tag: u32,
        slot: u8,
        pos: u64,
    ) -> Result<Option<Request>, Error> {
        let gen = self.activate(bufs, tag, slot, pos);
        self.recv_eager(usize::from(slot), pos)?;
        Ok(Some(Request {
            comm: self.id,
            kind: Kind::Recv,
            index: u16::from(slot),
            gen,
        }))
    }

    /// Makes slot `slot` the Active receive of `bufs` at position `pos`;
    /// returns its generation.
    fn activate(&mut self, bufs: &[Span], tag: u32, slot: u8, pos: u64) -> u32 {
        let st = &mut self.slots[usize::from(slot)];
        st.gen = st.gen.wrapping_add(1);
        st.state = SlotState::Active;
        st.nreqs = bufs.len() as u8;
        st.posted = [0; MAX_BUFFERS];
        for (p, b) in st.posted.iter_mut().zip(bufs) {
            *p = b.len as u32;
        }
        st.expected = 0;
        st.seen = 0;
        st.first_imm = 0;
        st.sizes = [0; MAX_BUFFERS];
        st.tm_tag = None;
        st.tag = tag;
        st.buf = (bufs[0].addr, bufs[0].len);
        st.lkeys = bufs[0].lkeys;
        st.pos = pos;
        self.recv_pos += 1;
        self.stats.recvs += 1;
        st.gen
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

    pub(super) fn poll_recvs(&mut self) {
        self.drain(|rail| rail.rcq, Comm::on_recv_completion);
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
        // An eager message can no longer come for it.
        self.drop_tag(usize::from(slot));
        Ok(())
    }

    /// Tops each rail's SRQ up to the high mark once it is below the low one.
    pub(super) fn refill(&mut self) {
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
