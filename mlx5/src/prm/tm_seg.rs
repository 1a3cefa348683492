//! Tag-matching segment (`struct mlx5_wqe_tm_seg`): the command a TM-SRQ's
//! command QP sends to the NIC to change the SRQ's tag list.
//!
//! A command WQE is a control segment with opcode
//! [`WqeOpcode::TagMatching`](super::WqeOpcode::TagMatching), this segment,
//! and for an append one [`DataSeg`](super::DataSeg): the buffer a matching
//! message lands in (an empty buffer is the end-of-list data segment, lkey
//! [`INVALID_LKEY`](super::INVALID_LKEY)). Remove and NOP carry no data
//! segment. Whether the command produces a CQE is
//! [`tm_flags::CQE_REQ`](super::tm_flags::CQE_REQ) here, not the control
//! segment's `fm_ce_se`.

use super::{be16, be64, put16, put64, tm_flags, view, Field, TmOpcode};

mod field {
    use super::Field;
    /// The command ([`TmOpcode`](super::TmOpcode)) in the high nibble.
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const INDEX: Field = 2..4;
    pub const RSVD0: Field = 4..6;
    pub const SW_CNT: Field = 6..8;
    pub const RSVD1: Field = 8..16;
    pub const APPEND_TAG: Field = 16..24;
    pub const APPEND_MASK: Field = 24..32;
}

/// Where the command sits in the `opcode` byte (rdma-core's `set_tm_seg`
/// writes `op << 4`).
const OPCODE_SHIFT: u32 = 4;

view!(
    /// Tag-matching segment: command, flags, tag-list index, software's
    /// unexpected-message count, and the tag and mask of an append.
    TmSeg,
    32
);

/// A tag-list command: every field of a [`TmSeg`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmCmd {
    /// The command.
    pub opcode: TmOpcode,
    /// [`tm_flags`](super::tm_flags).
    pub flags: u8,
    /// The tag-list entry. For an append, the entry the *next* append will
    /// fill: the appended tag takes the entry the previous append named (the
    /// first takes entry 0), which is the index the tag's CQEs report in
    /// `app_info`; rdma-core and UCX both pass the free entry after the one
    /// they fill. For a remove, the entry removed; unused by a NOP.
    pub index: u16,
    /// Software's count of handled unexpected messages; read with
    /// [`tm_flags::SW_CNT`] only.
    pub sw_cnt: u16,
    /// The appended tag.
    pub append_tag: u64,
    /// The appended mask: the tag bits a message's tag must match.
    pub append_mask: u64,
}

impl TmCmd {
    /// Appends `tag` under `mask`, the next append going to entry `index`;
    /// no CQE, no sync.
    pub const fn append(index: u16, tag: u64, mask: u64) -> TmCmd {
        TmCmd {
            opcode: TmOpcode::Append,
            flags: 0,
            index,
            sw_cnt: 0,
            append_tag: tag,
            append_mask: mask,
        }
    }
    /// Removes list entry `index`; no CQE, no sync.
    pub const fn remove(index: u16) -> TmCmd {
        TmCmd {
            opcode: TmOpcode::Remove,
            flags: 0,
            index,
            sw_cnt: 0,
            append_tag: 0,
            append_mask: 0,
        }
    }
    /// Changes nothing (with [`sync`](Self::sync), reports the count of
    /// unexpected messages alone); no CQE.
    pub const fn nop() -> TmCmd {
        TmCmd {
            opcode: TmOpcode::Nop,
            flags: 0,
            index: 0,
            sw_cnt: 0,
            append_tag: 0,
            append_mask: 0,
        }
    }
    /// The same command, asking for a CQE ([`tm_flags::CQE_REQ`]).
    pub const fn signaled(mut self) -> TmCmd {
        self.flags |= tm_flags::CQE_REQ;
        self
    }
    /// The same command, reporting `unexpected` handled unexpected messages
    /// ([`tm_flags::SW_CNT`]).
    pub const fn sync(mut self, unexpected: u16) -> TmCmd {
        self.flags |= tm_flags::SW_CNT;
        self.sw_cnt = unexpected;
        self
    }
}

