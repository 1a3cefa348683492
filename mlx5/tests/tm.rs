//! Tag matching on the software device: a TM-SRQ's list commands (APPEND,
//! REMOVE, NOP with the unexpected count) posted by `mlx5::tm::TmSrq` on the
//! SRQ's command QP, executed by the NIC in order, and completed with the
//! CQEs rdma-core's mlx5 provider reads. Every scenario runs with the NIC
//! inline and deferred.

mod support;

use std::time::{Duration, Instant};

use mlx5::cq::{Completion, CqRing};
use mlx5::device::{CqAttr, ExecMode, QpState, TmSrqAttr};
use mlx5::prm::{CqeOpcode, Syndrome, TmAppOp, TmCmd, CQE_APP_TAG_MATCHING};
use mlx5::sim::device::{SimContext, SimCq, SimPd, SimTmSrq, SIM_TM_CAPS};
use mlx5::sq::{SendQueue, Sge, SqConfig};
use mlx5::tm::{is_list_cqe, TagHandle, TmError, TmEvent, TmSrq};
use mlx5::wqe_table::{CommandFifo, OrderedSparse};
use support::tm_world::{fabric_name, modes};
use support::FabricGuard;

struct Tm {
    ctx: SimContext,
    cq: CqRing,
    srq: SimTmSrq,
    _objs: (SimCq, SimPd),
    _g: FabricGuard,
}

fn tm_srq(tag: &str, mode: ExecMode, max_num_tags: u32) -> Tm {
    let name = fabric_name(tag, &mode);
    let g = FabricGuard(name.clone());
    let ctx = SimContext::open_in_mode(&name, "sim0", mode).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let attr = TmSrqAttr {
        max_num_tags,
        ..TmSrqAttr::default()
    };
    let srq = ctx.create_tm_srq(&pd, &cq, &attr).unwrap();
    Tm {
        cq: cq.ring().unwrap(),
        ctx,
        srq,
        _objs: (cq, pd),
        _g: g,
    }
}

impl Tm {
    /// Software's side of the list, on the command QP's send queue.
    fn list(&self, max_tags: u16) -> TmSrq<u32> {
        TmSrq::new(self.cmd_queue(), max_tags)
    }

    fn cmd_queue<T: mlx5::wqe_table::SendTable>(&self) -> SendQueue<T> {
        self.srq
            .cmd_qp()
            .send_queue(SqConfig {
                signal_interval: 0,
                ..SqConfig::default()
            })
            .unwrap()
    }

