//! Memory regions and queues carved out of shared segments (`sim::pool`):
//! reachable from another process exactly as regions with a segment of their
//! own, isolated from their neighbours by their keys and bounds, zeroed when
//! handed out again, and in numbers a benchmark of tens of thousands of
//! endpoints needs without a file and a mapping each.
//!
//! The cross-process test runs this binary again as the owner of the regions
//! (`MLX5_CARVE_ROLE`); details travel over the child's stdin/stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mlx5::device::{access, ConnInfo, Context, Cq, CqAttr, Mr, Pd, QpCaps, RtrAttr, RtsAttr};
use mlx5::prm::Syndrome;
use mlx5::sim::device::live_qps;
use mlx5::sim::fabric::Fabric;
use mlx5::sq::{Payload, Sge, SqConfig};
use mlx5::wqe_table::OrderedSparse;

/// Region sizes of the cross-process test: carved ones of mixed sizes, and
/// one large enough for a segment of its own.
const SIZES: [usize; 6] = [100, 4096, 5000, 65536, 12288, 3 << 20];
/// Which region the owner also registers part of on a second device, where.
const PART: (usize, usize, usize) = (3, 8192, 4096);

fn pattern(i: usize, k: usize) -> u8 {
    (i * 31 + k * 7) as u8
}
fn part_pattern(k: usize) -> u8 {
    (k * 13 + 5) as u8
}

/// "INFO a b c" lines.
fn info(a: u64, b: u64, c: u64) -> String {
    format!("INFO {a} {b} {c}")
}
fn parse(l: &str) -> [u64; 3] {
    let f: Vec<u64> = l
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    [f[0], f[1], f[2]]
}

fn conn(qpn: u64, lid: u64) -> ConnInfo {
    ConnInfo {
        qpn: qpn as u32,
        lid: lid as u16,
        gid: [0; 16],
        psn: 0,
    }
}

fn connect(qp: &mlx5::device::Qp, peer: ConnInfo) {
    qp.to_init().unwrap();
    qp.to_rtr(&RtrAttr::new(peer, access::REMOTE_WRITE))
        .unwrap();
    qp.to_rts(&RtsAttr::default()).unwrap();
}

fn lines(child: &mut std::process::Child) -> impl Iterator<Item = String> {
    BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        // The harness prints "test <name> ... " before the test's output.
        .filter_map(|l| {
            let at = l.find("INFO ").or_else(|| l.find("DONE "))?;
            Some(l[at..].to_owned())
        })
}

fn read_line() -> String {
    let mut l = String::new();
    std::io::stdin().read_line(&mut l).unwrap();
    l
}

/// The child: regions of [`SIZES`] on sim1, part of one registered again on
/// sim2, a QP on each device; checks what the parent wrote.
fn owner(fabric: &str) {
    let (a, b) = (
        Context::open_in(fabric, "sim1").unwrap(),
        Context::open_in(fabric, "sim2").unwrap(),
    );
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let rw = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let mrs: Vec<Mr> = SIZES.iter().map(|&l| pa.alloc_mr(l, rw).unwrap()).collect();
    let (i, at, len) = PART;
    // SAFETY: inside `mrs[i]`, which outlives the region.
    let part = unsafe { pb.reg_mr((mrs[i].addr() + at as u64) as *mut u8, len, rw) }.unwrap();
    let (ca, cb) = (
        a.create_cq(&CqAttr::default()).unwrap(),
        b.create_cq(&CqAttr::default()).unwrap(),
    );
    let qa = a
        .create_qp(&pa, &ca, &ca, None, &QpCaps::default())
        .unwrap();
    let qb = b
        .create_qp(&pb, &cb, &cb, None, &QpCaps::default())
        .unwrap();
    println!("{}", info(qa.qpn().into(), a.lid().into(), 0));
    println!("{}", info(qb.qpn().into(), b.lid().into(), 0));
    for m in mrs.iter().chain([&part]) {
        println!("{}", info(m.addr(), m.rkey().into(), m.len() as u64));
    }
    let peers = [parse(&read_line()), parse(&read_line())];
    connect(&qa, conn(peers[0][0], peers[0][1]));
    connect(&qb, conn(peers[1][0], peers[1][1]));
    println!("INFO 0 0 0");
    let _ = read_line(); // the parent's writes completed
    let ok = mrs.iter().enumerate().all(|(i, m)| {
        m.to_vec(0, m.len()).iter().enumerate().all(|(k, &v)| {
            let in_part = i == PART.0 && (PART.1..PART.1 + PART.2).contains(&k);
            v == if in_part {
                part_pattern(k - PART.1)
            } else {
                pattern(i, k)
            }
        })
    });
    println!("DONE {}", u8::from(ok));
}

