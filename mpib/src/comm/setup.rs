//! Building a communicator: its configuration, its resources before they
//! are connected, and a connected pair in one process.

use std::sync::atomic::{AtomicU32, Ordering};

use mlx5::device::Context;

use super::{Comm, Stats, MAX_RAILS, POLL_BATCH};
use crate::error::SetupError;
use crate::imm::{self};
use crate::info::{CommInfo, COMM_INFO_VERSION};
use crate::liveness::Liveness;
use crate::policy::{PolicyKind, RailMeter};
use crate::rail::{Rail, Sizing};
use crate::regcache::RegCache;
use crate::request::{RecvSlot, SendPool};

/// How a communicator is built. Both sides must agree on `depth`,
/// `granularity`, the number of rails and `qps_per_rail`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Data QPs per rail (as `NCCL_IB_QPS_PER_CONNECTION`); requests take
    /// them round-robin, one QP per rail per request. Default 2.
    pub qps_per_rail: usize,
    /// FIFO slots: receives outstanding at once (2..=256). Default 32.
    pub depth: usize,
    /// Bytes per `size_q` unit in the immediate: a power of two. Default 128
    /// (sizes up to just under 512 MiB travel in the immediate).
    pub granularity: u32,
    /// The split policy (two rails only). Default `static` 50/50.
    pub policy: PolicyKind,
    /// The SRQ of each rail is refilled when fewer receives than this are
    /// posted (at least `depth`, so an honest peer never meets an empty SRQ).
    /// Default: `depth`.
    pub srq_low: Option<usize>,
    /// ... up to this many. Default: `2 * depth`.
    pub srq_high: Option<usize>,
    /// Sends outstanding at once (the send request pool). Default:
    /// `2 * depth`.
    pub send_requests: Option<usize>,
    /// Largest single-buffer transfer sent eagerly over tag matching, with
    /// no CTS round trip, where every rail of both sides has it (0: never).
    /// Both sides use the smaller value. Default 0: off, as UCX's
    /// `UCX_RC_MLX5_TM_ENABLE` is. On the software device a CTS costs
    /// nothing to wait for (data lands the moment the doorbell rings) while
    /// the tag list's work does, so eager transfers are slower there; on a
    /// NIC they save a CTS's one-way latency when a receive is posted late,
    /// which no machine here can measure. [`SUGGESTED_EAGER_MAX`] is a
    /// threshold to turn them on with.
    pub eager_max: usize,
}

/// A [`Config::eager_max`] to turn eager transfers on with: one 8 KiB
/// buffer.
pub const SUGGESTED_EAGER_MAX: usize = 8192;
/// The largest [`Config::eager_max`].
pub const MAX_EAGER: usize = 64 * 1024;

impl Default for Config {
    fn default() -> Self {
        Config {
            qps_per_rail: 2,
            depth: 32,
            granularity: imm::DEFAULT_GRANULARITY,
            policy: PolicyKind::default(),
            srq_low: None,
            srq_high: None,
            send_requests: None,
            eager_max: 0,
        }
    }
}

/// A [`Config`] with every default filled in and checked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resolved {
    pub(super) depth: usize,
    pub(super) granularity: u32,
    pub(super) srq_low: usize,
    pub(super) srq_high: usize,
    pub(super) sizing: Sizing,
}

impl Config {
    fn resolve(&self, rails: usize) -> Result<Resolved, SetupError> {
        let bad = |s: String| Err(SetupError::Config(s));
        if rails == 0 || rails > MAX_RAILS {
            return bad(format!("{rails} rails (1 or 2)"));
        }
        if !(1..=64).contains(&self.qps_per_rail) {
            return bad(format!("{} QPs per rail (1..=64)", self.qps_per_rail));
        }
        if !(2..=256).contains(&self.depth) {
            return bad(format!("depth {} (2..=256)", self.depth));
        }
        if !self.granularity.is_power_of_two() || self.granularity > 1 << 20 {
            return bad(format!(
                "granularity {} (a power of two up to 1 MiB)",
                self.granularity
            ));
        }
        let srq_low = self.srq_low.unwrap_or(self.depth);
        let srq_high = self.srq_high.unwrap_or(2 * self.depth);
        if srq_low < self.depth || srq_high <= srq_low || srq_high > 1 << 15 {
            return bad(format!(
                "SRQ water marks {srq_low}..{srq_high} (depth <= low < high <= 32768)"
            ));
        }
        let send_requests = self.send_requests.unwrap_or(2 * self.depth);
        if !(1..=4096).contains(&send_requests) {
            return bad(format!("{send_requests} send requests (1..=4096)"));
        }
        if self.eager_max > MAX_EAGER {
            return bad(format!(
                "eager_max {} (at most {MAX_EAGER})",
                self.eager_max
            ));
        }
        Ok(Resolved {
            depth: self.depth,
            granularity: self.granularity,
            srq_low,
            srq_high,
            sizing: Sizing {
                depth: self.depth,
                qps: self.qps_per_rail,
                srq_high,
                send_requests,
                eager_max: self.eager_max,
            },
        })
    }
}

