//! Datagram segment (`struct mlx5_wqe_datagram_seg`): the address vector
//! (`struct mlx5_wqe_av`) a WQE carries when its QP is not connected to one
//! peer. A DCI's WQE names the DCT it goes to here: the DCT number, the DC
//! access key the DCT checks, and the route (LID for InfiniBand; MAC and GID
//! for RoCE). It follows the control segment.

use super::{be16, be32, be64, put16, put32, put64, view, Field};

mod field {
    use super::Field;
    /// The DC access key (DC), or the Q_Key and a reserved word (UD).
    pub const KEY: Field = 0..8;
    /// The extended-AV flag (bit 31) and the DCT or QP number (24 bits).
    pub const DQP_DCT: Field = 8..12;
    pub const STAT_RATE_SL: usize = 12;
    pub const FL_MLID: usize = 13;
    pub const RLID: Field = 14..16;
    pub const RESERVED0: Field = 16..20;
    pub const RMAC: Field = 20..26;
    pub const TCLASS: usize = 26;
    pub const HOP_LIMIT: usize = 27;
    pub const GRH_GID_FL: Field = 28..32;
    pub const RGID: Field = 32..48;
}

/// The extended-AV flag in `dqp_dct` (`MLX5_EXTENDED_UD_AV`): the AV is the
/// whole 48 bytes, with the GRH fields, not the 16-byte base AV.
pub const EXTENDED_AV: u32 = 0x8000_0000;

/// The mask of a DCT or QP number in `dqp_dct`.
const NUMBER_MASK: u32 = 0x00ff_ffff;

view!(
    /// Datagram segment: the address vector of one WQE.
    DatagramSeg,
    48
);

/// The values of an address vector, as `mlx5dv_set_dgram_seg` takes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressVector {
    /// The DC access key (DC), or the Q_Key in the high 32 bits (UD).
    pub key: u64,
    /// The DCT number (DC) or remote QP number (UD), 24 bits.
    pub dqp_dct: u32,
    /// Whether the AV is extended (carries a GRH): always for RoCE.
    pub extended: bool,
    /// Static rate (high nibble) and service level (low nibble).
    pub stat_rate_sl: u8,
    /// Whether the GRH is present (bit 7) and the source path bits.
    pub fl_mlid: u8,
    /// The remote LID (InfiniBand).
    pub rlid: u16,
    /// The remote MAC (RoCE).
    pub rmac: [u8; 6],
    /// The traffic class.
    pub tclass: u8,
    /// The hop limit.
    pub hop_limit: u8,
    /// The GID index (high byte) and the flow label (low 20 bits).
    pub grh_gid_fl: u32,
    /// The remote GID.
    pub rgid: [u8; 16],
}

impl AddressVector {
    /// The route to a port known by its LID and GID alone: the extended AV
    /// with both, no MAC, no key or number yet. The software device reads
    /// nothing more, and it is what [`SendQueue::dc`](crate::sq::SendQueue::dc)
    /// writes; a NIC on RoCE also needs the destination MAC, which only the
    /// AV of an address handle carries
    /// ([`Context::dc_route`](crate::device::Context::dc_route)).
    pub fn lid_gid_route(lid: u16, gid: [u8; 16]) -> AddressVector {
        AddressVector {
            extended: true,
            rlid: lid,
            rgid: gid,
            ..AddressVector::default()
        }
    }
}

