//! An opened device ([`HwContext`]): its port and GID, completion channels,
//! and the probe of its BlueFlame and inline limits.

use std::sync::Arc;

use super::info::{choose_gid, open_ctx, query_port, GidInfo, PortInfo};
use crate::cq::Compression;
use crate::hw::channel::HwChannel;
use crate::hw::ctx::Ctx;
use crate::hw::loader::HwError;
use crate::types::QpCaps;

/// An opened RDMA device.
#[derive(Clone)]
pub struct HwContext {
    pub(in crate::hw) c: Arc<Ctx>,
    port: u8,
    pub(in crate::hw) lid: u16,
    pub(in crate::hw) gid: GidInfo,
    pub(in crate::hw) mtu: u32,
    pub(in crate::hw) link_layer: u8,
}

impl std::fmt::Debug for HwContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwContext")
            .field("name", &self.c.name)
            .field("port", &self.port)
            .finish()
    }
}

impl HwContext {
    /// Opens device `name` on port 1, choosing a RoCE v2 GID (an IPv4-mapped one
    /// first) on Ethernet ports.
    pub fn open(name: &str) -> Result<HwContext, HwError> {
        let c = open_ctx(name)?;
        let port = query_port(&c, 1)?;
        let gid = choose_gid(&port).ok_or(HwError::Verb {
            verb: "ibv_query_gid (no usable GID)",
            errno: libc::ENOENT,
        })?;
        Ok(HwContext {
            c,
            port: 1,
            lid: port.lid,
            gid,
            mtu: port.active_mtu,
            link_layer: port.link_layer,
        })
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.c.name
    }

    /// Whether the direct (mlx5) data path applies.
    pub fn is_mlx5(&self) -> bool {
        self.c.is_mlx5
    }

    /// Port 1's LID (0 on Ethernet).
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// The GID chosen for connections.
    pub fn gid(&self) -> GidInfo {
        self.gid
    }

    /// Creates a completion channel (`ibv_create_comp_channel`).
    pub fn create_comp_channel(&self) -> Result<HwChannel, HwError> {
        HwChannel::new(&self.c)
    }

    /// BlueFlame register half size and the largest inline payload a QP gets,
    /// probed by creating a throwaway CQ and QP (`mlx5dv_init_obj` reports the
    /// former, `ibv_create_qp` the latter).
    pub fn probe_bf_and_inline(&self) -> Result<(u32, u32), HwError> {
        let pd = self.alloc_pd()?;
        let cq = self.create_cq(64, 64, Compression::Off)?;
        let mut last = None;
        for inline in [512u32, 256, 128, 64, 0] {
            let caps = QpCaps {
                sq_wqe_cnt: 64,
                rq_wqe_cnt: 1,
                max_recv_sge: 1,
                max_inline: inline,
            };
            match pd.create_qp(&cq, &cq, None, &caps) {
                Ok(qp) => {
                    let bf = qp.dv()?.bf.size;
                    return Ok((bf, qp.q.max_inline));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(HwError::NoDevice))
    }

    /// Queries port 1 again.
    pub fn port(&self) -> Result<PortInfo, HwError> {
        query_port(&self.c, self.port)
    }
}
