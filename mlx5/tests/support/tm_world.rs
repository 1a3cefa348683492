//! A tag-matching receiver and a sender on the software device, built
//! through the device API (`Context::create_tm_srq`), for the TM-SRQ
//! tests: the receiver's QP on a TM-SRQ (its tag list driven by
//! `mlx5::tm::TmSrq`, its unexpected buffers in the SRQ), the sender's QP
//! with its own RQ (where a rendezvous FIN lands), connected across two
//! devices of one fabric.

use std::time::{Duration, Instant};

use mlx5::cq::{Completion, CompletionSource, CqRing};
use mlx5::device::{
    access, Context, Cq, CqAttr, ExecMode, FaultPlan, Mr, Pd, Qp, QpCaps, RtrAttr, RtsAttr,
    TmSrqAttr, TmSrqHandle,
};
use mlx5::prm::{Rvh, Tmh, TmhOpcode};
use mlx5::rq::{RecvQueue, Srq};
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::tm::{is_tm_cqe, TmEvent, TmSrq};
use mlx5::wqe_table::{OrderedRecv, OrderedSparse, UnorderedRecv};

use super::FabricGuard;

/// Bytes of each unexpected-message buffer in the SRQ.
pub const BOUNCE: usize = 8192;
/// Unexpected-message buffers posted.
pub const BOUNCES: usize = 16;
/// Bytes of the receiver's tagged-buffer region.
pub const TAGGED: usize = 1 << 16;

/// The NIC inline, and deferred under three scheduler seeds.
pub fn modes() -> Vec<ExecMode> {
    let deferred = (1..=3).map(|seed| ExecMode::Deferred {
        seed,
        faults: FaultPlan::default(),
    });
    std::iter::once(ExecMode::Inline).chain(deferred).collect()
}

/// A name for the fabric of test `tag` in `mode`.
pub fn fabric_name(tag: &str, mode: &ExecMode) -> String {
    let seed = match mode {
        ExecMode::Deferred { seed, .. } => *seed,
        _ => 0,
    };
    format!("tm-{}-{tag}-{seed}", std::process::id())
}

/// A receiver on a TM-SRQ and a sender.
pub struct World {
    pub rx: Context,
    pub tx: Context,
    /// The receiver's CQ: the TM-SRQ's, and its QP's.
    pub rcq: CqRing,
    /// The sender's CQ (send and receive).
    pub scq: CqRing,
    pub tm: TmSrq<u32>,
    pub srq: Srq<UnorderedRecv<u32>>,
    pub sq: SendQueue<OrderedSparse<u32>>,
    pub srq_h: TmSrqHandle,
    /// The sender's own RQ: FINs land here.
    pub fin_rq: RecvQueue<OrderedRecv<u32>>,
    /// The sender's data: headers and payloads are built here.
    pub src: Mr,
    /// The receiver's tagged buffers.
    pub tagged: Mr,
    /// The unexpected-message buffers.
    pub bounce: Mr,
    /// The sender's FIN buffers.
    pub fins: Mr,
    pub rqp: Qp,
    pub sqp: Qp,
    _objs: (Cq, Cq, Pd, Pd),
    _g: FabricGuard,
}

impl World {
    /// The world of test `tag` in `mode`: a list of `max_tags` tags, the
    /// sender's QP allowing remote reads if `sender_reads`.
    pub fn new(tag: &str, mode: ExecMode, max_tags: u32, sender_reads: bool) -> World {
        let name = fabric_name(tag, &mode);
        let g = FabricGuard(name.clone());
        let rx = Context::open_in_mode(&name, "sim0", mode).unwrap();
        let tx = Context::open_in_mode(&name, "sim1", mode).unwrap();
        let (rpd, spd) = (rx.alloc_pd().unwrap(), tx.alloc_pd().unwrap());
        let rcq = rx.create_cq(&CqAttr::default()).unwrap();
        let scq = tx.create_cq(&CqAttr::default()).unwrap();
        let attr = TmSrqAttr {
            wqe_cnt: BOUNCES as u32,
            max_num_tags: max_tags,
            ..TmSrqAttr::default()
        };
        let srq_h = rx.create_tm_srq(&rpd, &rcq, &attr).unwrap();
        let caps = QpCaps::default();
        let on = srq_h.srq();
        let rqp = rx.create_qp(&rpd, &rcq, &rcq, Some(&on), &caps).unwrap();
        let sqp = tx.create_qp(&spd, &scq, &scq, None, &caps).unwrap();
        let read = if sender_reads { access::REMOTE_READ } else { 0 };
        for (p, q, acc) in [(&rqp, &sqp, 0), (&sqp, &rqp, read)] {
            p.to_init().unwrap();
            p.to_rtr(&RtrAttr::new(q.conn_info(), acc)).unwrap();
            p.to_rts(&RtsAttr::default()).unwrap();
        }
        let tm = srq_h.tm_srq().unwrap();
        let bounce = rpd.alloc_mr(BOUNCE * BOUNCES, access::LOCAL_WRITE).unwrap();
        let mut srq = on.srq::<UnorderedRecv<u32>>().unwrap();
        // A free-list SRQ keeps one WQE out of use (as rdma-core's does).
        for i in 0..BOUNCES - 1 {
            let s = sge(&bounce, i * BOUNCE, BOUNCE);
            srq.post(&[s], i as u32).unwrap();
        }
        srq.ring_doorbell();
        let tagged = rpd.alloc_mr(TAGGED, access::LOCAL_WRITE).unwrap();
        let src_access = access::LOCAL_WRITE | access::REMOTE_READ;
        let src = spd.alloc_mr(1 << 16, src_access).unwrap();
        let fins = spd.alloc_mr(64 * 16, access::LOCAL_WRITE).unwrap();
        let sq = sqp.send_queue(SqConfig::default()).unwrap();
        let fin_rq = sqp.recv_queue::<OrderedRecv<u32>>().unwrap();
        World {
            rcq: rcq.ring().unwrap(),
            scq: scq.ring().unwrap(),
            rx,
            tx,
            tm,
            srq,
            sq,
            srq_h,
            fin_rq,
            src,
            tagged,
            bounce,
            fins,
            rqp,
            sqp,
            _objs: (rcq, scq, rpd, spd),
            _g: g,
        }
    }

