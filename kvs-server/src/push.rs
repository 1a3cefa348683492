//! The keeper's map pusher: a thread that sends every new map to every other
//! member (`SET_MAP` on its control endpoint) until each has it. A member
//! that cannot be reached is tried again every second until it answers or
//! a newer map replaces the one it is owed; the pushes of the others do not
//! wait for it longer than one connection attempt.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use copyrpc::transport::{run_on_device, DeviceSpec, OnTransport, Transport};
use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::{AuthToken, ShardMap};
use mlx5::device::Context as Device;

use crate::config::Config;

/// How long a member has to accept the pusher's connection and to answer.
const PUSH_SETUP: Duration = Duration::from_secs(2);
const PUSH_ANSWER: Duration = Duration::from_secs(10);
/// How often an unreachable member is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// The pusher thread, as started.
pub(crate) struct Pusher {
    pub me: u16,
    pub cfg: Config,
    pub auth: Option<AuthToken>,
    pub maps: Receiver<ShardMap>,
    pub stop: Arc<AtomicBool>,
}

impl Pusher {
    /// Opens the device and runs until the server stops.
    pub fn start(self) {
        let spec = DeviceSpec {
            name: &self.cfg.device,
            fabric: self.cfg.fabric.as_deref(),
            software: "sim1",
        };
        match spec.open() {
            Ok(dev) => run_on_device(dev, self),
            Err(e) => eprintln!("kvs-server: the map pusher cannot open its device: {e}"),
        }
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
        // Members still owed the map, and whether their failure was logged.
        let mut owed: Vec<(u16, bool)> = Vec::new();
        while !self.stop.load(Ordering::Acquire) {
            let wait = if owed.is_empty() {
                Duration::from_millis(250)
            } else {
                RETRY
            };
            match self.maps.recv_timeout(wait) {
                Ok(mut m) => {
                    // Only the newest matters.
                    while let Ok(newer) = self.maps.try_recv() {
                        m = newer;
                    }
                    owed = (0..m.members().len() as u16)
                        .filter(|&i| i != self.me)
                        .map(|i| (i, false))
                        .collect();
                    map = Some(m);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            let Some(m) = &map else { continue };
            owed.retain_mut(|(i, logged)| {
                if self.stop.load(Ordering::Acquire) {
                    return true;
                }
                let addr = m.members()[usize::from(*i)].addr;
                match cc.set_map(addr, m) {
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