    /// Polls CQEs until `n` have come (the NIC runs in between), handing
    /// each to `f`.
    fn poll(&mut self, n: usize, mut f: impl FnMut(&Completion<'_>)) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = 0;
        while got < n {
            assert!(Instant::now() < deadline, "{got} of {n} CQEs in 10 s");
            self.ctx.progress();
            got += self.cq.poll(n - got, |c| f(c));
        }
    }

    /// The events of the next `n` list CQEs.
    fn events(&mut self, tm: &mut TmSrq<u32>, n: usize) -> Vec<TmEvent<u32>> {
        let mut out = Vec::new();
        self.poll(n, |c| {
            assert!(is_list_cqe(c), "not a list CQE: {:02x?}", c.bytes());
            out.push(tm.complete(c).unwrap());
        });
        out
    }

    /// No CQE is waiting (after the NIC ran).
    fn quiet(&mut self) {
        for _ in 0..10 {
            self.ctx.progress();
        }
        assert_eq!(
            self.cq
                .poll(usize::MAX, |c| panic!("CQE {:02x?}", c.bytes())),
            0
        );
    }
}

fn added(tag: u16) -> TmEvent<u32> {
    TmEvent::Added {
        tag: TagHandle::from_index(tag),
        sync_req: false,
    }
}

#[test]
fn the_device_offers_tag_matching_and_checks_the_attributes() {
    for mode in modes() {
        let t = tm_srq("caps", mode, 8);
        assert_eq!(t.ctx.tm_caps(), SIM_TM_CAPS);
        let caps = t.ctx.tm_caps();
        assert!(caps.rc && caps.max_num_tags > 0 && caps.max_sge == 1);
        let pd = t.ctx.alloc_pd();
        let cq = t.ctx.create_cq(&CqAttr::default()).unwrap();
        for bad in [
            TmSrqAttr {
                max_num_tags: 0,
                ..TmSrqAttr::default()
            },
            TmSrqAttr {
                max_num_tags: SIM_TM_CAPS.max_num_tags + 1,
                ..TmSrqAttr::default()
            },
            TmSrqAttr {
                max_ops: 0,
                ..TmSrqAttr::default()
            },
        ] {
            let e = t.ctx.create_tm_srq(&pd, &cq, &bad).unwrap_err();
            assert!(e.to_string().contains("invalid argument"), "{bad:?}: {e}");
        }
        // The command QP is connected to itself and ready.
        let qp = t.srq.cmd_qp();
        assert_eq!(qp.state(), QpState::Rts);
    }
}

#[test]
fn appends_complete_in_order_and_a_remove_hands_the_data_back() {
    for mode in modes() {
        let mut t = tm_srq("order", mode, 8);
        let mut tm = t.list(8);
        let tags: Vec<TagHandle> = (0..5u32)
            .map(|i| tm.add(0x100 + u64::from(i), !0, &[], i).unwrap())
            .collect();
        assert_eq!(
            tags.iter().map(|h| h.index()).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4],
            "entries are filled in the chain's order"
        );
        tm.ring_doorbell();
        assert_eq!(
            t.events(&mut tm, 5),
            (0..5).map(added).collect::<Vec<_>>(),
            "{mode:?}"
        );
        assert_eq!(tm.tags_in_use(), 5);

        tm.remove(tags[3]).unwrap();
        assert_eq!(
            tm.remove(tags[3]),
            Err(TmError::NotInList(tags[3])),
            "removed twice"
        );
        tm.remove(tags[1]).unwrap();
        tm.ring_doorbell();
        let ev = t.events(&mut tm, 2);
        assert_eq!(
            ev,
            [
                TmEvent::Removed {
                    tag: tags[3],
                    removed: true,
                    data: Some(3),
                    sync_req: false
                },
                TmEvent::Removed {
                    tag: tags[1],
                    removed: true,
                    data: Some(1),
                    sync_req: false
                },
            ],
            "{mode:?}"
        );
        assert_eq!(tm.tags_in_use(), 3);
        assert_eq!(tm.remove(tags[1]), Err(TmError::NotInList(tags[1])), "gone");
        t.quiet();
    }
}

#[test]
fn a_full_list_refuses_an_append_and_takes_one_after_a_remove() {
    for mode in modes() {
        let mut t = tm_srq("full", mode, 4);
        let mut tm = t.list(4);
        let tags: Vec<TagHandle> = (0..4u32)
            .map(|i| tm.add(u64::from(i), !0, &[], i).unwrap())
            .collect();
        assert_eq!(tm.add(9, !0, &[], 9), Err(TmError::ListFull { max: 4 }));
        tm.ring_doorbell();
        assert_eq!(t.events(&mut tm, 4).len(), 4);
        t.quiet();
        tm.remove(tags[0]).unwrap();
        tm.ring_doorbell();
        t.events(&mut tm, 1);
        // The spare (entry 4) is filled next; entry 0 becomes the spare.
        let h = tm.add(9, !0, &[], 9).unwrap();
        assert_eq!(h.index(), 4);
        assert_eq!(tm.add(10, !0, &[], 10), Err(TmError::ListFull { max: 4 }));
        tm.ring_doorbell();
        assert_eq!(t.events(&mut tm, 1), [added(4)], "{mode:?}");
        // Entries cycle through the whole list, many times over.
        let mut live: Vec<TagHandle> = tags[1..].iter().copied().chain([h]).collect();
        for round in 0..50u32 {
            let old = live.remove(0);
            tm.remove(old).unwrap();
            tm.ring_doorbell();
            t.events(&mut tm, 1);
            let new = tm.add(u64::from(round), !0, &[], round).unwrap();
            tm.ring_doorbell();
            assert_eq!(t.events(&mut tm, 1), [added(new.index())], "round {round}");
            live.push(new);
        }
        assert_eq!(tm.tags_in_use(), 4);
        assert_eq!(tm.add(99, !0, &[], 0), Err(TmError::ListFull { max: 4 }));
    }
}

