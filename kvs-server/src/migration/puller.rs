//! Priority pulls: a worker serving a slot it imports gets a request for a
//! key that has not arrived, and fetches that key from the source at once
//! (`PULL` on the source's control endpoint, answered from its frozen copy)
//! instead of waiting for the bulk transfer to reach it. One thread per
//! worker, started at the worker's first pull; requests for the same key
//! are merged by the worker.

use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use copyrpc::Waker;
use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::AuthToken;
use mlx5::device::Context as Device;

use crate::bulk::PullError;
use crate::config::Config;
use crate::threads::to_worker::ToWorker;

/// One key to fetch.
#[derive(Debug)]
pub(crate) struct PullKey {
    pub slot: u32,
    pub key: Vec<u8>,
    /// The source's control endpoint.
    pub from: SocketAddr,
}

/// A worker's puller thread, as started.
pub(crate) struct Puller {
    pub keys: Receiver<PullKey>,
    pub worker: (Sender<ToWorker>, Waker),
    pub cfg: Config,
    pub cluster_token: Option<AuthToken>,
}

impl Puller {
    /// Serves pulls until the worker drops its end.
    pub fn start(self) {
        let wire = self.cfg.transport;
        let (p, e) = match self.cfg.device_spec().open() {
            Ok(dev) => match run_on_device_as(dev, wire, self) {
                Ok(()) => return,
                Err(refused) => refused,
            },
            Err(e) => (self, e),
        };
        p.fail_all(PullError::Device(e));
    }

    /// Answers every request with an error (nothing can be pulled).
    fn fail_all(&self, why: PullError) {
        let why = Arc::new(why);
        for p in self.keys.iter() {
            self.answer(p, Err(why.clone()));
        }
    }

    fn answer(&self, p: PullKey, value: Result<Option<Vec<u8>>, Arc<PullError>>) {
        let m = ToWorker::Pulled {
            slot: p.slot,
            key: p.key,
            value,
        };
        if self.worker.0.send(m).is_ok() {
            self.worker.1.wake();
        }
    }
}

impl OnTransport for Puller {
    type Output = ();

    fn run<T: Transport>(self, dev: Device) {
        let opts = ControlOptions {
            cluster_token: self.cluster_token.clone(),
            setup_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(5),
            ..ControlOptions::default()
        };
        let mut cc = match ControlClient::<T>::new(&dev, opts) {
            Ok(c) => c,
            Err(e) => return self.fail_all(e.into()),
        };
        while let Ok(p) = self.keys.recv() {
            let r = cc
                .pull(p.from, &p.key)
                .map_err(|e| Arc::new(PullError::from(e)));
            self.answer(p, r);
        }
    }
}
