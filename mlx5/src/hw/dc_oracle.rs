//! rdma-core's own DC WQE writer (`oracle/dc_wr.c`: `ibv_wr_start`,
//! `ibv_wr_rdma_write`, `mlx5dv_wr_set_dc_addr_stream`, `ibv_wr_set_sge`),
//! for the hardware test that compares our writer's bytes with it
//! (`tests/hw_dc.rs`). Built with the `rdma-core-oracle` feature only, and
//! never run on a ConnectX yet.

use std::ffi::{c_int, c_void};

use super::dc::Ah;
use super::device::{HwContext, HwCq, HwPd, HwQp};
use super::ffi::*;
use super::loader::HwError;
use crate::sq::Sge;
use crate::types::{DcDest, DciStreams, QpCaps};

extern "C" {
    fn oracle_dc_wr_write(
        qpx: *mut c_void,
        mqpx: *mut c_void,
        ah: *mut ibv_ah,
        dctn: u32,
        key: u64,
        stream: u16,
        rkey: u32,
        raddr: u64,
        lkey: u32,
        addr: u64,
        len: u32,
    ) -> c_int;
    fn oracle_dc_wr_abort(qpx: *mut c_void);
}

impl HwPd {
    /// A DCI whose rdma-core work-request API (`ibv_qp_ex`) takes RDMA
    /// WRITEs (`IBV_QP_EX_WITH_RDMA_WRITE`), for the oracle test.
    #[doc(hidden)]
    pub fn create_dci_wr_api(
        &self,
        send_cq: &HwCq,
        caps: &QpCaps,
        streams: DciStreams,
    ) -> Result<HwQp, HwError> {
        self.create_dci_with(send_cq, caps, streams, IBV_QP_EX_WITH_RDMA_WRITE)
    }
}

impl HwQp {
    /// Builds one signaled RDMA WRITE of `sge` to `raddr`/`rkey` at `dest`
    /// with rdma-core's writer (the address vector from an address handle
    /// towards `dest.lid` / `dest.gid`), runs `read` while the WQE sits in
    /// the send queue, not rung, then drops it (`ibv_wr_abort`). The DCI
    /// must come from [`HwPd::create_dci_wr_api`].
    #[doc(hidden)]
    pub fn with_rdma_core_dc_write<R>(
        &self,
        ctx: &HwContext,
        dest: &DcDest,
        (raddr, rkey): (u64, u32),
        sge: &Sge,
        read: impl FnOnce() -> R,
    ) -> Result<R, HwError> {
        let c = &self.q.pd.c;
        let missing = |symbol| HwError::SymbolMissing {
            lib: "rdma-core".into(),
            symbol,
        };
        let m = c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let to_ex = c.v.qp_to_qp_ex.ok_or(missing("ibv_qp_to_qp_ex"))?;
        let to_dv = m
            .qp_ex_from_ibv_qp_ex
            .ok_or(missing("mlx5dv_qp_ex_from_ibv_qp_ex"))?;
        // SAFETY: a live QP; null when it was made without send_ops_flags.
        let qpx = unsafe { to_ex(self.q.qp.as_ptr()) };
        if qpx.is_null() {
            return Err(missing("ibv_qp_ex (a DCI without send_ops_flags)"));
        }
        // SAFETY: the QP's live ibv_qp_ex.
        let mqpx = unsafe { to_dv(qpx) };
        let pd = HwPd {
            p: self.q.pd.clone(),
        };
        let ah = Ah::new(&pd, ctx, dest.lid, dest.gid)?;
        // SAFETY: the QP's ibv_qp_ex and mlx5dv_qp_ex, a live AH (its AV is
        // copied into the WQE), plain values.
        let rc = unsafe {
            oracle_dc_wr_write(
                qpx,
                mqpx,
                ah.ah.as_ptr(),
                dest.dct,
                dest.key,
                dest.stream,
                rkey,
                raddr,
                sge.lkey,
                sge.addr,
                sge.len,
            )
        };
        if rc != 0 {
            return Err(missing("mlx5dv_qp_ex.wr_set_dc_addr_stream"));
        }
        let r = read();
        // SAFETY: the same thread, after the ibv_wr_start above.
        unsafe { oracle_dc_wr_abort(qpx) };
        Ok(r)
    }
}
