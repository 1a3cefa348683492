//! kvs-client: one request to a kvs-server cluster from the command line.
//!
//! ```text
//! kvs-client --server 127.0.0.1:7000 put user1 hello
//! kvs-client --server 127.0.0.1:7000 get user1
//! kvs-client --server 127.0.0.1:7000 scan user 10
//! kvs-client --server 127.0.0.1:7000 del user1
//! kvs-client --server 10.0.0.5:7000 --auth-token-file ~/.kvs-token get user1
//! ```

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use copyrpc::transport::{run_on_device_as, DeviceSpec, OnTransport, Transport, Wire};
use kvs_client::{auth_token, Client, ClientOptions, KvError, OwnedReply};
use mlx5::device::Context as Device;

#[derive(Parser, Debug)]
#[command(version, about = "Client of the copyrpc key-value store")]
struct Args {
    /// The setup address of a server of the cluster (any member: the client
    /// learns the others from its shard map).
    #[arg(long, short, default_value = "127.0.0.1:7000")]
    server: String,
    /// RDMA device: mlx5_0, sim0, … or auto.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Software device fabric.
    #[arg(long)]
    fabric: Option<String>,
    /// How the connections reach the servers: `rc` (a QP per connection)
    /// or `dc` (DC, mlx5 only). The servers' `transport` setting.
    #[arg(long, value_name = "rc|dc", default_value = "rc")]
    transport: Wire,
    /// File holding the server's auth token (readable by its owner only).
    /// Without it, the token is taken from the environment variable
    /// KVS_AUTH_TOKEN if that is set.
    #[arg(long, value_name = "FILE")]
    auth_token_file: Option<PathBuf>,
    /// Seconds the request may take, and the connection setup (a host that
    /// does not answer, or a member that is stuck, fails after this long;
    /// a write that times out may still have been applied).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    timeout: f64,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Prints a key's value.
    Get { key: String },
    /// Sets a key's value.
    Put { key: String, value: String },
    /// Removes a key.
    Del { key: String },
    /// Prints up to COUNT records from START on, in key order.
    Scan { start: String, count: u32 },
}

fn main() {
    let a = Args::parse();
    kvs_client::log_to_stderr();
    let token = auth_token(a.auth_token_file.as_deref()).unwrap_or_else(|e| die(&e));
    let spec = DeviceSpec {
        name: &a.device,
        fabric: a.fabric.as_deref(),
        software: "sim0",
    };
    let dev = spec.open().unwrap_or_else(|e| die(&e));
    let timeout = std::time::Duration::try_from_secs_f64(a.timeout)
        .unwrap_or_else(|e| die(&format!("--timeout {}: {e}", a.timeout)));
    let opts = ClientOptions {
        value_allowance: 64 << 10,
        auth_token: token,
        setup_timeout: timeout,
        timeout,
        ..ClientOptions::default()
    };
    let r = run_on_device_as(dev, a.transport, Request { args: &a, opts })
        .unwrap_or_else(|(_, e)| die(&e));
    match r {
        Ok(OwnedReply::Value(v)) => println!("{}", String::from_utf8_lossy(&v)),
        Ok(OwnedReply::Done) => println!("OK"),
        Ok(OwnedReply::NotFound) => {
            println!("(not found)");
            std::process::exit(2)
        }
        Ok(OwnedReply::Scan(recs, complete)) => {
            for (k, v) in recs {
                println!(
                    "{}\t{}",
                    String::from_utf8_lossy(&k),
                    String::from_utf8_lossy(&v)
                );
            }
            if !complete {
                println!("(incomplete: more records may follow)");
            }
        }
        Err(e) => die(&e),
    }
}

/// Connects over transport `X` and runs the command.
/// The command's one request, on whichever transport the device calls for.
struct Request<'a> {
    args: &'a Args,
    opts: ClientOptions,
}

impl OnTransport for Request<'_> {
    type Output = Result<OwnedReply, KvError>;
    fn run<X: Transport>(self, dev: Device) -> Self::Output {
        run::<X>(self.args, &dev, self.opts)
    }
}

fn run<X: Transport>(a: &Args, dev: &Device, opts: ClientOptions) -> Result<OwnedReply, KvError> {
    let mut c: Client<u64, X> =
        Client::connect(a.server.as_str(), dev, opts).unwrap_or_else(|e| die(&e));
    match &a.cmd {
        Cmd::Get { key } => c.wait_for(|c, t| c.get(key.as_bytes(), t)),
        Cmd::Put { key, value } => c.wait_for(|c, t| c.put(key.as_bytes(), value.as_bytes(), t)),
        Cmd::Del { key } => c.wait_for(|c, t| c.delete(key.as_bytes(), t)),
        Cmd::Scan { start, count } => c.wait_for(|c, t| c.scan(start.as_bytes(), *count, t)),
    }
}

fn die(e: &dyn std::fmt::Display) -> ! {
    eprintln!("kvs-client: {e}");
    std::process::exit(1)
}
