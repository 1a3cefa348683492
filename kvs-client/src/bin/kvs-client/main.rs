//! kvs-client: requests to a kvs-server cluster from the command line:
//! one per process, an interactive shell, or a file of them through one
//! connection.
//!
//! ```text
//! kvs-client --server 127.0.0.1:7000 put user1 hello
//! kvs-client --server 127.0.0.1:7000 get user1
//! kvs-client --server 127.0.0.1:7000 scan user 10
//! kvs-client --server 127.0.0.1:7000 del user1
//! kvs-client --server 10.0.0.5:7000 --auth-token-file ~/.kvs-token get user1
//! kvs-client --server 127.0.0.1:7000                       # the shell
//! kvs-client --server 127.0.0.1:7000 --pipe < commands.txt # bulk
//! ```

use std::io::Write;
use std::path::PathBuf;

mod pipe;
mod shell;
mod syntax;

use clap::{Parser, Subcommand};
use copyrpc::transport::{run_on_device_as, DeviceSpec, OnTransport, Transport, Wire};
use kvs_client::{auth_token, Client, ClientOptions, KvError, OwnedReply};
use mlx5::device::Context as Device;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Client of the copyrpc key-value store",
    after_help = "With no command, an interactive shell on one connection (history, `help`, \
        Tab completes command names). With --pipe, commands from stdin, one per line in the \
        shell's syntax (put KEY VALUE, get KEY, del KEY, scan START COUNT; blank lines and \
        # comments skipped), --depth of them in flight; answers print in the lines' order \
        (values, (not found), records, `(error) line N: ...`; a PUT or DEL that succeeds \
        prints nothing), and a summary goes to stderr. Exit status 1 if any line failed.\n\n\
        Quoting, in the shell and --pipe: \"a b\" is one word, with escapes \\\" \\\\ \\n \
        \\r \\t and \\xHH for any byte; 'a b' is one word taken as written (\\' for a \
        quote). Values print the same way when they need it, so they can be typed again."
)]
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
    /// Reads commands from stdin, one per line, through one connection
    /// (see below); no command with it.
    #[arg(long)]
    pipe: bool,
    /// With --pipe: the requests kept in flight.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    depth: u16,
    #[command(flatten)]
    docs: cli_docs::DocsFlags,
    #[command(subcommand)]
    cmd: Option<Cmd>,
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
    cli_docs::serve::<Args>();
    let a = Args::parse();
    a.docs.alone::<Args>();
    if a.pipe && a.cmd.is_some() {
        die(&"--pipe reads its commands from stdin: give no command with it");
    }
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
    let code = run_on_device_as(dev, a.transport, Session { args: &a, opts })
        .unwrap_or_else(|(_, e)| die(&e));
    std::process::exit(code)
}

/// Prints a one-shot command's answer; the exit status (2: not found).
fn print_reply(r: Result<OwnedReply, KvError>) -> i32 {
    match r {
        Ok(OwnedReply::Value(v)) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&v).and_then(|()| out.write_all(b"\n"));
            0
        }
        Ok(OwnedReply::Done) => {
            println!("OK");
            0
        }
        Ok(OwnedReply::NotFound) => {
            println!("(not found)");
            2
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
            0
        }
        Err(e) => die(&e),
    }
}

/// The session: one command, the shell, or --pipe, on whichever transport
/// the device calls for; its exit status.
struct Session<'a> {
    args: &'a Args,
    opts: ClientOptions,
}

impl OnTransport for Session<'_> {
    type Output = i32;
    fn run<X: Transport>(self, dev: Device) -> i32 {
        run::<X>(self.args, &dev, self.opts)
    }
}

fn run<X: Transport>(a: &Args, dev: &Device, opts: ClientOptions) -> i32 {
    let mut c: Client<u64, X> =
        Client::connect(a.server.as_str(), dev, opts).unwrap_or_else(|e| die(&e));
    let cmd = match &a.cmd {
        Some(Cmd::Get { key }) => syntax::Command::Get(key.clone().into_bytes()),
        Some(Cmd::Put { key, value }) => {
            syntax::Command::Put(key.clone().into_bytes(), value.clone().into_bytes())
        }
        Some(Cmd::Del { key }) => syntax::Command::Del(key.clone().into_bytes()),
        Some(Cmd::Scan { start, count }) => {
            syntax::Command::Scan(start.clone().into_bytes(), *count)
        }
        None if a.pipe => {
            let input = Box::new(std::io::stdin());
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let (s, took) =
                pipe::timed(|| pipe::run(&mut c, input, usize::from(a.depth), &mut out));
            let s = s.unwrap_or_else(|e| die(&format!("writing stdout: {e}")));
            eprintln!("kvs-client: {}", pipe::summary_line(&s, took));
            return i32::from(s.errors > 0);
        }
        None => {
            shell::run(&mut c, &a.server).unwrap_or_else(|e| die(&e));
            return 0;
        }
    };
    print_reply(shell::run_one(&mut c, &cmd))
}

fn die(e: &dyn std::fmt::Display) -> ! {
    eprintln!("kvs-client: {e}");
    std::process::exit(1)
}
