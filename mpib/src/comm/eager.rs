//! Eager transfers over tag matching (see `crate::eager`): `isend` of one
//! buffer of at most the communicator's eager threshold sends at once;
//! `irecv` of one buffer appends a tag for its FIFO position (and writes
//! the CTS too when its buffer is larger than the threshold, for a sender
//! that takes the CTS path); the TM-SRQs' completions finish receives.
//!
//! A message that arrives before its receive (or while the receive's tag
//! cannot match yet) lands in a bounce buffer: it is parked until its
//! `irecv`, which copies it out, and the NIC is told it was handled (a
//! sync), so that later tags match.

use std::time::Instant;

use mlx5::prm::TmhOpcode;
use mlx5::sq::Sge;
use mlx5::tm::{TagHandle, TmEvent};
use mlx5::wr::{SendOp, SendWr, TmWc, WcStatus};

use super::Comm;
use crate::buffer::Span;
use crate::eager::TMH_LEN;
use crate::error::{CloseReason, Error, ProtocolError};
use crate::request::{Kind, Request, SlotState};

/// An eager message that came before its receive, in a bounce buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Parked {
    rail: usize,
    pos: u64,
    app_ctx: u32,
    bounce: u64,
    /// Payload bytes.
    len: u32,
}

impl Comm {
    /// Whether a transfer of `bufs` goes eagerly.
    pub(super) fn is_eager(&self, bufs: &[Span]) -> bool {
        self.eager > 0 && bufs.len() == 1 && bufs[0].len <= self.eager
    }

    /// The rail that carries the eager message of FIFO position `pos`.
    fn eager_rail(&self, pos: u64) -> usize {
        (pos % self.rails.len() as u64) as usize
    }

    /// `isend`'s eager path: the header and `buf` in one SEND, now.
    pub(super) fn isend_eager(&mut self, buf: &Span, tag: u32) -> Result<Option<Request>, Error> {
        let Some((idx, _)) = self.sends.take() else {
            return Ok(None);
        };
        let pos = self.send_pos;
        let r = self.eager_rail(pos);
        let rail = &mut self.rails[r];
        let Some(e) = rail.eager.as_ref() else {
            self.sends.release(idx);
            return Err(Error::Invalid(
                "eager transfer on a rail without tag matching",
            ));
        };
        let sges = [
            e.stage_header(idx, pos, tag),
            Sge {
                addr: buf.addr,
                len: buf.len as u32,
                lkey: buf.lkeys[r],
            },
        ];
        let n = if buf.len == 0 { 1 } else { 2 };
        let wr = SendWr {
            wr_id: u64::from(idx) << 8 | r as u64,
            op: SendOp::Send,
            sges: &sges[..n],
            remote: (0, 0),
            signaled: true,
            fence: false,
        };
        if let Err(why) = rail.dom.post_send(e.qp, &wr) {
            self.sends.release(idx);
            return self.fail(CloseReason::Post {
                rail: r,
                why: why.to_string(),
            });
        }
        let now = Instant::now();
        self.meters[r].posted(buf.len, now);
        self.stats.rail_bytes[r] += buf.len;
        self.stats.eager_sends += 1;
        self.stats.sends += 1;
        self.send_pos += 1;
        let Some(req) = self.sends.get_mut(idx) else {
            return Err(Error::Invalid("send request"));
        };
        req.nreqs = 1;
        req.sizes[0] = buf.len as u32;
        req.pending = 1 << r;
        req.rail_bytes = [0; 2];
        req.rail_bytes[r] = buf.len;
        req.posted_at = Some(now);
        Ok(Some(Request {
            comm: self.id,
            kind: Kind::Send,
            index: idx,
            gen: req.gen,
        }))
    }

    /// For `irecv` of one buffer at FIFO position `pos`, into slot `s`
    /// (already set up, Active): takes a parked message for `pos` if one
    /// came first (the slot is then Done), else appends the tag. Returns
    /// whether the receive is already complete.
    pub(super) fn recv_eager(&mut self, s: usize, pos: u64) -> Result<bool, Error> {
        if let Some(k) = self.parked.iter().position(|p| p.pos == pos) {
            let p = self.parked.swap_remove(k);
            self.unpark(s, p)?;
            return Ok(true);
        }
        let r = self.eager_rail(pos);
        let (addr, len) = self.slots[s].buf;
        let rail = &mut self.rails[r];
        let Some(e) = rail.eager.as_ref() else {
            return Err(Error::Invalid(
                "eager receive on a rail without tag matching",
            ));
        };
        let sge = Sge {
            addr,
            len: len as u32,
            lkey: self.slots[s].lkeys[r],
        };
        let bufs: &[Sge] = if len == 0 { &[] } else { &[sge] };
        match rail.dom.tm_add(e.tm, (pos, !0), bufs, pos) {
            Ok(h) => {
                self.slots[s].tm_tag = Some(h);
                Ok(false)
            }
            Err(why) => self.fail(CloseReason::Post {
                rail: r,
                why: why.to_string(),
            }),
        }
    }