    /// Posts `n` receives for FINs on the sender's RQ.
    pub fn post_fin_receives(&mut self, n: usize) {
        for i in 0..n {
            let s = sge(&self.fins, (i % 64) * 16, 16);
            self.fin_rq.post(&[s], i as u32).unwrap();
        }
        self.fin_rq.ring_doorbell();
    }

    /// Sends a message whose header is `(op, app_ctx, tag)` followed by
    /// `rest`, from offset `at` of the sender's buffer (`id` names its
    /// completion).
    pub fn send(
        &mut self,
        (op, app_ctx, tag): (TmhOpcode, u32, u64),
        rest: &[u8],
        at: usize,
        id: u32,
    ) {
        let mut hdr = [0u8; 16];
        Tmh::new_unchecked(&mut hdr[..]).set(op, app_ctx, tag);
        self.src.write(at, &hdr);
        self.src.write(at + 16, rest);
        let s = sge(&self.src, at, 16 + rest.len());
        self.sq.send(Payload::Sges(&[s])).unwrap().post(Some(id));
        self.sq.ring_doorbell();
    }

    /// Sends an eager message of `payload` for `tag`.
    pub fn eager(&mut self, tag: u64, payload: &[u8], at: usize, id: u32) {
        self.send((TmhOpcode::Eager, id, tag), payload, at, id);
    }

    /// Sends a rendezvous request for `tag` naming `len` bytes of the
    /// sender's buffer at offset `data_at` (the request itself from `at`).
    pub fn rndv(&mut self, tag: u64, (data_at, len): (usize, u32), at: usize, id: u32) {
        let mut rvh = [0u8; 16];
        let va = self.src.addr() + data_at as u64;
        Rvh::new_unchecked(&mut rvh[..]).set(va, self.src.rkey(), len);
        self.send((TmhOpcode::Rndv, id, tag), &rvh, at, id);
    }

    /// The tagged-buffer SGE of `len` bytes at offset `at`.
    pub fn tagged_at(&self, at: usize, len: usize) -> Sge {
        sge(&self.tagged, at, len)
    }

    /// The receiver's next `n` tag-matching events (the NICs run in
    /// between); an unexpected or NO_TAG message's SRQ WQE is retired.
    pub fn events(&mut self, n: usize) -> Vec<TmEvent<u32>> {
        let (rx, tx) = (self.rx.clone(), self.tx.clone());
        let mut out = Vec::new();
        let (tm, srq) = (&mut self.tm, &mut self.srq);
        poll(
            &mut self.rcq,
            n,
            || drive(&rx, &tx),
            |c| {
                assert!(is_tm_cqe(c), "not a TM CQE: {:02x?}", c.bytes());
                let ev = tm.complete(c).unwrap();
                if let TmEvent::Unexpected { .. } | TmEvent::NoTag { .. } = ev {
                    assert_eq!(srq.complete(c, |_, _| {}), 1, "SRQ WQE retired");
                }
                out.push(ev);
            },
        );
        out
    }

    /// The sender's next `n` CQEs (its SENDs' and the FINs'), retired.
    pub fn sender(&mut self, n: usize) -> Vec<Completion64> {
        let (rx, tx) = (self.rx.clone(), self.tx.clone());
        let mut out = Vec::new();
        let (sq, rq) = (&mut self.sq, &mut self.fin_rq);
        poll(
            &mut self.scq,
            n,
            || drive(&rx, &tx),
            |c| {
                if c.is_requester() {
                    sq.complete(c, |_, _| {});
                } else {
                    rq.complete(c, |_, _| {});
                }
                out.push(Completion64(*c.bytes()));
            },
        );
        out
    }

    /// Neither side has a CQE waiting, after the NICs ran.
    pub fn quiet(&mut self) {
        for _ in 0..20 {
            drive(&self.rx, &self.tx);
        }
        let n = self
            .rcq
            .poll(usize::MAX, |c| panic!("receiver CQE {:02x?}", c.bytes()));
        let m = self
            .scq
            .poll(usize::MAX, |c| panic!("sender CQE {:02x?}", c.bytes()));
        assert_eq!(n + m, 0);
    }
}

/// A CQE's 64 bytes, kept past the poll.
#[derive(Clone, Copy)]
pub struct Completion64(pub [u8; 64]);

impl Completion64 {
    /// The CQE, to read.
    pub fn get(&self) -> Completion<'_> {
        Completion::new(&self.0, &[])
    }
}

/// Runs both NICs once.
fn drive(rx: &Context, tx: &Context) {
    rx.progress();
    tx.progress();
}

/// Polls `cq` until `n` CQEs came, running `drive` in between.
fn poll(cq: &mut CqRing, n: usize, drive: impl Fn(), mut f: impl FnMut(&Completion<'_>)) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < n {
        assert!(Instant::now() < deadline, "{got} of {n} CQEs in 10 s");
        drive();
        got += cq.poll(n - got, |c| f(c));
    }
}

/// `len` bytes of `mr` at offset `at`.
pub fn sge(mr: &Mr, at: usize, len: usize) -> Sge {
    Sge {
        addr: mr.addr() + at as u64,
        len: len as u32,
        lkey: mr.lkey(),
    }
}
