//! The software cost of a copyrpc RPC, without the cost of moving cache lines
//! between cores: a client and a server context on two software devices in
//! one process, stepped from one thread (the device runs inline, in the
//! doorbell call). Every figure is nanoseconds of this thread per RPC, both
//! sides and the device's copies included; the median of `RUNS` runs.
//!
//!   cargo bench -p copyrpc --bench step [-- DEPTH...]
//!
//! Run under `valgrind --tool=callgrind` for instruction counts per function.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use copyrpc::transport::Mlx5;
use copyrpc::{CallFailed, ContextBuilder};
use mlx5::device::{Context as Device, ExecMode};
use mlx5::sim::fabric::Fabric;

const RUNS: usize = 5;
const PAYLOAD: usize = 32;

fn main() {
    let depths: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let depths = if depths.is_empty() {
        vec![1, 16, 64, 256]
    } else {
        depths
    };
    let rpcs: u64 = std::env::var("STEP_RPCS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let fabric = format!("step-{}", std::process::id());
    for &depth in &depths {
        let mut ns: Vec<f64> = (0..RUNS).map(|_| run(&fabric, depth, rpcs)).collect();
        ns.sort_by(f64::total_cmp);
        println!(
            "copyrpc {PAYLOAD} B, one thread steps client and server, depth {depth:4}: {:6.1} ns per RPC (median of {RUNS}; min {:.1})",
            ns[RUNS / 2],
            ns[0]
        );
    }
    Fabric::remove_if_unused(&fabric);
}

/// One run of `rpcs` RPCs at `depth`; returns ns per RPC.
fn run(fabric: &str, depth: usize, rpcs: u64) -> f64 {
    let d0 = Device::open_in_mode(fabric, "sim0", ExecMode::Inline).expect("sim0");
    let d1 = Device::open_in_mode(fabric, "sim1", ExecMode::Inline).expect("sim1");
    let b = ContextBuilder::new().srq_size(4096).cq_size(16384);
    let done = Rc::new(Cell::new(0u64));
    let d = done.clone();
    let mut client = b
        .build_on::<Mlx5, u64, _>(&d0, move |_, r: Result<&[u8], CallFailed>| {
            assert!(r.is_ok(), "a call failed");
            d.set(d.get() + 1);
        })
        .expect("client");
    let mut server = b
        .build_on::<Mlx5, u64, _>(&d1, |_, _: Result<&[u8], CallFailed>| {})
        .expect("server");
    let (c, ci) = client.create_endpoint().expect("endpoint");
    let (s, si) = server.create_endpoint().expect("endpoint");
    client.connect(c, &si).expect("connect");
    server.connect(s, &ci).expect("connect");
    let data = [0x5au8; PAYLOAD];
    let mut out = [0u8; PAYLOAD];
    let mut sent = 0u64;
    let mut start = Instant::now();
    let warm = rpcs / 10;
    let mut started = false;
    while done.get() < rpcs + warm {
        if !started && done.get() >= warm {
            started = true;
            start = Instant::now();
        }
        while sent - done.get() < depth as u64 {
            if client.call(c, &data, PAYLOAD, sent).is_err() {
                break;
            }
            sent += 1;
        }
        client.poll();
        server.poll();
        while let Some(h) = server.recv() {
            let n = server.request(&h).map_or(0, |r| {
                out[..r.len()].copy_from_slice(r);
                r.len()
            });
            server.reply(h, &out[..n]).expect("reply");
        }
        server.poll();
    }
    let el = start.elapsed().as_nanos() as f64;
    el / (done.get() - warm) as f64
}
