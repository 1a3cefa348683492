//! The CQ arm sequence: software asks the NIC for one completion event by
//! writing an *arm word* (`sn << 28 | cmd | ci`) into the second word of the
//! CQ doorbell record ([`CQ_ARM_DB`](super::CQ_ARM_DB)) and then the 64-bit
//! CQ doorbell `arm word << 32 | cqn`, big-endian, into the UAR page at
//! [`CQ_DOORBELL`](super::CQ_DOORBELL) — what rdma-core's `mlx5_arm_cq` and
//! UCX's `uct_ib_mlx5_arm_cq` write.
//!
//! `sn` is the arm sequence number (2 bits): software advances it after each
//! completion event it takes for the CQ. `ci` is the consumer index (24 bits)
//! as of the arm; the NIC raises the event at once when CQEs software has not
//! consumed by then are already in the CQ.

use super::{be32, put32, view, Field, CQ_DB_REQ_NOT, CQ_DB_REQ_NOT_SOL};

/// What an arm asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArmCmd {
    /// An event at the next CQE, whatever it is (`MLX5_CQ_DB_REQ_NOT`).
    Next,
    /// An event at the next CQE of a solicited WQE, or the next error CQE
    /// (`MLX5_CQ_DB_REQ_NOT_SOL`).
    Solicited,
}

impl ArmCmd {
    /// The command's bits in the arm word.
    #[inline(always)]
    pub const fn bits(self) -> u32 {
        match self {
            ArmCmd::Next => CQ_DB_REQ_NOT,
            ArmCmd::Solicited => CQ_DB_REQ_NOT_SOL,
        }
    }

    /// The command of `solicited_only` (as `ibv_req_notify_cq` takes it).
    #[inline(always)]
    pub const fn of(solicited_only: bool) -> Self {
        if solicited_only {
            ArmCmd::Solicited
        } else {
            ArmCmd::Next
        }
    }
}

/// The arm word: `sn << 28 | cmd | ci`, in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqArm(u32);

impl CqArm {
    /// Shift of the arm sequence number.
    pub const SN_SHIFT: u32 = 28;
    /// The arm sequence number's bits, in place.
    pub const SN_MASK: u32 = 3 << Self::SN_SHIFT;
    /// The command's bits, in place.
    pub const CMD_MASK: u32 = 0x0f00_0000;
    /// The consumer index's bits.
    pub const CI_MASK: u32 = 0x00ff_ffff;

    /// The word for arm sequence number `sn` (its low 2 bits), command `cmd`
    /// and consumer index `ci` (its low 24 bits).
    #[inline(always)]
    pub const fn new(sn: u32, cmd: ArmCmd, ci: u32) -> Self {
        CqArm(((sn & 3) << Self::SN_SHIFT) | cmd.bits() | (ci & Self::CI_MASK))
    }

    /// Wraps a raw word.
    #[inline(always)]
    pub const fn from_raw(v: u32) -> Self {
        CqArm(v)
    }

    /// The raw word.
    #[inline(always)]
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// The arm sequence number (2 bits).
    #[inline(always)]
    pub const fn sn(self) -> u32 {
        (self.0 & Self::SN_MASK) >> Self::SN_SHIFT
    }

    /// The command; `None` for a value no arm uses.
    #[inline]
    pub const fn cmd(self) -> Option<ArmCmd> {
        match self.0 & Self::CMD_MASK {
            CQ_DB_REQ_NOT => Some(ArmCmd::Next),
            CQ_DB_REQ_NOT_SOL => Some(ArmCmd::Solicited),
            _ => None,
        }
    }

    /// The consumer index (24 bits).
    #[inline(always)]
    pub const fn ci(self) -> u32 {
        self.0 & Self::CI_MASK
    }

    /// The 64-bit CQ doorbell value for CQ `cqn`: `word << 32 | cqn`, in host
    /// order (it is written big-endian, see [`CqDoorbell`]).
    #[inline(always)]
    pub const fn doorbell(self, cqn: u32) -> u64 {
        ((self.0 as u64) << 32) | cqn as u64
    }
}

mod field {
    use super::Field;
    pub const ARM: Field = 0..4;
    pub const CQN: Field = 4..8;
}

view!(
    /// The 8 bytes of the UAR's CQ doorbell register
    /// ([`CQ_DOORBELL`](super::CQ_DOORBELL)) after an arm: the 64-bit value
    /// `arm word << 32 | cqn` stored big-endian, i.e. the arm word then the
    /// CQ number, each big-endian.
    CqDoorbell,
    8
);

impl<T: AsRef<[u8]>> CqDoorbell<T> {
    /// The arm word.
    #[inline]
    pub fn arm(&self) -> CqArm {
        CqArm(be32(self.buffer.as_ref(), field::ARM))
    }
    /// The CQ number.
    #[inline]
    pub fn cqn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::CQN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CqDoorbell<T> {
    /// Writes the doorbell of `arm` for CQ `cqn`.
    #[inline]
    pub fn set(&mut self, arm: CqArm, cqn: u32) {
        put32(self.buffer.as_mut(), field::ARM, arm.raw());
        put32(self.buffer.as_mut(), field::CQN, cqn);
    }
}

/// The doorbell's 8 bytes as one big-endian 64-bit store writes them.
#[inline(always)]
pub const fn cq_doorbell_bytes(arm: CqArm, cqn: u32) -> [u8; 8] {
    arm.doorbell(cqn).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_are_masked() {
        let a = CqArm::new(7, ArmCmd::Solicited, 0x1234_5678);
        assert_eq!(a.raw(), 3 << 28 | 1 << 24 | 0x34_5678);
        assert_eq!(
            (a.sn(), a.cmd(), a.ci()),
            (3, Some(ArmCmd::Solicited), 0x34_5678)
        );
        let b = CqArm::new(1, ArmCmd::Next, 5);
        assert_eq!(b.raw(), 0x1000_0005);
        assert_eq!(b.cmd(), Some(ArmCmd::Next));
        assert_eq!(CqArm::from_raw(0x0300_0000).cmd(), None);
        assert_eq!(b.doorbell(0xabcdef), 0x1000_0005_00ab_cdef);
    }

    #[test]
    fn doorbell_bytes_are_the_word_then_the_cqn() {
        let a = CqArm::new(2, ArmCmd::Next, 0x10);
        let bytes = cq_doorbell_bytes(a, 0x42);
        assert_eq!(bytes, [0x20, 0, 0, 0x10, 0, 0, 0, 0x42]);
        let mut b = [0u8; 8];
        CqDoorbell::new_unchecked(&mut b[..]).set(a, 0x42);
        assert_eq!(b, bytes);
        let v = CqDoorbell::new_unchecked(&b[..]);
        assert_eq!((v.arm(), v.cqn()), (a, 0x42));
    }
}
