//! The Dynamically Connected transport on an opened device: DC targets
//! ([`Dct`]) and initiators (DCIs, which are [`Qp`]s), and the routes a
//! DCI's WQEs carry.

use super::context::Context;
use super::cq::Cq;
use super::pd::Pd;
use super::qp::{HwQpHandle, Qp};
use super::seam::backend;
use super::srq::SrqHandle;
use crate::hw::{HwContext, HwDct};
use crate::prm::AddressVector;
#[cfg(feature = "sim")]
use crate::sim::{dct::SimDct, device::DCI_STREAM_CAPS};
use crate::types::error::DeviceError;
use crate::types::{DciStreams, DctAttr, QpCaps};

/// The Dynamically Connected transport: DC targets and initiators. On a NIC
/// they are mlx5 DC queues (`hw::dc`, written from rdma-core's
/// headers and never run on a ConnectX yet); a device that is not mlx5
/// (soft-RoCE `rxe`) has no DC and refuses them with
/// [`DeviceError::Invalid`].
impl Context {
    /// The DCI streams the device supports: the largest `log_concurrent`
    /// and `log_errored` [`create_dci`](Self::create_dci) accepts (on a NIC,
    /// `mlx5dv_query_device`'s `dci_streams_caps`; zero and zero where the
    /// device has none).
    pub fn dci_stream_caps(&self) -> Result<DciStreams, DeviceError> {
        backend!(self,
            Sim(_) => Ok(DCI_STREAM_CAPS),
            Hw(c) => Ok(dc_capable(c)?.dci_stream_caps()?),
        )
    }

    /// The route a DCI's WQE carries to the port `lid` / `gid` (a DCT's
    /// device, as its owner publishes it), for
    /// [`SendQueue::dc_via`](crate::sq::SendQueue::dc_via). On a NIC it is
    /// the address vector of an address handle (`ibv_create_ah`), which on
    /// RoCE holds the destination MAC; get it once per peer device, not per
    /// WQE. On the software device it is
    /// [`AddressVector::lid_gid_route`], what
    /// [`SendQueue::dc`](crate::sq::SendQueue::dc) writes.
    pub fn dc_route(&self, pd: &Pd, lid: u16, gid: [u8; 16]) -> Result<AddressVector, DeviceError> {
        backend!(self,
            Sim(_) => {
                pd.sim_part()?;
                Ok(AddressVector::lid_gid_route(lid, gid))
            },
            Hw(c) => Ok(pd.hw_part()?.dc_route(dc_capable(c)?, lid, gid)?),
        )
    }

    /// Creates a DC target on `pd`, ready to receive: any DCI whose WQE
    /// names its number and carries `attr.key` reaches it. Its receives
    /// come from `srq` and complete on `recv_cq`. On a NIC it is brought to
    /// RTR here, where it gets its number; dropping it destroys it (rdma-core
    /// drains it first).
    pub fn create_dct(
        &self,
        pd: &Pd,
        srq: &SrqHandle,
        recv_cq: &Cq,
        attr: &DctAttr,
    ) -> Result<Dct, DeviceError> {
        backend!(self,
            Sim(c) => {
                let (p, s, q) = (pd.sim_part()?, srq.sim_part()?, recv_cq.sim_part()?);
                Ok(Dct::Sim(c.create_dct(p, s, q, attr)?))
            },
            Hw(c) => {
                let (p, s, q) = (pd.hw_part()?, srq.hw_part()?, recv_cq.hw_part()?);
                Ok(Dct::Hw(p.create_dct(dc_capable(c)?, s, q, attr)?))
            }
        )
    }

    /// Creates a DC initiator on `pd` with its completions on `send_cq`
    /// and `streams` within [`dci_stream_caps`](Self::dci_stream_caps).
    /// It has no receive queue (`caps.rq_wqe_cnt` is ignored); bring it up
    /// with [`Qp::ready_dci`], then post through
    /// [`SendQueue::dc`](crate::sq::SendQueue::dc).
    pub fn create_dci(
        &self,
        pd: &Pd,
        send_cq: &Cq,
        caps: &QpCaps,
        streams: DciStreams,
    ) -> Result<Qp, DeviceError> {
        backend!(self,
            Sim(c) => {
                let (p, s) = (pd.sim_part()?, send_cq.sim_part()?);
                Ok(Qp::Sim(c.create_dci(p, s, caps, streams)?))
            },
            Hw(c) => {
                let (p, s) = (pd.hw_part()?, send_cq.hw_part()?);
                check_streams(c.name(), streams, dc_capable(c)?.dci_stream_caps()?)?;
                Ok(Qp::Hw(HwQpHandle::new(p.create_dci(s, caps, streams)?, c)))
            }
        )
    }
}

/// The device, if it has DC queues: mlx5 devices have, others (soft-RoCE
/// `rxe`, in particular) have not.
fn dc_capable(c: &HwContext) -> Result<&HwContext, DeviceError> {
    if c.is_mlx5() {
        Ok(c)
    } else {
        Err(DeviceError::Invalid(format!(
            "{}: not an mlx5 device, so it has no DC transport (soft-RoCE rxe has none); \
             use RC QPs",
            c.name()
        )))
    }
}

/// `want` within the device's DCI stream caps, else a clear error.
fn check_streams(dev: &str, want: DciStreams, caps: DciStreams) -> Result<(), DeviceError> {
    if want.log_concurrent > caps.log_concurrent || want.log_errored > caps.log_errored {
        return Err(DeviceError::Invalid(format!(
            "{dev}: DCI streams 2^{} concurrent, 2^{} errored: the device's dci_streams_caps \
             allow 2^{} and 2^{} (max_log_num_concurent {}, max_log_num_errored {})",
            want.log_concurrent,
            want.log_errored,
            caps.log_concurrent,
            caps.log_errored,
            caps.log_concurrent,
            caps.log_errored
        )));
    }
    Ok(())
}

/// A DC target: receives from any DCI that names it and carries its key.
#[derive(Debug, Clone)]
pub enum Dct {
    /// Software device.
    #[cfg(feature = "sim")]
    Sim(SimDct),
    /// An mlx5 NIC (never run on one yet: see `hw::dc`).
    Hw(HwDct),
}

impl Dct {
    /// The DCT number, which a DCI's WQE names.
    pub fn number(&self) -> u32 {
        backend!(self, d => d.number())
    }

    /// The access key a DCI's WQE must carry.
    pub fn key(&self) -> u64 {
        backend!(self, d => d.key())
    }
}
