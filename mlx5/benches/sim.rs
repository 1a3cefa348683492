//! Software-device benchmark: WRITE_IMM message rate and ping-pong latency,
//! thread-to-thread and process-to-process, at 32 B and 4 KiB; and the same
//! posting loop on plain memory versus through the simulated NIC (inline), with
//! the simulator's own work separated out.
//!
//! `cargo bench -p mlx5 --bench sim` (`-- --quick` for a short run; `-- --lat-only`
//! for the process-to-process 32 B ping-pong alone). Compare with
//! `ucx_perftest` over shared memory (`UCX_TLS=posix,self`) run the same way.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use mlx5::cq::CqRing;
use mlx5::device::{access, ConnInfo, Context, CqAttr, Mr, Qp, QpCaps, RtrAttr, RtsAttr};
use mlx5::mem::AlignedBuf;
use mlx5::prm::Cqe64;
use mlx5::rq::RecvQueue;
use mlx5::sim::fabric::Fabric;
use mlx5::sq::{BfMode, Payload, SendQueue, Sge, SqConfig, SqMemory};
use mlx5::wqe_table::{OrderedRecv, OrderedSparse, SendTable};
use mlx5::Completion;

const WINDOW: u64 = 128;
const RQ: u32 = 512;

/// A line-based channel to the peer: mpsc between threads, pipes between processes.
trait Chan {
    fn send(&mut self, l: String);
    fn recv(&mut self) -> String;
}
struct ThreadChan(mpsc::Sender<String>, mpsc::Receiver<String>);
impl Chan for ThreadChan {
    fn send(&mut self, l: String) {
        self.0.send(l).unwrap();
    }
    fn recv(&mut self) -> String {
        self.1.recv().unwrap()
    }
}
struct StdioChan;
impl Chan for StdioChan {
    fn send(&mut self, l: String) {
        println!("LINE {l}");
    }
    fn recv(&mut self) -> String {
        let mut s = String::new();
        std::io::stdin().read_line(&mut s).unwrap();
        s.trim().to_owned()
    }
}
struct ChildChan(
    std::process::ChildStdin,
    BufReader<std::process::ChildStdout>,
);
impl Chan for ChildChan {
    fn send(&mut self, l: String) {
        writeln!(self.0, "{l}").unwrap();
    }
    fn recv(&mut self) -> String {
        loop {
            let mut s = String::new();
            if self.1.read_line(&mut s).unwrap() == 0 {
                panic!("peer process ended");
            }
            if let Some(l) = s.trim().strip_prefix("LINE ") {
                return l.to_owned();
            }
        }
    }
}

/// One endpoint: QP with its own RQ, a data MR, a credit word.
struct Ep {
    _qp: Qp,
    sq: SendQueue<OrderedSparse<()>>,
    rq: RecvQueue<OrderedRecv<()>>,
    scq: CqRing,
    rcq: CqRing,
    mr: Mr,
    ctx: Context,
    peer_addr: u64,
    peer_rkey: u32,
}

