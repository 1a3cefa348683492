//! A DCI's verbs: each WQE carries the DCT it goes to in a datagram segment
//! (48 bytes, three segments) right after its control segment, and its DCI
//! stream in the control segment. Otherwise they are the RC verbs. The
//! address vector is built from the DCT's LID and GID ([`SendQueue::dc`]),
//! or is a route the device made ([`SendQueue::dc_via`]; on a NIC, from an
//! address handle, which on RoCE carries the destination MAC).

use super::{sge_segments, Payload, SendQueue, SqError, WqeBuilder};
use crate::prm::{AddressVector, WqeOpcode};
use crate::types::DcDest;
use crate::wqe_table::SendTable;

/// Segments a DCI's address vector takes.
const AV_DS: usize = 3;

/// The verbs of a DCI's send queue towards one DCT
/// ([`SendQueue::dc`]).
#[derive(Debug)]
pub struct DcSends<'a, T> {
    sq: &'a mut SendQueue<T>,
    av: AddressVector,
    stream: u16,
}

impl<T> SendQueue<T> {
    /// The verbs of this queue (a DCI's) towards `dest`, routed by its LID
    /// and GID alone ([`AddressVector::lid_gid_route`]): enough for the
    /// software device and for InfiniBand; a NIC on RoCE needs
    /// [`dc_via`](Self::dc_via).
    #[inline(always)]
    pub fn dc(&mut self, dest: &DcDest) -> DcSends<'_, T> {
        self.dc_via(&AddressVector::lid_gid_route(dest.lid, dest.gid), dest)
    }

    /// The verbs of this queue (a DCI's) towards `dest` over `route`: the
    /// route's address vector (on a NIC, the one its address handle holds,
    /// from [`Context::dc_route`](crate::device::Context::dc_route), MAC and
    /// all) with `dest`'s DCT number and key, on `dest`'s stream.
    /// `dest.lid` and `dest.gid` are not read: the route has them.
    #[inline(always)]
    pub fn dc_via(&mut self, route: &AddressVector, dest: &DcDest) -> DcSends<'_, T> {
        DcSends {
            sq: self,
            av: AddressVector {
                key: dest.key,
                dqp_dct: dest.dct,
                ..*route
            },
            stream: dest.stream,
        }
    }
}

impl<'a, T: SendTable> DcSends<'a, T> {
    /// A WQE of `opcode` and `ds` segments after the address, addressed.
    #[inline(always)]
    fn begin(
        self,
        opcode: WqeOpcode,
        ds: usize,
        inline: usize,
    ) -> Result<WqeBuilder<'a, T>, SqError> {
        let mut b = self.sq.begin(opcode, 1 + AV_DS + ds, inline)?;
        b.put_av(&self.av, self.stream);
        Ok(b)
    }

    /// RDMA WRITE of `data` to `raddr` under `rkey` at the DCT's side.
    #[inline(always)]
    pub fn write(
        self,
        raddr: u64,
        rkey: u32,
        data: Payload<'_>,
    ) -> Result<WqeBuilder<'a, T>, SqError> {
        let mut b = self.begin(WqeOpcode::RdmaWrite, 1 + data.ds(), data.inline_len())?;
        b.put_raddr(raddr, rkey);
        b.put_payload(&data);
        Ok(b)
    }

    /// RDMA WRITE with immediate: consumes a receive WQE of the DCT's SRQ,
    /// whose CQE carries `imm`.
    #[inline(always)]
    pub fn write_imm(
        self,
        raddr: u64,
        rkey: u32,
        imm: u32,
        data: Payload<'_>,
    ) -> Result<WqeBuilder<'a, T>, SqError> {
        let mut b = self.begin(WqeOpcode::RdmaWriteImm, 1 + data.ds(), data.inline_len())?;
        b.set_imm(imm);
        b.put_raddr(raddr, rkey);
        b.put_payload(&data);
        Ok(b)
    }

    /// SEND of `data` into the next receive WQE of the DCT's SRQ.
    #[inline(always)]
    pub fn send(self, data: Payload<'_>) -> Result<WqeBuilder<'a, T>, SqError> {
        let mut b = self.begin(WqeOpcode::Send, data.ds(), data.inline_len())?;
        b.put_payload(&data);
        Ok(b)
    }

    /// SEND with immediate.
    #[inline(always)]
    pub fn send_imm(self, imm: u32, data: Payload<'_>) -> Result<WqeBuilder<'a, T>, SqError> {
        let mut b = self.begin(WqeOpcode::SendImm, data.ds(), data.inline_len())?;
        b.set_imm(imm);
        b.put_payload(&data);
        Ok(b)
    }

    /// RDMA READ from `raddr` under `rkey` at the DCT's side into `sges`.
    #[inline(always)]
    pub fn read(
        self,
        raddr: u64,
        rkey: u32,
        sges: &[super::Sge],
    ) -> Result<WqeBuilder<'a, T>, SqError> {
        let mut b = self.begin(WqeOpcode::RdmaRead, 1 + sge_segments(sges), 0)?;
        b.put_raddr(raddr, rkey);
        b.put_payload(&Payload::Sges(sges));
        Ok(b)
    }
}
