//! The WQE builder: segments are written in place into the reserved BBs; `post`
//! writes the control segment and records the WQE in the table.

use super::{write_atomic_seg, write_data_seg, write_raddr_seg, Payload, SendQueue, Sge};
use crate::prm::{
    ctrl_flags, tm_flags, AddressVector, Ctrl, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, TmCmd,
    TmSeg, WqeOpcode, WQE_SEG_UNIT,
};
use crate::wqe_table::SendTable;

/// A WQE being built in the send queue. Dropping it without
/// [`post`](Self::post) abandons the WQE: nothing is recorded and the producer
/// index does not move.
#[must_use = "a WQE is only queued by post()"]
#[derive(Debug)]
pub struct WqeBuilder<'a, T> {
    sq: &'a mut SendQueue<T>,
    start: u16,
    opcode: u8,
    ds: u8,
    bbs: u16,
    off: usize,
    flags: u8,
    imm: u32,
    force_signal: bool,
    /// A DCI's stream (0 for every other WQE).
    stream: u16,
    /// A tag-matching command: whether it asks for a CQE (its segment's
    /// `CQE_REQ`, which replaces the control segment's `CQ_UPDATE`).
    tm_signal: Option<bool>,
}

impl<'a, T: SendTable> WqeBuilder<'a, T> {
    #[inline(always)]
    pub(super) fn new(sq: &'a mut SendQueue<T>, opcode: WqeOpcode, ds: u8, bbs: u16) -> Self {
        let start = sq.pi;
        Self {
            sq,
            start,
            opcode: opcode as u8,
            ds,
            bbs,
            off: WQE_SEG_UNIT,
            flags: 0,
            imm: 0,
            force_signal: false,
            stream: 0,
            tm_signal: None,
        }
    }

    /// Puts a DCI's address vector (the datagram segment, right after the
    /// control segment) and stream: where the WQE goes.
    #[inline(always)]
    pub(super) fn put_av(&mut self, av: &AddressVector, stream: u16) {
        let mut b = [0u8; DatagramSeg::<()>::LEN];
        DatagramSeg::new_unchecked(&mut b[..]).set(av);
        for part in b.chunks_exact(16) {
            self.sq.seg16(self.start, self.off).copy_from_slice(part);
            self.off += 16;
        }
        self.stream = stream;
    }

    /// Puts a tag-matching command's segment, and for an APPEND its
    /// buffer's data segment (`buf`, written whatever its length).
    #[inline]
    pub(super) fn put_tm(&mut self, cmd: &TmCmd, buf: Option<Sge>) {
        let seg = self.sq.seg(self.start, self.off, TmSeg::<()>::LEN);
        TmSeg::new_unchecked(seg).set(cmd);
        self.off += TmSeg::<()>::LEN;
        if let Some(b) = buf {
            let seg = self.sq.seg16(self.start, self.off);
            DataSeg::new_unchecked(&mut seg[..]).set(b.len, b.lkey, b.addr);
            self.off += 16;
        }
        self.tm_signal = Some(cmd.flags & tm_flags::CQE_REQ != 0);
    }

    #[inline(always)]
    pub(super) fn set_imm(&mut self, imm: u32) {
        self.imm = imm;
    }

    #[inline(always)]
    pub(super) fn put_raddr(&mut self, raddr: u64, rkey: u32) {
        let seg = self.sq.seg16(self.start, self.off);
        write_raddr_seg(seg, raddr, rkey);
        self.off += 16;
    }

    #[inline(always)]
    pub(super) fn put_atomic(&mut self, swap_add: u64, compare: u64) {
        let seg = self.sq.seg16(self.start, self.off);
        write_atomic_seg(seg, swap_add, compare);
        self.off += 16;
    }

    #[inline(always)]
    pub(super) fn put_payload(&mut self, p: &Payload<'_>) {
        match p {
            Payload::None => {}
            Payload::Sges(s) => self.put_sges(s),
            Payload::Inline(d) => self.put_inline(d),
            Payload::InlineSges(d, s) => {
                self.put_inline(d);
                self.put_sges(s);
            }
        }
    }

    #[inline(always)]
    fn put_sges(&mut self, sges: &[super::Sge]) {
        for s in sges.iter().filter(|s| s.len != 0) {
            let seg = self.sq.seg16(self.start, self.off);
            write_data_seg(seg, s);
            self.off += 16;
        }
    }

    #[inline(always)]
    fn put_inline(&mut self, d: &[u8]) {
        let total = InlineSeg::wqe_bytes(d.len());
        let seg = self.sq.seg(self.start, self.off, total);
        const INL: usize = InlineSeg::<()>::LEN;
        InlineSeg::new_unchecked(&mut seg[..INL]).set_len(d.len() as u32);
        seg[INL..INL + d.len()].copy_from_slice(d);
        seg[INL + d.len()..].fill(0);
        self.off += total;
    }

    /// Waits for earlier READs and atomics of this QP before executing
    /// (`MLX5_WQE_CTRL_FENCE`).
    #[inline(always)]
    pub fn fence(mut self) -> Self {
        self.flags |= ctrl_flags::FENCE;
        self
    }

    /// Raises a solicited event at the responder (SEND / WRITE_IMM).
    #[inline(always)]
    pub fn solicited(mut self) -> Self {
        self.flags |= ctrl_flags::SOLICITED;
        self
    }

    /// Requests a CQE for this WQE whatever the signal interval says.
    #[inline(always)]
    pub fn signaled(mut self) -> Self {
        self.force_signal = true;
        self
    }

    /// Size of the WQE in 16-byte units.
    pub fn ds(&self) -> u8 {
        self.ds
    }

    /// The WQE counter this WQE will have.
    pub fn counter(&self) -> u16 {
        self.start
    }

    /// Finishes the WQE: writes the control segment, records `input` in the WQE
    /// table and advances the producer index. Returns the WQE counter. The NIC
    /// sees it after the next [`ring_doorbell`](SendQueue::ring_doorbell).
    #[inline(always)]
    pub fn post(self, input: T::Input) -> u16 {
        debug_assert_eq!(self.off, usize::from(self.ds) * WQE_SEG_UNIT);
        let (signaled, cq_update) = match self.tm_signal {
            Some(s) => (s, false),
            None => {
                let s = self.force_signal
                    || T::ALWAYS_SIGNALED
                    || T::wants_signal(&input)
                    || self.sq.interval_says_signal(self.bbs);
                (s, s)
            }
        };
        let flags = self.flags | if cq_update { ctrl_flags::CQ_UPDATE } else { 0 };
        let (start, bbs, qpn) = (self.start, self.bbs, self.sq.qpn);
        let ctrl = self.sq.seg16(start, 0);
        CtrlSeg::new_unchecked(ctrl).set_all(Ctrl {
            wqe_index: start,
            opcode: self.opcode,
            qpn,
            fm_ce_se: flags,
            ds: self.ds,
            imm: self.imm,
            ..Ctrl::default()
        });
        if self.stream != 0 {
            CtrlSeg::new_unchecked(self.sq.seg16(start, 0)).set_dci_stream_channel_id(self.stream);
        }
        self.sq
            .table
            .record(start, start.wrapping_add(bbs), Some(input), signaled);
        self.sq.note_posted(start, bbs, signaled);
        start
    }
}
