//! Tag matching at the work-request level (`mlx5::wr`): a domain's TM-SRQ,
//! its tags added and removed as `ibv_post_srq_ops` does, and the poll of
//! its CQ, which hands the tag's `wr_id` back with a matched message and the
//! SRQ WQE's with an unexpected one. The NIC inline and deferred.

mod support;

use std::time::{Duration, Instant};

use mlx5::device::{access, Context, RtrAttr, RtsAttr, TmSrqAttr};
use mlx5::prm::{Tmh, TmhOpcode};
use mlx5::sq::Sge;
use mlx5::tm::{TagInfo, TmEvent};
use mlx5::wr::{Domain, QpId, SendOp, SendWr, TmId, TmWc, WcOpcode, WcStatus};
use support::tm_world::{fabric_name, modes};
use support::FabricGuard;

/// Polls `tm`'s CQ until `n` completions came.
fn poll_tm(dom: &mut Domain, peer: &Context, tm: TmId, n: usize) -> Vec<TmWc> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        assert!(Instant::now() < deadline, "{} of {n}: {out:?}", out.len());
        dom.context().progress();
        peer.progress();
        dom.poll_tm(tm, n - out.len(), &mut out).unwrap();
    }
    out
}

#[test]
fn a_domain_matches_tagged_sends_and_reports_wr_ids() {
    for mode in modes() {
        let name = fabric_name("wr", &mode);
        let _g = FabricGuard(name.clone());
        let (a, b) = (
            Context::open_in_mode(&name, "sim0", mode).unwrap(),
            Context::open_in_mode(&name, "sim1", mode).unwrap(),
        );
        let mut rx = Domain::new(&a).unwrap();
        let mut tx = Domain::new(&b).unwrap();
        let rcq = rx.create_cq(256).unwrap();
        let attr = TmSrqAttr {
            wqe_cnt: 8,
            max_num_tags: 8,
            ..TmSrqAttr::default()
        };
        let (tm, srq) = rx.create_tm_srq(rcq, &attr).unwrap();
        let rq: QpId = rx
            .create_qp(rcq, rcq, Some(srq), &Default::default())
            .unwrap();
        let scq = tx.create_cq(256).unwrap();
        let sq = tx.create_qp(scq, scq, None, &Default::default()).unwrap();
        for (d, q, p, pq) in [(&rx, rq, &tx, sq), (&tx, sq, &rx, rq)] {
            let x = d.qp(q);
            x.to_init().unwrap();
            x.to_rtr(&RtrAttr::new(p.qp(pq).conn_info(), access::REMOTE_WRITE))
                .unwrap();
            x.to_rts(&RtsAttr::default()).unwrap();
        }
        let bufs = rx.pd().alloc_mr(8 * 1024, access::LOCAL_WRITE).unwrap();
        let sge = |at: usize, len: u32| Sge {
            addr: bufs.addr() + at as u64,
            len,
            lkey: bufs.lkey(),
        };
        for i in 0..4u64 {
            rx.post_srq_recv(srq, 100 + i, &[sge(4096 + i as usize * 1024, 1024)])
                .unwrap();
        }
        let h = rx.tm_add(tm, (7, !0), &[sge(0, 1024)], 55).unwrap();
        let src = tx.pd().alloc_mr(4096, 0).unwrap();
        for (k, tag) in [7u64, 9].into_iter().enumerate() {
            let mut hdr = [0u8; 16];
            Tmh::new_unchecked(&mut hdr[..]).set(TmhOpcode::Eager, 3, tag);
            src.write(k * 64, &hdr);
            src.write(k * 64 + 16, b"payload!");
            let s = Sge {
                addr: src.addr() + (k * 64) as u64,
                len: 24,
                lkey: src.lkey(),
            };
            let wr = SendWr {
                wr_id: k as u64,
                op: SendOp::Send,
                sges: &[s],
                remote: (0, 0),
                signaled: true,
                fence: false,
            };
            tx.post_send(sq, &wr).unwrap();
        }
        let got = poll_tm(&mut rx, &b, tm, 3);
        assert!(
            matches!(got[0], TmWc::Tm { event: TmEvent::Added { tag, .. }, srq_wr_id: None } if tag == h),
            "{mode:?}: {got:?}"
        );
        let TmWc::Tm {
            event,
            srq_wr_id: None,
        } = got[1]
        else {
            panic!("{got:?}");
        };
        assert_eq!(
            event,
            TmEvent::Matched {
                tag: h,
                info: Some(TagInfo { tag: 7, app_ctx: 3 }),
                len: Some(8),
                truncated: false,
                rndv_incomplete: false,
                imm: None,
                data: Some(55),
            }
        );
        assert_eq!(bufs.to_vec(0, 8), b"payload!");
        let TmWc::Tm {
            event: TmEvent::Unexpected { len, .. },
            srq_wr_id: Some(id),
        } = got[2]
        else {
            panic!("{got:?}");
        };
        assert_eq!(len, 24);
        assert_eq!(
            bufs.to_vec(4096 + (id - 100) as usize * 1024 + 16, 8),
            b"payload!"
        );
        assert_eq!(rx.tm_unexpected_seen(tm).unwrap(), 1);

        let mut wcs = Vec::new();
        while wcs.len() < 2 {
            b.progress();
            tx.poll_cq(scq, 2, &mut wcs).unwrap();
        }
        assert!(wcs
            .iter()
            .all(|w| w.status == WcStatus::Success && w.opcode == Some(WcOpcode::Send)));

        // A tag removed: its wr_id comes back with the REMOVE's completion.
        let h2 = rx.tm_add(tm, (1, !0), &[sge(1024, 64)], 66).unwrap();
        rx.tm_remove(tm, h2).unwrap();
        let got = poll_tm(&mut rx, &b, tm, 2);
        assert!(matches!(
            got[1],
            TmWc::Tm {
                event: TmEvent::Removed {
                    removed: true,
                    data: Some(66),
                    ..
                },
                ..
            }
        ));
    }
}
