//! Transfers on two software devices per side: every split, grouped
//! receives, both size paths, one rail, and the rail-selection rules. The
//! CTS protocol itself, as on rxe (which runs the same bodies and has no tag
//! matching): eager transfers are off here; `tests/eager.rs` has them.

mod support;

use mlx5::device::ExecMode;
use mpib::{Config, PolicyKind};
use support::transfers;
use support::*;

/// The default configuration without eager transfers.
fn base() -> Config {
    Config {
        eager_max: 0,
        ..Config::default()
    }
}

fn cfg(policy: PolicyKind) -> Config {
    Config { policy, ..base() }
}

#[test]
fn every_split_delivers_every_byte() {
    let mut w = world("split", ExecMode::Inline, 2, &base());
    transfers::every_split(&mut w.a, &mut w.b, &[1, 64, 100, 4096, 65_536, 1_000_003]);
}

#[test]
fn zero_byte_transfers_signal_on_rail_0() {
    for frac in [0.0, 0.5, 1.0] {
        let mut w = world("zero", ExecMode::Inline, 2, &cfg(PolicyKind::Static(frac)));
        transfers::zero_bytes_on_rail_0(&mut w.a, &mut w.b);
    }
}

#[test]
fn grouped_receives_return_each_size_exactly() {
    let mut w = world("group", ExecMode::Inline, 2, &cfg(PolicyKind::Static(0.5)));
    transfers::grouped_sizes_exact(&mut w.a, &mut w.b);
}

#[test]
fn fast_path_is_one_wr_per_active_rail() {
    let mut w = world("fast", ExecMode::Inline, 2, &cfg(PolicyKind::Static(0.5)));
    transfers::fast_path_one_wr_per_rail(&mut w.a, &mut w.b);
}

#[test]
fn beyond_size_q_takes_the_record_path() {
    // Granularity 1: size_q covers sizes below 4 MiB only.
    let c = Config {
        granularity: 1,
        policy: PolicyKind::Static(0.5),
        ..base()
    };
    let mut w = world("big", ExecMode::Inline, 2, &c);
    transfers::beyond_size_q(&mut w.a, &mut w.b);
}

#[test]
fn one_rail() {
    let mut w = world("one", ExecMode::Inline, 1, &base());
    transfers::one_rail(&mut w.a, &mut w.b, 200);
}

#[test]
fn cts_alternates_devices_and_signals_by_parity() {
    let mut w = world("cts", ExecMode::Inline, 2, &base());
    transfers::cts_by_parity(&mut w.a, &mut w.b);
}

#[test]
fn data_qps_round_robin_one_per_request() {
    let c = Config {
        qps_per_rail: 3,
        depth: 16,
        ..base()
    };
    let mut w = world("rr", ExecMode::Inline, 2, &c);
    transfers::round_robin_whole_requests(&mut w.a, &mut w.b);
}
