//! The simulated NIC's fast path for the work an RPC stack posts most: an RDMA
//! WRITE or WRITE_IMM whose data is one gather entry (one data segment, or
//! inline data) and that succeeds.
//!
//! It makes the general path's checks (`requester::execute`) in the same order and
//! writes the same bytes and CQEs, without its scatter/gather lists and error
//! plumbing. A WQE it cannot take whole — another layout, an armed fault, a
//! check that fails, an empty receive queue, a peer due for its liveness check,
//! a fabric with a link model, a port down or a path cut — it leaves untouched, and
//! the general path runs it and reports exactly what went wrong.

use std::sync::atomic::Ordering;

use super::memory::{demote_written, resolve, resolve_remote, MAX_MSG};
use super::responder::{connected_peer, peer_check_due, recv_cqe, solicited, take_recv};
use super::Qp;
use crate::prm::{CqeOpcode, CtrlSeg, DataSeg, InlineSeg, RaddrSeg, INVALID_LKEY};
use crate::sim::cqe_out::FlushReport;
use crate::sim::exec::Exec;
use crate::types::access;

/// Largest message for which the responder's CQ is locked before the data is
/// copied (a longer copy would hold other producers of that CQ up).
const PRELOCK_MAX: u64 = 4096;

/// Executes a WRITE (`imm` none) or WRITE_IMM `body` (its `ds` × 16 bytes)
/// of `qp`; returns the byte count, or `None` to leave the WQE to the general
/// path (nothing has been changed then).
#[inline]
pub(super) fn write(x: &mut Exec<'_>, qp: &Qp<'_>, body: &[u8], imm: Option<u32>) -> Option<u32> {
    const RADDR: usize = CtrlSeg::<()>::LEN;
    const GATHER: usize = RADDR + RaddrSeg::<()>::LEN;
    if body.len() < GATHER + DataSeg::<()>::LEN
        || x.faults.any_failure()
        || x.links
        || x.paths_down
        || !x.fast_path_on()
    {
        return None;
    }
    let fab = x.fab;
    let r = RaddrSeg::new_unchecked(&body[RADDR..GATHER]);
    let (raddr, rkey) = (r.raddr(), r.rkey());
    let seg = &body[GATHER..];
    // The gather entry: exactly one inline segment or one data segment.
    const INL: usize = InlineSeg::<()>::LEN;
    let inl = InlineSeg::new_unchecked(&seg[..INL]);
    let (src, len) = if inl.is_inline() {
        let n = inl.len() as usize;
        if InlineSeg::wqe_bytes(n) != seg.len() {
            return None;
        }
        (seg[INL..].as_ptr(), n as u64)
    } else {
        if seg.len() != 16 {
            return None;
        }
        let d = DataSeg::new_unchecked(seg);
        let (bc, lkey, addr) = (d.byte_count(), d.lkey(), d.addr());
        // A byte count of 0 means 2 GiB: the general path's business.
        let len = u64::from(bc & 0x7fff_ffff);
        if len > MAX_MSG || lkey == INVALID_LKEY {
            return None;
        }
        let p = resolve(fab, lkey, qp.pd, qp.dev, addr, len, 0).ok()?;
        (p as *const u8, len)
    };
    // A zero-length message (an empty inline segment, or byte count 2^31).
    if len == 0 {
        return None;
    }
    // The responder, as `engine::responder` checks it; a liveness check that
    // is due is the general path's.
    let (_, r) = connected_peer(fab, qp)?;
    if peer_check_due(qp, x.clock.peer_stamp()) {
        return None;
    }
    if r.access.load(Ordering::Relaxed) & access::REMOTE_WRITE == 0 {
        return None;
    }
    let dst = resolve_remote(fab, r, rkey, raddr, len, access::REMOTE_WRITE).ok()?;
    // Last, the one change that can still fail: taking a receive WQE.
    let recv = match imm {
        Some(imm) => Some((take_recv(x, r).ok()?, imm)),
        None => None,
    };
    // For a small message the responder's CQ is locked before the data moves:
    // no locked instruction then stands between the data's stores and the
    // CQE's, and the CPU gains ownership of their cache lines together.
    let cqn = r.recv_cqn.load(Ordering::Relaxed);
    let locked = match recv {
        Some(_) if len <= PRELOCK_MAX => x.lock_for_one(cqn),
        _ => None,
    };
    // SAFETY: both ranges were resolved against live regions of `len` bytes
    // (they may overlap: a WRITE may target its own source).
    unsafe { std::ptr::copy(src, dst, len as usize) };
    demote_written(dst, len as usize);
    if let Some((rv, imm)) = recv {
        let se = solicited(qp, body);
        let cqe = recv_cqe(r, &rv, CqeOpcode::RespWrImm, len as u32, imm, qp.qpn, se);
        // A responder CQ that overruns goes to error on its own; the
        // requester's WQE still completed.
        match locked {
            Some(l) => {
                l.write(&cqe);
            }
            None => x.push_cqe(cqn, &cqe, &mut FlushReport::default()),
        }
    }
    #[cfg(test)]
    {
        x.fast_wqes += 1;
    }
    Some(len as u32)
}