fn endpoint(fabric: &str, dev: &str, ch: &mut dyn Chan, size: usize) -> Ep {
    let ctx = Context::open_in(fabric, dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .alloc_mr(
            size.max(64) * 2 + 64,
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        )
        .unwrap();
    let scq = ctx
        .create_cq(&CqAttr {
            cqe_cnt: 1024,
            ..CqAttr::default()
        })
        .unwrap();
    let rcq = ctx
        .create_cq(&CqAttr {
            cqe_cnt: 1024,
            ..CqAttr::default()
        })
        .unwrap();
    let qp = ctx
        .create_qp(
            &pd,
            &scq,
            &rcq,
            None,
            &QpCaps {
                sq_wqe_cnt: 1024,
                rq_wqe_cnt: RQ,
                ..QpCaps::default()
            },
        )
        .unwrap();
    let mut rq = qp.recv_queue::<OrderedRecv<()>>().unwrap();
    for _ in 0..RQ {
        rq.post(&[], ()).unwrap();
    }
    rq.ring_doorbell();
    let c = qp.conn_info();
    ch.send(format!("{} {} {} {}", c.qpn, c.lid, mr.addr(), mr.rkey()));
    let l = ch.recv();
    let f: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let remote = ConnInfo {
        qpn: f[0] as u32,
        lid: f[1] as u16,
        gid: [0; 16],
        psn: 0,
    };
    qp.connect(
        &RtrAttr {
            remote,
            access: access::REMOTE_WRITE,
            min_rnr_timer: 1,
            max_dest_rd_atomic: 0,
        },
        &RtsAttr::default(),
    )
    .unwrap();
    let sq = qp
        .send_queue(SqConfig {
            signal_interval: 64,
            max_inline: 64,
            bf_mode: BfMode::Auto,
        })
        .unwrap();
    let ep = Ep {
        sq,
        rq,
        scq: scq.ring().unwrap(),
        rcq: rcq.ring().unwrap(),
        mr,
        _qp: qp,
        ctx,
        peer_addr: f[2],
        peer_rkey: f[3] as u32,
    };
    // Both sides connected before traffic starts.
    ch.send("ready".into());
    assert_eq!(ch.recv(), "ready");
    ep
}

impl Ep {
    fn retire_sends(&mut self) {
        let sq = &mut self.sq;
        self.scq.poll(usize::MAX, |c| {
            assert_ok(c);
            sq.complete(c, |_, _| {});
        });
    }
    /// Posts a WRITE_IMM of `size` bytes to the peer's data area (offset `off`).
    fn send(&mut self, size: usize, off: u64, imm: u32) {
        loop {
            let r = if size <= 64 {
                // Small messages inline, as UCX's short active messages.
                let data = [0x5au8; 64];
                self.sq.write_imm(
                    self.peer_addr + off,
                    self.peer_rkey,
                    imm,
                    Payload::Inline(&data[..size]),
                )
            } else {
                let s = Sge {
                    addr: self.mr.addr(),
                    len: size as u32,
                    lkey: self.mr.lkey(),
                };
                self.sq.write_imm(
                    self.peer_addr + off,
                    self.peer_rkey,
                    imm,
                    Payload::Sges(&[s]),
                )
            };
            match r {
                Ok(b) => {
                    b.post(None);
                    return;
                }
                Err(_) => self.retire_sends(),
            }
        }
    }
    /// Polls received messages; reposts their receives. Returns (count, last imm).
    fn recv(&mut self) -> (u64, u32) {
        let (n, last) = self.poll_recv();
        self.repost(n);
        (n, last)
    }
    /// Polls received messages without reposting their receives.
    fn poll_recv(&mut self) -> (u64, u32) {
        let mut n = 0;
        let mut last = 0;
        let rq = &mut self.rq;
        self.rcq.poll(usize::MAX, |c| {
            assert_ok(c);
            mlx5::cq::CompletionSource::complete(rq, c, |_, _| {});
            last = c.imm();
            n += 1;
        });
        (n, last)
    }
    /// Reposts `n` receives.
    fn repost(&mut self, n: u64) {
        for _ in 0..n {
            self.rq.post(&[], ()).unwrap();
        }
        self.rq.ring_doorbell();
    }
}

/// Stops the benchmark at an error CQE. A peer that is gone, or a queue
/// that is flushed, must end the run loudly: taking a flush CQE as a
/// message and posting its receive again would loop forever (the QP is in
/// error, so the new receive is flushed at once).
fn assert_ok(c: &Completion<'_>) {
    assert!(
        !c.is_error(),
        "error CQE: QP {:#x}, syndrome {:?}, WQE {}",
        c.qpn(),
        c.syndrome_raw(),
        c.wqe_counter()
    );
}

/// Streaming: the sender keeps up to WINDOW messages in flight; the receiver
/// returns credit (an 8-byte WRITE_IMM carrying its count) every 32 messages.
fn rate_sender(ep: &mut Ep, size: usize, n: u64) -> f64 {
    let mut acked = 0u64;
    let t = Instant::now();
    for i in 0..n {
        while i - acked >= WINDOW {
            let (k, last) = ep.recv();
            if k > 0 {
                acked = u64::from(last);
            }
            ep.retire_sends();
        }
        ep.send(size, 0, i as u32);
        ep.sq.ring_doorbell();
    }
    while acked < n {
        let (k, last) = ep.recv();
        if k > 0 {
            acked = u64::from(last);
        }
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn rate_receiver(ep: &mut Ep, n: u64) {
    let mut got = 0u64;
    let mut since = 0u64;
    while got < n {
        let (k, _) = ep.recv();
        got += k;
        since += k;
        // The last credit goes out however the final poll lands: the
        // sender waits for a credit of `n`.
        if since >= 32 || (got >= n && since > 0) {
            since = 0;
            ep.send(8, 64, got as u32);
            ep.sq.ring_doorbell();
        }
        ep.retire_sends();
    }
}

/// Ping-pong: returns half round-trip times in ns. As ucx_perftest does, the
/// clock is read once per iteration and a sample is the whole iteration (send,
/// wait for the answer, repost the receive), so no clock call of its own lies
/// inside the round trip.
fn lat_pinger(ep: &mut Ep, size: usize, n: usize) -> Vec<u64> {
    let mut v = Vec::with_capacity(n);
    let mut last = Instant::now();
    for i in 0..n + 1000 {
        let t = Instant::now();
        if i > 1000 {
            v.push(t.duration_since(last).as_nanos() as u64 / 2);
        }
        last = t;
        ep.send(size, 0, i as u32);
        ep.sq.ring_doorbell();
        while ep.poll_recv().0 == 0 {}
        ep.repost(1);
        ep.retire_sends();
    }
    v
}

fn lat_ponger(ep: &mut Ep, size: usize, n: usize) {
    for i in 0..n + 1000 {
        while ep.poll_recv().0 == 0 {}
        ep.send(size, 0, i as u32);
        ep.sq.ring_doorbell();
        ep.repost(1);
        ep.retire_sends();
    }
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p) as usize] as f64 / 1000.0
}

/// Runs one measurement with the peer in a thread or in another process.
fn measure(kind: &str, size: usize, n: u64, process: bool) -> String {
    let fabric = format!(
        "bench-{}-{kind}-{size}-{}",
        std::process::id(),
        process as u8
    );
    let out = if process {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--peer", kind, &fabric, &size.to_string(), &n.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ch = ChildChan(
            child.stdin.take().unwrap(),
            BufReader::new(child.stdout.take().unwrap()),
        );
        let mut ep = endpoint(&fabric, "sim0", &mut ch, size);
        let out = lead(kind, &mut ep, size, n);
        assert!(child.wait().unwrap().success());
        out
    } else {
        let (tx1, rx1) = mpsc::channel();
        let (tx2, rx2) = mpsc::channel();
        let f2 = fabric.clone();
        let k = kind_static(kind);
        let h = std::thread::spawn(move || {
            let mut ch = ThreadChan(tx2, rx1);
            follow(k, &f2, size, n, &mut ch)
        });
        let mut ch = ThreadChan(tx1, rx2);
        let mut ep = endpoint(&fabric, "sim0", &mut ch, size);
        let out = lead(kind, &mut ep, size, n);
        h.join().unwrap();
        out
    };
    Fabric::remove_if_unused(&fabric);
    out
}

