//! Tag matching: what a device offers, and how a tag-matching SRQ is made.

use super::error::DeviceError;

/// A device's tag-matching capabilities (`struct ibv_tm_caps`); all zero on
/// a device without tag matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmCaps {
    /// Largest rendezvous request (TMH, RVH and any data) the NIC turns
    /// into an RDMA READ.
    pub max_rndv_hdr_size: u32,
    /// Tags a TM-SRQ's list holds at most.
    pub max_num_tags: u32,
    /// Tag matching on RC QPs (`IBV_TM_CAP_RC`).
    pub rc: bool,
    /// List commands outstanding at most.
    pub max_ops: u32,
    /// SGEs of a tagged buffer.
    pub max_sge: u32,
}

/// How a tag-matching SRQ is created (`ibv_srq_init_attr_ex` with
/// `IBV_SRQ_INIT_ATTR_TM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmSrqAttr {
    /// WQEs of the SRQ: the buffers unexpected messages land in.
    pub wqe_cnt: u32,
    /// SGEs per SRQ WQE.
    pub max_sge: u32,
    /// Tags the list holds at once.
    pub max_num_tags: u32,
    /// List commands outstanding at once: the command QP's send queue, in
    /// 64-byte blocks (one per command).
    pub max_ops: u32,
}

impl Default for TmSrqAttr {
    fn default() -> Self {
        Self {
            wqe_cnt: 256,
            max_sge: 1,
            max_num_tags: 64,
            max_ops: 128,
        }
    }
}

impl TmSrqAttr {
    /// Checks the attributes against the capabilities of `device`, as
    /// rdma-core and the kernel refuse them (`EINVAL`); a device without
    /// tag matching refuses every one.
    pub fn check(&self, device: &str, caps: &TmCaps) -> Result<(), DeviceError> {
        if caps.max_num_tags == 0 {
            return Err(DeviceError::NoTagMatching(device.to_owned()));
        }
        if self.max_num_tags == 0 || self.max_num_tags > caps.max_num_tags {
            return Err(DeviceError::Invalid(format!(
                "a tag list of {} tags: the device holds 1 to {}",
                self.max_num_tags, caps.max_num_tags
            )));
        }
        if self.max_ops == 0 || self.max_ops > caps.max_ops {
            return Err(DeviceError::Invalid(format!(
                "{} outstanding list commands: the device allows 1 to {}",
                self.max_ops, caps.max_ops
            )));
        }
        Ok(())
    }
}
