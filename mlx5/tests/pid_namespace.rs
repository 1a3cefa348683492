//! Processes of one fabric in different PID namespaces, as servers in
//! containers that bind-mount one fabric directory: pids say nothing there
//! (both peers below are pid 1), so the device must know who is who and who
//! lives without them.
//!
//! The test binary runs itself again as each peer, under `unshare --pid
//! --fork --kill-child`, so each peer is pid 1 of a PID namespace of its own;
//! the test process (in the root namespace) relays connection details and
//! tells the peers what to do over their stdin/stdout. Making a PID namespace
//! needs root; any other user gets one inside a user namespace of its own
//! (`unshare --user --map-root-user`, which Debian allows); where the system
//! forbids that (Ubuntu's AppArmor restriction), the test says it skipped.
//! CI runs it as root.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use mlx5::device::{access, ConnInfo, Context, Cq, CqAttr, Mr, Pd, Qp, QpCaps, RtrAttr, RtsAttr};
use mlx5::prm::{CqeOpcode, Syndrome};
use mlx5::sim::device::{hold_cq_lock_forever, live_qps};
use mlx5::sim::fabric::Fabric;
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::wqe_table::OrderedSparse;

const TEST: &str = "peers_in_other_pid_namespaces_are_told_apart_and_their_death_is_seen";
/// How long the test waits for a peer's answer.
const ANSWER: Duration = Duration::from_secs(30);
/// A peer's MR: where others write to it (`WRITE_AT` per writer) and, from
/// `SRC`, what it sends.
const MR_LEN: usize = 4096;
const SRC: usize = 3072;
const LEN: usize = 64;

/// Short transport retries (a dead peer is found in well under a second):
/// 8.2 µs ACK timeout, 2 retries.
fn rts() -> RtsAttr {
    RtsAttr {
        timeout: 1,
        retry_cnt: 2,
        ..RtsAttr::default()
    }
}

fn pattern(seed: u32) -> Vec<u8> {
    (0..LEN)
        .map(|k| (seed as u8).wrapping_mul(37) ^ (k as u8).wrapping_add((seed >> 8) as u8))
        .collect()
}

/// One end: a device's PD, MR, CQ (send and receive) and QPs, each QP with
/// its send queue.
struct End {
    ctx: Context,
    pd: Pd,
    mr: Mr,
    cq: Cq,
    qps: Vec<(Qp, SendQueue<OrderedSparse<u32>>)>,
    ring: mlx5::cq::CqRing,
}

impl End {
    fn new(fabric: &str, dev: &str) -> End {
        let ctx = Context::open_in(fabric, dev).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd
            .alloc_mr(MR_LEN, access::LOCAL_WRITE | access::REMOTE_WRITE)
            .unwrap();
        let cq = ctx.create_cq(&CqAttr::default()).unwrap();
        let ring = cq.ring().unwrap();
        End {
            ctx,
            pd,
            mr,
            cq,
            qps: Vec::new(),
            ring,
        }
    }

    /// A new QP; returns its index.
    fn add_qp(&mut self) -> usize {
        let qp = self
            .ctx
            .create_qp(&self.pd, &self.cq, &self.cq, None, &QpCaps::default())
            .unwrap();
        let sq = qp
            .send_queue::<OrderedSparse<u32>>(SqConfig::default())
            .unwrap();
        self.qps.push((qp, sq));
        self.qps.len() - 1
    }

    fn connect(&self, i: usize, peer: ConnInfo) {
        let qp = &self.qps[i].0;
        qp.to_init().unwrap();
        qp.to_rtr(&RtrAttr::new(peer, access::REMOTE_WRITE))
            .unwrap();
        qp.to_rts(&rts()).unwrap();
    }

    /// RDMA WRITEs `pattern(seed)` through QP `i` to `addr`/`rkey`; returns
    /// the completion: "ok", "err <syndrome>", or "none" (nothing in 20 s).
    fn write(&mut self, i: usize, addr: u64, rkey: u32, seed: u32) -> String {
        self.mr.write(SRC, &pattern(seed));
        let sge = Sge {
            addr: self.mr.addr() + SRC as u64,
            len: LEN as u32,
            lkey: self.mr.lkey(),
        };
        let sq = &mut self.qps[i].1;
        sq.write(addr, rkey, Payload::Sges(&[sge]))
            .unwrap()
            .post(Some(seed));
        sq.ring_doorbell();
        let t = Instant::now();
        let mut got = None;
        while got.is_none() && t.elapsed() < Duration::from_secs(20) {
            self.ring.poll(1, |c| {
                got = Some(match (c.opcode(), c.syndrome_raw()) {
                    (Some(CqeOpcode::Req), None) => "ok".to_owned(),
                    (_, s) => format!("err {}", s.unwrap_or(0)),
                });
                sq.complete(c, |_, _| {});
            });
        }
        got.unwrap_or_else(|| "none".to_owned())
    }