#[cfg(test)]
mod tests {
    use crate::doorbell::BfMode;
    use crate::sim::device::{SimContext, SimCq, SimMr, SimPd, SimQp, SimSrq};
    use crate::sim::fabric::Fabric;
    use crate::sim::link::Link;
    use crate::sq::{Payload, Sge, SqConfig};
    use crate::types::{access, CqAttr, ExecMode, QpCaps, RtrAttr, RtsAttr};
    use crate::wqe_table::{OrderedRecv, OrderedSparse};

    const LENS: [usize; 12] = [1, 7, 12, 31, 32, 33, 60, 64, 100, 250, 1000, 4000];

    /// What software can see after a run.
    struct Transcript {
        /// Every CQE's bytes, per CQ, in the order polled.
        cqes: [Vec<[u8; 64]>; 2],
        /// The target memory.
        mem: Vec<u8>,
        /// WQEs the fast path executed.
        fast: u64,
        /// CQEs the link model held back.
        held: u64,
    }

    /// Everything software can see after a run of WRITEs and WRITE_IMMs (inline
    /// and gathered, signaled and not, into an RQ and an SRQ, then one with a
    /// bad rkey), with the fast path on or off and the ports' link model.
    fn transcript(general_only: bool, link: Option<Link>) -> Transcript {
        static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let fabric = format!("fastpath-{}-{run}", std::process::id());
        let a = SimContext::open_in_mode(&fabric, "sim0", ExecMode::Inline).unwrap();
        let b = SimContext::open_in_mode(&fabric, "sim1", ExecMode::Inline).unwrap();
        for dev in [0, 1] {
            a.fabric().set_link(dev, link).unwrap();
        }
        // Both contexts share this process's NIC on the fabric.
        let nic = a.nic().clone();
        nic.set_fast_path(!general_only);
        let taken_before = nic.fast_path_wqes();
        let held_before = nic.held_cqes();
        let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
        let src = pa.alloc_mr(1 << 14, access::LOCAL_WRITE).unwrap();
        let dst = pb
            .alloc_mr(1 << 14, access::LOCAL_WRITE | access::REMOTE_WRITE)
            .unwrap();
        let pattern: Vec<u8> = (0..1 << 14).map(|i| (i * 7 + 3) as u8).collect();
        src.write(0, &pattern);
        let cq_attr = CqAttr {
            cqe_cnt: 1024,
            ..CqAttr::default()
        };
        let (acq, bcq) = (
            a.create_cq(&cq_attr).unwrap(),
            b.create_cq(&cq_attr).unwrap(),
        );
        let srq = b.create_srq(&pb, 256, 1).unwrap();
        let pairs = connected_pairs((&a, &pa, &acq), (&b, &pb, &bcq), &srq);
        let mut rq = pairs[0].1.recv_queue::<OrderedRecv<()>>().unwrap();
        let mut srq_q = srq.srq::<OrderedRecv<()>>().unwrap();
        for _ in 0..200 {
            rq.post(&[], ()).unwrap();
            srq_q.post(&[], ()).unwrap();
        }
        rq.ring_doorbell();
        srq_q.ring_doorbell();
        let (mut aring, mut bring) = (acq.ring().unwrap(), bcq.ring().unwrap());
        let mut cqes = [Vec::new(), Vec::new()];
        let mut drain = |cqes: &mut [Vec<[u8; 64]>; 2]| {
            aring.poll(usize::MAX, |c| cqes[0].push(*c.bytes()));
            bring.poll(usize::MAX, |c| cqes[1].push(*c.bytes()));
        };
        for (k, (qa, _)) in pairs.iter().enumerate() {
            post_writes(qa, k, (&src, &dst, &pattern), &mut || drain(&mut cqes));
        }
        // CQEs the link model holds come due.
        while a.progress() > 0 {
            drain(&mut cqes);
        }
        drain(&mut cqes);
        let fast = nic.fast_path_wqes() - taken_before;
        let held = nic.held_cqes() - held_before;
        let mem = dst.to_vec(0, 1 << 14);
        drop((
            rq, srq_q, aring, bring, pairs, srq, acq, bcq, src, dst, pa, pb, a, b, nic,
        ));
        Fabric::remove_if_unused(&fabric);
        Transcript {
            cqes,
            mem,
            fast,
            held,
        }
    }