impl<T: AsRef<[u8]>> TmSeg<T> {
    /// Raw `opcode` byte (the command in its high nibble).
    #[inline]
    pub fn opcode_raw(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }
    /// The command, if known (from the high nibble).
    #[inline]
    pub fn opcode(&self) -> Option<TmOpcode> {
        TmOpcode::from_u8(self.opcode_raw() >> OPCODE_SHIFT)
    }
    /// [`tm_flags`](super::tm_flags).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Tag-list index.
    #[inline]
    pub fn index(&self) -> u16 {
        be16(self.buffer.as_ref(), field::INDEX)
    }
    /// Software's count of handled unexpected messages.
    #[inline]
    pub fn sw_cnt(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SW_CNT)
    }
    /// Tag of an append.
    #[inline]
    pub fn append_tag(&self) -> u64 {
        be64(self.buffer.as_ref(), field::APPEND_TAG)
    }
    /// Mask of an append.
    #[inline]
    pub fn append_mask(&self) -> u64 {
        be64(self.buffer.as_ref(), field::APPEND_MASK)
    }
    /// Every field, read back; `None` for a command this crate does not know.
    #[inline]
    pub fn get(&self) -> Option<TmCmd> {
        Some(TmCmd {
            opcode: self.opcode()?,
            flags: self.flags(),
            index: self.index(),
            sw_cnt: self.sw_cnt(),
            append_tag: self.append_tag(),
            append_mask: self.append_mask(),
        })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TmSeg<T> {
    /// Writes the whole segment, every byte: the fields rdma-core's
    /// `set_tm_seg` writes for the command, the rest (reserved bytes, and
    /// the fields the command does not use) as `c` holds them, zero from
    /// [`TmCmd`]'s constructors.
    #[inline]
    pub fn set(&mut self, c: &TmCmd) {
        let b = self.buffer.as_mut();
        b[field::OPCODE] = u8::from(c.opcode) << OPCODE_SHIFT;
        b[field::FLAGS] = c.flags;
        put16(b, field::INDEX, c.index);
        b[field::RSVD0].fill(0);
        put16(b, field::SW_CNT, c.sw_cnt);
        b[field::RSVD1].fill(0);
        put64(b, field::APPEND_TAG, c.append_tag);
        put64(b, field::APPEND_MASK, c.append_mask);
    }
    /// Sets the command.
    #[inline]
    pub fn set_opcode(&mut self, v: TmOpcode) {
        self.buffer.as_mut()[field::OPCODE] = u8::from(v) << OPCODE_SHIFT;
    }
    /// Sets the flags.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Sets the tag-list index.
    #[inline]
    pub fn set_index(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::INDEX, v);
    }
    /// Sets software's count of handled unexpected messages.
    #[inline]
    pub fn set_sw_cnt(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SW_CNT, v);
    }
    /// Sets the tag of an append.
    #[inline]
    pub fn set_append_tag(&mut self, v: u64) {
        put64(self.buffer.as_mut(), field::APPEND_TAG, v);
    }
    /// Sets the mask of an append.
    #[inline]
    pub fn set_append_mask(&mut self, v: u64) {
        put64(self.buffer.as_mut(), field::APPEND_MASK, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_bytes() {
        let mut b = [0xa5u8; 32];
        let cmd = TmCmd::append(0x0102, 0x1112_1314_1516_1718, 0x2122_2324_2526_2728)
            .signaled()
            .sync(0x0304);
        TmSeg::new_unchecked(&mut b[..]).set(&cmd);
        let mut want = [0u8; 32];
        want[..8].copy_from_slice(&[0x10, 0xc0, 0x01, 0x02, 0, 0, 0x03, 0x04]);
        want[16..24].copy_from_slice(&[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
        want[24..].copy_from_slice(&[0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28]);
        assert_eq!(b, want);
        assert_eq!(TmSeg::new_checked(&b[..]).unwrap().get(), Some(cmd));
        assert!(TmSeg::new_checked(&b[..31]).is_err());
    }

    #[test]
    fn remove_and_nop_zero_what_they_do_not_use() {
        let mut b = [0xffu8; 32];
        TmSeg::new_unchecked(&mut b[..]).set(&TmCmd::remove(0xbeef));
        let s = TmSeg::new_unchecked(&b[..]);
        assert_eq!((s.opcode_raw(), s.opcode()), (0x20, Some(TmOpcode::Remove)));
        assert_eq!(s.index(), 0xbeef);
        assert_eq!(b.iter().filter(|&&x| x != 0).count(), 3, "{b:02x?}");

        TmSeg::new_unchecked(&mut b[..]).set(&TmCmd::nop().signaled());
        assert_eq!(b[..2], [0x00, tm_flags::CQE_REQ]);
        assert!(b[2..].iter().all(|&x| x == 0));
        b[0] = 0x30;
        assert_eq!(TmSeg::new_unchecked(&b[..]).get(), None);
    }
}
