//! The client's own map fetch, once it is sent (by `chase`): its answer
//! (`map_answered`: the map, kept in `fetched` until the answers at hand are
//! handled; or a request for a larger allowance, sent again; or a failure),
//! a fetch that failed (`fetch_failed`: its waiting requests are retried
//! later), and installing a fetched map (`install`, called by `chase`).

use std::time::Instant;

use copyrpc::transport::Transport;
use copyrpc::{CloseReason, EndpointId};

use crate::map_fetch::{self, MapAnswer};
use crate::members;
use crate::reach::Reach;
use crate::retry::Target;
use kvs_proto::ShardMap;

use super::{Client, Peer};

impl<T, X: Transport> Client<T, X> {
    /// The answer to the client's map fetch (op `i`).
    pub(super) fn map_answered(&mut self, i: u32, bytes: Result<&[u8], CloseReason>) {
        let from = self.ops[i as usize].ep;
        match map_fetch::read_answer(bytes) {
            MapAnswer::Map(m) => {
                self.release(i);
                self.fetched = Some((m, from));
            }
            MapAnswer::TooSmall(needed) => {
                let s = &mut self.ops[i as usize];
                match map_fetch::raised(needed, s.allowance, self.opts.ring_size) {
                    Ok(a) => {
                        s.allowance = a;
                        self.map_allowance = a;
                        if let Some(e) = self.resend(i, Target::To(from)) {
                            self.release(i);
                            self.fetch_failed(e.to_string());
                        }
                    }
                    Err(e) => {
                        self.release(i);
                        self.fetch_failed(e.to_string());
                    }
                }
            }
            MapAnswer::Bad(why) => {
                self.release(i);
                self.fetch_failed(why);
            }
        }
    }

    /// The map fetch failed: the requests waiting for it are retried later.
    pub(super) fn fetch_failed(&mut self, why: String) {
        self.map_error = Some(why);
        let now = Instant::now();
        for op in self.chaser.fetch_failed() {
            let s = &mut self.ops[op as usize];
            self.chaser.later(op, &mut s.chase, Target::Route, now);
        }
    }

    /// Installs `map`, fetched from `from`, if it is newer than the one in
    /// use, and rebuilds the routes (without connecting to anyone: the
    /// slots of members the client lacks are connected when first needed).
    /// A member the client is not connected to is reached where the new map
    /// says (an unspecified IP: the IP `from`'s member was reached at); one
    /// whose address changed is tried at once, whatever its backoff.
    pub(super) fn install(&mut self, map: ShardMap, from: EndpointId) {
        if map.version() <= self.routes.version() {
            return;
        }
        let sender = self.routes.member_of(from).and_then(|m| {
            let at = self.peers.get(m.index())?.addr;
            Some((m, at))
        });
        for (id, m) in map.member_ids().zip(map.members()) {
            let at = match sender {
                Some((s, sa)) => members::member_addr(m, id, s, sa),
                None => m.addr,
            };
            let connected = self.routes.workers(id) > 0;
            match self.peers.get_mut(id.index()) {
                // Where it was reached.
                Some(_) if connected => {}
                Some(p) => {
                    if p.addr != at {
                        *p = Peer {
                            addr: at,
                            reach: Reach::default(),
                        };
                    }
                }
                None => self.peers.push(Peer {
                    addr: at,
                    reach: Reach::default(),
                }),
            }
        }
        self.routes.rebuild(&map);
        self.map = map;
    }
}
