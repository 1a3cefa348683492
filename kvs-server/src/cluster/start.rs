//! How a member starts: it resumes the member its data dir holds; with an
//! empty data dir it joins the cluster of the member `join` names, or starts
//! a new cluster when `bootstrap` says so. A data dir that holds a member is
//! never started anew: a restart under systemd resumes the same member of
//! the same cluster, whatever `join` or `bootstrap` say. An empty data dir
//! with neither is refused: it may be a member's lost one, and founding a
//! cluster there would put a second, empty cluster at a member's address.
//! Without `data_dir` the member makes a temporary one and, without `join`,
//! starts a cluster of its own.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::Path;
use std::time::Instant;

use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use kvs_client::{ControlClient, ControlOptions};
use kvs_control::{Group, Identity};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_proto::{AuthToken, ClusterId, MemberId, ShardMap};
use mlx5::device::Context as Device;

use super::temp_dir::TempDir;
use crate::config::Config;
use crate::start_error::StartError;

/// How the member came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// It started a new cluster.
    Bootstrapped,
    /// It resumed the member its data dir holds.
    Resumed,
    /// It joined a cluster as a new member.
    Joined,
}

/// A started member's part in the control group.
pub(crate) struct Started {
    pub group: Group,
    /// The map its workers start with.
    pub map: ShardMap,
    pub how: How,
    /// The data dir, if the member made a temporary one (removed when the
    /// server ends).
    pub temporary: Option<TempDir>,
}

/// Starts the member: resumes, bootstraps or joins (see the module docs).
/// `bound`: the setup address it listens at; `bulk_port`: its bulk port.
pub(crate) fn start(
    cfg: &Config,
    bound: SocketAddr,
    bulk_port: u16,
    cluster_token: Option<AuthToken>,
) -> Result<Started, StartError> {
    let (dir, temporary) = match &cfg.data_dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = TempDir::new_in(&std::env::temp_dir()).map_err(|e| {
                StartError::Join(format!(
                    "a temporary data dir under {}: {e}",
                    std::env::temp_dir().display()
                ))
            })?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let now = Instant::now();
    let fail = |e: kvs_control::GroupError| StartError::Join(format!("{}: {e}", dir.display()));
    // A temporary data dir is new by construction: no member can have lost
    // it, so it bootstraps without being told (the one-line demo server).
    let may_bootstrap = cfg.bootstrap || temporary.is_some();
    let (group, map, how) = if Identity::load(&dir).map_err(|e| fail(e.into()))?.is_some() {
        resume(cfg, &dir, cluster_token, now)?
    } else {
        match &cfg.join {
            Some(j) => join_anew(cfg, &dir, j, (bound, bulk_port), cluster_token, now)?,
            None if may_bootstrap => bootstrap(cfg, &dir, (bound, bulk_port), now)?,
            None => return Err(StartError::NoMember { dir }),
        }
    };
    Ok(Started {
        group,
        map,
        how,
        temporary,
    })
}

/// The group, map and way of a started member.
type Member = (Group, ShardMap, How);

/// Resumes the member the data dir `dir` holds.
fn resume(
    cfg: &Config,
    dir: &Path,
    cluster_token: Option<AuthToken>,
    now: Instant,
) -> Result<Member, StartError> {
    let fail = |e: kvs_control::GroupError| StartError::Join(format!("{}: {e}", dir.display()));
    let (group, rec) = Group::open(dir, cfg.group_config(), now).map_err(fail)?;
    if rec.torn_bytes > 0 {
        tracing::warn!(
            "{}: dropped the last {} bytes of the control log, a write the \
             crash cut short",
            dir.display(),
            rec.torn_bytes
        );
    }
    let map = match group.state() {
        Some(s) => s.map().clone(),
        // It joined and stopped before the group gave it the state.
        None => match &cfg.join {
            Some(j) => fetch_map(cfg, resolve(j)?, cluster_token, group.cluster_id())?,
            None => {
                return Err(StartError::Join(format!(
                    "{} holds member {} of cluster {}, which has not yet been given the \
                     cluster's state: start it with --join and any member's address",
                    dir.display(),
                    group.me(),
                    group.cluster_id()
                )))
            }
        },
    };
    check_workers(&map, group.me(), cfg.workers)?;
    Ok((group, map, How::Resumed))
}

