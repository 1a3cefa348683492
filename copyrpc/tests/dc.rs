//! copyrpc over DC: endpoints that share one DC target per context and
//! borrow DCI streams, through the public API.

mod support;

use copyrpc::transport::Dc;
use copyrpc::ContextBuilder;
use mlx5::device::ExecMode;
use support::*;

#[test]
fn echo_over_dc() {
    let mut w = world_t::<Dc>(
        "dc-echo",
        ExecMode::Inline,
        ContextBuilder::new().ring_size(1 << 16),
        3,
    );
    echo_run(&mut w, 2000, |i| (i as usize * 97) % 1500);
}
