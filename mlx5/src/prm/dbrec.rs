//! Doorbell records: small big-endian words in host memory that software
//! writes and the NIC reads (QP, SRQ) or that software writes to tell the NIC
//! how far it has consumed (CQ).

use super::{be32, put32, view, CqArm, Field};

mod field {
    use super::Field;
    pub const WORD0: Field = 0..4;
    pub const WORD1: Field = 4..8;
}

view!(
    /// QP doorbell record: receive counter ([`RCV_DBR`](super::RCV_DBR)) and send
    /// counter ([`SND_DBR`](super::SND_DBR)).
    QpDbRec,
    8
);
view!(
    /// CQ doorbell record: consumer index ([`CQ_SET_CI`](super::CQ_SET_CI), 24 bits)
    /// and arm word ([`CQ_ARM_DB`](super::CQ_ARM_DB)).
    CqDbRec,
    8
);
view!(
    /// SRQ doorbell record: the WQE counter.
    SrqDbRec,
    4
);

impl<T: AsRef<[u8]>> QpDbRec<T> {
    /// Receive counter.
    #[inline]
    pub fn recv_counter(&self) -> u32 {
        be32(self.buffer.as_ref(), field::WORD0)
    }
    /// Send counter.
    #[inline]
    pub fn send_counter(&self) -> u32 {
        be32(self.buffer.as_ref(), field::WORD1)
    }
}

impl<T: AsRef<[u8]>> CqDbRec<T> {
    /// Consumer index (24 bits).
    #[inline]
    pub fn ci(&self) -> u32 {
        be32(self.buffer.as_ref(), field::WORD0)
    }
    /// Arm word.
    #[inline]
    pub fn arm(&self) -> u32 {
        be32(self.buffer.as_ref(), field::WORD1)
    }
    /// Arm word, decoded.
    #[inline]
    pub fn arm_word(&self) -> CqArm {
        CqArm::from_raw(self.arm())
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> CqDbRec<T> {
    /// Sets the arm word.
    #[inline]
    pub fn set_arm(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::WORD1, v)
    }
    /// Sets the arm word from its fields ([`CqArm`]).
    #[inline]
    pub fn set_arm_word(&mut self, v: CqArm) {
        self.set_arm(v.raw())
    }
}

impl<T: AsRef<[u8]>> SrqDbRec<T> {
    /// WQE counter.
    #[inline]
    pub fn counter(&self) -> u32 {
        be32(self.buffer.as_ref(), field::WORD0)
    }
}
