//! A blocking client of servers' control endpoints: membership, the control
//! group's messages and administration ([`kvs_proto::control`]). Servers use
//! it to join a cluster and to carry the group's messages to each other;
//! `kvs-admin` uses it to ask and
//! command. One copyrpc context, one endpoint per server it has talked to,
//! connected on first use and again after the connection dies. Control
//! traffic is rare and small, so this client waits for each answer.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use copyrpc::conn::{connect_within, ConnError, Connection};
use copyrpc::transport::{Mlx5, Transport};
use copyrpc::{CallFailed, CloseReason, Context, ContextBuilder, IdlePolicy, WaitError};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_proto::proto::{self, Op, Response, Status, RESPONSE_HEADER};
use kvs_proto::{hello, AuthToken, ClusterId, SetupAnswer, CONTROL};
use mlx5::device::Context as Device;

/// Control client settings.
#[derive(Debug, Clone)]
pub struct ControlOptions {
    /// The cluster token (the server's `cluster_token_file`), presented to
    /// servers that require one. A client token is refused here.
    pub cluster_token: Option<AuthToken>,
    /// The id of the cluster the servers must belong to. `None`: the
    /// cluster of the first server that answers; every later one must be
    /// of the same.
    pub cluster_id: Option<ClusterId>,
    /// How long a connection's setup may take.
    pub setup_timeout: Duration,
    /// How long an answer may take once the request is sent.
    pub call_timeout: Duration,
}

impl Default for ControlOptions {
    fn default() -> Self {
        ControlOptions {
            cluster_token: None,
            cluster_id: None,
            setup_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a control request failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The connection to the server could not be set up.
    #[error("connect to {addr}: {source}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// Why.
        source: ConnError,
    },
    /// The context could not be made.
    #[error(transparent)]
    Setup(#[from] copyrpc::SetupError),
    /// The connection failed while the request was out.
    #[error("{addr}: connection failed: {why}")]
    Failed {
        /// The server.
        addr: SocketAddr,
        /// Why.
        why: CloseReason,
    },
    /// The server belongs to another cluster than the ones before it.
    #[error(
        "{addr} belongs to cluster {theirs}, not to cluster {ours}: it was started with \
         another data dir (or none), or the address is another cluster's"
    )]
    OtherCluster {
        /// The server.
        addr: SocketAddr,
        /// Its cluster id.
        theirs: String,
        /// The cluster id expected.
        ours: String,
    },
    /// No answer in time.
    #[error("{addr}: no answer within {after:?}")]
    Timeout {
        /// The server.
        addr: SocketAddr,
        /// How long we waited.
        after: Duration,
    },
    /// The server answered with an error status, or something that does not
    /// parse.
    #[error("{addr}: {message}")]
    Server {
        /// The server.
        addr: SocketAddr,
        /// What it said, or what was wrong with it.
        message: String,
    },
    /// Waiting for the answer failed (arming the CQs, or the channel).
    #[error(transparent)]
    Wait(#[from] WaitError),
}

type Answer = (u32, Result<Vec<u8>, CloseReason>);
type Handler = Box<dyn FnMut(u32, Result<&[u8], CallFailed>)>;

/// The ring of a control connection: room for answers up to
/// [`MAX_ANSWER`].
const RING: u64 = 1 << 20;
/// The allowance a request starts with.
const FIRST_ALLOWANCE: usize = 16 << 10;
/// The largest answer asked for after an `AllowanceTooSmall` (a map of
/// about 18 000 runs).
const MAX_ANSWER: usize = 256 << 10;

/// A client of control endpoints; see the [module docs](self).
pub struct ControlClient<X: Transport = Mlx5> {
    ctx: Context<u32, Handler, X>,
    answers: Rc<RefCell<Vec<Answer>>>,
    peers: Vec<(SocketAddr, Connection)>,
    opts: ControlOptions,
    /// The cluster every server must belong to, once known.
    cluster: Option<ClusterId>,
    next: u32,
    req: Vec<u8>,
}

impl<X: Transport> std::fmt::Debug for ControlClient<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let peers: Vec<_> = self.peers.iter().map(|(a, _)| a).collect();
        f.debug_struct("ControlClient")
            .field("peers", &peers)
            .finish()
    }
}

