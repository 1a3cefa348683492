//! The cluster as this member's copy of the control state has it: each
//! member's state, the slots short of copies, and what the running
//! migration has still to move. Every member reports the same figures (once
//! it has applied the same entries), so alert rules may read any of them.

use kvs_control::MemberState;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::{Exposition, Labels};

/// Every state a member can be in, with its `state` label.
const STATES: [(MemberState, &str); 3] = [
    (MemberState::Up, "up"),
    (MemberState::Failed, "failed"),
    (MemberState::Left, "left"),
];

impl Exposition {
    /// `kvs_cluster_member_state`, `kvs_under_replicated_slots`,
    /// `kvs_migration_slots_remaining`.
    pub(super) fn encode_figures(
        &self,
        enc: &mut DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let f = match self.cluster.figures.lock() {
            Ok(f) => f.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let mut m = enc.encode_descriptor(
            "kvs_cluster_member_state",
            "1 for each member's state as this member's copy of the control state has it \
             (up, failed: no word within member_timeout, left: forgotten), 0 for the others.",
            None,
            MetricType::Gauge,
        )?;
        for (member, state) in &f.members {
            for (s, name) in STATES {
                let l: Labels = vec![("member", member.to_string()), ("state", name.into())];
                m.encode_family(&l)?.encode_gauge(&u64::from(*state == s))?;
            }
        }
        enc.encode_descriptor(
            "kvs_under_replicated_slots",
            "Slots with fewer ready copies than replicas, in the cluster.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&u64::from(f.under_replicated))?;
        enc.encode_descriptor(
            "kvs_migration_slots_remaining",
            "Slots the running migration has still to move (0: none runs).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&u64::from(f.migration_remaining))?;
        Ok(())
    }
}
