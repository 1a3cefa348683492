//! mpib on real RDMA devices through the verbs data path: kernel soft-RoCE in
//! the qemu guest of `scripts/rxe/run-tests.sh`, which runs these with
//! `MPIB_TEST_DEVICE=rxe0 MPIB_TEST_DEVICE2=rxe1 --ignored` (two virtio NICs,
//! one rxe device on each).
//!
//! Rail 0 is `MPIB_TEST_DEVICE`, rail 1 `MPIB_TEST_DEVICE2` or, without it,
//! a second context opened on the first device. Both communicators live in
//! this process (`mpib::pair`), each opening its own context per rail, and
//! each rail connects a device to itself (RoCE loopback; one Linux kernel
//! does not carry RoCE between two of its own rxe devices).
//!
//! The bodies are the software-device tests' (`transfer.rs`, `pipeline.rs`,
//! `bad_peer.rs`), written once in `tests/support/` with the same assertions
//! and made for a NIC that runs on its own: loops are bounded by the wall
//! clock (`PATIENCE` here) and the raw bad peer waits for each of its writes
//! to complete (so the victim has it before it polls). What is rxe's own:
//! "no RNR" is read from rxe's port counters, and counts are small: the
//! guest's traffic is emulated.

mod support;

use std::time::Duration;

use mlx5::device::Context;
use mlx5::wr::DataPath;
use mpib::{Comm, Config, PolicyKind};
use support::bad_peer::{self, Devices};
use support::{pipeline, transfers};

const WHY: &str = "needs an RDMA device: MPIB_TEST_DEVICE=rxe0 (and MPIB_TEST_DEVICE2=rxe1) \
                   in the rxe guest (bash scripts/rxe/run-tests.sh)";

/// How long a loop may wait for the NIC before the test counts as stuck.
const PATIENCE: Duration = Duration::from_secs(30);

/// Opens `name`, which must take the verbs data path.
fn open_verbs(name: &str) -> Context {
    let dev = Context::open(name).unwrap_or_else(|e| panic!("open {name}: {e}"));
    assert_eq!(
        DataPath::of(&dev),
        DataPath::Verbs,
        "{name} is not mlx5: the verbs data path"
    );
    dev
}

/// The device names of rail 0 and rail 1.
fn rail_names() -> [String; 2] {
    let d0 = std::env::var("MPIB_TEST_DEVICE").expect(WHY);
    let d1 = std::env::var("MPIB_TEST_DEVICE2").unwrap_or_else(|_| d0.clone());
    [d0, d1]
}

/// One context per rail for one side: on `names[r]`.
fn side(names: &[String], rails: usize) -> Vec<Context> {
    names[..rails].iter().map(|n| open_verbs(n)).collect()
}

/// Two communicators over `rails` rails.
struct Rx {
    a: Comm,
    b: Comm,
}

fn world_on(names: &[String; 2], rails: usize, cfg: &Config) -> Rx {
    let da = side(names, rails);
    let db = side(names, rails);
    let (a, b) = mpib::pair(&da, &db, cfg).expect("pair");
    assert_eq!(a.nrails(), rails);
    Rx { a, b }
}

fn world(rails: usize, cfg: &Config) -> Rx {
    world_on(&rail_names(), rails, cfg)
}

fn cfg(policy: PolicyKind) -> Config {
    Config {
        policy,
        ..Config::default()
    }
}