#[test]
fn a_buffer_of_two_sges_is_refused_before_anything_is_posted() {
    let mut t = tm_srq("sges", ExecMode::Inline, 4);
    let mut tm = t.list(4);
    let s = Sge {
        addr: 0x1000,
        len: 64,
        lkey: 1,
    };
    assert_eq!(tm.add(1, !0, &[s, s], 0), Err(TmError::TooManySges(2)));
    tm.ring_doorbell();
    t.quiet();
    assert_eq!(tm.tags_in_use(), 0);
}

#[test]
fn a_sync_completes_as_a_noop_and_unsignaled_commands_give_no_cqe() {
    for mode in modes() {
        let mut t = tm_srq("sync", mode, 4);
        let mut tm = t.list(4);
        tm.sync(0, false).unwrap();
        tm.ring_doorbell();
        t.quiet();
        tm.sync(0, true).unwrap();
        tm.add(7, 0xff, &[], 7).unwrap();
        tm.ring_doorbell();
        assert_eq!(
            t.events(&mut tm, 2),
            [TmEvent::Synced, added(0)],
            "{mode:?}"
        );
    }
}

/// The command CQEs as rdma-core reads them: opcode NO_PACKET, `app` tag
/// matching, the list operation, the success bit, the NIC's unexpected
/// count, the entry, the SRQ and command QP, and the command's counter.
#[test]
fn list_cqes_carry_what_rdma_core_reads() {
    for mode in modes() {
        let mut t = tm_srq("bytes", mode, 4);
        let mut sq: SendQueue<OrderedSparse<()>> = t.cmd_queue();
        let (srqn, qpn) = (t.srq.srq().srqn(), t.srq.cmd_qp().qpn());
        let cmds = [
            TmCmd::append(1, 0x1234, !0).signaled(),
            TmCmd::append(2, 0x5678, 0xff00).signaled().sync(0),
            TmCmd::remove(1).signaled(),
            // Entry 3 holds no tag: the REMOVE fails.
            TmCmd::remove(3).signaled(),
            TmCmd::nop().signaled().sync(0),
        ];
        let mut counters = Vec::new();
        for c in &cmds {
            let b = sq.tm_command(c, None).unwrap();
            counters.push(b.counter());
            b.post(Some(()));
        }
        // The control segment leaves fm_ce_se zero: CQE_REQ asks instead.
        assert_eq!(sq.bb(counters[0])[11], 0);
        assert_eq!(sq.bb(counters[0])[..4], [0, 0, 0, 0x28]);
        sq.ring_doorbell();
        let want = [
            (TmAppOp::Append, 0, true),
            (TmAppOp::Append, 1, true),
            (TmAppOp::Remove, 1, true),
            (TmAppOp::Remove, 3, false),
            (TmAppOp::Noop, 0, true),
        ];
        let mut i = 0;
        t.poll(want.len(), |c| {
            let q = c.cqe();
            let (op, entry, ok) = want[i];
            assert_eq!(q.opcode(), Some(CqeOpcode::NoPacket));
            assert_eq!(
                (q.app(), q.tm_op()),
                (CQE_APP_TAG_MATCHING, Some(op)),
                "CQE {i}"
            );
            assert_eq!((q.app_info(), q.tm_succeeded()), (entry, ok), "CQE {i}");
            assert_eq!(q.tm_hw_phase_cnt(), 0);
            assert_eq!((q.srqn(), q.qpn()), (srqn, qpn));
            assert_eq!(q.wqe_counter(), counters[i]);
            i += 1;
        });
        t.quiet();
    }
}

