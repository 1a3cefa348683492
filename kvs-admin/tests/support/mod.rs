//! In-process clusters of kvs-servers, and the kvs-admin binary run against
//! them as a child process.
#![allow(dead_code)]

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

/// Slots of a test cluster.
pub const SLOTS: u32 = 256;

/// Servers of one cluster on a fabric of the test's own (device `sim1`,
/// loopback ports of their own, 256 slots, two workers each); kvs-admin
/// runs on device `sim0` of the same fabric.
pub struct Cluster {
    pub fabric: String,
    pub servers: Vec<Server>,
}

/// A test server's settings: joining `join` if given.
pub fn config(fabric: &str, join: Option<SocketAddr>) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric.into()),
        workers: 2,
        slots: SLOTS,
        max_value: 2048,
        stats_interval_s: 0,
        join: join.map(|a| a.to_string()),
        ..Config::default()
    }
}

impl Cluster {
    /// `members` servers: the first starts the cluster, the others join it
    /// through the first; returns once every member serves the same map,
    /// one that includes them all (with backups, later versions place
    /// them).
    pub fn start(tag: &str, members: usize) -> Cluster {
        let fabric = format!("kvs-admin-{tag}-{}", std::process::id());
        Cluster::start_with(fabric, members, |c| c)
    }

    /// [`start`](Self::start) on `fabric` with every server's settings
    /// passed through `adjust`.
    pub fn start_with(
        fabric: String,
        members: usize,
        adjust: impl Fn(Config) -> Config,
    ) -> Cluster {
        let first = Server::start(adjust(config(&fabric, None))).expect("start the first server");
        let join = first.addr();
        let mut servers = vec![first];
        for _ in 1..members {
            servers.push(Server::start(adjust(config(&fabric, Some(join)))).expect("join"));
        }
        let version = members as u32;
        let t = Instant::now();
        let settled = |s: &[Server]| {
            let v = s[0].map_version();
            v >= version && s.iter().all(|x| x.map_version() == v)
        };
        while !settled(&servers) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the map never reached every member"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Cluster { fabric, servers }
    }

    /// A client of the cluster through member `i` (device `sim0`).
    pub fn client(&self, i: usize) -> kvs_client::Client<u64> {
        let dev = copyrpc::transport::DeviceSpec {
            name: "sim0",
            fabric: Some(&self.fabric),
            software: "sim0",
        }
        .open()
        .expect("open sim0");
        kvs_client::Client::connect(self.addr(i), &dev, Default::default()).expect("connect")
    }

    /// The address of member `i`.
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.servers[i].addr()
    }

    /// Runs kvs-admin against member 0 with `args` after the global ones.
    pub fn admin(&self, args: &[&str]) -> Run {
        self.admin_via(self.addr(0), args)
    }

    /// Runs kvs-admin against `server` with `args` after the global ones.
    pub fn admin_via(&self, server: SocketAddr, args: &[&str]) -> Run {
        admin(&self.fabric, server, args)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for s in self.servers.drain(..).rev() {
            s.shutdown();
        }
        Fabric::remove_if_unused(&self.fabric);
    }
}

/// How a kvs-admin run ended.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The exit code (`None`: killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// The kvs-admin command for `fabric` (device `sim0`) and `server`, with
/// `args` after the global options.
pub fn command(fabric: &str, server: SocketAddr, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kvs-admin"));
    cmd.args(["--fabric", fabric, "--device", "sim0", "--timeout", "5"])
        .arg("--server")
        .arg(server.to_string())
        .args(args)
        .env_remove("KVS_AUTH_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs kvs-admin and waits (at most 60 s) for it to exit.
pub fn admin(fabric: &str, server: SocketAddr, args: &[&str]) -> Run {
    run(command(fabric, server, args))
}

/// Runs `cmd` (stdout and stderr piped) and waits (at most 60 s) for it to
/// exit.
pub fn run(mut cmd: Command) -> Run {
    let mut child = cmd.spawn().expect("start kvs-admin");
    let (out, err) = readers(&mut child);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "kvs-admin {:?} did not exit: {}",
                cmd.get_args().collect::<Vec<_>>(),
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Threads that read the child's stdout and stderr to their ends.
pub fn readers(child: &mut Child) -> (JoinHandle<String>, JoinHandle<String>) {
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().expect("piped")));
    let err = read(Box::new(child.stderr.take().expect("piped")));
    (out, err)
}
