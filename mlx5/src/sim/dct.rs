//! DC targets of the software device. A DCT receives from any DCI whose WQE
//! names its number and carries its access key, into its SRQ, with its
//! receive completions on its CQ. It has no send queue. Its number comes
//! from the QP table, as on a ConnectX, where DCT and QP numbers share one
//! space; a ConnectX gives a DCT its number when it reaches RTR, and a DCT
//! never goes further, so [`SimContext::create_dct`] returns one ready.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::device::{SimContext, SimCq, SimPd, SimSrq};
use super::fabric::FabricError;
use super::registry::{self, qp_kind, qp_state, LIVE, MAX_QPS};
use crate::types::error::DeviceError;
use crate::types::{rnr_timer_us, DctAttr};

/// A DC target of the software device.
#[derive(Debug, Clone)]
pub struct SimDct {
    inner: Arc<DctInner>,
}

#[derive(Debug)]
struct DctInner {
    ctx: SimContext,
    slot: usize,
    number: u32,
    key: u64,
    // Held while the DCT lives: the NIC delivers into them.
    _srq: SimSrq,
    _cq: SimCq,
}

impl Drop for DctInner {
    fn drop(&mut self) {
        let e = &self.ctx.fabric().reg().qps[self.slot];
        e.qp_state.store(qp_state::RESET, Ordering::Release);
        e.state.store(registry::FREE, Ordering::Release);
    }
}

impl SimContext {
    /// Creates a DCT on `pd` that takes its receives from `srq` and
    /// completes them on `recv_cq`, reachable by DCIs that carry
    /// `attr.key`, ready to receive.
    pub fn create_dct(
        &self,
        pd: &SimPd,
        srq: &SimSrq,
        recv_cq: &SimCq,
        attr: &DctAttr,
    ) -> Result<SimDct, DeviceError> {
        let fab = self.fabric();
        let r = fab.reg();
        let slot = r
            .claim_qp()
            .ok_or_else(|| DeviceError::Fabric(FabricError::Full(fab.name().into(), "QP")))?;
        let number = registry::object_number(slot, MAX_QPS, r.next_gen());
        let e = &r.qps[slot];
        let dev = u32::from(self.lid()) - 1;
        e.clear(number, qp_kind::DCT, fab.token(), dev, pd.pdn());
        e.dc_key.store(attr.key, Ordering::Relaxed);
        e.srqn.store(srq.srqn(), Ordering::Relaxed);
        e.send_cqn.store(recv_cq.cqn(), Ordering::Relaxed);
        e.recv_cqn.store(recv_cq.cqn(), Ordering::Relaxed);
        e.access.store(attr.access, Ordering::Relaxed);
        e.min_rnr_us
            .store(rnr_timer_us(attr.min_rnr_timer), Ordering::Relaxed);
        e.qp_state.store(qp_state::RTR, Ordering::Relaxed);
        e.state.store(LIVE, Ordering::Release);
        Ok(SimDct {
            inner: Arc::new(DctInner {
                ctx: self.clone(),
                slot,
                number,
                key: attr.key,
                _srq: srq.clone(),
                _cq: recv_cq.clone(),
            }),
        })
    }
}

impl SimDct {
    /// The DCT number, which a DCI's WQE names.
    pub fn number(&self) -> u32 {
        self.inner.number
    }

    /// The access key a DCI's WQE must carry.
    pub fn key(&self) -> u64 {
        self.inner.key
    }

    /// Transport tries that named this DCT with another key (each dropped:
    /// the DCI gets no answer), as a ConnectX counts them in its DCT
    /// context's `dc_access_key_violation_count`.
    pub fn key_violations(&self) -> u32 {
        let e = &self.inner.ctx.fabric().reg().qps[self.inner.slot];
        e.key_violations.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::device::live_qps;
    use crate::types::{access, CqAttr, QpCaps};

    #[test]
    fn a_dct_takes_a_number_from_the_qp_space_and_gives_it_back() {
        let fabric = format!("dct-num-{}", std::process::id());
        dct_number(&SimContext::open_in(&fabric, "sim0").unwrap());
        crate::sim::fabric::Fabric::remove_if_unused(&fabric);
    }

    fn dct_number(c: &SimContext) {
        let pd = c.alloc_pd();
        let cq = c.create_cq(&CqAttr::default()).unwrap();
        let srq = c.create_srq(&pd, 64, 1).unwrap();
        let before = live_qps(c);
        let attr = DctAttr {
            key: 0x1234_5678_9abc_def0,
            access: access::REMOTE_WRITE,
            min_rnr_timer: 1,
        };
        let dct = c.create_dct(&pd, &srq, &cq, &attr).unwrap();
        let qp = c
            .create_qp(&pd, &cq, &cq, Some(&srq), &QpCaps::default())
            .unwrap();
        assert_ne!(dct.number(), qp.qpn());
        assert_eq!(dct.key(), attr.key);
        assert_eq!(live_qps(c), before + 2);
        let e = &c.fabric().reg().qps[registry::slot_of(dct.number(), MAX_QPS)];
        assert_eq!(e.kind.load(Ordering::Relaxed), qp_kind::DCT);
        assert_eq!(e.dc_key.load(Ordering::Relaxed), attr.key);
        assert_eq!(e.srqn.load(Ordering::Relaxed), srq.srqn());
        assert_eq!(e.qp_state.load(Ordering::Relaxed), qp_state::RTR);
        // An RC QP made in a slot a DCT left is an RC QP again.
        let number = dct.number();
        drop(dct);
        assert_eq!(live_qps(c), before + 1);
        let again = c
            .create_qp(&pd, &cq, &cq, Some(&srq), &QpCaps::default())
            .unwrap();
        let e = &c.fabric().reg().qps[registry::slot_of(again.qpn(), MAX_QPS)];
        assert_eq!(e.kind.load(Ordering::Relaxed), qp_kind::RC);
        assert_eq!(e.dc_key.load(Ordering::Relaxed), 0);
        assert_ne!(again.qpn(), number, "a number is not reused at once");
    }
}
