//! Rendezvous header (`struct ibv_rvh`, rdma-core `infiniband/tm_types.h`):
//! the 16 bytes after the [`Tmh`](super::Tmh) of a rendezvous request, naming
//! the sender's buffer that the receiver reads the payload from.

use super::{be32, be64, put32, put64, view, Field};

mod field {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const LEN: Field = 12..16;
}

view!(
    /// Rendezvous header: virtual address, rkey and length of the sender's
    /// buffer.
    Rvh,
    16
);

impl<T: AsRef<[u8]>> Rvh<T> {
    /// Virtual address of the sender's buffer.
    #[inline]
    pub fn va(&self) -> u64 {
        be64(self.buffer.as_ref(), field::VA)
    }
    /// Remote key of the sender's buffer.
    #[inline]
    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::RKEY)
    }
    /// Length of the payload in bytes.
    #[inline]
    pub fn len(&self) -> u32 {
        be32(self.buffer.as_ref(), field::LEN)
    }
    /// True when the header announces an empty payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Rvh<T> {
    /// Writes the whole header.
    #[inline]
    pub fn set(&mut self, va: u64, rkey: u32, len: u32) {
        let b = self.buffer.as_mut();
        put64(b, field::VA, va);
        put32(b, field::RKEY, rkey);
        put32(b, field::LEN, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_bytes() {
        let mut b = [0u8; 16];
        Rvh::new_unchecked(&mut b[..]).set(0x0001_0203_0405_0607, 0x0809_0a0b, 0x0c0d_0e0f);
        let want: Vec<u8> = (0..16).collect();
        assert_eq!(b[..], want[..]);
        let h = Rvh::new_checked(&b[..]).unwrap();
        assert_eq!(
            (h.va(), h.rkey(), h.len()),
            (0x0001_0203_0405_0607, 0x0809_0a0b, 0x0c0d_0e0f)
        );
        assert!(!h.is_empty());
        assert!(Rvh::new_checked(&b[..15]).is_err());
    }
}