/// WRITEs `len` bytes of `src` (from its start) to `raddr`/`rkey` through
/// `sq`, and waits for the completion; its syndrome (`None`: success).
fn write_and_wait(
    sq: &mut mlx5::sq::SendQueue<OrderedSparse<u32>>,
    ring: &mut mlx5::cq::CqRing,
    src: &Mr,
    len: usize,
    (raddr, rkey): (u64, u32),
) -> Option<u8> {
    let sge = Sge {
        addr: src.addr(),
        len: len as u32,
        lkey: src.lkey(),
    };
    sq.write(raddr, rkey, Payload::Sges(&[sge]))
        .unwrap()
        .post(Some(1));
    sq.ring_doorbell();
    let t = Instant::now();
    let mut status = None;
    while status.is_none() {
        assert!(t.elapsed() < Duration::from_secs(10), "no completion");
        ring.poll(1, |c| status = Some(c.syndrome_raw()));
    }
    status.flatten()
}

#[test]
fn carved_regions_of_mixed_sizes_are_reachable_from_another_process() {
    match std::env::var("MLX5_CARVE_ROLE").as_deref() {
        Ok("owner") => return owner(&std::env::var("MLX5_CARVE_FABRIC").unwrap()),
        Ok(_) => return,
        Err(_) => {}
    }
    let fabric = format!("carve-mp-{}", std::process::id());
    let test = "carved_regions_of_mixed_sizes_are_reachable_from_another_process";
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("MLX5_CARVE_ROLE", "owner")
        .env("MLX5_CARVE_FABRIC", &fabric)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut from = lines(&mut child);
    let mut next = || parse(&from.next().unwrap());
    let peers = [next(), next()];
    let regions: Vec<[u64; 3]> = (0..=SIZES.len()).map(|_| next()).collect();
    let ctx = Context::open_in(&fabric, "sim0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(*SIZES.iter().max().unwrap(), 0).unwrap();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let qps = [0, 1].map(|_| {
        ctx.create_qp(&pd, &cq, &cq, None, &QpCaps::default())
            .unwrap()
    });
    let stdin = child.stdin.as_mut().unwrap();
    for (qp, peer) in qps.iter().zip(peers) {
        writeln!(stdin, "{}", info(qp.qpn().into(), ctx.lid().into(), 0)).unwrap();
        connect(qp, conn(peer[0], peer[1]));
    }
    let _ = next(); // the child's QPs are in RTS
    let mut ring = cq.ring().unwrap();
    let mut sqs = qps.each_ref().map(|q| {
        q.send_queue::<OrderedSparse<u32>>(SqConfig::default())
            .unwrap()
    });
    for (i, &[addr, rkey, len]) in regions[..SIZES.len()].iter().enumerate() {
        let len = len as usize;
        src.write(0, &(0..len).map(|k| pattern(i, k)).collect::<Vec<_>>());
        let r = write_and_wait(&mut sqs[0], &mut ring, &src, len, (addr, rkey as u32));
        assert_eq!(r, None, "region {i} of {len} bytes");
    }
    // The part registered on the second device, through it.
    let [addr, rkey, len] = regions[SIZES.len()];
    let len = len as usize;
    src.write(0, &(0..len).map(part_pattern).collect::<Vec<_>>());
    let r = write_and_wait(&mut sqs[1], &mut ring, &src, len, (addr, rkey as u32));
    assert_eq!(r, None, "the part registered on sim2");
    writeln!(child.stdin.as_mut().unwrap(), "written").unwrap();
    assert_eq!(from.next().as_deref(), Some("DONE 1"), "bytes differ");
    child.wait().unwrap();
    drop((sqs, ring, qps, cq, src, pd, ctx));
    Fabric::remove_if_unused(&fabric);
}

/// A QP on `a` connected to a fresh QP on `b` (in `pb`, the target's PD)
/// WRITEs `data` to `raddr` under `rkey`: the syndrome (`None`: success).
fn write_status(
    a: &Context,
    b: &Context,
    pb: &Pd,
    (raddr, rkey): (u64, u32),
    data: &[u8],
) -> Option<u8> {
    let pa = a.alloc_pd().unwrap();
    let src = pa.alloc_mr(data.len(), 0).unwrap();
    src.write(0, data);
    let (ca, cb): (Cq, Cq) = (
        a.create_cq(&CqAttr::default()).unwrap(),
        b.create_cq(&CqAttr::default()).unwrap(),
    );
    let qa = a
        .create_qp(&pa, &ca, &ca, None, &QpCaps::default())
        .unwrap();
    let qb = b.create_qp(pb, &cb, &cb, None, &QpCaps::default()).unwrap();
    connect(&qa, qb.conn_info());
    connect(&qb, qa.conn_info());
    let mut sq = qa
        .send_queue::<OrderedSparse<u32>>(SqConfig::default())
        .unwrap();
    let mut ring = ca.ring().unwrap();
    write_and_wait(&mut sq, &mut ring, &src, data.len(), (raddr, rkey))
}

