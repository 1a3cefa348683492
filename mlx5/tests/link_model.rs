//! The software device's link model: a port with a rate delivers completions
//! no faster than that rate, in both execution modes, and a fabric takes its
//! link models from the environment when it is created.

mod support;
use support::FabricGuard;

use std::time::{Duration, Instant};

use mlx5::cq::{CompletionSource, CqRing};
use mlx5::device::{
    access, Context, Cq, CqAttr, ExecMode, FaultPlan, Mr, QpCaps, RtrAttr, RtsAttr,
};
use mlx5::prm::CqeOpcode;
use mlx5::sim::fabric::Fabric;
use mlx5::sim::link::{Link, LINKS_ENV};
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::wqe_table::{OrderedRecv, OrderedSparse};

/// Messages per run and their size: 4 MiB in all.
const MSGS: usize = 128;
const LEN: usize = 32 << 10;

/// A WRITE_IMM stream from sim0 to sim1.
struct Stream {
    a: Context,
    sq: SendQueue<OrderedSparse<()>>,
    src: Mr,
    dst: Mr,
    scq: CqRing,
    rcq: CqRing,
    rq: mlx5::rq::RecvQueue<OrderedRecv<()>>,
    _keep: (Context, Vec<Cq>, Vec<mlx5::device::Qp>),
    _g: Option<FabricGuard>,
}

fn stream(tag: &str, mode: ExecMode, link: Option<Link>) -> Stream {
    let name = format!("link-{}-{tag}", std::process::id());
    let g = FabricGuard(name.clone());
    stream_in(&name, Some(g), mode, link)
}

/// A stream in fabric `name`, which `g` (if any) removes when the stream is
/// dropped.
fn stream_in(name: &str, g: Option<FabricGuard>, mode: ExecMode, link: Option<Link>) -> Stream {
    let name = name.to_owned();
    let a = Context::open_in_mode(&name, "sim0", mode).unwrap();
    let b = Context::open_in_mode(&name, "sim1", mode).unwrap();
    a.as_sim().unwrap().fabric().set_link(0, link).unwrap();
    assert_eq!(a.as_sim().unwrap().fabric().link(0), link);
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let src = pa.alloc_mr(LEN, 0).unwrap();
    let dst = pb
        .alloc_mr(LEN * 4, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let attr = CqAttr {
        cqe_cnt: 1024,
        ..CqAttr::default()
    };
    let (acq, bcq) = (a.create_cq(&attr).unwrap(), b.create_cq(&attr).unwrap());
    let caps = QpCaps {
        sq_wqe_cnt: 256,
        rq_wqe_cnt: 256,
        ..QpCaps::default()
    };
    let qa = a.create_qp(&pa, &acq, &acq, None, &caps).unwrap();
    let qb = b.create_qp(&pb, &bcq, &bcq, None, &caps).unwrap();
    for (x, y, acc) in [(&qa, &qb, 0), (&qb, &qa, access::REMOTE_WRITE)] {
        x.connect(&RtrAttr::new(y.conn_info(), acc), &RtsAttr::default())
            .unwrap();
    }
    let mut rq = qb.recv_queue::<OrderedRecv<()>>().unwrap();
    for _ in 0..MSGS {
        rq.post(&[], ()).unwrap();
    }
    rq.ring_doorbell();
    let sq = qa
        .send_queue(SqConfig {
            signal_interval: 8,
            ..SqConfig::default()
        })
        .unwrap();
    Stream {
        sq,
        src,
        dst,
        scq: acq.ring().unwrap(),
        rcq: bcq.ring().unwrap(),
        rq,
        a,
        _keep: (b, vec![acq, bcq], vec![qa, qb]),
        _g: g,
    }
}

/// Posts every message at once, then polls until each has been received;
/// returns the receive CQEs' immediates in order and the wall time taken.
fn run(s: &mut Stream) -> (Vec<u32>, Duration) {
    run_within(s, Duration::from_secs(60))
}

/// [`run`], failing when the messages take longer than `limit`.
fn run_within(s: &mut Stream, limit: Duration) -> (Vec<u32>, Duration) {
    let t = Instant::now();
    let sge = Sge {
        addr: s.src.addr(),
        len: LEN as u32,
        lkey: s.src.lkey(),
    };
    for i in 0..MSGS {
        let raddr = s.dst.addr() + ((i % 4) * LEN) as u64;
        s.sq.write_imm(raddr, s.dst.rkey(), i as u32, Payload::Sges(&[sge]))
            .unwrap()
            .post(None);
    }
    s.sq.ring_doorbell();
    let mut imms = Vec::new();
    let deadline = Instant::now() + limit;
    while imms.len() < MSGS {
        // Every receive was posted up front.
        let rq = &mut s.rq;
        s.rcq.poll(usize::MAX, |c| {
            assert_eq!(c.opcode(), Some(CqeOpcode::RespWrImm));
            assert_eq!(c.byte_cnt(), LEN as u32);
            imms.push(c.imm());
            CompletionSource::complete(rq, c, |_, _| {});
        });
        let sq = &mut s.sq;
        s.scq.poll(usize::MAX, |c| {
            sq.complete(c, |_, _| {});
        });
        assert!(
            Instant::now() < deadline,
            "{} of {MSGS} received",
            imms.len()
        );
    }
    (imms, t.elapsed())
}

fn gbit_per_s(d: Duration) -> f64 {
    (MSGS * LEN * 8) as f64 / d.as_secs_f64() / 1e9
}

#[test]
fn a_rate_limited_port_delivers_no_faster_than_its_rate() {
    let rate = 2.0;
    let mut s = stream("inline", ExecMode::Inline, Some(Link::rate(rate)));
    let (imms, took) = run(&mut s);
    assert_eq!(imms, (0..MSGS as u32).collect::<Vec<_>>());
    let got = gbit_per_s(took);
    // 4 MiB at 2 Gbit/s is 16.8 ms: completions may come late on a busy
    // machine, never early.
    assert!(
        got <= rate * 1.10,
        "{got:.2} Gbit/s through a {rate} Gbit/s port"
    );
    assert!(
        got >= rate * 0.25,
        "{got:.2} Gbit/s: the port is far too slow"
    );
}

#[test]
fn threads_polling_one_nic_at_once_all_see_their_held_completions() {
    // Several threads stream through the same rate-limited port of one
    // process's NIC and poll at once, so that two of them often write the
    // held CQEs that came due at the same moment. Each emptying of the delay
    // line must lower the NIC's idle-work word once: lowered twice, it read 0
    // while CQEs were held again, pollers stopped calling into the NIC, and
    // every held completion of the process — of any QP, old or new — stayed
    // held for good.
    let name = format!("link-{}-threads", std::process::id());
    let _g = FabricGuard(name.clone());
    let link = Some(Link::rate(64.0));
    let streams: Vec<Stream> = (0..4)
        .map(|_| stream_in(&name, None, ExecMode::Inline, link))
        .collect();
    let t = Instant::now();
    std::thread::scope(|sc| {
        for mut s in streams {
            sc.spawn(move || {
                for round in 0..50 {
                    let (imms, _) = run_within(&mut s, Duration::from_secs(10));
                    assert_eq!(imms.len(), MSGS, "round {round}");
                    // The send completions come one latency after the
                    // receives'; then the next round's receives.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while s.sq.free_bbs() != s.sq.wqe_cnt() {
                        let sq = &mut s.sq;
                        s.scq.poll(usize::MAX, |c| {
                            sq.complete(c, |_, _| {});
                        });
                        assert!(Instant::now() < deadline, "round {round}: sends");
                    }
                    for _ in 0..MSGS {
                        s.rq.post(&[], ()).unwrap();
                    }
                    s.rq.ring_doorbell();
                }
            });
        }
    });
    eprintln!("4 threads x 50 rounds in {:?}", t.elapsed());
}