/// Starts a new cluster in the empty data dir `dir`, this server its member
/// 0 and owner of every slot; `at`: its setup address and bulk port.
fn bootstrap(
    cfg: &Config,
    dir: &Path,
    at: (SocketAddr, u16),
    now: Instant,
) -> Result<Member, StartError> {
    let me = advertised(cfg, at.0, None)?;
    let mut map = ShardMap::single(me, cfg.slots, cfg.workers)
        .map_err(|e| StartError::Config(crate::config::ConfigError::Invalid(e.to_string())))?;
    let _ = map.set_bulk_port(MemberId(0), at.1);
    let group = Group::bootstrap(dir, map.clone(), founding(cfg), cfg.group_config(), now)
        .map_err(|e| StartError::Join(format!("{}: {e}", dir.display())))?;
    Ok((group, map, How::Bootstrapped))
}

/// Joins the cluster of the member at `contact` (`join`) as a new member,
/// kept in the empty data dir `dir`; `at`: its setup address and bulk port.
fn join_anew(
    cfg: &Config,
    dir: &Path,
    contact: &str,
    at: (SocketAddr, u16),
    cluster_token: Option<AuthToken>,
    now: Instant,
) -> Result<Member, StartError> {
    let fail = |e: kvs_control::GroupError| StartError::Join(format!("{}: {e}", dir.display()));
    let target = resolve(contact)?;
    let me = advertised(cfg, at.0, Some(target))?;
    let (id, map) = join(cfg, target, me, at.1, cluster_token)?;
    id.store(dir).map_err(|e| fail(e.into()))?;
    let (group, _) = Group::open(dir, cfg.group_config(), now).map_err(fail)?;
    Ok((group, map, How::Joined))
}

/// A member comes back with the workers the map gave it.
fn check_workers(map: &ShardMap, me: MemberId, workers: u16) -> Result<(), StartError> {
    match map.members().get(me.index()) {
        Some(m) if m.workers != workers => Err(StartError::Join(format!(
            "this is member {me}, which has {} workers in the cluster's map; it cannot come \
             back with {workers} (set workers = {})",
            m.workers, m.workers
        ))),
        _ => Ok(()),
    }
}

/// The address a server tells others to reach it at: `advertise`, else its
/// listening address, with an unspecified IP replaced by the IP this host
/// uses on the route to `toward` (when it has somewhere to go).
pub(crate) fn advertised(
    cfg: &Config,
    bound: SocketAddr,
    toward: Option<SocketAddr>,
) -> Result<SocketAddr, StartError> {
    let a = cfg.advertise.unwrap_or(bound);
    match toward {
        Some(t) if a.ip().is_unspecified() => {
            let ip = route_ip(t).map_err(|e| {
                StartError::Join(format!(
                    "cannot tell which of this host's addresses reaches {t} ({e}); set advertise"
                ))
            })?;
            Ok(SocketAddr::new(ip, a.port()))
        }
        _ => Ok(a),
    }
}

/// The local IP of the route to `t`: a UDP socket's `connect` picks it
/// without sending anything.
fn route_ip(t: SocketAddr) -> std::io::Result<std::net::IpAddr> {
    let any: SocketAddr = if t.is_ipv4() {
        "0.0.0.0:0".parse().expect("a valid address")
    } else {
        "[::]:0".parse().expect("a valid address")
    };
    let s = UdpSocket::bind(any)?;
    s.connect(t)?;
    Ok(s.local_addr()?.ip())
}

/// The first address `join` resolves to.
pub(crate) fn resolve(join: &str) -> Result<SocketAddr, StartError> {
    join.to_socket_addrs()
        .map_err(|e| StartError::Join(format!("join {join}: {e}")))?
        .next()
        .ok_or_else(|| StartError::Join(format!("join {join}: no address")))
}

/// Joins the cluster `target` belongs to as `me`: the member's identity
/// and the map that includes it.
fn join(
    cfg: &Config,
    target: SocketAddr,
    me: SocketAddr,
    bulk_port: u16,
    cluster_token: Option<AuthToken>,
) -> Result<(Identity, ShardMap), StartError> {
    let req = ControlRequest::Join {
        zone: cfg.zone.clone(),
        addr: me,
        workers: cfg.workers,
        slots: cfg.slots,
        bulk_port,
    };
    ask(cfg, target, cluster_token, None, req).and_then(|answer| match answer {
        ControlReply::Joined {
            cluster_id,
            member,
            map,
        } => {
            let fail = |m: String| StartError::Join(format!("join {target}: {m}"));
            let map = ShardMap::decode(&map).map_err(|e| fail(e.to_string()))?;
            match map.members().get(member.index()) {
                Some(m) if m.addr == me && m.workers == cfg.workers => {}
                _ => {
                    return Err(fail(format!(
                        "the map does not have this server as member {member}"
                    )))
                }
            }
            tracing::info!("joined cluster {cluster_id} as member {member}");
            Ok((Identity { cluster_id, member }, map))
        }
        other => Err(StartError::Join(format!(
            "join {target}: unexpected answer {other:?}"
        ))),
    })
}

