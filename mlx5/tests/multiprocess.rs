//! Two processes on one fabric, as two hosts on one network: a million
//! WRITE_IMM messages with every byte checked, a peer process that dies, two
//! processes that sleep on completion events between messages, a port one
//! process takes down and up under another's traffic, and tagged messages
//! matched against another process's tag list.
//!
//! The test binary runs itself again as the peer (`MLX5_MP_ROLE` tells the
//! child what to do); connection details travel over the child's stdin/stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mlx5::cq::{CompletionSource, CqRing};
use mlx5::device::{
    access, CompletionChannel, ConnInfo, Context, CqAttr, QpCaps, RtrAttr, RtsAttr,
};
use mlx5::prm::{CqeOpcode, Syndrome};
use mlx5::rq::RecvQueue;
use mlx5::sim::fabric::Fabric;
use mlx5::sq::SendQueue;
use mlx5::sq::{Payload, Sge, SqConfig};
use mlx5::wqe_table::{OrderedRecv, OrderedSparse};
use test_support::KillOnDrop;

const SLOTS: u64 = 64;
const SLOT: u64 = 256;

fn msg_len(i: u64) -> usize {
    1 + (i.wrapping_mul(7919) % SLOT) as usize
}
fn msg_byte(i: u64, k: usize) -> u8 {
    (i as u8).wrapping_mul(31) ^ (k as u8).wrapping_add((i >> 8) as u8)
}

/// "INFO qpn lid addr rkey" lines.
fn info_line(c: &ConnInfo, addr: u64, rkey: u32) -> String {
    format!("INFO {} {} {} {}", c.qpn, c.lid, addr, rkey)
}
fn parse_info(l: &str) -> (ConnInfo, u64, u32) {
    let f: Vec<&str> = l.split_whitespace().collect();
    assert_eq!(f[0], "INFO", "{l}");
    (
        ConnInfo {
            qpn: f[1].parse().unwrap(),
            lid: f[2].parse().unwrap(),
            gid: [0; 16],
            psn: 0,
        },
        f[3].parse().unwrap(),
        f[4].parse().unwrap(),
    )
}

/// RESET -> INIT -> RTR (accepting RDMA WRITE) -> RTS.
fn connect(qp: &mlx5::device::Qp, peer: ConnInfo, rts: RtsAttr) {
    qp.to_init().unwrap();
    qp.to_rtr(&RtrAttr::new(peer, access::REMOTE_WRITE))
        .unwrap();
    qp.to_rts(&rts).unwrap();
}

fn child_lines(child: &mut std::process::Child) -> impl Iterator<Item = String> {
    BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        // The harness prints "test <name> ... " before the test's own output.
        .filter_map(|l| {
            let at = l.find("INFO ").or_else(|| l.find("DONE "))?;
            Some(l[at..].to_owned())
        })
}