impl<X: Transport> ControlClient<X> {
    /// A client on `device`, connected to nobody yet.
    pub fn new(device: &Device, opts: ControlOptions) -> Result<Self, ControlError> {
        let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
        let a = answers.clone();
        let handler: Handler = Box::new(move |id, r: Result<&[u8], CallFailed>| {
            a.borrow_mut()
                .push((id, r.map(<[u8]>::to_vec).map_err(|CallFailed(why)| why)));
        });
        let ctx = ContextBuilder::new()
            .idle(IdlePolicy::default())
            .ring_size(RING)
            .build_on::<X, _, _>(device, handler)?;
        Ok(ControlClient {
            ctx,
            answers,
            peers: Vec::new(),
            cluster: opts.cluster_id,
            opts,
            next: 0,
            req: Vec::new(),
        })
    }

    /// The id of the cluster the servers answering belong to, once one has.
    pub fn cluster_id(&self) -> Option<ClusterId> {
        self.cluster
    }

    /// Sends a control request to the server at `addr` and waits for its
    /// answer.
    pub fn request(
        &mut self,
        addr: SocketAddr,
        req: &ControlRequest,
    ) -> Result<ControlReply, ControlError> {
        let b = self.call_ok(addr, Op::Control, &req.encode())?;
        ControlReply::decode(&b).map_err(|e| ControlError::Server {
            addr,
            message: e.to_string(),
        })
    }

    /// Carries a batch of control-group messages ([`kvs_proto::group`]) to
    /// the member at `addr`.
    pub fn raft(&mut self, addr: SocketAddr, batch: &[u8]) -> Result<(), ControlError> {
        self.call_ok(addr, Op::Raft, batch).map(drop)
    }

    /// A migration's priority pull: the value of `key` among the records
    /// the server at `addr` holds for the slot's new owner (`None`: it has
    /// no such key).
    pub fn pull(&mut self, addr: SocketAddr, key: &[u8]) -> Result<Option<Vec<u8>>, ControlError> {
        match self.call(addr, Op::Pull, key) {
            Ok((Status::Ok, v)) => Ok(Some(v)),
            Ok((Status::NotFound, _)) => Ok(None),
            Ok((st, m)) => Err(ControlError::Server {
                addr,
                message: format!("{st:?}: {}", String::from_utf8_lossy(&m)),
            }),
            Err(e) => Err(e),
        }
    }

    /// Drops the connection to `addr`, if any (the next request connects
    /// again).
    pub fn forget(&mut self, addr: SocketAddr) {
        if let Some(i) = self.peers.iter().position(|(a, _)| *a == addr) {
            let (_, c) = self.peers.swap_remove(i);
            self.ctx.close(c.endpoint());
            self.ctx.remove(c.endpoint());
        }
    }

    /// The endpoint to `addr`, connecting if there is none or it died.
    fn endpoint(&mut self, addr: SocketAddr) -> Result<copyrpc::EndpointId, ControlError> {
        if let Some(i) = self.peers.iter().position(|(a, _)| *a == addr) {
            let alive = {
                let (_, c) = &mut self.peers[i];
                c.check(&mut self.ctx) && self.ctx.closed(c.endpoint()).is_none()
            };
            if alive {
                return Ok(self.peers[i].1.endpoint());
            }
            self.forget(addr);
        }
        let h = hello(CONTROL, self.opts.cluster_token.as_ref());
        let c = connect_within(addr, &mut self.ctx, &h, self.opts.setup_timeout)
            .map_err(|source| ControlError::Connect { addr, source })?;
        let ep = c.endpoint();
        let refuse = |ctx: &mut Context<u32, Handler, X>, e: ControlError| {
            ctx.close(ep);
            ctx.remove(ep);
            Err(e)
        };
        let Some(answer) = SetupAnswer::parse(c.peer_private_data()) else {
            let message = "not a kvs-server's control endpoint (bad setup answer)".into();
            return refuse(&mut self.ctx, ControlError::Server { addr, message });
        };
        match self.cluster {
            Some(ours) if ours != answer.cluster => {
                let e = ControlError::OtherCluster {
                    addr,
                    theirs: answer.cluster.to_string(),
                    ours: ours.to_string(),
                };
                return refuse(&mut self.ctx, e);
            }
            Some(_) => {}
            None => self.cluster = Some(answer.cluster),
        }
        self.peers.push((addr, c));
        Ok(ep)
    }