/// Two regions carved side by side from one segment: a WRITE that runs past
/// the first one's end, or names the second's memory under the first's key,
/// is a remote access error and leaves the second untouched; a dropped
/// region's key no longer works, and its memory comes back zeroed.
#[test]
fn carved_neighbours_are_isolated_by_keys_and_bounds() {
    let fabric = format!("carve-iso-{}", std::process::id());
    let a = Context::open_in(&fabric, "sim0").unwrap();
    let b = Context::open_in(&fabric, "sim1").unwrap();
    let pb = b.alloc_pd().unwrap();
    let rw = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let m1 = pb.alloc_mr(4096, rw).unwrap();
    let m2 = pb.alloc_mr(4096, rw).unwrap();
    assert_eq!(m2.addr(), m1.addr() + 4096, "carved side by side");
    let err = Some(Syndrome::RemoteAccess as u8);
    let k1 = m1.rkey();
    // Inside: fine.
    assert_eq!(
        write_status(&a, &b, &pb, (m1.addr() + 4088, k1), b"12345678"),
        None
    );
    // Four bytes past the end, into the neighbour.
    assert_eq!(
        write_status(&a, &b, &pb, (m1.addr() + 4092, k1), b"ABCDEFGH"),
        err
    );
    // The neighbour's memory under the first one's key.
    assert_eq!(write_status(&a, &b, &pb, (m2.addr(), k1), b"ABCDEFGH"), err);
    assert!(
        m2.to_vec(0, 4096).iter().all(|&v| v == 0),
        "neighbour touched"
    );
    assert_eq!(m1.to_vec(4088, 8), b"12345678");
    // A dropped region: its key is dead, and its memory comes back zeroed.
    let addr1 = m1.addr();
    m1.write(0, &[0xa5; 4096]);
    drop(m1);
    assert_eq!(write_status(&a, &b, &pb, (addr1, k1), b"ABCDEFGH"), err);
    let again = pb.alloc_mr(4096, rw).unwrap();
    assert_eq!(again.addr(), addr1, "the same range, handed out again");
    assert!(again.to_vec(0, 4096).iter().all(|&v| v == 0), "not zeroed");
    drop((again, m2, pb, a, b));
    Fabric::remove_if_unused(&fabric);
}

/// Mappings of this process (lines of /proc/self/maps).
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

/// 20,000 memory regions and 20,000 QPs in one fabric (more than the tables
/// held before), in a few dozen segments and mappings, and all of it gone
/// again when dropped; twice, so the second round claims slots after the
/// tables' cursors wrapped.
#[test]
fn twenty_thousand_regions_and_qps_in_one_fabric() {
    const N: usize = 20_000;
    let fabric = format!("carve-many-{}", std::process::id());
    let ctx = Context::open_in(&fabric, "sim0").unwrap();
    let sim = ctx.as_sim().unwrap().clone();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let caps = QpCaps {
        sq_wqe_cnt: 64,
        rq_wqe_cnt: 4,
        ..QpCaps::default()
    };
    let maps_before = mappings();
    for round in 0..2 {
        let mrs: Vec<Mr> = (0..N)
            .map(|i| pd.alloc_mr(4096 << (i % 5), access::LOCAL_WRITE).unwrap())
            .collect();
        let qps: Vec<_> = (0..N)
            .map(|_| ctx.create_qp(&pd, &cq, &cq, None, &caps).unwrap())
            .collect();
        let mut keys: Vec<u32> = mrs.iter().map(Mr::lkey).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), N, "round {round}: keys are unique");
        let mut qpns: Vec<u32> = qps.iter().map(|q| q.qpn()).collect();
        qpns.sort_unstable();
        qpns.dedup();
        assert_eq!(qpns.len(), N, "round {round}: QPNs are unique");
        assert_eq!(live_qps(&sim), N);
        let segs = sim.fabric().carving_segments();
        // 20,000 regions of 4-64 KiB (about 480 MiB) and 20,000 queues of
        // 12 KiB (about 240 MiB) in 32 MiB segments.
        assert!(segs <= 30, "round {round}: {segs} carving segments");
        let added = mappings().saturating_sub(maps_before);
        assert!(added <= 100, "round {round}: {added} new mappings");
        drop((qps, mrs));
        assert_eq!(sim.fabric().carving_segments(), 0, "round {round}");
        assert_eq!(live_qps(&sim), 0);
    }
    drop((cq, pd, sim, ctx));
    Fabric::remove_if_unused(&fabric);
}
