//! The kvs-server binary as a child process, and clients of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvs_client::{Client, ClientOptions, ConnectError, ControlClient};
use kvs_proto::control::{ControlReply, ControlRequest, GroupView, MemberStatus};

/// The settings of an in-process test server: a loopback port of its own,
/// software device `sim1` of `fabric`, two workers, values up to 2 KiB, no
/// stats lines. The server's log goes to the test's captured output (shown
/// when it fails).
pub fn test_config(fabric: &str) -> kvs_server::Config {
    kvs_server::logging::init_for_tests();
    kvs_server::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric.into()),
        workers: 2,
        max_value: 2048,
        stats_interval_s: 0,
        ..kvs_server::Config::default()
    }
}

/// A kvs-server process: its address and everything it printed so far.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    out: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl ServerProcess {
    /// Starts `kvs-server` on a loopback port of its own, software device
    /// `sim1` of `fabric`, with two workers and no stats lines, and the flags
    /// in `extra` (which may set `--workers` or `--stats-interval` instead).
    pub fn start_on(fabric: &str, extra: &[&str]) -> ServerProcess {
        ServerProcess::start_command(ServerProcess::command_on(fabric, extra))
    }

    /// The command [`start_on`](Self::start_on) runs, for a test that sets
    /// more up before it starts it ([`start_command`](Self::start_command)).
    pub fn command_on(fabric: &str, extra: &[&str]) -> Command {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--device",
            "sim1",
            "--fabric",
            fabric,
        ];
        for (flag, default) in [("--workers", "2"), ("--stats-interval", "0")] {
            if !extra.contains(&flag) {
                args.extend([flag, default]);
            }
        }
        args.extend_from_slice(extra);
        let mut cmd = Command::new(server_bin());
        cmd.args(args);
        cmd
    }

    /// Starts `kvs-server` with `args` (which must listen on a port of its
    /// own) and waits (at most 60 s) for its "listening on" line.
    pub fn start(args: &[&str]) -> ServerProcess {
        let mut cmd = Command::new(server_bin());
        cmd.args(args);
        ServerProcess::start_command(cmd)
    }

    /// [`start`](Self::start) with `cmd` (the kvs-server binary and its
    /// arguments, set up as the test needs).
    pub fn start_command(cmd: Command) -> ServerProcess {
        let (mut p, rx) = ServerProcess::spawn(cmd);
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => {
                p.addr = a;
                p
            }
            Err(_) => {
                let _ = p.child.kill();
                let _ = p.child.wait();
                panic!("kvs-server did not start: {}", p.out.lock().unwrap());
            }
        }
    }

    /// Starts `cmd`, a kvs-server that listens at `addr` (known from an
    /// earlier start), and returns at once: for a test that looks at it
    /// while it starts ([`listening`](Self::listening) says when it is
    /// up).
    pub fn launch_at(cmd: Command, addr: SocketAddr) -> ServerProcess {
        let (mut p, _) = ServerProcess::spawn(cmd);
        p.addr = addr;
        p
    }

    /// Whether it has said that it listens (that it is up).
    pub fn listening(&self) -> bool {
        self.printed().contains("kvs-server: listening on ")
    }

    /// Spawns `cmd` with its output captured; the address its "listening
    /// on" line gives comes on the channel.
    fn spawn(mut cmd: Command) -> (ServerProcess, std::sync::mpsc::Receiver<SocketAddr>) {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kvs-server");
        let out = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
        let stdout = child.stdout.take().expect("piped");
        let o = out.clone();
        let r1 = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(a) = line.strip_prefix("kvs-server: listening on ") {
                    let _ = tx.send(a.trim().parse().expect("an address"));
                }
                let mut g = o.lock().unwrap();
                g.push_str(&line);
                g.push('\n');
            }
        });
        let mut stderr = child.stderr.take().expect("piped");
        let o = out.clone();
        let r2 = std::thread::spawn(move || {
            let mut b = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut b) {
                if n == 0 {
                    break;
                }
                o.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&b[..n]));
            }
        });
        let p = ServerProcess {
            child,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            out,
            readers: vec![r1, r2],
        };
        (p, rx)
    }

    /// Stops it with SIGSTOP (`stop`), or lets it go on with SIGCONT.
    /// A stop returns once every thread of the process is stopped: kill(2)
    /// returns before a thread running on another CPU has taken the
    /// signal, and it may answer a request meanwhile.
    pub fn pause(&self, stop: bool) {
        let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        let pid = self.child.id();
        // SAFETY: kill(2) with a pid this process spawned and has not reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
        if stop {
            let until = Instant::now() + Duration::from_secs(10);
            while !all_threads_stopped(pid) {
                assert!(
                    Instant::now() < until,
                    "process {pid} did not stop within 10 s"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Kills it with SIGKILL and waits until it is gone.
    pub fn kill9(&mut self) {
        // SAFETY: kill(2) with a pid this process spawned and has not reaped.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }

    /// Stops it with SIGTERM (systemd's stop) and waits, at most `within`,
    /// until it exits by itself; whether it did (else it is killed).
    pub fn term(&mut self, within: Duration) -> bool {
        // SAFETY: kill(2) with a pid this process spawned and has not reaped.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < within {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill9();
        false
    }

    /// What it has printed so far.
    pub fn printed(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Stops it (SIGKILL) and returns everything it printed.
    pub fn output(mut self) -> String {
        self.kill9();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let o = self.out.lock().unwrap().clone();
        o
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A member process of `fabric` with its data dir `dir`, at `listen`
/// (`127.0.0.1:0` the first time), with `workers` workers, joining `join`
/// if given (device `sim1`, no stats lines). Without `join`, a `dir` that
/// holds no member yet gets `--bootstrap`, as an operator gives it once,
/// when the cluster is created; a restart resumes from `dir` without it.
pub fn member_process(
    fabric: &str,
    dir: &Path,
    listen: &str,
    workers: u16,
    join: Option<SocketAddr>,
) -> ServerProcess {
    member_process_with(fabric, dir, listen, workers, join, &[])
}

/// [`member_process`] with the flags in `extra` after the others.
pub fn member_process_with(
    fabric: &str,
    dir: &Path,
    listen: &str,
    workers: u16,
    join: Option<SocketAddr>,
    extra: &[&str],
) -> ServerProcess {
    ServerProcess::start_command(member_command(fabric, dir, listen, workers, join, extra))
}

/// The command [`member_process_with`] runs.
pub fn member_command(
    fabric: &str,
    dir: &Path,
    listen: &str,
    workers: u16,
    join: Option<SocketAddr>,
    extra: &[&str],
) -> Command {
    let dir = dir.to_str().expect("a UTF-8 path").to_string();
    let workers = workers.to_string();
    let join = join.map(|a| a.to_string());
    let mut args = vec![
        "--listen",
        listen,
        "--device",
        "sim1",
        "--fabric",
        fabric,
        "--workers",
        &workers,
        "--stats-interval",
        "0",
        "--data-dir",
        &dir,
    ];
    match &join {
        Some(j) => args.extend(["--join", j]),
        None if !Path::new(&dir).join("identity").exists() => args.push("--bootstrap"),
        None => {}
    }
    args.extend_from_slice(extra);
    let mut cmd = Command::new(server_bin());
    cmd.args(args);
    cmd
}

/// [`member_process_with`], configured by `toml` in a file beside `dir`
/// (`--config`) as well.
pub fn member_process_configured(
    fabric: &str,
    dir: &Path,
    listen: &str,
    join: Option<SocketAddr>,
    toml: &str,
    extra: &[&str],
) -> ServerProcess {
    let cfg = dir.with_extension("toml");
    write_file(&cfg, toml, 0o644);
    let cfg = cfg.to_str().expect("a UTF-8 path");
    let mut args = vec!["--config", cfg];
    args.extend_from_slice(extra);
    member_process_with(fabric, dir, listen, 2, join, &args)
}

/// A control client on `fabric` that waits for members that restart or
/// fail over: 2 s for a setup, 3 s for an answer.
pub fn control_client(fabric: &str) -> ControlClient {
    let opts = kvs_client::ControlOptions {
        setup_timeout: std::time::Duration::from_secs(2),
        call_timeout: std::time::Duration::from_secs(3),
        ..kvs_client::ControlOptions::default()
    };
    ControlClient::new(&client_device(fabric), opts).expect("a control client")
}

/// The status of the member at `at`, if it answers.
pub fn member_status(cc: &mut ControlClient, at: SocketAddr) -> Option<MemberStatus> {
    match cc.request(at, &ControlRequest::Status) {
        Ok(ControlReply::Status(s)) => Some(s),
        _ => None,
    }
}

/// The control group as the member at `at` sees it, if it answers.
pub fn group_view(cc: &mut ControlClient, at: SocketAddr) -> Option<GroupView> {
    member_status(cc, at).and_then(|s| s.group)
}

/// The kvs-server binary the tests run: `KVS_SERVER_BIN` if set (a build
/// kept aside, or the one installed on a host), else the one this build made.
pub fn server_bin() -> std::ffi::OsString {
    std::env::var_os("KVS_SERVER_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_kvs-server").into())
}

/// Runs the kvs-server binary with `args` and expects it to exit by itself
/// within 60 s; returns its status and everything it printed.
pub fn run_server(args: &[&str]) -> (ExitStatus, String) {
    let mut child = Command::new(server_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kvs-server");
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("kvs-server {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    (status, out)
}

/// Software device `sim0` of `fabric`: the clients' device in tests.
pub fn client_device(fabric: &str) -> mlx5::device::Context {
    copyrpc::transport::DeviceSpec {
        name: "sim0",
        fabric: Some(fabric),
        software: "sim0",
    }
    .open()
    .unwrap()
}

/// A client of the server at `addr` on software device `sim0` of `fabric`.
pub fn connect(
    addr: SocketAddr,
    fabric: &str,
    opts: ClientOptions,
) -> Result<Client<u64>, ConnectError> {
    Client::connect(addr, &client_device(fabric), opts)
}

/// A fresh directory for this test's files, removed when dropped.
pub fn temp_dir(tag: &str) -> test_support::TempDir {
    test_support::TempDir::new("kvs", tag)
}

/// Writes `text` to `path` with permission bits `mode`.
pub fn write_file(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A bench's numeric argument `name N` from the command line, else
/// `default`.
pub fn bench_arg(name: &str, default: usize) -> usize {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How long [`answer`] and [`client_of`] wait.
const WITHIN: Duration = Duration::from_secs(10);

/// Submits one request (tag 1) through `c` and waits for its answer, 10 s
/// at most.
pub fn answer(
    c: &mut Client<u64>,
    mut submit: impl FnMut(&mut Client<u64>) -> Result<(), kvs_client::SubmitError<u64>>,
) -> Result<kvs_client::OwnedReply, kvs_client::KvError> {
    let t = Instant::now();
    loop {
        match submit(c) {
            Ok(()) => break,
            Err(kvs_client::SubmitError::Busy(_)) => {
                c.poll(|_, _| {});
            }
            Err(e) => panic!("not sent: {e}"),
        }
        assert!(t.elapsed() < WITHIN, "not sent in time");
    }
    let mut out = None;
    while out.is_none() {
        c.wait(Duration::from_millis(10), |_, r| {
            out = Some(r.map(kvs_client::OwnedReply::from))
        })
        .unwrap();
        assert!(out.is_some() || t.elapsed() < WITHIN, "no answer in time");
    }
    out.expect("an answer")
}

/// A client of the server process `s` on `fabric`, connecting until the
/// server takes it (10 s at most).
pub fn client_of(s: &ServerProcess, fabric: &str) -> Client<u64> {
    client_with(s, fabric, ClientOptions::default())
}

/// [`client_of`] with `opts`.
pub fn client_with(s: &ServerProcess, fabric: &str, opts: ClientOptions) -> Client<u64> {
    let t = Instant::now();
    loop {
        match connect(s.addr, fabric, opts.clone()) {
            Ok(c) => return c,
            Err(e) if t.elapsed() > WITHIN => panic!("connect: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// One HTTP request; the status code, headers and body.
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: kvs\r\nAccept: */*\r\n\r\n");
    std::io::Write::write_all(&mut s, req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("a length");
    assert_eq!(length, body.len());
    (code, head.to_string(), body.to_string())
}

/// Whether every thread of process `pid` is stopped (state `T` in its
/// `/proc` stat; a thread that exits meanwhile counts as stopped).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).map_or(true, |st| {
            // The state follows the command's closing parenthesis.
            st.rfind(')')
                .and_then(|i| st[i + 1..].split_whitespace().next())
                .is_some_and(|state| state == "T" || state == "t")
        })
    })
}
