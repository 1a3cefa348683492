//! Answers lost on the way back: a path cut one way (`link::set_cut`) lets
//! a request reach the responder and be executed there, while the
//! acknowledgement, READ response or NAK that answers it is lost.
//!
//! The requester then hears nothing, as if the request had been lost: it
//! retries after each ACK timeout and fails the WQE with
//! TRANSPORT_RETRY_EXC_ERR when its tries run out. But the work is done at
//! the responder — the data written, the receive consumed and completed,
//! the atomic applied — and a WQE that failed so did take effect. Its
//! retries are duplicates (the same PSN): the responder answers them
//! without executing them again (an atomic with the result it kept, as an
//! IB responder's atomic replay does), so a cut that heals within the
//! retries completes the WQE exactly once. A READ changes nothing at the
//! responder: its response is lost before any byte lands, and a retry reads
//! again (a duplicate READ is executed again).
//!
//! A NAK that is lost leaves the responder as it was when it sent it: a
//! responder QP that refused the request (access, length, operation) is in
//! ERR, and answers no duplicate; an RNR NAK lost is plain silence, counted
//! against `retry_cnt`, not `rnr_retry`.

use std::sync::atomic::Ordering;

use super::errors::{move_to_err, Fail, RetryKind, Unanswered};
use super::{Done, Qp};
use crate::prm::WqeOpcode;
use crate::sim::cqe_out::FlushReport;
use crate::sim::exec::Exec;
use crate::sim::link;
use crate::sim::registry::qp_kind;

/// Whether the answers to `qp`'s requests are lost on their way back from
/// its remote device (a port down at either end, or that direction cut).
#[inline]
pub(super) fn lost(x: &Exec<'_>, qp: &Qp<'_>) -> bool {
    x.paths_down && link::lost(x.fab.reg(), qp.remote_dev(), qp.dev)
}

/// The outcome `out` of `qp`'s WQE (`opcode`) at the responder, as the
/// requester sees it: the same, unless its answer is lost on the way back.
#[inline(always)]
pub(super) fn as_seen(
    x: &mut Exec<'_>,
    qp: &Qp<'_>,
    opcode: u8,
    out: Result<Done, Fail>,
) -> Result<Done, Fail> {
    // A NOP sends nothing and waits for nothing.
    if !x.paths_down || opcode == WqeOpcode::Nop as u8 {
        return out;
    }
    unanswered(x, qp, out)
}