    /// Copies parked message `p` into slot `s`'s buffer and completes it.
    fn unpark(&mut self, s: usize, p: Parked) -> Result<(), Error> {
        let st = self.slots[s];
        let bad = |why| ProtocolError::Eager {
            rail: p.rail,
            pos: p.pos,
            why,
        };
        if p.app_ctx != st.tag {
            return self.fail(bad("its tag is not the receive's"));
        }
        if u64::from(p.len) > st.buf.1 {
            return self.fail(bad("more bytes than the receive's buffer"));
        }
        let rail = &mut self.rails[p.rail];
        if let Some(e) = rail.eager.as_ref() {
            let from = e.bounce_at(p.bounce) + TMH_LEN;
            // SAFETY: the bounce buffer holds the message (`p.len` payload
            // bytes after its header, checked against the buffer's size
            // when it was parked); the receive's buffer is registered
            // memory the caller gave `irecv`, valid and ours to write
            // until the receive is tested done (the contract of
            // `Comm::register` and `Buffer`).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    from as *const u8,
                    st.buf.0 as *mut u8,
                    p.len as usize,
                )
            };
            if let Err(why) = e.repost(&mut rail.dom, p.bounce) {
                return self.fail(CloseReason::Post {
                    rail: p.rail,
                    why: why.to_string(),
                });
            }
        }
        let st = &mut self.slots[s];
        st.sizes[0] = p.len;
        st.state = SlotState::Done;
        self.stats.eager_recvs += 1;
        Ok(())
    }

    /// Removes the tag of slot `s`, if it has one (its receive completed
    /// another way).
    pub(super) fn drop_tag(&mut self, s: usize) {
        let Some(h) = self.slots[s].tm_tag.take() else {
            return;
        };
        let r = self.eager_rail(self.slots[s].pos);
        let rail = &mut self.rails[r];
        if let Some(tm) = rail.eager.as_ref().map(|e| e.tm) {
            if let Err(why) = rail.dom.tm_remove(tm, h) {
                self.shut(CloseReason::Post {
                    rail: r,
                    why: why.to_string(),
                });
            }
        }
    }

    /// Polls every rail's TM-SRQ.
    pub(super) fn poll_eager(&mut self) {
        if self.eager == 0 {
            return;
        }
        let mut out = std::mem::take(&mut self.tm_wcs);
        self.drain_each(
            &mut out,
            |rail, out| {
                let tm = rail.eager.as_ref()?.tm;
                Some(rail.dom.poll_tm(tm, super::POLL_BATCH, out))
            },
            |c, r, w| c.on_tm(r, w),
        );
        self.tm_wcs = out;
    }

    fn on_tm(&mut self, r: usize, w: &TmWc) {
        let res = match *w {
            TmWc::Wc(wc) if wc.status != WcStatus::Success => {
                self.shut(CloseReason::Transport {
                    rail: r,
                    status: wc.status,
                    vendor_err: wc.vendor_err,
                });
                return;
            }
            TmWc::Wc(_) => Err(ProtocolError::UnexpectedCompletion { rail: r }),
            TmWc::Tm { event, srq_wr_id } => self.on_tm_event(r, event, srq_wr_id),
        };
        if let Err(p) = res {
            self.shut(CloseReason::Protocol(p));
        }
    }

    fn on_tm_event(
        &mut self,
        r: usize,
        event: TmEvent<u64>,
        srq_wr_id: Option<u64>,
    ) -> Result<(), ProtocolError> {
        let bad = |pos, why| ProtocolError::Eager { rail: r, pos, why };
        match event {
            TmEvent::Added { sync_req: true, .. } => self.sync(r),
            TmEvent::Added { .. } | TmEvent::Synced => {}
            TmEvent::Removed { removed, tag, .. } => {
                if !removed {
                    // The tag's receive completed by the CTS path, and a
                    // message for it came as well.
                    return Err(bad(u64::from(tag.index()), "sent both eagerly and by CTS"));
                }
            }
            TmEvent::Matched {
                tag,
                info,
                len,
                truncated,
                rndv_incomplete,
                data,
                ..
            } => {
                let Some(s) = self.slot_of_tag(r, tag, data) else {
                    return Err(bad(data.unwrap_or(0), "no receive holds its tag"));
                };
                let pos = self.slots[s].pos;
                if info.is_some_and(|i| i.app_ctx != self.slots[s].tag) {
                    return Err(bad(pos, "its tag is not the receive's"));
                }
                if truncated || rndv_incomplete {
                    return Err(bad(pos, "more bytes than the receive's buffer"));
                }
                if let (Some(n), Some(_)) = (len, data) {
                    let st = &mut self.slots[s];
                    st.tm_tag = None;
                    st.sizes[0] = n;
                    st.state = SlotState::Done;
                    self.stats.eager_recvs += 1;
                }
            }
            TmEvent::Unexpected { len, .. } => {
                let b = srq_wr_id.ok_or(bad(0, "no bounce buffer"))?;
                self.on_unexpected(r, b, len)?;
                self.sync(r);
            }
            TmEvent::NoTag { .. } => return Err(bad(0, "a message without a tag")),
        }
        Ok(())
    }

    /// The slot whose tag is `tag` in rail `r`'s list (named by its
    /// position `data` on the last CQE, by the handle before: handles are
    /// per rail).
    fn slot_of_tag(&self, r: usize, tag: TagHandle, data: Option<u64>) -> Option<usize> {
        let depth = self.res.depth as u64;
        let on_r = |st: &crate::request::RecvSlot| self.eager_rail(st.pos) == r;
        let s = match data {
            Some(pos) => (pos % depth) as usize,
            None => self
                .slots
                .iter()
                .position(|st| st.tm_tag == Some(tag) && on_r(st))?,
        };
        let st = &self.slots[s];
        (st.state == SlotState::Active
            && st.tm_tag == Some(tag)
            && on_r(st)
            && data.is_none_or(|p| p == st.pos))
        .then_some(s)
    }

    /// A message in bounce buffer `b` of rail `r`, `len` bytes with its
    /// header: matched in software to its receive if that is posted (its
    /// tag could not match yet), else parked.
    fn on_unexpected(&mut self, r: usize, b: u64, len: u32) -> Result<(), ProtocolError> {
        let Some(e) = self.rails[r].eager.as_ref() else {
            return Err(ProtocolError::UnexpectedCompletion { rail: r });
        };
        let (pos, app_ctx, op) = e.bounce_header(b);
        let bad = |why| ProtocolError::Eager { rail: r, pos, why };
        if op != u8::from(TmhOpcode::Eager) || (len as usize) < TMH_LEN {
            return Err(bad("not an eager message"));
        }
        if pos % self.rails.len() as u64 != r as u64 {
            return Err(bad("on another rail than its position's"));
        }
        let p = Parked {
            rail: r,
            pos,
            app_ctx,
            bounce: b,
            len: len - TMH_LEN as u32,
        };
        self.stats.unexpected += 1;
        if pos >= self.recv_pos {
            if pos >= self.recv_pos + self.parked.capacity() as u64 {
                return Err(bad("too far ahead of the receives"));
            }
            self.parked.push(p);
            return Ok(());
        }
        let s = (pos % self.res.depth as u64) as usize;
        let st = self.slots[s];
        if st.state != SlotState::Active || st.pos != pos || st.tm_tag.is_none() {
            return Err(bad("its receive is not waiting for an eager message"));
        }
        self.drop_tag(s);
        // A refusal closes the communicator with its reason, in `unpark`.
        let _ = self.unpark(s, p);
        Ok(())
    }

    /// Tells rail `r`'s NIC that software has dealt with every unexpected
    /// message it reported.
    fn sync(&mut self, r: usize) {
        let rail = &mut self.rails[r];
        let Some(tm) = rail.eager.as_ref().map(|e| e.tm) else {
            return;
        };
        let res = rail
            .dom
            .tm_unexpected_seen(tm)
            .and_then(|n| rail.dom.tm_sync(tm, n, false));
        if let Err(why) = res {
            self.shut(CloseReason::Post {
                rail: r,
                why: why.to_string(),
            });
        }
    }
}
