//! Tag-matching header (`struct ibv_tmh`, rdma-core `infiniband/tm_types.h`):
//! the 16 bytes in front of every message sent to a tag-matching SRQ, and
//! what the NIC scatters into a CQE when a message matches a tag.
//!
//! A message is the header then its payload (eager), the header and an
//! [`Rvh`](super::Rvh) (rendezvous request), or the header alone (rendezvous
//! finished). The NIC compares the header's tag, under each listed entry's
//! mask, with the tags appended to the list. rdma-core declares the tag and
//! the user data big-endian (`__be64`, `__be32`), and so do these accessors;
//! the NIC compares bits, so what matters is that the sender's header and the
//! receiver's append ([`TmSeg`](super::TmSeg)) agree (UCX stores both in host
//! order).

use super::{be32, be64, put32, put64, view, Field, TmhOpcode};

mod field {
    use super::Field;
    pub const OPCODE: usize = 0;
    pub const RESERVED: Field = 1..4;
    pub const APP_CTX: Field = 4..8;
    pub const TAG: Field = 8..16;
}

view!(
    /// Tag-matching header: operation, user data and tag.
    Tmh,
    16
);

impl<T: AsRef<[u8]>> Tmh<T> {
    /// Raw operation byte.
    #[inline]
    pub fn opcode_raw(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }
    /// Operation, if known.
    #[inline]
    pub fn opcode(&self) -> Option<TmhOpcode> {
        TmhOpcode::from_u8(self.opcode_raw())
    }
    /// The sender's opaque user data (`app_ctx`; what rdma-core reports as
    /// `ibv_wc_tm_info.priv`).
    #[inline]
    pub fn app_ctx(&self) -> u32 {
        be32(self.buffer.as_ref(), field::APP_CTX)
    }
    /// The tag.
    #[inline]
    pub fn tag(&self) -> u64 {
        be64(self.buffer.as_ref(), field::TAG)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tmh<T> {
    /// Writes the whole header, every byte: the reserved bytes, which must
    /// be zero, zeroed.
    #[inline]
    pub fn set(&mut self, opcode: TmhOpcode, app_ctx: u32, tag: u64) {
        let b = self.buffer.as_mut();
        b[field::OPCODE] = opcode.into();
        b[field::RESERVED].fill(0);
        put32(b, field::APP_CTX, app_ctx);
        put64(b, field::TAG, tag);
    }
    /// Sets the operation byte alone (a rendezvous FIN is the request's
    /// header with this byte changed).
    #[inline]
    pub fn set_opcode(&mut self, opcode: TmhOpcode) {
        self.buffer.as_mut()[field::OPCODE] = opcode.into();
    }
    /// Sets the user data.
    #[inline]
    pub fn set_app_ctx(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::APP_CTX, v);
    }
    /// Sets the tag.
    #[inline]
    pub fn set_tag(&mut self, v: u64) {
        put64(self.buffer.as_mut(), field::TAG, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_bytes() {
        let mut b = [0xffu8; 16];
        Tmh::new_unchecked(&mut b[..]).set(TmhOpcode::Eager, 0x0102_0304, 0x1122_3344_5566_7788);
        assert_eq!(
            b,
            [3, 0, 0, 0, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
        );
        let h = Tmh::new_checked(&b[..]).unwrap();
        assert_eq!(h.opcode(), Some(TmhOpcode::Eager));
        assert_eq!((h.app_ctx(), h.tag()), (0x0102_0304, 0x1122_3344_5566_7788));
        assert!(Tmh::new_checked(&b[..15]).is_err());
    }

    #[test]
    fn fin_changes_only_the_opcode() {
        let mut b = [0u8; 16];
        let mut h = Tmh::new_unchecked(&mut b[..]);
        h.set(TmhOpcode::Rndv, 7, u64::MAX);
        h.set_opcode(TmhOpcode::Fin);
        assert_eq!(h.opcode(), Some(TmhOpcode::Fin));
        assert_eq!((h.app_ctx(), h.tag()), (7, u64::MAX));
        b[0] = 0x42;
        assert_eq!(Tmh::new_unchecked(&b[..]).opcode(), None);
        assert_eq!(Tmh::new_unchecked(&b[..]).opcode_raw(), 0x42);
    }
}