/// rxe's port counter `name` of device `dev` (sysfs `hw_counters`).
fn port_counter(dev: &str, name: &str) -> u64 {
    let p = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters/{name}");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// RNR NAKs sent and received so far on every device of the rails.
fn rnr_counts() -> Vec<(String, u64, u64)> {
    let mut names = rail_names().to_vec();
    names.dedup();
    names
        .into_iter()
        .map(|d| {
            let sent = port_counter(&d, "send_rnr_err");
            let got = port_counter(&d, "rcvd_rnr_err");
            (d, sent, got)
        })
        .collect()
}

// ------------------------------------------------------------- transfers

// The bodies are transfer.rs's (tests/support/transfers.rs).

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn every_split_delivers_every_byte() {
    let mut w = world(2, &Config::default());
    transfers::every_split(&mut w.a, &mut w.b, &[1, 64, 100, 4096, 65_536, 1_000_003]);
    for r in 0..2 {
        assert!(w.a.stats().signals[r] > 0 && w.b.stats().signals[r] > 0);
    }
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn zero_byte_transfers_signal_on_rail_0() {
    for frac in [0.0, 0.5, 1.0] {
        let mut w = world(2, &cfg(PolicyKind::Static(frac)));
        transfers::zero_bytes_on_rail_0(&mut w.a, &mut w.b);
    }
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn grouped_receives_return_each_size_exactly() {
    let mut w = world(2, &cfg(PolicyKind::Static(0.5)));
    transfers::grouped_sizes_exact(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn fast_path_is_one_wr_per_active_rail() {
    let mut w = world(2, &cfg(PolicyKind::Static(0.5)));
    transfers::fast_path_one_wr_per_rail(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn beyond_size_q_takes_the_record_path() {
    // Granularity 1: size_q covers sizes below 4 MiB only.
    let c = Config {
        granularity: 1,
        policy: PolicyKind::Static(0.5),
        ..Config::default()
    };
    let mut w = world(2, &c);
    transfers::beyond_size_q(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn one_rail() {
    let mut w = world(1, &Config::default());
    transfers::one_rail(&mut w.a, &mut w.b, 100);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn cts_alternates_devices_and_signals_by_parity() {
    let mut w = world(2, &Config::default());
    transfers::cts_by_parity(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn data_qps_round_robin_one_per_request() {
    let c = Config {
        qps_per_rail: 3,
        depth: 16,
        ..Config::default()
    };
    let mut w = world(2, &c);
    transfers::round_robin_whole_requests(&mut w.a, &mut w.b);
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn two_rails_on_one_device() {
    // Whatever MPIB_TEST_DEVICE2 says: both rails on MPIB_TEST_DEVICE, each
    // rail its own context (PD, CQs, SRQ, QPs) on the one device.
    let d0 = rail_names()[0].clone();
    let mut w = world_on(&[d0.clone(), d0], 2, &Config::default());
    assert_eq!(w.a.device(0).unwrap().name(), w.a.device(1).unwrap().name());
    transfers::every_split(&mut w.a, &mut w.b, &[100, 4096, 100_000]);
    transfers::grouped_sizes_exact(&mut w.a, &mut w.b);
    let s = w.a.stats();
    assert!(s.signals[0] > 0 && s.signals[1] > 0, "{s:?}");
}

// -------------------------------------------------------------- pipeline

// The run is pipeline.rs's (tests/support/pipeline.rs).

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn pipelined_transfers_never_meet_an_empty_srq() {
    let mut w = world(2, &pipeline::srq_config());
    let before = rnr_counts();
    let count = 600;
    let (a, _) = pipeline::never_meet_an_empty_srq(&mut w.a, &mut w.b, count, PATIENCE, || {});
    // rxe counts every RNR NAK it sends (a WRITE_WITH_IMM found its SRQ
    // empty) and receives, per device.
    assert_eq!(rnr_counts(), before, "RNR NAKs (device, sent, received)");
    for r in 0..2 {
        assert!(a.signals[r] > count / 10, "rail {r} carried traffic: {a:?}");
    }
    assert!(a.fast_path > 50 && a.record_path > 50, "{a:?}");
}

// -------------------------------------------------------------- bad peer

// The bodies are bad_peer.rs's (tests/support/bad_peer.rs).

/// The rails' devices; every call of `sides` opens fresh contexts on them.
struct Rxe([String; 2]);

impl Devices for Rxe {
    fn sides(&self) -> (Vec<Context>, Vec<Context>) {
        (side(&self.0, 2), side(&self.0, 2))
    }
    fn patience(&self) -> Duration {
        PATIENCE
    }
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn garbage_immediates_and_records_close_only_that_communicator() {
    bad_peer::garbage_immediates_and_records(&Rxe(rail_names()));
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn malformed_cts_entries_close_only_that_communicator() {
    bad_peer::malformed_cts_entries(&Rxe(rail_names()));
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn dropped_peer_closes_the_other_side() {
    bad_peer::dropped_peer_closes_the_other_side(&Rxe(rail_names()));
}

#[test]
#[ignore = "needs an RDMA device (MPIB_TEST_DEVICE)"]
fn vanished_peer_without_liveness_channel_is_a_transport_error() {
    bad_peer::vanished_peer_without_liveness_channel(&Rxe(rail_names()));
}
