//! The members the client reaches. A request for a slot whose owner the
//! client is not connected to connects it first (`reach_owner` → `reach`,
//! blocking for up to the setup timeout, unless a failed attempt holds the
//! member off: [`Reach`](crate::reach::Reach)); a scan connects every member
//! that owns slots (`reach_owners`). The periodic `check_liveness` (every
//! 100 ms, from `complete`) expires requests past their deadline and finds
//! dead connections; `lost_member` drops a member whose connections died
//! and has the map fetched again.

use std::time::Instant;

use copyrpc::transport::Transport;
use copyrpc::EndpointId;

use crate::error::KvError;
use crate::members::{self, Setup};
use crate::reply::Reply;
use kvs_proto::{MemberId, Owner};

use super::Client;

impl<T, X: Transport> Client<T, X> {
    /// The endpoint of `owner`, connecting to its member first if the
    /// client lacks it ([`reach`](Self::reach)).
    #[cold]
    #[inline(never)]
    pub(super) fn reach_owner(&mut self, owner: Owner) -> Result<EndpointId, KvError> {
        self.reach(owner.member)?;
        self.routes.endpoint(owner).ok_or_else(|| {
            KvError::NoRoute(format!(
                "member {} has no worker {} (map version {})",
                owner.member,
                owner.worker,
                self.map.version()
            ))
        })
    }

    /// Connects to the workers of member `id` the client lacks, unless a
    /// failed attempt holds the member off ([`Reach`]): blocking, for up to
    /// [`ClientOptions::setup_timeout`]. Then routes its slots to them.
    ///
    /// # Errors
    /// [`KvError::Unreachable`] when the attempt fails or the member is held
    /// off; [`KvError::NoRoute`] for a member the map does not name.
    ///
    /// [`Reach`]: crate::reach::Reach
    /// [`ClientOptions::setup_timeout`]: crate::ClientOptions::setup_timeout
    #[cold]
    #[inline(never)]
    pub(super) fn reach(&mut self, id: MemberId) -> Result<(), KvError> {
        let i = id.index();
        let (Some(&m), Some(peer)) = (self.map.members().get(i), self.peers.get_mut(i)) else {
            return Err(KvError::NoRoute(format!(
                "member {id} is not in the shard map (version {})",
                self.map.version()
            )));
        };
        let have = self.routes.workers(id);
        if have >= m.workers {
            return Ok(());
        }
        let addr = peer.addr;
        if let Err(h) = peer.reach.may_try(Instant::now()) {
            return Err(KvError::Unreachable {
                member: id,
                addr,
                why: format!(
                    "{} ({} failed attempt(s) in a row; not tried again for {} ms)",
                    h.why,
                    h.failures,
                    h.left.as_millis()
                ),
            });
        }
        let setup = Setup {
            token: self.opts.auth_token.as_ref(),
            cluster: Some(self.cluster),
            within: self.opts.setup_timeout,
            deadline: Instant::now() + self.opts.setup_timeout,
        };
        match members::connect_workers(&mut self.ctx, addr, id, &m, have..m.workers, setup) {
            Ok(made) => {
                for c in made {
                    self.routes.push_worker(id, c.endpoint());
                    self.conns.push(c);
                }
                self.peers[i].reach.connected();
                self.routes.rebuild(&self.map);
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                let hold = self.peers[i].reach.failed(Instant::now(), why.clone());
                Err(KvError::Unreachable {
                    member: id,
                    addr,
                    why: format!("{why} (not tried again for {} ms)", hold.as_millis()),
                })
            }
        }
    }

    /// Connects to every member that owns slots under the map in use and
    /// that the client lacks ([`reach`](Self::reach)), for a scan.
    #[cold]
    #[inline(never)]
    pub(super) fn reach_owners(&mut self) -> Result<(), KvError> {
        for id in self.map.member_ids() {
            if self.map.slots_of(id) > 0 {
                self.reach(id)?;
            }
        }
        Ok(())
    }

    /// The periodic check: expires requests past their deadline, marks the
    /// map stale while a member it names is unreachable, and treats the
    /// members of dead connections as lost. Returns how many of the
    /// caller's requests completed.
    pub(super) fn check_liveness(
        &mut self,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        self.last_check = self.clock;
        let n = self.expire(f);
        // While a member the map names is unreachable, the map is
        // fetched again every check: the group may move its slots to
        // their backups (it marks it failed after member_timeout_ms).
        if self.peers.iter().any(|p| p.reach.failing()) {
            self.map_stale = true;
        }
        let mut dead: Vec<MemberId> = Vec::new();
        for c in &mut self.conns {
            if !c.check(&mut self.ctx) {
                if let Some(m) = self.routes.member_of(c.endpoint()) {
                    dead.push(m);
                }
            }
        }
        for m in dead {
            self.lost_member(m);
        }
        n
    }

    /// The connections to member `m` died (its process stopped or was
    /// killed): its endpoints go, it is connected again when a request
    /// needs it (after its backoff), and the map is fetched anew from
    /// another member (its slots may have moved to their backups). The
    /// calls still waiting on an endpoint that had not failed by itself
    /// fail now, closed by this side, into the inbox (followed in the same
    /// round when this runs while it is being followed); their requests
    /// are sent again by the next map, as those of a connection that died.
    #[cold]
    #[inline(never)]
    pub(super) fn lost_member(&mut self, m: MemberId) {
        let mine: Vec<EndpointId> = (0..self.routes.workers(m))
            .filter_map(|w| {
                self.routes.endpoint(Owner {
                    member: m,
                    worker: w,
                })
            })
            .collect();
        if mine.is_empty() {
            return;
        }
        self.routes.drop_member(m);
        self.routes.rebuild(&self.map);
        self.conns.retain(|c| !mine.contains(&c.endpoint()));
        for ep in mine {
            self.ctx.remove(ep);
        }
        if let Some(p) = self.peers.get_mut(m.index()) {
            p.reach
                .failed(Instant::now(), "its connection closed".to_string());
        }
        self.map_stale = true;
    }
}