    /// One request whose answer must be OK; its payload.
    fn call_ok(&mut self, addr: SocketAddr, op: Op, value: &[u8]) -> Result<Vec<u8>, ControlError> {
        match self.call(addr, op, value)? {
            (Status::Ok, b) => Ok(b),
            (st, m) => Err(ControlError::Server {
                addr,
                message: format!("{st:?}: {}", String::from_utf8_lossy(&m)),
            }),
        }
    }

    /// One request (a PULL carries its key, anything else its value); its
    /// answer's status and payload, with an allowance that grows once if the
    /// answer needs more.
    fn call(
        &mut self,
        addr: SocketAddr,
        op: Op,
        value: &[u8],
    ) -> Result<(Status, Vec<u8>), ControlError> {
        let mut allowance = FIRST_ALLOWANCE;
        loop {
            let ep = self.endpoint(addr)?;
            if op == Op::Pull {
                proto::write_request(&mut self.req, op, 0, value, &[], 0, 0);
            } else {
                proto::write_request(&mut self.req, op, 0, &[], value, value.len() as u32, 0);
            }
            self.next = self.next.wrapping_add(1);
            let id = self.next;
            if let Err(e) = self
                .ctx
                .call(ep, &self.req, RESPONSE_HEADER + allowance, id)
            {
                // A fresh endpoint with nothing in flight refuses only what
                // can never fit.
                self.forget(addr);
                return Err(ControlError::Server {
                    addr,
                    message: format!("request not sent: {e}"),
                });
            }
            let bytes = self.answer(addr, id)?;
            let resp = Response::new_checked(&bytes).map_err(|e| ControlError::Server {
                addr,
                message: format!("malformed answer: {e}"),
            })?;
            match resp.status() {
                Status::AllowanceTooSmall if allowance < MAX_ANSWER => {
                    let need = match resp.payload() {
                        [a, b, c, d] => u32::from_le_bytes([*a, *b, *c, *d]) as usize,
                        _ => MAX_ANSWER,
                    };
                    if need > MAX_ANSWER {
                        return Err(ControlError::Server {
                            addr,
                            message: format!(
                                "an answer of {need} bytes is larger than the \
                                 {MAX_ANSWER} a control client takes"
                            ),
                        });
                    }
                    allowance = need.max(allowance);
                }
                st => return Ok((st, resp.payload().to_vec())),
            }
        }
    }

    /// Waits for the answer to call `id` on the connection to `addr`.
    fn answer(&mut self, addr: SocketAddr, id: u32) -> Result<Vec<u8>, ControlError> {
        let t = Instant::now();
        let mut last_check = Instant::now();
        loop {
            self.ctx.wait(Duration::from_millis(50))?;
            let got = {
                let mut a = self.answers.borrow_mut();
                a.iter()
                    .position(|(i, _)| *i == id)
                    .map(|p| a.swap_remove(p).1)
            };
            // Answers to calls given up on are dropped.
            self.answers.borrow_mut().retain(|(i, _)| *i == id);
            match got {
                Some(Ok(b)) => return Ok(b),
                Some(Err(why)) => {
                    self.forget(addr);
                    return Err(ControlError::Failed { addr, why });
                }
                None => {}
            }
            if last_check.elapsed() >= Duration::from_millis(100) {
                last_check = Instant::now();
                if let Some(i) = self.peers.iter().position(|(a, _)| *a == addr) {
                    let (_, c) = &mut self.peers[i];
                    c.check(&mut self.ctx);
                }
            }
            if t.elapsed() > self.opts.call_timeout {
                self.forget(addr);
                return Err(ControlError::Timeout {
                    addr,
                    after: self.opts.call_timeout,
                });
            }
        }
    }
}