/// An APPEND that names its own entry as the next one, or an entry past
/// the list, is a local QP operation error: the command QP goes to ERR.
#[test]
fn a_malformed_append_fails_the_command_qp() {
    for (k, bad) in [TmCmd::append(0, 1, !0), TmCmd::append(5, 1, !0)]
        .into_iter()
        .enumerate()
    {
        for mode in modes() {
            let mut t = tm_srq(&format!("bad{k}"), mode, 4);
            let mut sq: SendQueue<OrderedSparse<()>> = t.cmd_queue();
            sq.tm_command(&bad.signaled(), None).unwrap().post(Some(()));
            sq.ring_doorbell();
            t.poll(1, |c| {
                assert!(c.is_error());
                assert_eq!(c.err_cqe().syndrome(), Some(Syndrome::LocalQpOp));
            });
            assert_eq!(t.srq.cmd_qp().state(), QpState::Err, "{bad:?} {mode:?}");
        }
    }
}

/// The command table hands CQEs to commands oldest first, whatever counter
/// a CQE names, and frees the unsignaled commands' space with them.
#[test]
fn the_command_table_retires_oldest_first() {
    use mlx5::wqe_table::SendTable;
    let mut t = CommandFifo::<u32>::with_capacity(8);
    t.record(0, 1, Some(None), false);
    t.record(1, 2, Some(Some(10)), true);
    t.record(2, 3, Some(Some(11)), true);
    assert_eq!(t.outstanding(), 3);
    let mut b = [0u8; 64];
    mlx5::prm::Cqe64::new_unchecked(&mut b[..]).set_wqe_counter(2);
    let c = Completion::new(&b, &[]);
    let mut got = Vec::new();
    assert_eq!(t.retire(&c, |u, _| got.push(u)), 1);
    assert_eq!(t.retire(&c, |u, _| got.push(u)), 1);
    assert_eq!(t.retire(&c, |u, _| got.push(u)), 0, "nothing left");
    assert_eq!(got, [10, 11]);
    assert_eq!(t.outstanding(), 0);
}

/// Through the device API: the software device's capabilities, a TM-SRQ
/// whose command queue is handed out once, attributes past the
/// capabilities refused.
#[test]
fn the_device_api_makes_tm_srqs() {
    use mlx5::device::{Context, DeviceError};
    let name = fabric_name("api", &ExecMode::Inline);
    let _g = FabricGuard(name.clone());
    let ctx = Context::open_in(&name, "sim0").unwrap();
    assert_eq!(ctx.tm_caps().unwrap(), SIM_TM_CAPS);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let attr = TmSrqAttr {
        max_num_tags: 8,
        ..TmSrqAttr::default()
    };
    let h = ctx.create_tm_srq(&pd, &cq, &attr).unwrap();
    assert_eq!(h.max_num_tags(), 8);
    let mut tm = h.tm_srq::<u32>().unwrap();
    assert!(matches!(h.tm_srq::<u32>(), Err(DeviceError::Taken(_))));
    // QPs that receive tagged messages go on the SRQ.
    let srq = h.srq();
    let qp = ctx
        .create_qp(&pd, &cq, &cq, Some(&srq), &mlx5::device::QpCaps::default())
        .unwrap();
    assert_eq!(qp.state(), QpState::Reset);
    let mut ring = cq.ring().unwrap();
    tm.add(1, !0, &[], 1).unwrap();
    tm.ring_doorbell();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.is_empty() {
        assert!(Instant::now() < deadline);
        ctx.progress();
        ring.poll(1, |c| got.push(tm.complete(c).unwrap()));
    }
    assert_eq!(got, [added(0)]);
    let too_many = TmSrqAttr {
        max_ops: SIM_TM_CAPS.max_ops + 1,
        ..TmSrqAttr::default()
    };
    let e = ctx.create_tm_srq(&pd, &cq, &too_many).unwrap_err();
    assert!(matches!(e, DeviceError::Invalid(_)), "{e}");
}