    /// Two connected pairs of QPs from `a` to `b`: the first on an RQ of its
    /// own at `b`, the second on `srq`. `b` accepts WRITEs.
    fn connected_pairs(
        (a, pa, acq): (&SimContext, &SimPd, &SimCq),
        (b, pb, bcq): (&SimContext, &SimPd, &SimCq),
        srq: &SimSrq,
    ) -> Vec<(SimQp, SimQp)> {
        let caps = QpCaps {
            sq_wqe_cnt: 1024,
            rq_wqe_cnt: 256,
            max_inline: 64,
            ..QpCaps::default()
        };
        let mut pairs = Vec::new();
        for with_srq in [false, true] {
            let qa = a.create_qp(pa, acq, acq, None, &caps).unwrap();
            let qb = b
                .create_qp(pb, bcq, bcq, with_srq.then_some(srq), &caps)
                .unwrap();
            for (x, y, acc) in [(&qa, &qb, 0), (&qb, &qa, access::REMOTE_WRITE)] {
                x.to_init().unwrap();
                x.to_rtr(&RtrAttr::new(y.conn_info(), acc)).unwrap();
                x.to_rts(&RtsAttr::default()).unwrap();
            }
            pairs.push((qa, qb));
        }
        pairs
    }

    /// Posts 48 WRITEs and WRITE_IMMs (inline and gathered, signaled every
    /// fourth) from `src` to `dst` on `qa`, the `k`-th QP, then one with a
    /// bad rkey, draining the CQs after each.
    fn post_writes(
        qa: &SimQp,
        k: usize,
        (src, dst, pattern): (&SimMr, &SimMr, &[u8]),
        drain: &mut dyn FnMut(),
    ) {
        let mut sq = qa
            .send_queue::<OrderedSparse<()>>(SqConfig {
                signal_interval: 4,
                max_inline: 64,
                bf_mode: BfMode::Auto,
            })
            .unwrap();
        for i in 0..48usize {
            let len = LENS[i % LENS.len()];
            let raddr = dst.addr() + ((i * 37 + k * 5) % 8000) as u64;
            let soff = (i * 11) % 8000;
            let sge = [Sge {
                addr: src.addr() + soff as u64,
                len: len as u32,
                lkey: src.lkey(),
            }];
            let data = if len <= 64 && i % 2 == 0 {
                Payload::Inline(&pattern[soff..soff + len])
            } else {
                Payload::Sges(&sge)
            };
            let imm = 0x1000_0000 | i as u32;
            let w = if i % 3 == 0 {
                sq.write(raddr, dst.rkey(), data)
            } else {
                sq.write_imm(raddr, dst.rkey(), imm, data)
            };
            w.unwrap().post(None);
            sq.ring_doorbell();
            drain();
        }
        // A key the responder never issued: the general path's error.
        let bad = Sge {
            addr: src.addr(),
            len: 16,
            lkey: src.lkey(),
        };
        sq.write_imm(dst.addr(), dst.rkey() ^ 0x80, 1, Payload::Sges(&[bad]))
            .unwrap()
            .post(None);
        sq.ring_doorbell();
        drain();
    }

    #[test]
    fn fast_path_writes_what_the_general_path_writes() {
        let fast = transcript(false, None);
        let slow = transcript(true, None);
        // Of the 2 × 48 good WQEs, all but those due for the peer-liveness
        // check (each QP's first, then one per millisecond) are the fast
        // path's; the bad key is the general path's.
        assert!(
            (48..=94).contains(&fast.fast),
            "{} WQEs on the fast path",
            fast.fast
        );
        assert_eq!(slow.fast, 0);
        assert_eq!(fast.held + slow.held, 0, "no link model, nothing held");
        assert!(fast.cqes.iter().map(Vec::len).sum::<usize>() > 64);
        same(&fast, &slow, "fast path");
    }

    #[test]
    fn the_link_model_changes_when_completions_appear_not_what_they_say() {
        let slow = transcript(true, None);
        let link = Link {
            gbit_per_s: Some(25.0),
            latency: std::time::Duration::from_micros(3),
        };
        let linked = transcript(false, Some(link));
        // With a link model the fast path steps aside, and every CQE of each
        // CQ comes in the same order with the same bytes, the error CQEs
        // behind the successes held before them.
        assert_eq!(linked.fast, 0);
        // At least every receive CQE of the 2 × 32 WRITE_IMMs was held.
        assert!(linked.held >= 64, "{} CQEs held", linked.held);
        same(&linked, &slow, "link model");
    }

    fn same(a: &Transcript, b: &Transcript, what: &str) {
        for cq in 0..2 {
            assert_eq!(a.cqes[cq].len(), b.cqes[cq].len(), "{what}: CQ {cq}");
            for (i, (x, y)) in a.cqes[cq].iter().zip(&b.cqes[cq]).enumerate() {
                assert_eq!(x, y, "{what}: CQ {cq}, CQE {i}");
            }
        }
        assert!(a.mem != vec![0u8; a.mem.len()]);
        assert!(a.mem == b.mem, "{what}: target memory differs");
    }
}
