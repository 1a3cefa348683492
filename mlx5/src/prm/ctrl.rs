//! Control segment (`struct mlx5_wqe_ctrl_seg`), the first 16 bytes of every send WQE.

use super::{be32, put32, view, Field, WqeOpcode};

mod field {
    use super::Field;
    pub const OPMOD_IDX_OPCODE: Field = 0..4;
    pub const QPN_DS: Field = 4..8;
    pub const SIGNATURE: usize = 8;
    pub const DCI_STREAM_CHANNEL_ID: Field = 9..11;
    pub const FM_CE_SE: usize = 11;
    pub const IMM: Field = 12..16;
}

view!(
    /// Control segment: opcode, WQE index, QPN, size in 16-byte units (DS),
    /// completion/fence/solicited flags and the immediate.
    CtrlSeg,
    16
);

impl<T: AsRef<[u8]>> CtrlSeg<T> {
    /// Raw opcode byte.
    #[inline]
    pub fn opcode_raw(&self) -> u8 {
        be32(self.buffer.as_ref(), field::OPMOD_IDX_OPCODE) as u8
    }
    /// Opcode, if known.
    #[inline]
    pub fn opcode(&self) -> Option<WqeOpcode> {
        WqeOpcode::from_u8(self.opcode_raw())
    }
    /// WQE index (the producer counter's low 16 bits).
    #[inline]
    pub fn wqe_index(&self) -> u16 {
        (be32(self.buffer.as_ref(), field::OPMOD_IDX_OPCODE) >> 8) as u16
    }
    /// Opcode modifier.
    #[inline]
    pub fn opmod(&self) -> u8 {
        (be32(self.buffer.as_ref(), field::OPMOD_IDX_OPCODE) >> 24) as u8
    }
    /// QP number (24 bits).
    #[inline]
    pub fn qpn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::QPN_DS) >> 8
    }
    /// WQE size in 16-byte units.
    #[inline]
    pub fn ds(&self) -> u8 {
        be32(self.buffer.as_ref(), field::QPN_DS) as u8
    }
    /// Signature byte.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }
    /// DCI stream channel id.
    #[inline]
    pub fn dci_stream_channel_id(&self) -> u16 {
        super::be16(self.buffer.as_ref(), field::DCI_STREAM_CHANNEL_ID)
    }
    /// Fence / completion / solicited flags ([`ctrl_flags`](super::ctrl_flags)).
    #[inline]
    pub fn fm_ce_se(&self) -> u8 {
        self.buffer.as_ref()[field::FM_CE_SE]
    }
    /// The immediate as the host value that was posted (the wire carries it big-endian).
    #[inline]
    pub fn imm(&self) -> u32 {
        be32(self.buffer.as_ref(), field::IMM)
    }
}

/// Every field of a control segment, as `mlx5dv_set_ctrl_seg` takes them (in
/// its order), for [`CtrlSeg::set_all`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ctrl {
    /// The WQE's index: the producer counter in basic blocks (`pi`).
    pub wqe_index: u16,
    /// The opcode ([`WqeOpcode`](super::WqeOpcode)).
    pub opcode: u8,
    /// The opcode modifier.
    pub opmod: u8,
    /// The QP number (24 bits).
    pub qpn: u32,
    /// Fence / completion / solicited flags ([`ctrl_flags`](super::ctrl_flags)).
    pub fm_ce_se: u8,
    /// The WQE's size in 16-byte units.
    pub ds: u8,
    /// The WQE signature byte.
    pub signature: u8,
    /// The immediate, a host value (stored big-endian; `mlx5dv_set_ctrl_seg`
    /// takes it already swapped).
    pub imm: u32,
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtrlSeg<T> {
    /// Writes the whole segment at once, every byte, as `mlx5dv_set_ctrl_seg`
    /// does.
    #[inline(always)]
    pub fn set_all(&mut self, c: Ctrl) {
        let Ctrl {
            wqe_index,
            opcode,
            opmod,
            qpn,
            fm_ce_se,
            ds,
            signature,
            imm,
        } = c;
        let b = self.buffer.as_mut();
        put32(
            b,
            field::OPMOD_IDX_OPCODE,
            (u32::from(opmod) << 24) | (u32::from(wqe_index) << 8) | u32::from(opcode),
        );
        put32(b, field::QPN_DS, (qpn << 8) | u32::from(ds));
        b[field::SIGNATURE] = signature;
        b[field::DCI_STREAM_CHANNEL_ID].copy_from_slice(&[0, 0]);
        b[field::FM_CE_SE] = fm_ce_se;
        put32(b, field::IMM, imm);
    }
    /// Sets opmod, WQE index and opcode.
    #[inline]
    pub fn set_opmod_idx_opcode(&mut self, opmod: u8, wqe_index: u16, opcode: u8) {
        put32(
            self.buffer.as_mut(),
            field::OPMOD_IDX_OPCODE,
            (u32::from(opmod) << 24) | (u32::from(wqe_index) << 8) | u32::from(opcode),
        );
    }
    /// Sets QPN and DS.
    #[inline]
    pub fn set_qpn_ds(&mut self, qpn: u32, ds: u8) {
        put32(
            self.buffer.as_mut(),
            field::QPN_DS,
            (qpn << 8) | u32::from(ds),
        );
    }
    /// Sets the fence / completion / solicited flags.
    #[inline]
    pub fn set_fm_ce_se(&mut self, v: u8) {
        self.buffer.as_mut()[field::FM_CE_SE] = v;
    }
    /// Sets the DCI stream a DCI's WQE belongs to: WQEs of one stream
    /// complete in order, and an error stops that stream alone.
    #[inline]
    pub fn set_dci_stream_channel_id(&mut self, id: u16) {
        super::put16(self.buffer.as_mut(), field::DCI_STREAM_CHANNEL_ID, id);
    }
    /// Sets the signature byte.
    #[inline]
    pub fn set_signature(&mut self, v: u8) {
        self.buffer.as_mut()[field::SIGNATURE] = v;
    }
    /// Sets the immediate (host value; stored big-endian).
    #[inline]
    pub fn set_imm(&mut self, imm: u32) {
        put32(self.buffer.as_mut(), field::IMM, imm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_bytes() {
        // bytes from rdma-core: mlx5dv_set_ctrl_seg(pi=5, WRITE_IMM, 0,
        // 0x1234, CQ_UPDATE, ds=3, 0, imm=0xdeadbeef) on x86-64 (imm stored raw,
        // i.e. our host value 0xefbeadde).
        let mut b = [0u8; 16];
        CtrlSeg::new_unchecked(&mut b[..]).set_all(Ctrl {
            wqe_index: 5,
            opcode: 0x09,
            qpn: 0x1234,
            fm_ce_se: 8,
            ds: 3,
            imm: 0xefbe_adde,
            ..Ctrl::default()
        });
        assert_eq!(
            b,
            [0, 0, 5, 9, 0, 0x12, 0x34, 3, 0, 0, 0, 8, 0xef, 0xbe, 0xad, 0xde]
        );
        let c = CtrlSeg::new_checked(&b[..]).unwrap();
        assert_eq!(c.wqe_index(), 5);
        assert_eq!(c.opcode(), Some(WqeOpcode::RdmaWriteImm));
        assert_eq!(c.qpn(), 0x1234);
        assert_eq!(c.ds(), 3);
        assert_eq!(c.fm_ce_se(), 8);
        assert!(CtrlSeg::new_checked(&b[..15]).is_err());
    }
}