#[test]
fn an_unlimited_port_is_not_slowed() {
    let mut s = stream("free", ExecMode::Inline, None);
    let (imms, took) = run(&mut s);
    assert_eq!(imms.len(), MSGS);
    // Memory speed: far above the rate the other test limits its port to.
    let got = gbit_per_s(took);
    assert!(got > 4.0, "{got:.2} Gbit/s without a link model");
}

#[test]
fn deferred_mode_keeps_the_rate_on_its_logical_clock_and_replays() {
    let link = Link {
        gbit_per_s: Some(10.0),
        latency: Duration::from_micros(2),
    };
    let mode = ExecMode::Deferred {
        seed: 11,
        faults: FaultPlan {
            delay: 200,
            ..FaultPlan::default()
        },
    };
    let mut clocks = Vec::new();
    for tag in ["d1", "d2"] {
        let mut s = stream(tag, mode, Some(link));
        let (imms, _) = run(&mut s);
        assert_eq!(imms, (0..MSGS as u32).collect::<Vec<_>>());
        clocks.push(s.a.sched_stats().clock_ns);
    }
    // 4 MiB at 10 Gbit/s: 3.36 ms on the wire, plus one latency.
    let wire_ns = (MSGS * LEN * 8) as u64 / 10;
    assert!(
        clocks[0] >= wire_ns + 2_000,
        "last completion at {} ns, the wire needs {wire_ns} ns",
        clocks[0]
    );
    assert!(clocks[0] < wire_ns * 2, "{} ns", clocks[0]);
    assert_eq!(
        clocks[0], clocks[1],
        "the same seed gives the same timeline"
    );
}

/// Run by `links_come_from_the_environment` in a child process.
#[test]
#[ignore]
fn env_child() {
    let name = std::env::var("LINK_TEST_FABRIC").unwrap();
    let _g = FabricGuard(name.clone());
    let f = Fabric::open(&name).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        f.link(1),
        Some(Link {
            gbit_per_s: Some(8.0),
            latency: Duration::from_micros(2)
        })
    );
    assert_eq!(f.link(0), Some(Link::rate(24.0)));
    assert_eq!(f.link(2), None);
}

#[test]
fn links_come_from_the_environment() {
    let exe = std::env::current_exe().unwrap();
    let run = |spec: &str, tag: &str| {
        std::process::Command::new(&exe)
            .args(["--exact", "env_child", "--ignored", "--nocapture"])
            .env(LINKS_ENV, spec)
            .env(
                "LINK_TEST_FABRIC",
                format!("link-env-{}-{tag}", std::process::id()),
            )
            .output()
            .unwrap()
    };
    let ok = run("sim0=24,sim1=8:2us", "ok");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    // A bad specification is refused with the variable's name.
    let bad = run("sim0=fast", "bad");
    assert!(!bad.status.success());
    let out = String::from_utf8_lossy(&bad.stderr);
    assert!(
        out.contains(LINKS_ENV) && out.contains("sim0=fast"),
        "{out}"
    );
}
