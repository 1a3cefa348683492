//! Two copyrpc contexts on two software devices in one process, stepped from
//! one thread.
#![allow(dead_code)]

use std::cell::RefCell;
use std::rc::Rc;

use copyrpc::{CallFailed, Context, ContextBuilder, EndpointId};
use mlx5::device::{Context as Device, ExecMode};
use mlx5::sim::fabric::Fabric;

/// Responses as the client's callback saw them: (user data, payload or failure).
pub type Log = Rc<RefCell<Vec<(u64, Result<Vec<u8>, CallFailed>)>>>;
pub type Handler = Box<dyn FnMut(u64, Result<&[u8], CallFailed>)>;

pub struct World {
    pub fabric: String,
    pub client: Context<u64, Handler>,
    pub server: Context<u64, Handler>,
    pub log: Log,
    pub server_log: Log,
    pub pairs: Vec<(EndpointId, EndpointId)>,
    pub devs: (Device, Device),
}

impl Drop for World {
    fn drop(&mut self) {
        Fabric::remove_if_unused(&self.fabric);
    }
}

fn handler(log: &Log) -> Handler {
    let l = log.clone();
    Box::new(move |u, r| l.borrow_mut().push((u, r.map(|b| b.to_vec()))))
}

/// A world with `n` connected endpoint pairs.
pub fn world(tag: &str, mode: ExecMode, b: ContextBuilder, n: usize) -> World {
    let fabric = format!("rpc-{}-{tag}", std::process::id());
    let d0 = Device::open_in_mode(&fabric, "sim0", mode).unwrap();
    let d1 = Device::open_in_mode(&fabric, "sim1", mode).unwrap();
    let log: Log = Default::default();
    let server_log: Log = Default::default();
    let mut client = b.build(&d0, handler(&log)).unwrap();
    let mut server = b.build(&d1, handler(&server_log)).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..n {
        let (c, ci) = client.create_endpoint().unwrap();
        let (s, si) = server.create_endpoint().unwrap();
        client.connect(c, &si).unwrap();
        server.connect(s, &ci).unwrap();
        pairs.push((c, s));
    }
    World {
        fabric,
        client,
        server,
        log,
        server_log,
        pairs,
        devs: (d0, d1),
    }
}

/// The reply an echo server gives: the request with every byte incremented.
pub fn transform(d: &[u8]) -> Vec<u8> {
    d.iter().map(|b| b.wrapping_add(1)).collect()
}

impl World {
    /// One step: both sides poll; the server answers every request (echo,
    /// transformed). Returns the number of requests answered.
    pub fn step(&mut self) -> usize {
        self.client.poll();
        self.server.poll();
        let mut n = 0;
        while let Some(h) = self.server.recv() {
            let d = transform(self.server.request(&h).unwrap());
            self.server.reply(h, &d).unwrap();
            n += 1;
        }
        n
    }

    /// Steps until `count` responses were logged (panics after `limit` steps).
    pub fn until_responses(&mut self, count: usize, limit: usize) {
        for _ in 0..limit {
            if self.log.borrow().len() >= count {
                return;
            }
            self.step();
        }
        panic!(
            "only {} of {count} responses after {limit} steps",
            self.log.borrow().len()
        );
    }
}

/// Deterministic generator.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0 | 1;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as u8).wrapping_mul(37) ^ (i as u8).wrapping_add((seed >> 8) as u8))
        .collect()
}