fn kind_static(k: &str) -> &'static str {
    if k == "rate" {
        "rate"
    } else {
        "lat"
    }
}

fn lead(kind: &str, ep: &mut Ep, size: usize, n: u64) -> String {
    if kind == "rate" {
        let r = rate_sender(ep, size, n);
        format!("{:>8.3} Mmsg/s", r / 1e6)
    } else {
        let mut v = lat_pinger(ep, size, n as usize);
        format!(
            "{:>6.2} us p50 {:>6.2} us p99",
            pct(&mut v, 0.5),
            pct(&mut v, 0.99)
        )
    }
}

fn follow(kind: &str, fabric: &str, size: usize, n: u64, ch: &mut dyn Chan) {
    let mut ep = endpoint(fabric, "sim1", ch, size);
    if kind == "rate" {
        rate_receiver(&mut ep, n);
    } else {
        lat_ponger(&mut ep, size, n as usize);
    }
}

/// A hook that does nothing: the price of the mechanism itself.
#[derive(Debug)]
struct NoopHook;
impl mlx5::DeviceNotify for NoopHook {
    fn sq_doorbell(&self, _: u32) {}
    fn rq_doorbell(&self, _: u32) {}
    fn cq_idle(&self, _: u32) {}
}

/// The posting loop on plain memory, with or without a (no-op) device hook.
fn plain_loop(n: u64, hook: bool) -> f64 {
    // Plain memory: what a hardware backend's queue looks like to the CPU.
    let buf = AlignedBuf::new(1024 * 64);
    let db = AlignedBuf::new(64);
    let bf = AlignedBuf::new(4096);
    let mem = SqMemory {
        buf: buf.as_non_null(),
        wqe_cnt: 1024,
        dbrec: db.as_non_null(),
        bf_reg: bf.as_non_null(),
        bf_half: 256,
        qpn: 1,
        notify: if hook {
            Some(std::sync::Arc::new(NoopHook))
        } else {
            None
        },
        keepalive: None,
    };
    let cfg = SqConfig {
        signal_interval: 64,
        max_inline: 64,
        bf_mode: BfMode::Auto,
    };
    // SAFETY: the buffers outlive the queue.
    let mut sq: SendQueue<OrderedSparse<()>> = unsafe { SendQueue::new(mem, cfg) }.unwrap();
    let data = [7u8; 32];
    let mut timed = 0u128;
    let mut i = 0u64;
    let mut last = 0;
    while i < n {
        let t = Instant::now();
        for _ in 0..64 {
            last = sq
                .write_imm(0x1000, 1, i as u32, Payload::Inline(&data))
                .unwrap()
                .post(None);
            sq.ring_doorbell();
            i += 1;
        }
        timed += t.elapsed().as_nanos();
        // Retire (untimed), as a completion for the newest WQE would.
        let mut c = [0u8; 64];
        Cqe64::new_unchecked(&mut c[..]).set_wqe_counter(last);
        sq.complete(&Completion::new(&c, &[]), |_, _| {});
    }
    black_box(&sq);
    timed as f64 / n as f64
}