    fn holds(&self, off: usize, seed: u32) -> bool {
        self.mr.to_vec(off, LEN) == pattern(seed)
    }
}

/// `ConnInfo` of a QP number on device `lid`.
fn conn(qpn: u32, lid: u16) -> ConnInfo {
    ConnInfo {
        qpn,
        lid,
        gid: [0; 16],
        psn: 0,
    }
}

/// The peer: answers the test's commands, one line each, until its stdin
/// closes (or it is killed).
fn peer(fabric: &str, dev: &str) {
    let mut me = End::new(fabric, dev);
    let sim = me.ctx.as_sim().expect("a software device");
    let token = sim.fabric().token();
    // In this namespace, and in the one /proc was mounted from (the test's).
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let nspid: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .expect("NSpid in /proc/self/status")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    println!(
        "PEER INFO {token} {} {} {} {} {} {}",
        std::process::id(),
        nspid[0],
        me.ctx.as_sim().unwrap().lid(),
        me.mr.addr(),
        me.mr.rkey(),
        me.cq.cqn()
    );
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        let answer = match f[..] {
            ["QP"] => {
                let i = me.add_qp();
                format!("QP {}", me.qps[i].0.qpn())
            }
            ["CONNECT", i, qpn, lid] => {
                me.connect(
                    i.parse().unwrap(),
                    conn(qpn.parse().unwrap(), lid.parse().unwrap()),
                );
                "OK".to_owned()
            }
            ["WRITE", i, addr, rkey, seed] => me.write(
                i.parse().unwrap(),
                addr.parse().unwrap(),
                rkey.parse().unwrap(),
                seed.parse().unwrap(),
            ),
            ["CHECK", off, seed] => {
                format!("{}", me.holds(off.parse().unwrap(), seed.parse().unwrap()))
            }
            ["COUNT"] => format!("{}", live_qps(me.ctx.as_sim().unwrap())),
            ["HOLD", cqn] => format!(
                "{}",
                hold_cq_lock_forever(me.ctx.as_sim().unwrap(), cqn.parse().unwrap())
            ),
            _ => panic!("unknown command {line:?}"),
        };
        println!("PEER {answer}");
    }
}

/// What a peer said about itself.
struct PeerInfo {
    token: u32,
    /// Its pid in its own namespace.
    ns_pid: u32,
    /// Its pid in the test's namespace.
    host_pid: u32,
    lid: u16,
    addr: u64,
    rkey: u32,
    cqn: u32,
}

/// A peer process in a PID namespace of its own (the `unshare` process
/// holding it), and its answers.
struct Peer {
    name: &'static str,
    unshare: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    info: PeerInfo,
}

/// The namespaces a peer needs besides its PID namespace: none for root;
/// for anyone else a user namespace, in which it may make the PID namespace
/// (its uid inside maps to this user's, so the fabric stays one user's).
fn namespace_args() -> &'static [&'static str] {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        &[]
    } else {
        &["--user", "--map-root-user"]
    }
}

