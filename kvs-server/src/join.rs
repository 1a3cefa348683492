//! Joining a cluster at start: a server started with `join` asks the member
//! it names (which sends it on to the keeper, member 0, if it is not the
//! keeper) to add it, and gets its member id and the map that includes it.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};

use copyrpc::transport::{run_on_device, OnTransport, Transport};
use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_proto::{AuthToken, ShardMap};
use mlx5::device::Context as Device;

use crate::config::Config;
use crate::server::StartError;

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

/// Joins the cluster `target` belongs to as `me`; returns the member id and
/// the map.
pub(crate) fn join(
    cfg: &Config,
    target: SocketAddr,
    me: SocketAddr,
    bulk_port: u16,
    auth: Option<AuthToken>,
) -> Result<(u16, ShardMap), StartError> {
    let spec = cfg.device_spec();
    let dev = spec
        .open()
        .map_err(|e| StartError::Join(format!("open the device: {e}")))?;
    run_on_device(
        dev,
        Joining {
            cfg,
            bulk_port,
            target,
            me,
            auth,
        },
    )
}

struct Joining<'a> {
    cfg: &'a Config,
    bulk_port: u16,
    target: SocketAddr,
    me: SocketAddr,
    auth: Option<AuthToken>,
}

impl OnTransport for Joining<'_> {
    type Output = Result<(u16, ShardMap), StartError>;

    fn run<T: Transport>(self, dev: Device) -> Self::Output {
        let fail = |m: String| StartError::Join(m);
        let opts = ControlOptions {
            auth_token: self.auth,
            ..ControlOptions::default()
        };
        let mut cc = ControlClient::<T>::new(&dev, opts).map_err(|e| fail(e.to_string()))?;
        let req = ControlRequest::Join {
            addr: self.me,
            workers: self.cfg.workers,
            slots: self.cfg.slots,
            bulk_port: self.bulk_port,
        };
        let mut target = self.target;
        // The member asked, then the keeper it names.
        for _ in 0..2 {
            let answer = cc
                .request(target, &req)
                .map_err(|e| fail(format!("join {target}: {e}")))?;
            match answer {
                ControlReply::Joined { member, map } => {
                    let map =
                        ShardMap::decode(&map).map_err(|e| fail(format!("join {target}: {e}")))?;
                    match map.members().get(usize::from(member)) {
                        Some(m) if m.addr == self.me && m.workers == self.cfg.workers => {}
                        _ => {
                            return Err(fail(format!(
                            "join {target}: the map does not have this server as member {member}"
                        )))
                        }
                    }
                    return Ok((member, map));
                }
                ControlReply::Keeper { addr } => {
                    target = if addr.ip().is_unspecified() {
                        SocketAddr::new(target.ip(), addr.port())
                    } else {
                        addr
                    };
                }
                ControlReply::Error { message } => {
                    return Err(fail(format!("join {target}: {message}")))
                }
                other => return Err(fail(format!("join {target}: unexpected answer {other:?}"))),
            }
        }
        Err(fail(format!(
            "join {}: the keeper did not take the request",
            self.target
        )))
    }
}