/// The same posting loop (32 B inline WRITE_IMM + doorbell) on plain memory and
/// through the simulated NIC (inline mode); the NIC's own time is measured
/// apart.
fn posting_loop(n: u64) {
    // Plain memory: what a hardware backend's queue looks like to the CPU.
    let runs = |hook| {
        let mut v: Vec<f64> = (0..5).map(|_| plain_loop(n, hook)).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[2]
    };
    let plain = runs(false);
    let hooked = runs(true);

    // The same loop through the software device; the peer returns credit
    // as in the rate test, and waiting for it is not timed.
    let fabric = format!("bench-{}-loop", std::process::id());
    let (tx1, rx1) = mpsc::channel();
    let (tx2, rx2) = mpsc::channel();
    let f2 = fabric.clone();
    let h = std::thread::spawn(move || {
        let mut ch = ThreadChan(tx2, rx1);
        follow("rate", &f2, 32, n, &mut ch);
    });
    let mut ch = ThreadChan(tx1, rx2);
    let mut ep = endpoint(&fabric, "sim0", &mut ch, 32);
    ep.ctx
        .as_sim()
        .expect("software device")
        .set_sim_timing(true);
    let (mut timed, mut nic_ns, mut i, mut acked) = (0u128, 0u64, 0u64, 0u64);
    while i < n {
        while i + 64 - acked > WINDOW {
            let (k, last) = ep.recv();
            if k > 0 {
                acked = u64::from(last);
            }
            ep.retire_sends();
        }
        let b0 = ep.ctx.as_sim().expect("software device").sim_busy_ns();
        let t = Instant::now();
        // Exactly `n` messages, as the peer receives exactly `n` and then
        // leaves: a message past them would find its QP gone.
        for _ in 0..64.min(n - i) {
            ep.send(32, 0, i as u32);
            ep.sq.ring_doorbell();
            i += 1;
        }
        timed += t.elapsed().as_nanos();
        nic_ns += ep.ctx.as_sim().expect("software device").sim_busy_ns() - b0;
    }
    while acked < n {
        let (k, last) = ep.recv();
        if k > 0 {
            acked = u64::from(last);
        }
    }
    h.join().unwrap();
    let total = timed as f64 / n as f64;
    let nic = nic_ns as f64 / n as f64;
    println!("loop  plain memory, no hook (the hardware backend)       {plain:>7.1} ns/WQE");
    println!("loop  plain memory, no-op hook (the hook mechanism)      {hooked:>7.1} ns/WQE");
    println!(
        "loop  software device, inline: total {total:>7.1} = simulated NIC {nic:>7.1} + application {:>7.1} ns/WQE",
        total - nic
    );
    drop(ep);
    Fabric::remove_if_unused(&fabric);
}

