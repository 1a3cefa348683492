//! The control plane's side of the server: the member's part in the
//! cluster's control group ([`kvs_control::Group`]), the thread that drives
//! it and serves control requests ([`control`]), the transport of the
//! group's messages ([`peers`]), how a member starts (bootstrap, resume or
//! join: [`start`]; a data dir of its own when none is set: [`temp_dir`]),
//! and the lease its workers serve under ([`crate::threads::lease`]). What the
//! control thread proposes for replication, drains and a replicated
//! migration's hand-over are in [`crate::replication`].

pub(crate) mod control;
pub(crate) mod peers;
pub(crate) mod start;
pub(crate) mod temp_dir;
