//! Connections to the cluster's members: where each is reached, and one
//! connection per worker, each checked against what the map says.

use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::Range;
use std::time::{Duration, Instant};

use copyrpc::conn::{connect_within, ConnError, Connection};
use copyrpc::transport::Transport;
use copyrpc::Context;
use kvs_proto::{hello, AuthToken, ClusterId, Member, MemberId, SetupAnswer};

use crate::error::ConnectError;
use crate::inbox::Handler;

/// Where to reach member `id`, as described by a map received from member
/// `sender`, reached at `sender_addr`: the sender at the address it was
/// reached at; a member with an unspecified IP at the sender's IP and its
/// own port; any other at its own address.
pub(crate) fn member_addr(
    m: &Member,
    id: MemberId,
    sender: MemberId,
    sender_addr: SocketAddr,
) -> SocketAddr {
    if id == sender {
        sender_addr
    } else if m.addr.ip().is_unspecified() {
        SocketAddr::new(sender_addr.ip(), m.addr.port())
    } else {
        m.addr
    }
}

/// What every connection's setup gets: the token to present, the cluster
/// the server must belong to (once known), and the time left (`deadline`;
/// `within`: the whole setup's timeout, for the error).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup<'a> {
    pub(crate) token: Option<&'a AuthToken>,
    pub(crate) cluster: Option<ClusterId>,
    pub(crate) within: Duration,
    pub(crate) deadline: Instant,
}

/// A connection setup error as the client reports it.
fn conn_error(e: ConnError, within: Duration) -> ConnectError {
    match e {
        ConnError::Refused(why) => ConnectError::Refused(why),
        ConnError::Timeout(_) => ConnectError::Conn(ConnError::Timeout(within)),
        e => ConnectError::Conn(e),
    }
}

impl Setup<'_> {
    /// The time left, or the timeout error.
    fn left(&self) -> Result<Duration, ConnectError> {
        match self.deadline.saturating_duration_since(Instant::now()) {
            d if d.is_zero() => Err(ConnectError::Conn(ConnError::Timeout(self.within))),
            d => Ok(d),
        }
    }
}

/// Connects to worker 0 of the server at `addr` (its addresses tried in
/// turn until one answers); returns the address that answered, the
/// connection, and the server's setup answer.
pub(crate) fn connect_contact<X: Transport>(
    addr: impl ToSocketAddrs,
    ctx: &mut Context<u32, Handler, X>,
    setup: Setup<'_>,
) -> Result<(SocketAddr, Connection, SetupAnswer), ConnectError> {
    let mut last = None;
    for a in addr.to_socket_addrs().map_err(ConnError::from)? {
        match connect_within(a, ctx, &hello(0, setup.token), setup.left()?) {
            Ok(c) => {
                let answer = match SetupAnswer::parse(c.peer_private_data()) {
                    Some(s) if s.workers > 0 => s,
                    Some(_) => {
                        ctx.remove(c.endpoint());
                        return Err(ConnectError::Protocol("a server with no workers".into()));
                    }
                    None => {
                        ctx.remove(c.endpoint());
                        return Err(ConnectError::Protocol("bad setup answer".into()));
                    }
                };
                return Ok((a, c, answer));
            }
            // An answer, not a missing server: no other address will differ.
            Err(ConnError::Refused(why)) => return Err(ConnectError::Refused(why)),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => conn_error(e, setup.within),
        None => ConnectError::Conn(ConnError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        ))),
    })
}

/// Connects to `workers` of member `member` at `addr`, each connection's
/// setup answer checked against the member and its worker count in the map
/// (`m`). All or none: on an error the connections made are closed.
pub(crate) fn connect_workers<X: Transport>(
    ctx: &mut Context<u32, Handler, X>,
    addr: SocketAddr,
    member: MemberId,
    m: &Member,
    workers: Range<u16>,
    setup: Setup<'_>,
) -> Result<Vec<Connection>, ConnectError> {
    let mut made: Vec<Connection> = Vec::with_capacity(workers.len());
    let one = |ctx: &mut Context<u32, Handler, X>, w: u16| -> Result<Connection, ConnectError> {
        let c = connect_within(addr, ctx, &hello(w, setup.token), setup.left()?)
            .map_err(|e| conn_error(e, setup.within))?;
        let bad = match SetupAnswer::parse(c.peer_private_data()) {
            None => Some("bad setup answer".to_string()),
            // Its cluster first: another cluster's member ids mean nothing.
            Some(a) if setup.cluster.is_some_and(|c| c != a.cluster) => Some(format!(
                "the server belongs to cluster {}, not to cluster {} whose map names it: \
                 it was started with another data dir (or none)",
                a.cluster,
                setup.cluster.unwrap_or_default()
            )),
            Some(a) if a.member != member => Some(format!(
                "the server says it is member {}, the map says member {member}",
                a.member
            )),
            Some(a) if a.workers != m.workers => Some(format!(
                "the server says it has {} workers, the map says {}",
                a.workers, m.workers
            )),
            Some(_) => None,
        };
        match bad {
            Some(why) => {
                ctx.remove(c.endpoint());
                Err(ConnectError::Protocol(why))
            }
            None => Ok(c),
        }
    };
    for w in workers {
        match one(ctx, w) {
            Ok(c) => made.push(c),
            Err(e) => {
                for c in made {
                    ctx.remove(c.endpoint());
                }
                return Err(e);
            }
        }
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(a: &str) -> Member {
        Member {
            addr: a.parse().unwrap(),
            workers: 2,
            bulk_port: 0,
        }
    }

    #[test]
    fn members_are_reached_where_the_map_says_or_at_the_senders_ip() {
        let sender: SocketAddr = "192.168.1.5:7000".parse().unwrap();
        // The sender itself: where it was reached (its map may name an
        // address the client cannot use).
        assert_eq!(
            member_addr(&member("0.0.0.0:7000"), MemberId(2), MemberId(2), sender),
            sender
        );
        assert_eq!(
            member_addr(&member("10.9.9.9:7100"), MemberId(2), MemberId(2), sender),
            sender
        );
        // Unspecified: the sender's IP, the member's port.
        assert_eq!(
            member_addr(&member("0.0.0.0:7001"), MemberId(0), MemberId(2), sender),
            "192.168.1.5:7001".parse().unwrap()
        );
        assert_eq!(
            member_addr(&member("[::]:7002"), MemberId(1), MemberId(2), sender),
            "192.168.1.5:7002".parse().unwrap()
        );
        // Anything else: as named.
        assert_eq!(
            member_addr(&member("10.0.0.3:7003"), MemberId(3), MemberId(2), sender),
            "10.0.0.3:7003".parse().unwrap()
        );
    }
}