/// One thread drives both ends: the NIC's cost per WRITE_IMM without any
/// waiting (for callgrind: `valgrind --tool=callgrind <bench> --nic-only`).
fn nic_only(n: u64) {
    use mlx5::wqe_table::OrderedDense;
    let fabric = format!("bench-{}-nic", std::process::id());
    let a = Context::open_in(&fabric, "sim0").unwrap();
    let b = Context::open_in(&fabric, "sim1").unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let dst = pb
        .alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let (acq, bcq) = (
        a.create_cq(&CqAttr::default()).unwrap(),
        b.create_cq(&CqAttr::default()).unwrap(),
    );
    let caps = QpCaps {
        sq_wqe_cnt: 1024,
        rq_wqe_cnt: 1024,
        ..QpCaps::default()
    };
    let qa = a.create_qp(&pa, &acq, &acq, None, &caps).unwrap();
    let qb = b.create_qp(&pb, &bcq, &bcq, None, &caps).unwrap();
    for (x, y, acc) in [(&qa, &qb, 0), (&qb, &qa, access::REMOTE_WRITE)] {
        x.connect(&RtrAttr::new(y.conn_info(), acc), &RtsAttr::default())
            .unwrap();
    }
    let mut sq = qa
        .send_queue::<OrderedSparse<()>>(SqConfig {
            signal_interval: 64,
            max_inline: 64,
            bf_mode: BfMode::Auto,
        })
        .unwrap();
    let mut rq = qb.recv_queue::<OrderedRecv<()>>().unwrap();
    let (mut sring, mut rring) = (acq.ring().unwrap(), bcq.ring().unwrap());
    for _ in 0..1024 {
        rq.post(&[], ()).unwrap();
    }
    rq.ring_doorbell();
    let data = [7u8; 32];
    let t = Instant::now();
    for i in 0..n {
        sq.write_imm(dst.addr(), dst.rkey(), i as u32, Payload::Inline(&data))
            .unwrap()
            .post(None);
        sq.ring_doorbell();
        if i % 64 == 63 {
            let mut got = 0;
            rring.poll(usize::MAX, |c| {
                mlx5::cq::CompletionSource::complete(&mut rq, c, |_, _| {});
                got += 1;
            });
            for _ in 0..got {
                rq.post(&[], ()).unwrap();
            }
            rq.ring_doorbell();
            sring.poll(usize::MAX, |c| {
                sq.complete(c, |_, _| {});
            });
        }
    }
    println!(
        "nic   one thread, both ends: {:.1} ns per WRITE_IMM (posting, NIC, polling)",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    let _ = OrderedDense::<()>::with_capacity;
    drop((sq, rq, sring, rring, qa, qb, acq, bcq, dst, pa, pb, a, b));
    Fabric::remove_if_unused(&fabric);
}

fn main() {
    mlx5::log_to_stderr();
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--nic-only") {
        nic_only(if args.iter().any(|a| a == "--quick") {
            20_000
        } else {
            1_000_000
        });
        return;
    }
    if args.get(1).map(String::as_str) == Some("--peer") {
        let (kind, fabric, size, n) = (
            &args[2],
            &args[3],
            args[4].parse().unwrap(),
            args[5].parse().unwrap(),
        );
        follow(kind_static(kind), fabric, size, n, &mut StdioChan);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    if args.iter().any(|a| a == "--lat-only") {
        // The device's own round trip, for scripts that set it beside an RPC's.
        let n = if quick { 5_000 } else { 200_000 };
        println!(
            "lat   process-to-process     32 B  {}",
            measure("lat", 32, n, true)
        );
        return;
    }
    let (rate_n, lat_n, loop_n) = if quick {
        (100_000, 5_000, 100_000)
    } else {
        (2_000_000, 100_000, 2_000_000)
    };
    println!(
        "software mlx5 device, inline mode ({} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for (process, label) in [(false, "thread-to-thread"), (true, "process-to-process")] {
        for size in [32usize, 4096] {
            let n = if size > 64 { rate_n / 4 } else { rate_n };
            println!(
                "rate  {label:<19} {size:>5} B  {}",
                measure("rate", size, n, process)
            );
        }
        for size in [32usize, 4096] {
            println!(
                "lat   {label:<19} {size:>5} B  {}",
                measure("lat", size, lat_n, process)
            );
        }
    }
    posting_loop(loop_n);
}