/// Runs `test` again as a child process in `role`; the child is killed if
/// the test fails before it ends (a busy-polling orphan would slow every
/// later test on the machine).
fn spawn(test: &str, role: &str, fabric: &str, n: u64) -> KillOnDrop {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("MLX5_MP_ROLE", role)
        .env("MLX5_MP_FABRIC", fabric)
        .env("MLX5_MP_N", n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// This process's side of a two-process test: device sim0 of `fabric`,
/// a PD, one CQ and an RC QP completing on it, whose address goes to
/// `child`.
fn parent_qp(
    fabric: &str,
    child: &mut std::process::Child,
) -> (
    Context,
    mlx5::device::Pd,
    mlx5::device::Cq,
    mlx5::device::Qp,
) {
    let ctx = Context::open_in(fabric, "sim0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let qp = ctx
        .create_qp(&pd, &cq, &cq, None, &QpCaps::default())
        .unwrap();
    writeln!(
        child.stdin.as_mut().unwrap(),
        "{}",
        info_line(&qp.conn_info(), 0, 0)
    )
    .unwrap();
    (ctx, pd, cq, qp)
}

fn messages() -> u64 {
    std::env::var("MLX5_MP_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}

/// The receiving process: verifies every message and returns credits by RDMA
/// WRITE into the sender's memory.
fn receiver(fabric: &str, n: u64) {
    let ctx = Context::open_in(fabric, "sim1").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let ring = pd
        .alloc_mr(
            (SLOTS * SLOT) as usize,
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        )
        .unwrap();
    let credit = pd.alloc_mr(8, access::LOCAL_WRITE).unwrap();
    let scq = ctx.create_cq(&CqAttr::default()).unwrap();
    let rcq = ctx.create_cq(&CqAttr::default()).unwrap();
    let qp = ctx
        .create_qp(
            &pd,
            &scq,
            &rcq,
            None,
            &QpCaps {
                rq_wqe_cnt: 128,
                ..QpCaps::default()
            },
        )
        .unwrap();
    let mut rq = qp.recv_queue::<OrderedRecv<()>>().unwrap();
    for _ in 0..128 {
        rq.post(&[], ()).unwrap();
    }
    rq.ring_doorbell();
    println!("{}", info_line(&qp.conn_info(), ring.addr(), ring.rkey()));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (peer, peer_credit_addr, peer_credit_rkey) = parse_info(&line);
    connect(&qp, peer, RtsAttr::default());
    // The sender starts once this QP receives: before, its WRITE_IMMs would
    // meet no ready QP, and a busy machine can hold this process off longer
    // than the sender's transport retries last.
    println!("DONE rts");
    let mut sq = qp
        .send_queue::<OrderedSparse<()>>(SqConfig {
            signal_interval: 32,
            ..SqConfig::default()
        })
        .unwrap();
    let mut rring = rcq.ring().unwrap();
    let mut sring = scq.ring().unwrap();
    let mut expect = 0u64;
    let mut credited = 0u64;
    let mut buf = vec![0u8; SLOT as usize];
    while expect < n {
        let mut got = 0;
        rring.poll(usize::MAX, |c| {
            assert_eq!(c.opcode(), Some(CqeOpcode::RespWrImm), "{c:?}");
            assert_eq!(
                u64::from(c.imm()),
                expect & 0xffff_ffff,
                "messages in order"
            );
            let len = msg_len(expect);
            assert_eq!(c.byte_cnt() as usize, len);
            ring.read(((expect % SLOTS) * SLOT) as usize, &mut buf[..len]);
            for (k, b) in buf[..len].iter().enumerate() {
                assert_eq!(*b, msg_byte(expect, k), "message {expect} byte {k}");
            }
            rq.complete(c, |_, _| {});
            expect += 1;
            got += 1;
        });
        for _ in 0..got {
            rq.post(&[], ()).unwrap();
        }
        rq.ring_doorbell();
        // Credit whenever 16 or more messages are uncredited (or at the end).
        if expect - credited >= 16 || (expect == n && credited < n) {
            credited = expect;
            credit.write(0, &expect.to_be_bytes());
            let s = Sge {
                addr: credit.addr(),
                len: 8,
                lkey: credit.lkey(),
            };
            loop {
                match sq.write(peer_credit_addr, peer_credit_rkey, Payload::Sges(&[s])) {
                    Ok(b) => {
                        b.post(None);
                        break;
                    }
                    Err(_) => {
                        sring.poll(usize::MAX, |c| {
                            sq.complete(c, |_, _| {});
                        });
                    }
                }
            }
            sq.ring_doorbell();
        }
        sring.poll(usize::MAX, |c| {
            assert!(!c.is_error(), "{c:?}");
            sq.complete(c, |_, _| {});
        });
    }
    println!("DONE {expect}");
}

#[test]
fn two_processes_exchange_a_million_write_imm() {
    match std::env::var("MLX5_MP_ROLE").as_deref() {
        Ok("receiver") => return receiver(&std::env::var("MLX5_MP_FABRIC").unwrap(), messages()),
        Ok(_) => return,
        Err(_) => {}
    }
    let fabric = format!("mp-{}", std::process::id());
    let n = messages();
    let mut child = spawn(
        "two_processes_exchange_a_million_write_imm",
        "receiver",
        &fabric,
        n,
    );
    let mut lines = child_lines(&mut child);
    let (peer, ring_addr, ring_rkey) = parse_info(&lines.next().expect("receiver info"));

    let ctx = Context::open_in(&fabric, "sim0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr((SLOTS * SLOT) as usize, 0).unwrap();
    let credit = pd
        .alloc_mr(8, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let scq = ctx.create_cq(&CqAttr::default()).unwrap();
    let rcq = ctx.create_cq(&CqAttr::default()).unwrap();
    let qp = ctx
        .create_qp(&pd, &scq, &rcq, None, &QpCaps::default())
        .unwrap();
    writeln!(
        child.stdin.as_mut().unwrap(),
        "{}",
        info_line(&qp.conn_info(), credit.addr(), credit.rkey())
    )
    .unwrap();
    connect(&qp, peer, RtsAttr::default());
    assert_eq!(
        lines.next().as_deref(),
        Some("DONE rts"),
        "the receiver is ready"
    );
    let mut sq = qp
        .send_queue::<OrderedSparse<()>>(SqConfig {
            signal_interval: 64,
            ..SqConfig::default()
        })
        .unwrap();
    let mut sring = scq.ring().unwrap();
    let mut acked = 0u64;
    let mut msg = vec![0u8; SLOT as usize];
    let t = std::time::Instant::now();
    for i in 0..n {
        while i - acked >= SLOTS {
            let mut w = [0u8; 8];
            credit.read(0, &mut w);
            acked = u64::from_be_bytes(w);
            sring.poll(usize::MAX, |c| {
                assert!(!c.is_error(), "{c:?}");
                sq.complete(c, |_, _| {});
            });
            assert!(
                t.elapsed().as_secs() < 120,
                "stuck at message {i}, acked {acked}"
            );
        }
        let len = msg_len(i);
        for (k, b) in msg[..len].iter_mut().enumerate() {
            *b = msg_byte(i, k);
        }
        let off = (i % SLOTS) * SLOT;
        src.write(off as usize, &msg[..len]);
        let s = Sge {
            addr: src.addr() + off,
            len: len as u32,
            lkey: src.lkey(),
        };
        loop {
            match sq.write_imm(ring_addr + off, ring_rkey, i as u32, Payload::Sges(&[s])) {
                Ok(b) => {
                    b.post(None);
                    break;
                }
                Err(_) => {
                    sring.poll(usize::MAX, |c| {
                        assert!(!c.is_error(), "{c:?}");
                        sq.complete(c, |_, _| {});
                    });
                }
            }
        }
        sq.ring_doorbell();
    }
    assert_eq!(lines.next().as_deref(), Some(format!("DONE {n}").as_str()));
    assert!(child.wait().unwrap().success());
    eprintln!(
        "{n} WRITE_IMM messages between two processes in {:?}",
        t.elapsed()
    );
    drop((sq, sring, qp, scq, rcq, src, credit, pd, ctx));
    Fabric::remove_if_unused(&fabric);
}

fn dying_peer(fabric: &str) {
    let ctx = Context::open_in(fabric, "sim1").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let qp = ctx
        .create_qp(&pd, &cq, &cq, None, &QpCaps::default())
        .unwrap();
    println!("{}", info_line(&qp.conn_info(), mr.addr(), mr.rkey()));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (peer, _, _) = parse_info(&line);
    connect(&qp, peer, RtsAttr::default());
    println!("INFO 0 0 0 0");
    // Wait to be killed; never clean up.
    std::thread::sleep(std::time::Duration::from_secs(600));
}

#[test]
fn a_peer_process_that_dies() {
    match std::env::var("MLX5_MP_ROLE").as_deref() {
        Ok("dying") => return dying_peer(&std::env::var("MLX5_MP_FABRIC").unwrap()),
        Ok(_) => return,
        Err(_) => {}
    }
    let fabric = format!("mpdie-{}", std::process::id());
    let mut child = spawn("a_peer_process_that_dies", "dying", &fabric, 0);
    let mut lines = child_lines(&mut child);
    let (peer, raddr, rkey) = parse_info(&lines.next().unwrap());
    let (ctx, pd, cq, qp) = parent_qp(&fabric, &mut child);
    qp.to_init().unwrap();
    qp.to_rtr(&RtrAttr::new(peer, 0)).unwrap();
    qp.to_rts(&RtsAttr {
        timeout: 1,
        retry_cnt: 2,
        ..RtsAttr::default()
    })
    .unwrap();
    let _ = lines.next(); // the peer is in RTS
    let mut sq = qp
        .send_queue::<OrderedSparse<u32>>(SqConfig::default())
        .unwrap();
    let mut ring = cq.ring().unwrap();
    // While the peer lives, a write goes through.
    sq.write(raddr, rkey, Payload::Inline(b"alive"))
        .unwrap()
        .post(Some(1));
    sq.ring_doorbell();
    let mut ok = Vec::new();
    ring.poll(16, |c| ok.push((c.opcode(), c.syndrome_raw())));
    assert_eq!(ok, vec![(Some(CqeOpcode::Req), None)]);
    // Kill it: it cleans nothing up.
    child.kill().unwrap();
    child.wait().unwrap();
    // Liveness of a peer is checked at most once per millisecond.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let dir = Fabric::open(&fabric).unwrap().dir().to_owned();
    let files_before = std::fs::read_dir(&dir).unwrap().count();
    sq.write(raddr, rkey, Payload::Inline(b"dead"))
        .unwrap()
        .post(Some(2));
    sq.ring_doorbell();
    let mut got = Vec::new();
    let t = std::time::Instant::now();
    while got.is_empty() && t.elapsed().as_secs() < 10 {
        ring.poll(16, |c| got.push((c.opcode(), c.syndrome_raw())));
    }
    assert_eq!(
        got,
        vec![(
            Some(CqeOpcode::ReqErr),
            Some(Syndrome::TransportRetryExc as u8)
        )]
    );
    // The dead process's segments are reclaimed by the survivors.
    Fabric::open(&fabric).unwrap().reap_dead();
    let files_after = std::fs::read_dir(&dir).unwrap().count();
    // Its MR and its QP's queues were carved out of one segment.
    assert_eq!(
        files_before - files_after,
        3,
        "the peer's carving segment (MR and QP), CQ segment and liveness file \
         (and no more) were removed"
    );
    drop((sq, ring, qp, cq, pd, ctx));
    Fabric::remove_if_unused(&fabric);
}

/// The child of `memory_registered_on_a_second_device_is_reachable_from_another_process`:
/// allocates region memory on sim0, registers part of it on sim1 (as mpib
/// registers one buffer on both rails), and checks what the parent wrote there
/// through sim1. Its last line says whether every byte arrived.
fn second_device_owner(fabric: &str) {
    let a = Context::open_in(fabric, "sim0").unwrap();
    let b = Context::open_in(fabric, "sim1").unwrap();
    let buf = a
        .alloc_pd()
        .unwrap()
        .alloc_mr(8192, access::LOCAL_WRITE)
        .unwrap();
    let pd = b.alloc_pd().unwrap();
    // SAFETY: inside `buf`, which outlives the region (the region keeps the
    // memory alive anyway).
    let part = unsafe {
        pd.reg_mr(
            (buf.addr() + 1024) as *mut u8,
            4096,
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        )
    }
    .unwrap();
    let cq = b.create_cq(&CqAttr::default()).unwrap();
    let qp = b
        .create_qp(&pd, &cq, &cq, None, &QpCaps::default())
        .unwrap();
    println!("{}", info_line(&qp.conn_info(), part.addr(), part.rkey()));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (peer, _, _) = parse_info(&line);
    connect(&qp, peer, RtsAttr::default());
    println!("INFO 0 0 0 0");
    // The parent says when its write has completed.
    line.clear();
    std::io::stdin().read_line(&mut line).unwrap();
    let got = buf.to_vec(1024, 4096);
    let ok = got.iter().enumerate().all(|(k, &v)| v == (k * 7) as u8);
    println!("DONE {}", u8::from(ok));
}

#[test]
fn memory_registered_on_a_second_device_is_reachable_from_another_process() {
    match std::env::var("MLX5_MP_ROLE").as_deref() {
        Ok("second-device") => {
            return second_device_owner(&std::env::var("MLX5_MP_FABRIC").unwrap())
        }
        Ok(_) => return,
        Err(_) => {}
    }
    let fabric = format!("mpreg-{}", std::process::id());
    let test = "memory_registered_on_a_second_device_is_reachable_from_another_process";
    let mut child = spawn(test, "second-device", &fabric, 0);
    let mut lines = child_lines(&mut child);
    let (peer, raddr, rkey) = parse_info(&lines.next().unwrap());
    let ctx = Context::open_in(&fabric, "sim2").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(4096, 0).unwrap();
    src.write(0, &(0..4096).map(|k| (k * 7) as u8).collect::<Vec<_>>());
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let qp = ctx
        .create_qp(&pd, &cq, &cq, None, &QpCaps::default())
        .unwrap();
    let stdin = child.stdin.as_mut().unwrap();
    writeln!(stdin, "{}", info_line(&qp.conn_info(), 0, 0)).unwrap();
    connect(&qp, peer, RtsAttr::default());
    let _ = lines.next(); // the peer is in RTS
    let mut sq = qp
        .send_queue::<OrderedSparse<u32>>(SqConfig::default())
        .unwrap();
    let mut ring = cq.ring().unwrap();
    let sge = Sge {
        addr: src.addr(),
        len: 4096,
        lkey: src.lkey(),
    };
    sq.write(raddr, rkey, Payload::Sges(&[sge]))
        .unwrap()
        .post(Some(1));
    sq.ring_doorbell();
    let mut status = None;
    while status.is_none() {
        ring.poll(1, |c| status = Some((c.opcode(), c.syndrome_raw())));
    }
    // Without the segment behind the registration this is a remote access
    // error (the memory would be the child's private memory).
    assert_eq!(status, Some((Some(CqeOpcode::Req), None)), "{status:?}");
    writeln!(child.stdin.as_mut().unwrap(), "written").unwrap();
    assert_eq!(lines.next().as_deref(), Some("DONE 1"), "bytes differ");
    child.wait().unwrap();
    drop((sq, ring, qp, cq, src, pd, ctx));
    Fabric::remove_if_unused(&fabric);
}

/// The child of `a_port_taken_down_by_another_process_breaks_the_path`:
/// takes sim1's port down through its own handle on the fabric, and up again
/// when the parent says so.
fn port_toggler(fabric: &str) {
    let fab = Fabric::open(fabric).unwrap();
    fab.set_port_down(1, true).unwrap();
    println!("DONE down");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    fab.set_port_down(1, false).unwrap();
    println!("DONE up");
}

/// A fresh QP on `a` connected (with `rts`) to a fresh QP on `b` WRITEs
/// "hello" into `b`'s memory; returns the CQE's syndrome (`None`: success)
/// and the five bytes at the target.
fn one_write(a: &Context, b: &Context, rts: RtsAttr) -> (Option<u8>, Vec<u8>) {
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let dst = pb
        .alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let ca = a.create_cq(&CqAttr::default()).unwrap();
    let cb = b.create_cq(&CqAttr::default()).unwrap();
    let qa = a
        .create_qp(&pa, &ca, &ca, None, &QpCaps::default())
        .unwrap();
    let qb = b
        .create_qp(&pb, &cb, &cb, None, &QpCaps::default())
        .unwrap();
    connect(&qa, qb.conn_info(), rts);
    connect(&qb, qa.conn_info(), rts);
    let mut sq = qa
        .send_queue::<OrderedSparse<u32>>(SqConfig::default())
        .unwrap();
    let mut ring = ca.ring().unwrap();
    sq.write(dst.addr(), dst.rkey(), Payload::Inline(b"hello"))
        .unwrap()
        .post(Some(1));
    sq.ring_doorbell();
    let t = Instant::now();
    let mut status = None;
    while status.is_none() {
        assert!(t.elapsed() < Duration::from_secs(10), "no completion");
        ring.poll(1, |c| status = Some(c.syndrome_raw()));
    }
    (status.flatten(), dst.to_vec(0, 5))
}

/// The port state lives in the fabric's shared registry: a port another
/// process takes down breaks this process's path through it (the WRITE
/// exhausts its retries, nothing lands), and when that process brings it up,
/// new QPs here work again.
#[test]
fn a_port_taken_down_by_another_process_breaks_the_path() {
    match std::env::var("MLX5_MP_ROLE").as_deref() {
        Ok("port") => return port_toggler(&std::env::var("MLX5_MP_FABRIC").unwrap()),
        Ok(_) => return,
        Err(_) => {}
    }
    let fabric = format!("mpport-{}", std::process::id());
    let test = "a_port_taken_down_by_another_process_breaks_the_path";
    let a = Context::open_in(&fabric, "sim0").unwrap();
    let b = Context::open_in(&fabric, "sim1").unwrap();
    let fab = Fabric::open(&fabric).unwrap();
    // 33 µs ACK timeout, 2 retries.
    let rts = RtsAttr {
        timeout: 3,
        retry_cnt: 2,
        ..RtsAttr::default()
    };
    assert!(!fab.port_down(1));
    assert_eq!(one_write(&a, &b, rts), (None, b"hello".to_vec()));

    let mut child = spawn(test, "port", &fabric, 0);
    let mut lines = child_lines(&mut child);
    assert_eq!(lines.next().as_deref(), Some("DONE down"));
    assert!(fab.port_down(1), "the other process's change is seen here");
    assert!(b.as_sim().unwrap().port_down());
    assert_eq!(
        one_write(&a, &b, rts),
        (Some(Syndrome::TransportRetryExc as u8), vec![0; 5])
    );

    writeln!(child.stdin.as_mut().unwrap(), "up").unwrap();
    assert_eq!(lines.next().as_deref(), Some("DONE up"));
    assert!(child.wait().unwrap().success());
    assert!(!fab.port_down(1));
    assert_eq!(one_write(&a, &b, rts), (None, b"hello".to_vec()));
    drop((a, b, fab));
    Fabric::remove_if_unused(&fabric);
}

/// Round trips of `processes_sleep_on_completion_events_and_none_is_lost`.
const EVENT_ROUNDS: u32 = 2000;
/// How long the event peer waits before its first reply.
const FIRST_REPLY_DELAY: Duration = Duration::from_millis(300);

/// One end of the event test: both CQs on a completion channel.
/// Spawns `test`'s child in `role` on `fabric` and connects a [`Sleeper`]
/// on `sim0` to it: the child, its lines after its info line, the sleeper,
/// and the child's buffer (address, key).
fn sleeper_and_peer(
    test: &str,
    role: &str,
    fabric: &str,
) -> (
    KillOnDrop,
    impl Iterator<Item = String>,
    Sleeper,
    (u64, u32),
) {
    let mut child = spawn(test, role, fabric, 0);
    let mut lines = child_lines(&mut child);
    let (peer, raddr, rkey) = parse_info(&lines.next().expect("peer info"));
    let me = Sleeper::new(fabric, "sim0");
    writeln!(
        child.stdin.as_mut().unwrap(),
        "{}",
        info_line(&me.qp.conn_info(), me.mr.addr(), me.mr.rkey())
    )
    .unwrap();
    connect(&me.qp, peer, RtsAttr::default());
    (child, lines, me, (raddr, rkey))
}

struct Sleeper {
    chan: CompletionChannel,
    mr: mlx5::device::Mr,
    qp: mlx5::device::Qp,
    sq: SendQueue<OrderedSparse<()>>,
    scq: CqRing,
    rcq: CqRing,
    rq: RecvQueue<OrderedRecv<()>>,
    /// Waits that returned an event.
    events: u32,
    _keep: (
        Context,
        mlx5::device::Pd,
        mlx5::device::Cq,
        mlx5::device::Cq,
    ),
}

impl Sleeper {
    fn new(fabric: &str, dev: &str) -> Sleeper {
        let ctx = Context::open_in(fabric, dev).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd
            .alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
            .unwrap();
        let chan = ctx.create_comp_channel().unwrap();
        let scq = ctx.create_cq_on(&CqAttr::default(), &chan).unwrap();
        let rcq = ctx.create_cq_on(&CqAttr::default(), &chan).unwrap();
        let qp = ctx
            .create_qp(&pd, &scq, &rcq, None, &QpCaps::default())
            .unwrap();
        let mut rq = qp.recv_queue::<OrderedRecv<()>>().unwrap();
        for _ in 0..64 {
            rq.post(&[], ()).unwrap();
        }
        rq.ring_doorbell();
        let sq = qp
            .send_queue::<OrderedSparse<()>>(SqConfig {
                signal_interval: 16,
                ..SqConfig::default()
            })
            .unwrap();
        Sleeper {
            chan,
            mr,
            sq,
            scq: scq.ring().unwrap(),
            rcq: rcq.ring().unwrap(),
            rq,
            qp,
            events: 0,
            _keep: (ctx, pd, scq, rcq),
        }
    }

    /// Sends WRITE_IMM `imm` (8 bytes) to the peer's memory.
    fn send(&mut self, raddr: u64, rkey: u32, imm: u32) {
        let sq = &mut self.sq;
        self.scq.poll(usize::MAX, |c| {
            assert!(!c.is_error(), "{c:?}");
            sq.complete(c, |_, _| {});
        });
        let s = Sge {
            addr: self.mr.addr(),
            len: 8,
            lkey: self.mr.lkey(),
        };
        self.sq
            .write_imm(raddr, rkey, imm, Payload::Sges(&[s]))
            .unwrap()
            .post(None);
        self.sq.ring_doorbell();
    }

    /// The next receive, if one is there (its receive WQE is posted again).
    fn poll_recv(&mut self) -> Option<u32> {
        let mut imm = None;
        let rq = &mut self.rq;
        self.rcq.poll(1, |c| {
            assert_eq!(c.opcode(), Some(CqeOpcode::RespWrImm), "{c:?}");
            imm = Some(c.imm());
            rq.complete(c, |_, _| {});
        });
        if imm.is_some() {
            self.rq.post(&[], ()).unwrap();
            self.rq.ring_doorbell();
        }
        imm
    }

    /// Receives the next message as a sleeper does: poll, arm, poll, and
    /// only then wait on the channel. A wait without an event within 10 s
    /// is a lost event, and one that took 5 s a lost wake-up (the peer
    /// answers within milliseconds).
    fn sleep_recv(&mut self) -> u32 {
        loop {
            if let Some(imm) = self.poll_recv() {
                return imm;
            }
            self.rcq.arm(false).unwrap();
            if let Some(imm) = self.poll_recv() {
                return imm;
            }
            let t = Instant::now();
            let ev = self.chan.wait(Duration::from_secs(10)).unwrap();
            assert!(ev.is_some(), "no completion event within 10 s: lost");
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the event's wake-up came late ({:?})",
                t.elapsed()
            );
            self.events += 1;
        }
    }
}

/// The child of `processes_sleep_on_completion_events_and_none_is_lost`:
/// answers every message with the same immediate, sleeping in between, the
/// first answer after a delay.
fn event_peer(fabric: &str) {
    let mut me = Sleeper::new(fabric, "sim1");
    println!(
        "{}",
        info_line(&me.qp.conn_info(), me.mr.addr(), me.mr.rkey())
    );
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (peer, raddr, rkey) = parse_info(&line);
    connect(&me.qp, peer, RtsAttr::default());
    println!("INFO 0 0 0 0");
    for i in 0..EVENT_ROUNDS {
        let imm = me.sleep_recv();
        assert_eq!(imm, i, "messages in order");
        if i == 0 {
            std::thread::sleep(FIRST_REPLY_DELAY);
        }
        me.send(raddr, rkey, imm);
    }
    println!("DONE {}", me.events);
}

/// Two processes ping-pong 2000 WRITE_IMMs and each sleeps on its completion
/// channel between messages (poll, arm, poll, wait): every wait is woken by
/// the other process's NIC through the futex in the fabric's shared memory,
/// and none times out. The parent's first wait sleeps through the peer's
/// delay, so it was a real sleep ended by the other process.
#[test]
fn processes_sleep_on_completion_events_and_none_is_lost() {
    match std::env::var("MLX5_MP_ROLE").as_deref() {
        Ok("event-peer") => return event_peer(&std::env::var("MLX5_MP_FABRIC").unwrap()),
        Ok(_) => return,
        Err(_) => {}
    }
    let fabric = format!("mpev-{}", std::process::id());
    let test = "processes_sleep_on_completion_events_and_none_is_lost";
    let (mut child, mut lines, mut me, (raddr, rkey)) =
        sleeper_and_peer(test, "event-peer", &fabric);
    let _ = lines.next(); // the peer is in RTS
    let t0 = Instant::now();
    let mut first = Duration::ZERO;
    for i in 0..EVENT_ROUNDS {
        me.send(raddr, rkey, i);
        let t = Instant::now();
        assert_eq!(me.sleep_recv(), i);
        if i == 0 {
            first = t.elapsed();
        }
    }
    let done = lines.next().expect("peer done");
    assert!(child.wait().unwrap().success());
    let peer_events: u32 = done.strip_prefix("DONE ").unwrap().parse().unwrap();
    eprintln!(
        "{EVENT_ROUNDS} round trips between sleeping processes in {:?}: {} + {peer_events} events",
        t0.elapsed(),
        me.events
    );
    assert!(
        first >= FIRST_REPLY_DELAY - Duration::from_millis(50),
        "the first answer came after {first:?}"
    );
    // Both slept on events (most waits find the peer's answer not there yet).
    assert!(me.events > 0 && peer_events > 0);
    drop(me);
    Fabric::remove_if_unused(&fabric);
}

/// The child of `a_stopped_consumer_does_not_block_delivery_into_its_cq`:
/// stops itself halfway through an arm of its receive CQ, and once let go
/// reports the message that arrived meanwhile and the events it got.
fn stopped_armer(fabric: &str) {
    let mut me = Sleeper::new(fabric, "sim1");
    println!(
        "{}",
        info_line(&me.qp.conn_info(), me.mr.addr(), me.mr.rkey())
    );
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (peer, _, _) = parse_info(&line);
    connect(&me.qp, peer, RtsAttr::default());
    mlx5::sim::device::stop_in_next_arm();
    println!("DONE arming");
    // Stops in here until the parent's SIGCONT.
    me.rcq.arm(false).unwrap();
    let imm = me.poll_recv().expect("the message delivered while stopped");
    let mut events = 0;
    while me.chan.wait(Duration::from_millis(200)).unwrap().is_some() {
        events += 1;
    }
    println!("DONE {imm} {events}");
}

/// Waits until child `pid` is stopped (by a signal).
fn wait_stopped(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid(2) on a child this process spawned and has not
    // reaped, with a valid status pointer; WUNTRACED reports a stop without
    // reaping anything.
    let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WUNTRACED) };
    assert_eq!(r, pid as libc::pid_t, "waitpid");
    assert!(libc::WIFSTOPPED(status), "the child stopped ({status:#x})");
}

/// A process stopped (SIGSTOP) in its consumer path — here halfway through
/// arming its receive CQ — does not stop another process's NIC from
/// delivering into that CQ, as a paused host does not stop its NIC: the
/// sender's WRITE_IMM lands, its receive CQE is written, and the arm's
/// event is raised once (by the sender, which found the CQ armed), not
/// again when the stopped process goes on and finds the CQE there.
#[test]
fn a_stopped_consumer_does_not_block_delivery_into_its_cq() {
    match std::env::var("MLX5_MP_ROLE").as_deref() {
        Ok("stopped-armer") => return stopped_armer(&std::env::var("MLX5_MP_FABRIC").unwrap()),
        Ok(_) => return,
        Err(_) => {}
    }
    let fabric = format!("mpstop-{}", std::process::id());
    let test = "a_stopped_consumer_does_not_block_delivery_into_its_cq";
    let (mut child, mut lines, mut me, (raddr, rkey)) =
        sleeper_and_peer(test, "stopped-armer", &fabric);
    assert_eq!(lines.next().as_deref(), Some("DONE arming"));
    wait_stopped(child.id());
    // The send runs this process's NIC inline: it returns once the message
    // and its receive CQE are delivered.
    let (tx, rx) = std::sync::mpsc::channel();
    let sender = std::thread::spawn(move || {
        me.send(raddr, rkey, 7);
        let _ = tx.send(());
        me
    });
    let delivered = rx.recv_timeout(Duration::from_secs(10));
    // SAFETY: kill(2) with a pid this process spawned and has not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
    assert!(
        delivered.is_ok(),
        "delivery into a stopped process's CQ waited 10 s for that process"
    );
    let me = sender.join().unwrap();
    assert_eq!(lines.next().as_deref(), Some("DONE 7 1"));
    assert!(child.wait().unwrap().success());
    drop(me);
    Fabric::remove_if_unused(&fabric);
}

/// Tagged messages matched by tag: the receiving process's tag list, SRQ
/// and buffers in its segments, matched and filled by the sending process's
/// NIC.
const TM_TAGS: u64 = 32;
/// Unexpected messages (tags nobody appended).
const TM_UNEXPECTED: u64 = 8;
/// Bytes of each tagged buffer.
const TM_BUF: usize = 512;

/// The payload of tagged message `i`.
fn tm_payload(i: u64) -> Vec<u8> {
    (0..100 + i as usize * 7).map(|k| msg_byte(i, k)).collect()
}

/// The receiving process of the tag-matching test: appends `TM_TAGS` tags,
/// then reports what each message did ("DONE tm ...").
fn tm_receiver(fabric: &str) {
    use mlx5::device::TmSrqAttr;
    use mlx5::tm::{TmEvent, TmSrq};
    use mlx5::wqe_table::UnorderedRecv;
    let ctx = Context::open_in(fabric, "sim1").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let attr = TmSrqAttr {
        wqe_cnt: 16,
        max_num_tags: 64,
        ..TmSrqAttr::default()
    };
    let h = ctx.create_tm_srq(&pd, &cq, &attr).unwrap();
    let on = h.srq();
    let qp = ctx
        .create_qp(&pd, &cq, &cq, Some(&on), &QpCaps::default())
        .unwrap();
    let mut ring = cq.ring().unwrap();
    let bufs = pd
        .alloc_mr(TM_BUF * (TM_TAGS as usize + 16), access::LOCAL_WRITE)
        .unwrap();
    let mut srq = on.srq::<UnorderedRecv<u64>>().unwrap();
    for i in 0..15u64 {
        let at = TM_BUF * (TM_TAGS as usize + i as usize);
        let s = Sge {
            addr: bufs.addr() + at as u64,
            len: TM_BUF as u32,
            lkey: bufs.lkey(),
        };
        srq.post(&[s], i).unwrap();
    }
    srq.ring_doorbell();
    let mut tm: TmSrq<u64> = h.tm_srq().unwrap();
    for i in 0..TM_TAGS {
        let s = Sge {
            addr: bufs.addr() + (i as usize * TM_BUF) as u64,
            len: TM_BUF as u32,
            lkey: bufs.lkey(),
        };
        tm.add(0x5000 + i, !0, &[s], i).unwrap();
    }
    tm.ring_doorbell();
    let (mut added, mut matched, mut unexpected, mut bad) = (0, 0, 0, 0);
    println!("{}", info_line(&qp.conn_info(), 0, 0));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (peer, _, _) = parse_info(&line);
    connect(&qp, peer, RtsAttr::default());
    println!("DONE rts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while matched + unexpected < TM_TAGS + TM_UNEXPECTED && Instant::now() < deadline {
        ctx.progress();
        ring.poll(usize::MAX, |c| match tm.complete(c) {
            Ok(TmEvent::Added { .. }) => added += 1,
            Ok(TmEvent::Matched {
                data: Some(i),
                len: Some(n),
                ..
            }) => {
                let want = tm_payload(i);
                let ok = n as usize == want.len()
                    && bufs.to_vec(i as usize * TM_BUF, want.len()) == want;
                matched += 1;
                bad += u64::from(!ok);
            }
            Ok(TmEvent::Unexpected { wqe, len, .. }) => {
                let mut wr = 0;
                srq.complete(c, |w, _| wr = w);
                let at = TM_BUF * (TM_TAGS as usize + wr as usize);
                let hdr = bufs.to_vec(at, 16);
                let tag = mlx5::prm::Tmh::new_unchecked(&hdr[..]).tag();
                let want = tm_payload(tag - 0x9000 + TM_TAGS);
                let ok = len as usize == 16 + want.len()
                    && bufs.to_vec(at + 16, want.len()) == want
                    && usize::from(wqe) < 16;
                unexpected += 1;
                bad += u64::from(!ok);
            }
            other => panic!("{other:?}"),
        });
    }
    println!("DONE tm added {added} matched {matched} unexpected {unexpected} bad {bad}");
}

#[test]
fn another_process_matches_tagged_messages_against_a_tag_list() {
    match std::env::var("MLX5_MP_ROLE").as_deref() {
        Ok("tm_receiver") => return tm_receiver(&std::env::var("MLX5_MP_FABRIC").unwrap()),
        Ok(_) => return,
        Err(_) => {}
    }
    let fabric = format!("mp-tm-{}", std::process::id());
    let test = "another_process_matches_tagged_messages_against_a_tag_list";
    let mut child = spawn(test, "tm_receiver", &fabric, 0);
    let mut lines = child_lines(&mut child);
    let (peer, _, _) = parse_info(&lines.next().expect("receiver info"));
    let (ctx, pd, cq, qp) = parent_qp(&fabric, &mut child);
    let src = pd.alloc_mr(1 << 16, 0).unwrap();
    connect(&qp, peer, RtsAttr::default());
    assert_eq!(lines.next().as_deref(), Some("DONE rts"));
    let mut sq = qp
        .send_queue::<OrderedSparse<u64>>(SqConfig::default())
        .unwrap();
    let mut ring = cq.ring().unwrap();
    // Tags 0..TM_TAGS in reverse, then TM_UNEXPECTED nobody appended.
    let tags = (0..TM_TAGS).rev().map(|i| (0x5000 + i, i));
    let strays = (0..TM_UNEXPECTED).map(|k| (0x9000 + k, TM_TAGS + k));
    for (n, (tag, i)) in tags.chain(strays).enumerate() {
        let mut hdr = [0u8; 16];
        mlx5::prm::Tmh::new_unchecked(&mut hdr[..]).set(mlx5::prm::TmhOpcode::Eager, 1, tag);
        let at = n * 1024;
        src.write(at, &hdr);
        src.write(at + 16, &tm_payload(i));
        let s = Sge {
            addr: src.addr() + at as u64,
            len: (16 + tm_payload(i).len()) as u32,
            lkey: src.lkey(),
        };
        sq.send(Payload::Sges(&[s])).unwrap().post(Some(i));
        sq.ring_doorbell();
    }
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < TM_TAGS + TM_UNEXPECTED {
        assert!(Instant::now() < deadline, "{done} sends completed");
        ctx.progress();
        ring.poll(usize::MAX, |c| {
            assert!(!c.is_error(), "{c:?}");
            done += sq.complete(c, |_, _| {}) as u64;
        });
    }
    let want =
        format!("DONE tm added {TM_TAGS} matched {TM_TAGS} unexpected {TM_UNEXPECTED} bad 0");
    assert_eq!(lines.next(), Some(want));
    drop(child);
    Fabric::remove_if_unused(&fabric);
}