/// Whether this user may make a user namespace with a PID namespace in it.
fn user_namespaces_work() -> bool {
    Command::new("unshare")
        .args(namespace_args())
        .args(["--pid", "--fork", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Peer {
    fn spawn(name: &'static str, fabric: &str, dev: &str) -> Peer {
        let exe = std::env::current_exe().unwrap();
        let mut unshare = Command::new("unshare")
            .args(namespace_args())
            .args(["--pid", "--fork", "--kill-child"])
            .arg(&exe)
            .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
            .env("MLX5_PIDNS_ROLE", dev)
            .env("MLX5_PIDNS_FABRIC", fabric)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run unshare (util-linux)");
        let stdin = unshare.stdin.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let out = unshare.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                // The harness prints "test <name> ... " before the peer's own
                // first line.
                if let Some(at) = l.find("PEER ") {
                    if tx.send(l[at + 5..].to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        let first = match lines.recv_timeout(ANSWER) {
            Ok(l) => l,
            Err(_) => {
                let _ = unshare.kill();
                let out = unshare.wait_with_output().unwrap();
                panic!(
                    "peer {name} did not start under `unshare {} --pid --fork` ({}): {}\n\
                     this test needs root, or unprivileged user namespaces \
                     (sysctl kernel.unprivileged_userns_clone=1), to make PID namespaces",
                    namespace_args().join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        };
        let f: Vec<&str> = first.split_whitespace().collect();
        assert_eq!(f[0], "INFO", "{first}");
        let n = |k: usize| -> u64 { f[k].parse().unwrap() };
        let info = PeerInfo {
            token: n(1) as u32,
            ns_pid: n(2) as u32,
            host_pid: n(3) as u32,
            lid: n(4) as u16,
            addr: n(5),
            rkey: n(6) as u32,
            cqn: n(7) as u32,
        };
        Peer {
            name,
            unshare,
            stdin,
            lines,
            info,
        }
    }

    /// Sends a command, returns the answer.
    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.lines.recv_timeout(ANSWER).unwrap_or_else(|_| {
            panic!(
                "peer {} gave no answer to {cmd:?} within {ANSWER:?} (stuck, or dead)",
                self.name
            )
        })
    }
}

impl Drop for Peer {
    /// A peer is never left behind, even when an assertion fails: killing
    /// `unshare` kills the peer (`--kill-child`).
    fn drop(&mut self) {
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// Names of the files in `dir` that start with `prefix`.
fn files(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

/// Two peers, each pid 1 of a PID namespace of its own, and the test process
/// in the root namespace share a fabric:
/// (a) while both live, RC QPs between them and to the test process carry
///     data both ways, each counts only its own QPs (same pid, different
///     owners), and neither they nor the test process (opening the fabric,
///     reaping) declare a peer dead or free anything of it;
/// (b) once peer A is SIGKILLed, writes to it from B and from the test
///     process fail with transport retries exhausted, and reaping frees A's
///     entries and segments and removes its liveness file, and nothing of B;
/// (c) A dies holding the lock of B's CQ, and B's NIC takes it over to write
///     that error completion.
#[test]
fn peers_in_other_pid_namespaces_are_told_apart_and_their_death_is_seen() {
    if let Ok(dev) = std::env::var("MLX5_PIDNS_ROLE") {
        return peer(&std::env::var("MLX5_PIDNS_FABRIC").unwrap(), &dev);
    }
    if !namespace_args().is_empty() && !user_namespaces_work() {
        // Root (CI) always runs it; another user where the system forbids
        // user namespaces (Ubuntu's AppArmor restriction) cannot.
        eprintln!(
            "skipped: PID namespaces need root, or user namespaces, which \
             `unshare --user --map-root-user` could not make here"
        );
        return;
    }
    let fabric = format!("pidns-{}", std::process::id());
    let mut t = End::new(&fabric, "sim2");
    let fab = Fabric::open(&fabric).unwrap();
    let dir = fab.dir().to_owned();
    let mut a = Peer::spawn("A", &fabric, "sim0");
    let mut b = Peer::spawn("B", &fabric, "sim1");
    let (ta, tb) = (a.info.token, b.info.token);

    // The same pid, in two namespaces; three distinct tokens.
    assert_eq!((a.info.ns_pid, b.info.ns_pid), (1, 1), "each peer is pid 1");
    assert_ne!(a.info.host_pid, b.info.host_pid);
    assert!(ta != tb && ta != fab.token() && tb != fab.token());

    // A's QP 0 to B's QP 0; A's QP 1 to the test's QP 0.
    let qa0: u32 = a.ask("QP")[3..].parse().unwrap();
    let qa1: u32 = a.ask("QP")[3..].parse().unwrap();
    let qb0: u32 = b.ask("QP")[3..].parse().unwrap();
    let qt = t.add_qp();
    let t_qpn = t.qps[qt].0.qpn();
    let t_lid = t.ctx.as_sim().unwrap().lid();
    let (la, lb) = (a.info.lid, b.info.lid);
    assert_eq!(a.ask(&format!("CONNECT 0 {qb0} {lb}")), "OK");
    assert_eq!(b.ask(&format!("CONNECT 0 {qa0} {la}")), "OK");
    assert_eq!(a.ask(&format!("CONNECT 1 {t_qpn} {t_lid}")), "OK");
    t.connect(qt, conn(qa1, la));

    // (a) Data both ways on every connection, a few milliseconds apart so
    // that each requester checks its peer's liveness (once per millisecond).
    let (ia, ib) = (a.info.addr, b.info.addr);
    let (ka, kb) = (a.info.rkey, b.info.rkey);
    let t_addr = t.mr.addr();
    let t_rkey = t.mr.rkey();
    let exchange = |a: &mut Peer, b: &mut Peer, t: &mut End, seed: u32| {
        // Into A: from B at 0, from the test at 1024. Into B: from A at 0.
        // Into the test: from A at 0.
        assert_eq!(a.ask(&format!("WRITE 0 {ib} {kb} {seed}")), "ok", "A to B");
        assert_eq!(
            b.ask(&format!("WRITE 0 {ia} {ka} {}", seed + 1)),
            "ok",
            "B to A"
        );
        assert_eq!(
            a.ask(&format!("WRITE 1 {t_addr} {t_rkey} {}", seed + 2)),
            "ok",
            "A to test"
        );
        assert_eq!(t.write(qt, ia + 1024, ka, seed + 3), "ok", "test to A");
        assert_eq!(b.ask(&format!("CHECK 0 {seed}")), "true", "B got A's bytes");
        assert_eq!(
            a.ask(&format!("CHECK 0 {}", seed + 1)),
            "true",
            "A got B's bytes"
        );
        assert!(t.holds(0, seed + 2), "the test got A's bytes");
        assert_eq!(
            a.ask(&format!("CHECK 1024 {}", seed + 3)),
            "true",
            "A got the test's bytes"
        );
    };
    for round in 0..5 {
        exchange(&mut a, &mut b, &mut t, round * 10);
        std::thread::sleep(Duration::from_millis(3));
    }
    // Each counts its own QPs only, though both are pid 1.
    assert_eq!(a.ask("COUNT"), "2", "A's live QPs");
    assert_eq!(b.ask("COUNT"), "1", "B's live QPs");
    // Seen from the root namespace, both live; reaping and opening the
    // fabric again free nothing of theirs.
    assert!(fab.alive(ta) && fab.alive(tb), "a live peer declared dead");
    let procs = files(&dir, "proc-");
    for tok in [ta, tb, fab.token()] {
        assert!(procs.contains(&format!("proc-{tok}")), "{procs:?}");
    }
    let segs = files(&dir, "seg-");
    fab.reap_dead();
    drop(Fabric::open(&fabric).unwrap());
    assert_eq!(
        files(&dir, "seg-"),
        segs,
        "a live peer's segments were reaped"
    );
    assert_eq!(files(&dir, "proc-"), procs);
    for round in 5..8 {
        exchange(&mut a, &mut b, &mut t, round * 10);
        std::thread::sleep(Duration::from_millis(3));
    }

    // (c) A takes the lock of B's CQ and dies with it held.
    assert_eq!(a.ask(&format!("HOLD {}", b.info.cqn)), "true");
    // SAFETY: kill has no memory effects; the pid is A's, which is alive
    // until this kill (its unshare parent has not reaped it).
    let killed = unsafe { libc::kill(a.info.host_pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(killed, 0, "kill A");
    // unshare waits for its child: once it has exited, A is gone.
    let status = a.unshare.wait().unwrap();
    assert!(!status.success(), "A was killed: {status}");
    assert!(
        files(&dir, "proc-").contains(&format!("proc-{ta}")),
        "a killed process cleans nothing up"
    );
    assert!(!fab.alive(ta), "a dead peer is seen dead");
    assert!(fab.alive(tb));

    // (b) Writes to the dead peer run out of retries: from B (whose NIC
    // takes over the CQ lock A died with to complete it) and from the test.
    std::thread::sleep(Duration::from_millis(5));
    let retry_exc = format!("err {}", Syndrome::TransportRetryExc as u8);
    assert_eq!(
        b.ask(&format!("WRITE 0 {ia} {ka} 99")),
        retry_exc,
        "B's write to the dead A"
    );
    assert_eq!(
        t.write(qt, ia + 1024, ka, 98),
        retry_exc,
        "the test's write to the dead A"
    );

    // Reaping frees A's segments (its CQ's, and the one its MR and two
    // QPs were carved out of) and its liveness file, and nothing of B's or
    // the test's.
    let segs = files(&dir, "seg-");
    fab.reap_dead();
    let after = files(&dir, "seg-");
    assert_eq!(
        segs.len() - after.len(),
        2,
        "A's 2 segments: {segs:?} -> {after:?}"
    );
    assert!(after.iter().all(|s| segs.contains(s)));
    let procs = files(&dir, "proc-");
    let mut want = vec![format!("proc-{tb}"), format!("proc-{}", fab.token())];
    want.sort();
    assert_eq!(procs, want, "A's liveness file is removed, the others stay");
    assert_eq!(b.ask("COUNT"), "1", "B's QP is still there");

    // B's unshare is killed; B itself dies of the signal it gets when its
    // parent dies (`--kill-child`), a moment later.
    drop(b);
    let deadline = Instant::now() + ANSWER;
    while fab.alive(tb) {
        assert!(
            Instant::now() < deadline,
            "B still lives after its unshare was killed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(fab);
    drop(t);
    Fabric::remove_if_unused(&fabric);
    assert!(!dir.exists(), "the fabric is removed once unused");
}
