//! The control plane's side of the server: the member's part in the
//! cluster's control group ([`kvs_control::Group`]), the thread that drives
//! it and serves control requests ([`control`]), the transport of the
//! group's messages ([`peers`]), how a member starts (bootstrap, resume or
//! join: [`start`]; a data dir of its own when none is set: [`temp_dir`]),
//! the reports of its workers' replication it proposes ([`replicas`]), a
//! migration's hand-over from this member ([`hand_over`]), and the lease
//! its workers serve under ([`crate::lease`]).

pub(crate) mod control;
pub(crate) mod hand_over;
pub(crate) mod peers;
pub(crate) mod replicas;
pub(crate) mod start;
pub(crate) mod temp_dir;
