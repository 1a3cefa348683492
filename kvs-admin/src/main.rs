//! kvs-admin: the operator's view of a kvs cluster and its controls.
//!
//! ```text
//! kvs-admin --server 10.0.0.1:7000 status
//! kvs-admin status --json
//! kvs-admin migrate --slots 0-511 --to 1
//! kvs-admin rebalance
//! kvs-admin cancel
//! kvs-admin set replicas 2
//! kvs-admin drain 1
//! kvs-admin snapshot
//! ```
//!
//! Every command reaches the cluster through one member (`--server`) on its
//! control endpoint; requests only the keeper serves go on to the keeper
//! (`drain` and `snapshot` go to the members they name: each member drains
//! and snapshots itself).
//! Migrations and the copying of slots to new backups run at the servers:
//! kvs-admin starts them and follows them.

mod admin;
mod args;
mod drain;
mod error;
#[cfg(test)]
mod fake;
mod member;
mod migrate;
mod progress;
mod recover;
mod render;
mod replicas;
mod snapshot;
mod status;

use std::io::{IsTerminal, Write};

use clap::Parser;
use copyrpc::transport::{run_on_device_as, DeviceSpec, OnTransport, Transport};
use kvs_client::{cluster_token, ControlClient, ControlOptions};
use mlx5::device::Context as Device;

use crate::admin::{Admin, Control};
use crate::args::{Args, Command, Setting, StatusArgs};
use crate::error::AdminError;
use crate::progress::Pace;

fn main() {
    cli_docs::serve::<Args>();
    let a = Args::parse();
    a.docs.alone::<Args>();
    kvs_client::log_to_stderr();
    if let Err(e) = run(&a) {
        eprintln!("kvs-admin: {e}");
        std::process::exit(1);
    }
}

/// Opens the device and runs the command on the transport it calls for.
fn run(a: &Args) -> Result<(), AdminError> {
    let contact = admin::resolve(&a.server)?[0];
    let opts = ControlOptions {
        cluster_token: cluster_token(a.cluster_token_file.as_deref())?,
        setup_timeout: a.timeout,
        call_timeout: a.timeout,
        cluster_id: None,
    };
    let dev = DeviceSpec {
        name: &a.device,
        fabric: a.fabric.as_deref(),
        software: "sim0",
    }
    .open()?;
    let job = Job {
        args: a,
        opts,
        contact,
    };
    run_on_device_as(dev, a.transport, job).map_err(|(_, e)| AdminError::Device(e))?
}

/// The command, generic over the transport.
#[derive(Debug)]
struct Job<'a> {
    args: &'a Args,
    opts: ControlOptions,
    contact: std::net::SocketAddr,
}

impl OnTransport for Job<'_> {
    type Output = Result<(), AdminError>;

    fn run<X: Transport>(self, dev: Device) -> Self::Output {
        let client = ControlClient::<X>::new(&dev, self.opts)?;
        let mut admin = Admin::new(client, self.contact);
        match &self.args.cmd {
            Command::Status(s) => show_status(&mut admin, s),
            Command::Migrate(m) => migrate::migrate(&mut admin, m, Pace::NORMAL),
            Command::Rebalance(w) => migrate::rebalance(&mut admin, w, Pace::NORMAL),
            Command::Cancel => migrate::cancel(&mut admin),
            Command::Forget(f) => migrate::forget(&mut admin, f),
            Command::UnsafeRecover(u) => recover::unsafe_recover(&mut admin, u),
            Command::Drain(d) => drain::drain(&mut admin, d, drain::PACE),
            Command::Snapshot(s) => snapshot::snapshot(&mut admin, s, snapshot::PACE),
            Command::Set(s) => match &s.what {
                Setting::Replicas(r) => replicas::set_replicas(&mut admin, r, replicas::PACE),
                Setting::MemberTimeout(t) => migrate::set_member_timeout(&mut admin, t.ms),
            },
        }
    }
}

/// `status`, once or every `--watch` seconds.
fn show_status<C: Control>(admin: &mut Admin<C>, s: &StatusArgs) -> Result<(), AdminError> {
    let Some(every) = s.watch else {
        let st = status::gather(admin)?;
        let mut out = std::io::stdout().lock();
        if s.json {
            writeln!(out, "{}", st.json())?;
        } else {
            write!(out, "{}", st.text())?;
        }
        return Ok(out.flush()?);
    };
    // Watching: a round that fails is reported and the next one tried; only
    // a closed output ends it.
    let clear = !s.json && std::io::stdout().is_terminal();
    loop {
        let t = std::time::Instant::now();
        let round = status::gather(admin);
        let mut out = std::io::stdout().lock();
        if clear {
            write!(out, "\x1b[H\x1b[2J")?;
        }
        match round {
            Ok(st) if s.json => writeln!(out, "{}", st.json())?,
            Ok(st) => {
                write!(out, "{}", st.text())?;
                writeln!(
                    out,
                    "\n(every {}; Ctrl-C to stop)",
                    render::duration(every.as_secs_f64())
                )?;
            }
            Err(e) if s.json => {
                let err = serde_json::json!({ "error": e.to_string() });
                writeln!(out, "{err}")?;
            }
            Err(e) => writeln!(out, "kvs-admin: {e}")?,
        }
        out.flush()?;
        drop(out);
        std::thread::sleep(every.saturating_sub(t.elapsed()));
    }
}
