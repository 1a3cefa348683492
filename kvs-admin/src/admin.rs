//! The cluster as kvs-admin reaches it: a control client, the contact
//! member `--server` names, the map it serves, members' figures, and
//! requests only the keeper serves (following `Keeper` answers).

use std::net::{SocketAddr, ToSocketAddrs};

use copyrpc::transport::Transport;
use kvs_client::{ControlClient, ControlError};
use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus};
use kvs_proto::{MemberId, ShardMap};

use crate::error::AdminError;

/// How many `Keeper` answers a keeper-only request follows.
const MAX_KEEPER_HOPS: usize = 4;

/// What kvs-admin needs of a control client: a request to a server, and
/// its answer. [`ControlClient`] over the network; a fake in unit tests.
pub trait Control {
    /// Sends `req` to the server at `addr` and waits for its answer.
    fn request(
        &mut self,
        addr: SocketAddr,
        req: &ControlRequest,
    ) -> Result<ControlReply, ControlError>;
}

impl<X: Transport> Control for ControlClient<X> {
    fn request(
        &mut self,
        addr: SocketAddr,
        req: &ControlRequest,
    ) -> Result<ControlReply, ControlError> {
        ControlClient::request(self, addr, req)
    }
}

/// A connection to the cluster through one contact member.
#[derive(Debug)]
pub struct Admin<C> {
    client: C,
    contact: SocketAddr,
}

impl<C: Control> Admin<C> {
    /// Reaches the cluster through `contact` with `client`.
    pub fn new(client: C, contact: SocketAddr) -> Self {
        Admin { client, contact }
    }

    /// The control client.
    #[cfg(test)]
    pub fn client(&self) -> &C {
        &self.client
    }

    /// The contact member's address.
    pub fn contact(&self) -> SocketAddr {
        self.contact
    }

    /// Where to reach a server a map or a `Keeper` answer names: an
    /// unspecified IP means the contact's.
    pub fn reach(&self, addr: SocketAddr) -> SocketAddr {
        reach(addr, self.contact)
    }

    /// The contact's shard map.
    pub fn map(&mut self) -> Result<ShardMap, AdminError> {
        self.map_of(self.contact)
    }

    /// The shard map of the member at `addr`.
    pub fn map_of(&mut self, addr: SocketAddr) -> Result<ShardMap, AdminError> {
        match self.client.request(addr, &ControlRequest::Map)? {
            ControlReply::Map { map } => {
                ShardMap::decode(&map).map_err(|source| AdminError::BadMap { addr, source })
            }
            other => Err(unexpected(addr, "map", other)),
        }
    }

    /// The figures of the member at `addr`.
    pub fn status(&mut self, addr: SocketAddr) -> Result<MemberStatus, AdminError> {
        match self.client.request(addr, &ControlRequest::Status)? {
            ControlReply::Status(s) => Ok(s),
            other => Err(unexpected(addr, "status", other)),
        }
    }

    /// Sends `req` to the member at `addr` itself (no `Keeper` answer is
    /// followed) and returns its answer.
    pub fn request(
        &mut self,
        addr: SocketAddr,
        req: &ControlRequest,
    ) -> Result<ControlReply, AdminError> {
        Ok(self.client.request(addr, req)?)
    }

    /// The members the control group has up, as the contact sees it (all
    /// of the map's when it does not say).
    pub fn up_members(&mut self, map: &ShardMap) -> Vec<MemberId> {
        let all: Vec<MemberId> = map.member_ids().collect();
        match self.status(self.contact).ok().and_then(|s| s.group) {
            Some(g) => all
                .into_iter()
                .filter(|&m| g.members.iter().any(|x| x.id == m && x.state == "up"))
                .collect(),
            None => all,
        }
    }

    /// Sends a request only the keeper serves to the contact, and on to
    /// whoever it names as the keeper; returns the keeper's address and its
    /// answer (an `Error` answer included).
    pub fn ask_keeper(
        &mut self,
        req: &ControlRequest,
    ) -> Result<(SocketAddr, ControlReply), AdminError> {
        let mut addr = self.contact;
        let mut path = vec![addr];
        let mut elections = 0;
        loop {
            match self.client.request(addr, req)? {
                // An election is under way: asked again, for up to 5 s.
                ControlReply::NoLeader if elections < 50 => {
                    elections += 1;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                ControlReply::NoLeader => {
                    return Err(AdminError::Refused {
                        addr,
                        what: "the request",
                        message: "the control group has had no leader for 5 s (is a majority \
                                  of its voters up?)"
                            .into(),
                    })
                }
                ControlReply::Keeper { addr: k } => {
                    let next = self.reach(k);
                    path.push(next);
                    if path.len() > MAX_KEEPER_HOPS + 1 || next == addr {
                        let p: Vec<String> = path.iter().map(ToString::to_string).collect();
                        return Err(AdminError::KeeperLoop(p.join(" -> ")));
                    }
                    addr = next;
                }
                answer => return Ok((addr, answer)),
            }
        }
    }
}

/// `addr`, with the IP of `contact` if its own is unspecified.
pub fn reach(addr: SocketAddr, contact: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(contact.ip(), addr.port())
    } else {
        addr
    }
}

/// An answer that does not fit the request, as an error (an `Error`
/// answer's message verbatim; a member still recovering, as such).
pub fn unexpected(addr: SocketAddr, what: &'static str, got: ControlReply) -> AdminError {
    match got {
        ControlReply::Error { message } => AdminError::Refused {
            addr,
            what,
            message,
        },
        ControlReply::Recovering { progress } => AdminError::Recovering {
            addr,
            what,
            progress,
        },
        other => AdminError::Unexpected {
            addr,
            what,
            got: format!("{other:?}"),
        },
    }
}

