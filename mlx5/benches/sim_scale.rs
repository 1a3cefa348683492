//! Software-device scale benchmark: N RC endpoints between two processes on
//! one fabric, shaped as copyrpc's (per endpoint and side: a QP on the
//! context's SRQ and CQ, a send ring and a receive ring MR of 4-64 KiB), then
//! one 64-byte WRITE per endpoint into the peer's receive ring, from both
//! sides. Prints, per process, the setup and connect times, the WRITE rate
//! across all endpoints, the segments its memory was carved from and the
//! mappings it holds (the kernel allows 65530).
//!
//! `cargo bench -p mlx5 --bench sim_scale` (16,384 endpoints; `-- N` for
//! another count).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use mlx5::cq::CqRing;
use mlx5::device::{access, ConnInfo, Context, CqAttr, Mr, Qp, QpCaps, RtrAttr, RtsAttr};
use mlx5::sim::fabric::Fabric;
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::wqe_table::OrderedSparse;

/// Lines exchanged per turn: small enough that a turn fits a pipe's buffer
/// while both sides write before they read.
const TURN: usize = 256;

/// Lines to and from the peer process.
trait Lines {
    fn send(&mut self, l: String);
    fn recv(&mut self) -> String;
}

struct Parent;
impl Lines for Parent {
    fn send(&mut self, l: String) {
        println!("LINE {l}");
    }
    fn recv(&mut self) -> String {
        let mut s = String::new();
        std::io::stdin().read_line(&mut s).unwrap();
        s.trim().to_owned()
    }
}

struct Child(
    std::process::ChildStdin,
    BufReader<std::process::ChildStdout>,
);
impl Lines for Child {
    fn send(&mut self, l: String) {
        writeln!(self.0, "{l}").unwrap();
    }
    fn recv(&mut self) -> String {
        loop {
            let mut s = String::new();
            assert!(self.1.read_line(&mut s).unwrap() > 0, "peer process ended");
            if let Some(l) = s.trim().strip_prefix("LINE ") {
                return l.to_owned();
            }
        }
    }
}

/// Mappings of this process.
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

/// One side's endpoints: QPs and their two rings.
struct Side {
    ctx: Context,
    qps: Vec<Qp>,
    rings: Vec<(Mr, Mr)>,
    cq: mlx5::device::Cq,
    _srq: mlx5::device::SrqHandle,
}