#[cold]
fn unanswered(x: &mut Exec<'_>, qp: &Qp<'_>, out: Result<Done, Fail>) -> Result<Done, Fail> {
    if !lost(x, qp) {
        return out;
    }
    let timeout_us = qp.e.timeout_us.load(Ordering::Relaxed);
    match out {
        Ok(done) => Err(Fail::unanswered(
            timeout_us,
            Unanswered {
                byte_cnt: done.byte_cnt,
                replay: 0,
            },
        )),
        Err(Fail::Retry {
            kind: RetryKind::Rnr,
            ..
        }) => Err(Fail::transport(timeout_us)),
        Err(Fail::Err {
            remote_err: Some(slot),
            ..
        }) => {
            // The responder refused, and went to ERR (a DCT, which serves
            // every DCI, does not); its NAK is lost.
            let r = &x.fab.reg().qps[slot];
            if r.kind.load(Ordering::Relaxed) != qp_kind::DCT {
                // Its receive CQ overrunning is that CQ's own error.
                move_to_err(x, r, &mut FlushReport::default());
            }
            Err(Fail::transport(timeout_us))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    //! One-way cuts between devices of a fabric, seen by RC QPs of both
    //! directions: what crosses, what completes, and with what.

    use std::time::{Duration, Instant};

    use crate::cq::CqRing;
    use crate::prm::{CqeOpcode, Syndrome};
    use crate::sim::device::{SimContext, SimCq, SimMr, SimPd, SimQp};
    use crate::sim::fabric::Fabric;
    use crate::sq::{Payload, SendQueue, Sge, SqConfig};
    use crate::types::{access, CqAttr, ExecMode, QpCaps, RtrAttr, RtsAttr};
    use crate::wqe_table::{OrderedDense, OrderedRecv};

    /// What a polled CQE says.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Seen {
        opcode: u8,
        /// The error CQE's syndrome, if it is one.
        syndrome: Option<u8>,
        byte_cnt: u32,
    }

    fn seen(b: &[u8; 64]) -> Seen {
        let c = crate::prm::Cqe64::new_unchecked(&b[..]);
        let opcode = c.op_own() >> 4;
        let err = opcode == CqeOpcode::ReqErr as u8 || opcode == CqeOpcode::RespErr as u8;
        Seen {
            opcode,
            syndrome: err.then(|| crate::prm::ErrCqe::new_unchecked(&b[..]).syndrome_raw()),
            byte_cnt: if err { 0 } else { c.byte_cnt() },
        }
    }

    fn ok(byte_cnt: u32) -> Seen {
        Seen {
            opcode: CqeOpcode::Req as u8,
            syndrome: None,
            byte_cnt,
        }
    }

    fn failed(s: Syndrome) -> Seen {
        Seen {
            opcode: CqeOpcode::ReqErr as u8,
            syndrome: Some(s as u8),
            byte_cnt: 0,
        }
    }

    fn received(opcode: CqeOpcode, byte_cnt: u32) -> Seen {
        Seen {
            opcode: opcode as u8,
            syndrome: None,
            byte_cnt,
        }
    }

    const MR_LEN: usize = 8192;
    /// Where receives land in an end's memory (64 bytes each).
    const RECV_AT: u64 = 4096;

    /// One QP's end on one device: its context, memory, send and receive
    /// CQs and queues, eight receives of 64 bytes posted at [`RECV_AT`].
    struct End {
        ctx: SimContext,
        mr: SimMr,
        sends: CqRing,
        recvs: CqRing,
        qp: SimQp,
        sq: SendQueue<OrderedDense<u32>>,
        _keep: (SimPd, SimCq, SimCq, crate::rq::RecvQueue<OrderedRecv<()>>),
    }

    impl End {
        fn open(fabric: &str, dev: &str) -> End {
            let ctx = SimContext::open_in_mode(fabric, dev, ExecMode::Inline).unwrap();
            let pd = ctx.alloc_pd();
            let all = access::LOCAL_WRITE
                | access::REMOTE_WRITE
                | access::REMOTE_READ
                | access::REMOTE_ATOMIC;
            let mr = pd.alloc_mr(MR_LEN, all).unwrap();
            let scq = ctx.create_cq(&CqAttr::default()).unwrap();
            let rcq = ctx.create_cq(&CqAttr::default()).unwrap();
            let caps = QpCaps {
                sq_wqe_cnt: 64,
                rq_wqe_cnt: 64,
                max_inline: 64,
                ..QpCaps::default()
            };
            let qp = ctx.create_qp(&pd, &scq, &rcq, None, &caps).unwrap();
            let (sends, recvs) = (scq.ring().unwrap(), rcq.ring().unwrap());
            let sq = qp
                .send_queue(SqConfig {
                    signal_interval: 1,
                    max_inline: 64,
                    ..SqConfig::default()
                })
                .unwrap();
            let mut rq = qp.recv_queue().unwrap();
            for i in 0..8u64 {
                let sge = Sge {
                    addr: mr.addr() + RECV_AT + 64 * i,
                    len: 64,
                    lkey: mr.lkey(),
                };
                rq.post(&[sge], ()).unwrap();
            }
            rq.ring_doorbell();
            End {
                ctx,
                mr,
                sends,
                recvs,
                qp,
                sq,
                _keep: (pd, scq, rcq, rq),
            }
        }

        /// Polls the send CQ (which also runs retries) until `n` CQEs came,
        /// at most 5 s.
        fn wait(&mut self, n: usize) -> Vec<Seen> {
            let t = Instant::now();
            let mut out = Vec::new();
            while out.len() < n {
                assert!(t.elapsed() < Duration::from_secs(5), "only {out:?}");
                self.sends.poll(usize::MAX, |c| out.push(seen(c.bytes())));
                self.ctx.progress();
            }
            out
        }

        /// Everything in the send CQ now.
        fn sent(&mut self) -> Vec<Seen> {
            let mut out = Vec::new();
            self.sends.poll(usize::MAX, |c| out.push(seen(c.bytes())));
            out
        }

        /// Everything in the receive CQ now.
        fn drain(&mut self) -> Vec<Seen> {
            let mut out = Vec::new();
            self.recvs.poll(usize::MAX, |c| out.push(seen(c.bytes())));
            out
        }
    }

    /// A fresh fabric's name for this test.
    fn fabric(tag: &str) -> String {
        format!("answer-{tag}-{}", std::process::id())
    }

    /// Two connected ends on devices `a` and `b` of `fabric`, with a 4.2 ms
    /// ACK timeout (timeout 10) and `retry_cnt` 2.
    fn pair(fabric: &str, a: &str, b: &str) -> (End, End) {
        let (a, b) = (End::open(fabric, a), End::open(fabric, b));
        let rts = RtsAttr {
            timeout: 10,
            retry_cnt: 2,
            ..RtsAttr::default()
        };
        let acc = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
        for (x, y) in [(&a.qp, &b.qp), (&b.qp, &a.qp)] {
            x.to_init().unwrap();
            x.to_rtr(&RtrAttr::new(y.conn_info(), acc)).unwrap();
            x.to_rts(&rts).unwrap();
        }
        (a, b)
    }

    fn cut(fabric: &str, from: u32, to: u32, down: bool) {
        let f = Fabric::open(fabric).unwrap();
        f.set_path_down(from, to, down).unwrap();
        assert_eq!(f.path_down(from, to), down);
        assert!(!f.path_down(to, from) || from == to, "one way only");
    }

    /// sim0 → sim1 cut. sim0's SEND to sim1 is lost: it fails with
    /// TRANSPORT_RETRY_EXC_ERR (syndrome 0x15) after its retries and sim1
    /// receives nothing. sim1's SEND to sim0 crosses and is received, but
    /// its acknowledgement cannot come back, so sim1's WQE fails the same
    /// way. sim0's SEND to sim2 completes: other paths are untouched.
    #[test]
    fn a_cut_loses_one_direction_and_the_other_still_arrives() {
        let f = fabric("one-way");
        let (mut a, mut b) = pair(&f, "sim0", "sim1");
        let (mut a2, mut b2) = pair(&f, "sim0", "sim1");
        let (mut a3, mut c) = pair(&f, "sim0", "sim2");
        cut(&f, 0, 1, true);
        // sim0 → sim1: lost on the way.
        a.sq.send(Payload::Inline(b"lost")).unwrap().post(1);
        a.sq.ring_doorbell();
        assert_eq!(a.wait(1), vec![failed(Syndrome::TransportRetryExc)]);
        assert_eq!(Syndrome::TransportRetryExc as u8, 0x15);
        assert!(b.drain().is_empty(), "sim1 received nothing");
        assert_eq!(b.mr.to_vec(RECV_AT as usize, 4), vec![0; 4]);
        // sim1 → sim0: arrives, unacknowledged.
        b2.sq.send(Payload::Inline(b"arrives")).unwrap().post(1);
        b2.sq.ring_doorbell();
        assert_eq!(b2.wait(1), vec![failed(Syndrome::TransportRetryExc)]);
        assert_eq!(a2.drain(), vec![received(CqeOpcode::RespSend, 7)]);
        assert_eq!(a2.mr.to_vec(RECV_AT as usize, 7), b"arrives");
        // sim0 → sim2: as ever.
        a3.sq.send(Payload::Inline(b"fine")).unwrap().post(1);
        a3.sq.ring_doorbell();
        assert_eq!(a3.wait(1), vec![ok(4)]);
        assert_eq!(c.drain(), vec![received(CqeOpcode::RespSend, 4)]);
        // Restored, a fresh pair works both ways.
        cut(&f, 0, 1, false);
        let (mut d, mut e) = pair(&f, "sim0", "sim1");
        d.sq.send(Payload::Inline(b"ping")).unwrap().post(1);
        d.sq.ring_doorbell();
        e.sq.send(Payload::Inline(b"pong!")).unwrap().post(1);
        e.sq.ring_doorbell();
        assert_eq!((d.wait(1), e.wait(1)), (vec![ok(4)], vec![ok(5)]));
        drop((a, b, a2, b2, a3, c, d, e));
        Fabric::remove_if_unused(&f);
    }

    /// sim1 → sim0 cut, so sim0's requests to sim1 arrive but their answers
    /// do not. A WRITE and a SEND are executed at sim1 — the bytes written,
    /// the receive completed, once, however many retries came — while
    /// sim0's WQE fails with TRANSPORT_RETRY_EXC_ERR and the next one is
    /// flushed. A READ's response is lost before anything lands.
    #[test]
    fn executed_but_not_acknowledged() {
        let f = fabric("no-ack");
        let (mut a, mut b) = pair(&f, "sim0", "sim1");
        let (mut a2, mut b2) = pair(&f, "sim0", "sim1");
        cut(&f, 1, 0, true);
        a.sq.write(b.mr.addr() + 128, b.mr.rkey(), Payload::Inline(b"written"))
            .unwrap()
            .post(1);
        a.sq.send(Payload::Inline(b"flushed")).unwrap().post(2);
        a.sq.ring_doorbell();
        assert_eq!(
            a.wait(2),
            vec![
                failed(Syndrome::TransportRetryExc),
                failed(Syndrome::WrFlush)
            ]
        );
        assert_eq!(b.mr.to_vec(128, 7), b"written", "the WRITE took effect");
        assert!(b.drain().is_empty(), "the flushed SEND was never sent");

        a2.sq.send(Payload::Inline(b"delivered")).unwrap().post(1);
        a2.sq.ring_doorbell();
        assert_eq!(a2.wait(1), vec![failed(Syndrome::TransportRetryExc)]);
        assert_eq!(
            b2.drain(),
            vec![received(CqeOpcode::RespSend, 9)],
            "received once, whatever the retries"
        );
        assert_eq!(b2.mr.to_vec(RECV_AT as usize, 9), b"delivered");

        let (mut a3, b3) = pair(&f, "sim0", "sim1");
        b3.mr.write(0, b"remote");
        let into = Sge {
            addr: a3.mr.addr() + 512,
            len: 6,
            lkey: a3.mr.lkey(),
        };
        a3.sq
            .read(b3.mr.addr(), b3.mr.rkey(), &[into])
            .unwrap()
            .post(1);
        a3.sq.ring_doorbell();
        assert_eq!(a3.wait(1), vec![failed(Syndrome::TransportRetryExc)]);
        assert_eq!(a3.mr.to_vec(512, 6), vec![0; 6], "no READ data landed");
        cut(&f, 1, 0, false);
        drop((a, b, a2, b2, a3, b3));
        Fabric::remove_if_unused(&f);
    }

    /// Answers cut, then the cut healed within the retries: the duplicates
    /// are answered and the WQEs complete once; the responder executed each
    /// once (one receive consumed, the atomic added once, its old value
    /// delivered to the requester), and the WQEs behind them run as usual.
    #[test]
    fn a_cut_healed_within_the_retries_completes_once() {
        let f = fabric("healed");
        let (mut a, mut b) = pair(&f, "sim0", "sim1");
        let (mut a2, b2) = pair(&f, "sim0", "sim1");
        b2.mr.write(0, &5u64.to_be_bytes());
        cut(&f, 1, 0, true);
        a.sq.send(Payload::Inline(b"once")).unwrap().post(1);
        a.sq.send(Payload::Inline(b"next")).unwrap().post(2);
        a.sq.ring_doorbell();
        let into = Sge {
            addr: a2.mr.addr() + 256,
            len: 8,
            lkey: a2.mr.lkey(),
        };
        a2.sq
            .atomic_fa(b2.mr.addr(), b2.mr.rkey(), 3, into)
            .unwrap()
            .post(1);
        a2.sq.ring_doorbell();
        // Idle polls well inside the first timeout: the first SEND and the
        // atomic arrived and were executed, nothing completes at sim0.
        for _ in 0..50 {
            assert!(a.sent().is_empty() && a2.sent().is_empty());
            a.ctx.progress();
        }
        assert_eq!(b.drain(), vec![received(CqeOpcode::RespSend, 4)]);
        assert_eq!(b2.mr.to_vec(0, 8), 8u64.to_be_bytes());
        assert_eq!(a2.mr.to_vec(256, 8), vec![0; 8], "no answer, no value");
        cut(&f, 1, 0, false);
        assert_eq!(a.wait(2), vec![ok(4), ok(4)]);
        assert_eq!(a2.wait(1), vec![ok(8)]);
        assert_eq!(
            b.drain(),
            vec![received(CqeOpcode::RespSend, 4)],
            "the second SEND only: no receive for a duplicate"
        );
        assert_eq!(b.mr.to_vec(RECV_AT as usize + 64, 4), b"next");
        assert_eq!(b2.mr.to_vec(0, 8), 8u64.to_be_bytes(), "added once");
        assert_eq!(a2.mr.to_vec(256, 8), 5u64.to_be_bytes(), "the old value");
        drop((a, b, a2, b2));
        Fabric::remove_if_unused(&f);
    }
}