impl<T: AsRef<[u8]>> DatagramSeg<T> {
    /// The DC access key (or Q_Key and reserved word).
    #[inline]
    pub fn key(&self) -> u64 {
        be64(self.buffer.as_ref(), field::KEY)
    }
    /// The DCT or remote QP number (24 bits).
    #[inline]
    pub fn dqp_dct(&self) -> u32 {
        be32(self.buffer.as_ref(), field::DQP_DCT) & NUMBER_MASK
    }
    /// Whether the extended-AV flag is set.
    #[inline]
    pub fn extended(&self) -> bool {
        be32(self.buffer.as_ref(), field::DQP_DCT) & EXTENDED_AV != 0
    }
    /// The remote LID.
    #[inline]
    pub fn rlid(&self) -> u16 {
        be16(self.buffer.as_ref(), field::RLID)
    }
    /// The GID index and flow label word.
    #[inline]
    pub fn grh_gid_fl(&self) -> u32 {
        be32(self.buffer.as_ref(), field::GRH_GID_FL)
    }
    /// Every field, read back.
    pub fn get(&self) -> AddressVector {
        let b = self.buffer.as_ref();
        let mut rmac = [0; 6];
        rmac.copy_from_slice(&b[field::RMAC]);
        let mut rgid = [0; 16];
        rgid.copy_from_slice(&b[field::RGID]);
        AddressVector {
            key: self.key(),
            dqp_dct: self.dqp_dct(),
            extended: self.extended(),
            stat_rate_sl: b[field::STAT_RATE_SL],
            fl_mlid: b[field::FL_MLID],
            rlid: self.rlid(),
            rmac,
            tclass: b[field::TCLASS],
            hop_limit: b[field::HOP_LIMIT],
            grh_gid_fl: self.grh_gid_fl(),
            rgid,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DatagramSeg<T> {
    /// Writes the whole segment, every byte: the fields
    /// `mlx5dv_set_dgram_seg` writes, and the reserved word zeroed (that
    /// helper leaves it as it was; rdma-core's provider copies a whole AV,
    /// zeroed where reserved, from the address handle).
    #[inline]
    pub fn set(&mut self, av: &AddressVector) {
        let b = self.buffer.as_mut();
        put64(b, field::KEY, av.key);
        let ext = if av.extended { EXTENDED_AV } else { 0 };
        put32(b, field::DQP_DCT, ext | (av.dqp_dct & NUMBER_MASK));
        b[field::STAT_RATE_SL] = av.stat_rate_sl;
        b[field::FL_MLID] = av.fl_mlid;
        put16(b, field::RLID, av.rlid);
        b[field::RESERVED0].fill(0);
        b[field::RMAC].copy_from_slice(&av.rmac);
        b[field::TCLASS] = av.tclass;
        b[field::HOP_LIMIT] = av.hop_limit;
        put32(b, field::GRH_GID_FL, av.grh_gid_fl);
        b[field::RGID].copy_from_slice(&av.rgid);
    }
    /// Sets the DC access key and the DCT number, the route left as it is:
    /// what a DCI's WQE changes from one DCT to the next
    /// (`mlx5dv_wr_set_dc_addr` copies the AV, then sets these two).
    #[inline]
    pub fn set_dc(&mut self, key: u64, dct: u32) {
        let b = self.buffer.as_mut();
        put64(b, field::KEY, key);
        let ext = be32(b, field::DQP_DCT) & EXTENDED_AV;
        put32(b, field::DQP_DCT, ext | (dct & NUMBER_MASK));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_bytes() {
        let av = AddressVector {
            key: 0x0102_0304_0506_0708,
            dqp_dct: 0xab_cdef,
            extended: true,
            stat_rate_sl: 0x21,
            fl_mlid: 0x80,
            rlid: 0x1234,
            rmac: [0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5],
            tclass: 0x33,
            hop_limit: 0x40,
            grh_gid_fl: 0x0300_0001,
            rgid: [0xfe; 16],
        };
        let mut b = [0xffu8; 48];
        DatagramSeg::new_unchecked(&mut b[..]).set(&av);
        let mut want = [0u8; 48];
        want[..8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        want[8..12].copy_from_slice(&[0x80, 0xab, 0xcd, 0xef]);
        want[12..16].copy_from_slice(&[0x21, 0x80, 0x12, 0x34]);
        want[20..28].copy_from_slice(&[0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0x33, 0x40]);
        want[28..32].copy_from_slice(&[3, 0, 0, 1]);
        want[32..].fill(0xfe);
        assert_eq!(b, want);
        assert_eq!(DatagramSeg::new_checked(&b[..]).unwrap().get(), av);
        assert!(DatagramSeg::new_checked(&b[..47]).is_err());
    }

    #[test]
    fn a_dct_change_keeps_the_route_and_the_extended_flag() {
        let av = AddressVector {
            extended: true,
            rlid: 7,
            rgid: [9; 16],
            ..AddressVector::default()
        };
        let mut b = [0u8; 48];
        let mut s = DatagramSeg::new_unchecked(&mut b[..]);
        s.set(&av);
        // A number wider than 24 bits keeps to its field.
        s.set_dc(0xdead_beef_0000_0001, 0xff12_3456);
        let got = s.get();
        assert_eq!((got.key, got.dqp_dct), (0xdead_beef_0000_0001, 0x12_3456));
        assert!(got.extended);
        assert_eq!((got.rlid, got.rgid), (7, [9; 16]));
    }
}
