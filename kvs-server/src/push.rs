//! The keeper's map deliveries: a thread that sends each new map to the
//! members (`SET_MAP` on their control endpoints), one map after another,
//! in the order a migration needs — the stages of a delivery are served one
//! after the other, each member of a stage until it has the map (a
//! handover goes to the source before the target) — and then to every
//! member not yet given it. A member that cannot be reached in the last
//! stage is tried again every second until it has this map or a newer one;
//! the next delivery does not wait for it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use copyrpc::transport::{run_on_device, OnTransport, Transport};
use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::{AuthToken, ShardMap};
use mlx5::device::Context as Device;

use crate::config::Config;

/// How long a member has to accept the pusher's connection and to answer.
const PUSH_SETUP: Duration = Duration::from_secs(2);
const PUSH_ANSWER: Duration = Duration::from_secs(10);
/// How often an unreachable member is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// A map to deliver: first to the members of each stage in turn (each
/// stage complete before the next), then to everyone else.
#[derive(Debug)]
pub(crate) struct Delivery {
    pub map: ShardMap,
    pub stages: Vec<Vec<u16>>,
}

/// The pusher thread, as started.
pub(crate) struct Pusher {
    /// Where the keeper reaches its own control endpoint.
    pub own: SocketAddr,
    pub me: u16,
    pub cfg: Config,
    pub auth: Option<AuthToken>,
    pub deliveries: Receiver<Delivery>,
    pub stop: Arc<AtomicBool>,
}

impl Pusher {
    /// Opens the device and runs until the server stops.
    pub fn start(self) {
        match self.cfg.device_spec().open() {
            Ok(dev) => run_on_device(dev, self),
            Err(e) => eprintln!("kvs-server: the map pusher cannot open its device: {e}"),
        }
    }

    fn addr(&self, map: &ShardMap, m: u16) -> SocketAddr {
        if m == self.me {
            self.own
        } else {
            map.members()[usize::from(m)].addr
        }
    }

    /// Gives `map` to member `m`, trying until it has it (false: the server
    /// is stopping).
    fn deliver_to(&self, cc: &mut ControlClient<impl Transport>, map: &ShardMap, m: u16) -> bool {
        let mut logged = false;
        while !self.stop.load(Ordering::Acquire) {
            match cc.set_map(self.addr(map, m), map) {
                Ok(()) => return true,
                Err(e) => {
                    if !logged {
                        eprintln!(
                            "kvs-server: member {m} does not take map version {} yet \
                             (the migration waits for it): {e}",
                            map.version()
                        );
                        logged = true;
                    }
                    std::thread::sleep(RETRY / 2);
                }
            }
        }
        false
    }
}

impl OnTransport for Pusher {
    type Output = ();

    fn run<T: Transport>(self, dev: Device) {
        let opts = ControlOptions {
            auth_token: self.auth.clone(),
            setup_timeout: PUSH_SETUP,
            call_timeout: PUSH_ANSWER,
        };
        let mut cc = match ControlClient::<T>::new(&dev, opts) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("kvs-server: the map pusher cannot start: {e}");
                return;
            }
        };
        let mut map: Option<ShardMap> = None;
        // Members still owed the newest map, and whether that was logged.
        let mut owed: Vec<(u16, bool)> = Vec::new();
        while !self.stop.load(Ordering::Acquire) {
            let wait = if owed.is_empty() {
                Duration::from_millis(250)
            } else {
                RETRY
            };
            match self.deliveries.recv_timeout(wait) {
                Ok(d) => {
                    let mut given = Vec::new();
                    for stage in &d.stages {
                        for &m in stage {
                            if !self.deliver_to(&mut cc, &d.map, m) {
                                return;
                            }
                            given.push(m);
                        }
                    }
                    owed = (0..d.map.members().len() as u16)
                        .filter(|m| !given.contains(m))
                        .map(|m| (m, false))
                        .collect();
                    // The keeper itself first: its clients fetch maps too.
                    owed.sort_by_key(|&(m, _)| m != self.me);
                    map = Some(d.map);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            let Some(m) = &map else { continue };
            owed.retain_mut(|(i, logged)| {
                if self.stop.load(Ordering::Acquire) {
                    return true;
                }
                match cc.set_map(self.addr(m, *i), m) {
                    Ok(()) => false,
                    Err(e) => {
                        if !*logged {
                            eprintln!(
                                "kvs-server: cannot give member {i} map version {} yet \
                                 (trying every {RETRY:?}): {e}",
                                m.version()
                            );
                            *logged = true;
                        }
                        true
                    }
                }
            });
        }
    }
}