static NEXT_COMM_ID: AtomicU32 = AtomicU32::new(1);

/// A communicator whose resources exist but which is not connected yet: send
/// [`info`](Self::info) to the peer and [`connect`](Self::connect) with the
/// peer's.
#[derive(Debug)]
pub struct PendingComm {
    rails: Vec<Rail>,
    cfg: Config,
    res: Resolved,
    info: CommInfo,
}

impl PendingComm {
    /// Creates the resources on `devices` (rail 0 first; one or two) and posts
    /// the first receives.
    pub fn new(devices: &[Context], cfg: &Config) -> Result<PendingComm, SetupError> {
        let res = cfg.resolve(devices.len())?;
        let mut rails = Vec::with_capacity(devices.len());
        for d in devices {
            let mut rail = Rail::new(d, &res.sizing)?;
            // Receives may be posted before the QPs connect.
            for _ in 0..res.srq_high {
                rail.dom
                    .post_srq_recv(rail.srq, 0, &[])
                    .map_err(|e| SetupError::Config(format!("posting the first receives: {e}")))?;
                rail.srq_outstanding += 1;
            }
            rails.push(rail);
        }
        let info = CommInfo {
            version: COMM_INFO_VERSION,
            depth: res.depth as u32,
            granularity: res.granularity,
            eager_max: cfg.eager_max as u32,
            rails: rails.iter().map(Rail::info).collect(),
        };
        Ok(PendingComm {
            rails,
            cfg: *cfg,
            res,
            info,
        })
    }

    /// What the peer needs to connect.
    pub fn info(&self) -> &CommInfo {
        &self.info
    }

    /// Connects to the peer described by `peer`.
    pub fn connect(self, peer: &CommInfo) -> Result<Comm, SetupError> {
        self.connect_with(peer, Liveness::None)
    }

    pub(crate) fn connect_with(
        mut self,
        peer: &CommInfo,
        liveness: Liveness,
    ) -> Result<Comm, SetupError> {
        self.info.check_peer(peer).map_err(SetupError::Peer)?;
        for (r, p) in self.rails.iter_mut().zip(&peer.rails) {
            r.connect(p)?;
        }
        let n = self.rails.len();
        let srq_posted = self.res.srq_high as u64;
        Ok(Comm {
            id: NEXT_COMM_ID.fetch_add(1, Ordering::Relaxed),
            rail_mask: if n == 2 { 0b11 } else { 0b01 },
            policy: self.cfg.policy.build(),
            meters: [RailMeter::default(); 2],
            send_pos: 0,
            sends: SendPool::new(self.res.sizing.send_requests),
            recv_pos: 0,
            slots: vec![RecvSlot::IDLE; self.res.depth],
            wcs: Vec::with_capacity(POLL_BATCH),
            eager: u64::from(self.info.eager_with(peer)),
            parked: Vec::with_capacity(crate::eager::BOUNCES * n),
            tm_wcs: Vec::with_capacity(POLL_BATCH),
            regs: RegCache::default(),
            liveness,
            closed: None,
            calls: 0,
            stats: Stats {
                sends: 0,
                recvs: 0,
                fast_path: 0,
                record_path: 0,
                rail_bytes: [0; 2],
                signals: [0; 2],
                data_writes: [0; 2],
                cts: [0; 2],
                cts_signaled: [0; 2],
                srq_posted: [srq_posted, if n == 2 { srq_posted } else { 0 }],
                srq_consumed: [0; 2],
                srq_min_outstanding: [self.res.srq_high as u32; 2],
                eager_sends: 0,
                eager_recvs: 0,
                unexpected: 0,
            },
            cfg: self.cfg,
            res: self.res,
            rails: self.rails,
        })
    }
}

/// Two connected communicators in one process: `a` on `a_devices`, `b` on
/// `b_devices` (the same number of rails), with a socket pair between them as
/// the liveness channel.
pub fn pair(
    a_devices: &[Context],
    b_devices: &[Context],
    cfg: &Config,
) -> Result<(Comm, Comm), SetupError> {
    let a = PendingComm::new(a_devices, cfg)?;
    let b = PendingComm::new(b_devices, cfg)?;
    let (ia, ib) = (a.info().clone(), b.info().clone());
    let (sa, sb) = std::os::unix::net::UnixStream::pair()?;
    let a = a.connect_with(&ib, Liveness::unix(sa)?)?;
    let b = b.connect_with(&ia, Liveness::unix(sb)?)?;
    Ok((a, b))
}
