//! A peer that breaks the protocol, on the software device: raw QPs connected
//! to a communicator write garbage immediates, completion records and CTS
//! entries. Each case closes that communicator with its named error; nothing
//! panics, the victim's requests fail instead of completing, and a second
//! communicator on the same devices keeps transferring. The bodies are
//! shared with `tests/rxe.rs` (`tests/support/bad_peer.rs`).

mod support;

use std::time::Duration;

use mlx5::device::{Context, ExecMode};
use support::bad_peer::{self, Devices};
use support::*;

/// Four software devices in a fabric of their own: victims (and the good
/// pair's side A) on sim0/sim1, raw peers (and side B) on sim2/sim3. Fields
/// drop in order: devices, then the fabric.
struct Sim {
    devs: Vec<Context>,
    _fabric: FabricGuard,
}

impl Sim {
    fn new(tag: &str) -> Sim {
        let fab = unique_name("mpib", tag);
        let guard = FabricGuard(fab.clone());
        Sim {
            devs: open(&fab, ExecMode::Inline, 4),
            _fabric: guard,
        }
    }
}

impl Devices for Sim {
    fn sides(&self) -> (Vec<Context>, Vec<Context>) {
        (self.devs[..2].to_vec(), self.devs[2..].to_vec())
    }
    fn patience(&self) -> Duration {
        SIM_PATIENCE
    }
}

#[test]
fn garbage_immediates_and_records_close_only_that_communicator() {
    bad_peer::garbage_immediates_and_records(&Sim::new("badimm"));
}

#[test]
fn malformed_cts_entries_close_only_that_communicator() {
    bad_peer::malformed_cts_entries(&Sim::new("badcts"));
}

#[test]
fn dropped_peer_closes_the_other_side() {
    bad_peer::dropped_peer_closes_the_other_side(&Sim::new("drop"));
}

#[test]
fn vanished_peer_without_liveness_channel_is_a_transport_error() {
    bad_peer::vanished_peer_without_liveness_channel(&Sim::new("vanish"));
}
