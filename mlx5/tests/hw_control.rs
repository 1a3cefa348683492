//! The hardware backend's control path on a real RDMA device, through the
//! device API: open, PD, MR, CQ, SRQ, two RC QPs connected to each other
//! through RESET → INIT → RTR → RTS → ERR, and a wrong transition reported with
//! the verb and errno. Runs where `MLX5_TEST_DEVICE` names a device; here that is
//! kernel soft-RoCE in a qemu guest.
//!
//! `bash scripts/rxe/run-tests.sh` boots that guest and runs this test there
//! (docs/testing.md).

use mlx5::cq::Compression;
use mlx5::device::{
    access, Context, CqAttr, DeviceError, QpCaps, QpState, RtrAttr, RtsAttr, TmCaps, TmSrqAttr,
};
use mlx5::hw::{HwContext, HwError};

#[test]
#[ignore = "needs MLX5_TEST_DEVICE naming an RDMA device"]
fn control_path_on_a_real_device() {
    let dev = std::env::var("MLX5_TEST_DEVICE").expect("MLX5_TEST_DEVICE");
    let ctx = Context::open(&dev).unwrap();
    assert_eq!(ctx.name(), dev);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .alloc_mr(
            1 << 20,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )
        .unwrap();
    assert_eq!(mr.len(), 1 << 20);
    assert_ne!(mr.lkey(), 0);
    mr.write(100, b"registered memory is ours to use");
    assert_eq!(&mr.to_vec(100, 10), b"registered");
    let cq = ctx
        .create_cq(&CqAttr {
            cqe_cnt: 256,
            compression: Compression::Off,
            ..CqAttr::default()
        })
        .unwrap();
    let srq = ctx.create_srq(&pd, 64, 1).unwrap();
    let a = ctx
        .create_qp(&pd, &cq, &cq, None, &QpCaps::default())
        .unwrap();
    let b = ctx
        .create_qp(&pd, &cq, &cq, Some(&srq), &QpCaps::default())
        .unwrap();
    assert_ne!(a.qpn(), b.qpn());
    assert_eq!(a.state(), QpState::Reset);

    // A transition the verbs reject: reported with the verb and errno.
    match a.to_rts(&RtsAttr::default()) {
        Err(DeviceError::Hw(HwError::Verb { verb, errno })) => {
            assert_eq!(verb, "ibv_modify_qp(RTS)");
            assert_eq!(errno, libc::EINVAL);
        }
        other => panic!("{other:?}"),
    }
    let msg = a.to_rts(&RtsAttr::default()).unwrap_err().to_string();
    assert!(
        msg.contains("ibv_modify_qp(RTS)") && msg.contains("Invalid argument"),
        "{msg}"
    );

    // Connect a and b to each other over the device's port.
    let all = access::REMOTE_WRITE | access::REMOTE_READ;
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.to_init().unwrap();
        assert_eq!(x.state(), QpState::Init);
        x.to_rtr(&RtrAttr {
            remote: y.conn_info(),
            access: all,
            min_rnr_timer: 12,
            max_dest_rd_atomic: 1,
        })
        .unwrap();
        assert_eq!(x.state(), QpState::Rtr);
    }
    for x in [&a, &b] {
        x.to_rts(&RtsAttr::default()).unwrap();
        assert_eq!(x.state(), QpState::Rts, "as the device reports it");
    }
    a.to_err().unwrap();
    assert_eq!(a.state(), QpState::Err);

    // On a device that is not mlx5 there is no direct data path.
    if let Context::Hw(h) = &ctx {
        if !h.is_mlx5() {
            assert!(matches!(
                cq.ring(),
                Err(DeviceError::Hw(HwError::NotMlx5(_)))
            ));
            assert!(matches!(
                b.send_queue::<mlx5::wqe_table::OrderedDense<()>>(Default::default()),
                Err(DeviceError::Hw(HwError::NotMlx5(_)))
            ));
            // Nor DC queues: soft-RoCE has no DC transport.
            let dci = ctx.create_dci(&pd, &cq, &QpCaps::default(), Default::default());
            match dci {
                Err(DeviceError::Invalid(msg)) => {
                    assert!(
                        msg.contains("no DC transport") && msg.contains("RC"),
                        "{msg}"
                    )
                }
                other => panic!("{other:?}"),
            }
            assert!(matches!(
                ctx.dci_stream_caps(),
                Err(DeviceError::Invalid(_))
            ));
        }
    }
}

/// Kernel soft-RoCE has no tag matching: its capabilities say so, the
/// device API refuses a TM-SRQ naming the device, and the verb itself,
/// asked anyway through the provider's `verbs_context` (rdma-core 44's rxe
/// provider has `create_srq_ex`: the error names the verb, not a missing
/// one), fails with `EOPNOTSUPP` in the kernel (rxe creates basic SRQs
/// only).
#[test]
#[ignore = "needs MLX5_TEST_DEVICE naming an RDMA device without tag matching (rxe)"]
fn a_device_without_tag_matching_says_so() {
    let dev = std::env::var("MLX5_TEST_DEVICE").expect("MLX5_TEST_DEVICE");
    let ctx = Context::open(&dev).unwrap();
    assert_eq!(ctx.tm_caps().unwrap(), TmCaps::default());
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    let e = ctx
        .create_tm_srq(&pd, &cq, &TmSrqAttr::default())
        .unwrap_err();
    assert!(
        matches!(e, DeviceError::NoTagMatching(ref d) if *d == dev),
        "{e}"
    );
    assert!(e.to_string().contains("has no tag matching"), "{e}");

    let hw = HwContext::open(&dev).unwrap();
    let hpd = hw.alloc_pd().unwrap();
    let hcq = hw.create_cq(256, 64, Compression::Off).unwrap();
    match hw.create_tm_srq(&hpd, &hcq, &TmSrqAttr::default()) {
        Err(HwError::Verb { verb, errno }) => {
            assert_eq!((verb, errno), ("ibv_create_srq_ex", libc::EOPNOTSUPP));
        }
        other => panic!("{other:?}"),
    }
}