fn build(fabric: &str, dev: &str, n: usize) -> Side {
    let ctx = Context::open_in(fabric, dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_cq(&CqAttr {
            cqe_cnt: (2 * n as u32).next_power_of_two(),
            ..CqAttr::default()
        })
        .unwrap();
    let srq = ctx.create_srq(&pd, 4096, 1).unwrap();
    let rw = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let caps = QpCaps {
        sq_wqe_cnt: 64,
        rq_wqe_cnt: 0,
        ..QpCaps::default()
    };
    let mut rings = Vec::with_capacity(n);
    let mut qps = Vec::with_capacity(n);
    for i in 0..n {
        let len = 4096 << (i % 5);
        rings.push((pd.alloc_mr(len, rw).unwrap(), pd.alloc_mr(len, rw).unwrap()));
        qps.push(ctx.create_qp(&pd, &cq, &cq, Some(&srq), &caps).unwrap());
    }
    Side {
        ctx,
        qps,
        rings,
        cq,
        _srq: srq,
    }
}

/// Exchanges (QPN, LID, receive ring address, rkey) with the peer in turns
/// and connects every QP; the peer's receive rings.
fn connect(side: &Side, ch: &mut dyn Lines) -> Vec<(u64, u32)> {
    let n = side.qps.len();
    let mut peer = Vec::with_capacity(n);
    for start in (0..n).step_by(TURN) {
        let end = (start + TURN).min(n);
        for (qp, (_, recv)) in side.qps[start..end].iter().zip(&side.rings[start..]) {
            let c = qp.conn_info();
            ch.send(format!(
                "{} {} {} {}",
                c.qpn,
                c.lid,
                recv.addr(),
                recv.rkey()
            ));
        }
        for qp in &side.qps[start..end] {
            let f: Vec<u64> = ch.recv().split(' ').map(|x| x.parse().unwrap()).collect();
            let remote = ConnInfo {
                qpn: f[0] as u32,
                lid: f[1] as u16,
                gid: [0; 16],
                psn: 0,
            };
            qp.connect(
                &RtrAttr::new(remote, access::REMOTE_WRITE),
                &RtsAttr::default(),
            )
            .unwrap();
            peer.push((f[2], f[3] as u32));
        }
    }
    peer
}

/// One signaled 64-byte WRITE per endpoint; waits for every completion.
fn write_all(
    side: &Side,
    sqs: &mut [SendQueue<OrderedSparse<()>>],
    peer: &[(u64, u32)],
    ring: &mut CqRing,
) {
    for (i, sq) in sqs.iter_mut().enumerate() {
        let src = &side.rings[i].0;
        let sge = Sge {
            addr: src.addr(),
            len: 64,
            lkey: src.lkey(),
        };
        sq.write(peer[i].0, peer[i].1, Payload::Sges(&[sge]))
            .unwrap()
            .post(Some(()));
        sq.ring_doorbell();
    }
    let mut done = 0;
    while done < sqs.len() {
        ring.poll(usize::MAX, |c| {
            assert!(c.syndrome_raw().is_none(), "WRITE failed");
            done += 1;
        });
        side.ctx.progress();
    }
}

/// One process's part: build, connect, write, and its report line.
fn run_side(fabric: &str, dev: &str, n: usize, ch: &mut dyn Lines) -> String {
    let maps0 = mappings();
    let t = Instant::now();
    let side = build(fabric, dev, n);
    let built = t.elapsed();
    let peer = connect(&side, ch);
    let connected = t.elapsed() - built;
    let mut ring = side.cq.ring().unwrap();
    // Both sides connected before traffic starts.
    ch.send("ready".into());
    assert_eq!(ch.recv(), "ready");
    let mut sqs: Vec<SendQueue<OrderedSparse<()>>> = side
        .qps
        .iter()
        .map(|q| q.send_queue(SqConfig::default()).unwrap())
        .collect();
    // The first round touches every queue and ring for the first time (page
    // faults in both processes); the second runs over warm memory.
    let mut rounds = [0.0; 2];
    for r in &mut rounds {
        let t = Instant::now();
        write_all(&side, &mut sqs, &peer, &mut ring);
        *r = t.elapsed().as_secs_f64();
    }
    // Neither side tears down before the other's writes are done.
    ch.send("done".into());
    assert_eq!(ch.recv(), "done");
    let sim = side.ctx.as_sim().unwrap();
    format!(
        "{dev}: {n} QPs + {} MRs in {:.2} s, connected in {:.2} s, \
         {n} WRITEs (one per QP, post + complete) first {:.1} ms, again {:.1} ms \
         ({:.2} M/s), {} carving segments, {} new mappings",
        2 * n,
        built.as_secs_f64(),
        connected.as_secs_f64(),
        rounds[0] * 1e3,
        rounds[1] * 1e3,
        n as f64 / rounds[1] / 1e6,
        sim.fabric().carving_segments(),
        mappings().saturating_sub(maps0),
    )
}

fn main() {
    mlx5::log_to_stderr();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--peer") {
        let report = run_side(&args[2], "sim1", args[3].parse().unwrap(), &mut Parent);
        println!("LINE {report}");
        return;
    }
    let n: usize = args
        .iter()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(16_384);
    let fabric = format!("bench-scale-{}", std::process::id());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--peer", &fabric, &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ch = Child(
        child.stdin.take().unwrap(),
        BufReader::new(child.stdout.take().unwrap()),
    );
    let mine = run_side(&fabric, "sim0", n, &mut ch);
    let theirs = ch.recv();
    assert!(child.wait().unwrap().success());
    println!("software mlx5 device, {n} RC endpoints between two processes");
    println!("{mine}");
    println!("{theirs}");
    Fabric::remove_if_unused(&fabric);
}
