//! A target worker's requests that wait for priority pulls: each parked
//! with a copy of its bytes (a request's payload is only readable until the
//! next poll), one pull per key however many requests wait for it.

use std::collections::HashSet;
use std::sync::mpsc::{self, Sender};

use copyrpc::{RecvHandle, Waker};
use kvs_proto::proto::Request;
use kvs_proto::{AuthToken, ShardMap};

use super::puller::{PullKey, Puller};
use crate::config::Config;
use crate::threads::to_worker::ToWorker;

/// A request waiting for its key.
#[derive(Debug)]
pub(crate) struct Parked {
    /// Answer it with this.
    pub handle: RecvHandle,
    /// Its bytes.
    pub req: Vec<u8>,
    /// Its key's slot.
    pub slot: u32,
}

impl Parked {
    /// The request's key.
    pub fn key(&self) -> &[u8] {
        Request::new_checked(&self.req).map_or(&[], |r| r.key())
    }
}

/// The waiting requests and the pulls under way.
#[derive(Debug)]
pub(crate) struct Waiting {
    parked: Vec<Parked>,
    pulling: HashSet<Vec<u8>>,
    puller: Option<Sender<PullKey>>,
    cfg: Config,
    cluster_token: Option<AuthToken>,
    worker: Sender<ToWorker>,
}

impl Waiting {
    /// Nothing waiting yet; `worker` is the worker's own channel, where
    /// pulled keys arrive.
    pub fn new(cfg: Config, cluster_token: Option<AuthToken>, worker: Sender<ToWorker>) -> Waiting {
        Waiting {
            parked: Vec::new(),
            pulling: HashSet::new(),
            puller: None,
            cfg,
            cluster_token,
            worker,
        }
    }

    /// Parks a request for a key of `slot`, and asks the source for the key
    /// unless that is under way. Gives the request back when no pull can be
    /// made (the map names no source, or the puller cannot start).
    pub fn park(&mut self, p: Parked, map: &ShardMap, waker: &Waker) -> Result<(), Parked> {
        let Some(from) = map
            .importing_from(p.slot)
            .and_then(|f| map.members().get(f.index()))
        else {
            return Err(p);
        };
        let key = p.key().to_vec();
        if !self.pulling.contains(&key) {
            let tx = match &self.puller {
                Some(t) => t.clone(),
                None => match self.start_puller(waker) {
                    Some(t) => t,
                    None => return Err(p),
                },
            };
            let ask = PullKey {
                slot: p.slot,
                key: key.clone(),
                from: from.addr,
            };
            if tx.send(ask).is_err() {
                self.puller = None;
                return Err(p);
            }
            self.pulling.insert(key);
        }
        self.parked.push(p);
        Ok(())
    }

    /// A pull is over (its answer arrived).
    pub fn pulled(&mut self, key: &[u8]) {
        self.pulling.remove(key);
    }

    /// Takes out the parked requests `pick` chooses.
    pub fn take(&mut self, pick: impl Fn(&Parked) -> bool) -> Vec<Parked> {
        let (out, keep): (Vec<_>, Vec<_>) = self.parked.drain(..).partition(|p| pick(p));
        self.parked = keep;
        out
    }

    fn start_puller(&mut self, waker: &Waker) -> Option<Sender<PullKey>> {
        let (tx, rx) = mpsc::channel();
        let p = Puller {
            keys: rx,
            worker: (self.worker.clone(), waker.clone()),
            cfg: self.cfg.clone(),
            cluster_token: self.cluster_token.clone(),
        };
        match std::thread::Builder::new()
            .name("kvs-puller".into())
            .spawn(move || p.start())
        {
            Ok(_) => {
                self.puller = Some(tx.clone());
                Some(tx)
            }
            Err(e) => {
                tracing::error!("cannot start a priority puller: {e}");
                None
            }
        }
    }
}
