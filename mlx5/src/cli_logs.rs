//! The log output of the workspace's command-line tools (mlx5-info, the
//! benches, kvs-client, kvs-admin): the libraries' warnings, such as the
//! software device standing in for a missing NIC, on stderr.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the process's log subscriber: warnings and errors on stderr,
/// colored on a terminal. `RUST_LOG` sets another level or per-module
/// filters (`RUST_LOG=kvs_client=debug`). Call it once, first thing in
/// `main`.
pub fn log_to_stderr() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