/// The cluster's map, from the member at `target`.
fn fetch_map(
    cfg: &Config,
    target: SocketAddr,
    cluster_token: Option<AuthToken>,
    cluster: ClusterId,
) -> Result<ShardMap, StartError> {
    match ask(
        cfg,
        target,
        cluster_token,
        Some(cluster),
        ControlRequest::Map,
    )? {
        ControlReply::Map { map } => ShardMap::decode(&map)
            .map_err(|e| StartError::Join(format!("the map from {target}: {e}"))),
        other => Err(StartError::Join(format!(
            "the map from {target}: unexpected answer {other:?}"
        ))),
    }
}

/// `req` to the member at `target`, sent on to the leader it names; the
/// leader's answer (an error answer is an error).
fn ask(
    cfg: &Config,
    target: SocketAddr,
    cluster_token: Option<AuthToken>,
    cluster: Option<ClusterId>,
    req: ControlRequest,
) -> Result<ControlReply, StartError> {
    let dev = cfg
        .device_spec()
        .open()
        .map_err(|e| StartError::Join(format!("open the device: {e}")))?;
    let asking = Asking {
        target,
        cluster_token,
        cluster,
        req,
    };
    run_on_device_as(dev, cfg.transport, asking)
        .map_err(|(_, e)| StartError::Join(format!("open the device: {e}")))?
}

/// What a cluster this member starts is founded with.
fn founding(cfg: &Config) -> kvs_control::Founding {
    kvs_control::Founding {
        control_voters: cfg.control_voters,
        replicas: cfg.replicas,
        zone: cfg.zone.clone(),
        member_timeout_ms: Some(cfg.member_timeout_ms),
    }
}

/// [`ask`] on the transport the device calls for.
struct Asking {
    target: SocketAddr,
    cluster_token: Option<AuthToken>,
    /// The cluster the target must belong to, when the member knows it.
    cluster: Option<ClusterId>,
    req: ControlRequest,
}

impl OnTransport for Asking {
    type Output = Result<ControlReply, StartError>;

    fn run<T: Transport>(self, dev: Device) -> Self::Output {
        let fail = |m: String| StartError::Join(m);
        let opts = ControlOptions {
            cluster_token: self.cluster_token,
            cluster_id: self.cluster,
            ..ControlOptions::default()
        };
        let mut cc = ControlClient::<T>::new(&dev, opts).map_err(|e| fail(e.to_string()))?;
        let mut target = self.target;
        // The member asked, then the leader it names (a new leader may be
        // named while an election settles); a join held up by another
        // membership change waits its turn, backing off. 30 s in all.
        let until = Instant::now() + std::time::Duration::from_secs(30);
        let mut backoff = std::time::Duration::from_millis(50);
        let mut said = false;
        while Instant::now() < until {
            let answer = cc
                .request(target, &self.req)
                .map_err(|e| fail(format!("{target}: {e}")))?;
            match answer {
                ControlReply::NoLeader => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                ControlReply::NotYet { message } => {
                    if !said {
                        tracing::info!("{target}: {message}; waiting its turn");
                        said = true;
                    }
                    // Spread the joiners that wait together.
                    let spread = u64::from(self.target.port() ^ std::process::id() as u16) % 50;
                    std::thread::sleep(backoff + std::time::Duration::from_millis(spread));
                    backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
                }
                ControlReply::Keeper { addr } => {
                    target = if addr.ip().is_unspecified() {
                        SocketAddr::new(target.ip(), addr.port())
                    } else {
                        addr
                    };
                }
                ControlReply::Error { message } => {
                    return Err(fail(format!("{target}: {message}")))
                }
                other => return Ok(other),
            }
        }
        Err(fail(format!(
            "{}: no leader took the request within 30 s (the control group may have no \
             quorum, or membership changes kept it busy)",
            self.target
        )))
    }
}