/// The addresses `HOST:PORT` names, IPv4 first.
pub fn resolve(name: &str) -> Result<Vec<SocketAddr>, AdminError> {
    let mut v: Vec<SocketAddr> = name
        .to_socket_addrs()
        .map_err(|e| AdminError::Resolve {
            name: name.to_string(),
            why: e.to_string(),
        })?
        .collect();
    if v.is_empty() {
        return Err(AdminError::Resolve {
            name: name.to_string(),
            why: "no addresses".to_string(),
        });
    }
    v.sort_by_key(|a| a.is_ipv6());
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake;

    #[test]
    fn keeper_answers_are_followed_and_loops_are_not() {
        // The contact names the keeper with an unspecified IP: the contact's.
        let mut a = fake::admin("10.0.0.2:7001", |at, _| {
            Ok(if at == fake::addr("10.0.0.2:7000") {
                ControlReply::Ok
            } else {
                ControlReply::Keeper {
                    addr: fake::addr("0.0.0.0:7000"),
                }
            })
        });
        let (k, r) = a.ask_keeper(&ControlRequest::Cancel).unwrap();
        assert_eq!((k, r), (fake::addr("10.0.0.2:7000"), ControlReply::Ok));
        assert_eq!(a.client().asked.len(), 2);
        // A member that names itself.
        let mut a = fake::admin("10.0.0.2:7001", |at, _| {
            Ok(ControlReply::Keeper { addr: at })
        });
        let e = a.ask_keeper(&ControlRequest::Cancel).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no keeper found: 10.0.0.2:7001 -> 10.0.0.2:7001"
        );
        // Members that pass it round.
        let mut a = fake::admin("10.0.0.2:7001", |at, _| {
            Ok(ControlReply::Keeper {
                addr: SocketAddr::new(at.ip(), at.port() ^ 1),
            })
        });
        assert!(matches!(
            a.ask_keeper(&ControlRequest::Cancel),
            Err(AdminError::KeeperLoop(_))
        ));
        assert_eq!(a.client().asked.len(), MAX_KEEPER_HOPS + 1);
        // A failure to reach one is the error.
        let mut a = fake::admin("10.0.0.2:7001", |addr, _| {
            Err(ControlError::Timeout {
                addr,
                after: std::time::Duration::from_secs(1),
            })
        });
        assert_eq!(
            a.ask_keeper(&ControlRequest::Cancel)
                .unwrap_err()
                .to_string(),
            "10.0.0.2:7001: no answer within 1s"
        );
    }

    #[test]
    fn a_map_or_status_answer_of_the_wrong_kind_is_an_error() {
        let mut a = fake::admin("10.0.0.2:7001", |_, req| {
            Ok(match req {
                ControlRequest::Map => ControlReply::Map { map: vec![1, 2, 3] },
                _ => ControlReply::error("not now"),
            })
        });
        assert_eq!(
            a.map().unwrap_err().to_string(),
            "10.0.0.2:7001: bad shard map: short"
        );
        assert_eq!(
            a.status(fake::addr("10.0.0.2:7001"))
                .unwrap_err()
                .to_string(),
            "status refused by 10.0.0.2:7001: not now"
        );
        let mut a = fake::admin("10.0.0.2:7001", |_, _| Ok(ControlReply::Ok));
        assert_eq!(
            a.map().unwrap_err().to_string(),
            "10.0.0.2:7001: unexpected answer to map: Ok"
        );
    }

    #[test]
    fn a_member_still_recovering_is_a_typed_refusal() {
        let progress = kvs_proto::control::RecoveryProgress {
            read: 3 << 29,
            total: 7 << 29,
        };
        let mut a = fake::admin("10.0.0.2:7001", move |_, _| {
            Ok(ControlReply::Recovering { progress })
        });
        let e = a
            .ask_keeper(&ControlRequest::Cancel)
            .map(|(at, r)| unexpected(at, "cancel", r));
        let e = e.unwrap();
        assert!(matches!(e, AdminError::Recovering { progress: p, .. } if p == progress));
        assert_eq!(
            e.to_string(),
            "cancel refused by 10.0.0.2:7001: the member is recovering its records from its \
             data dir: 1.50 GiB of 3.50 GiB (42%); ask again once it serves (kvs-admin status \
             shows how far it got)"
        );
        assert!(matches!(
            a.status(fake::addr("10.0.0.2:7001")),
            Err(AdminError::Recovering { what: "status", .. })
        ));
    }

    #[test]
    fn unspecified_addresses_take_the_contacts_ip() {
        let contact: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        assert_eq!(
            reach("0.0.0.0:7001".parse().unwrap(), contact),
            "10.0.0.1:7001".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            reach("[::]:7001".parse().unwrap(), contact),
            "10.0.0.1:7001".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            reach("10.0.0.2:7001".parse().unwrap(), contact),
            "10.0.0.2:7001".parse::<SocketAddr>().unwrap()
        );
    }

    #[test]
    fn names_resolve_ipv4_first_and_garbage_does_not() {
        let v = resolve("127.0.0.1:7000").unwrap();
        assert_eq!(v, ["127.0.0.1:7000".parse::<SocketAddr>().unwrap()]);
        assert!(resolve("no port").is_err());
        assert!(resolve("127.0.0.1:99999").is_err());
    }
}
