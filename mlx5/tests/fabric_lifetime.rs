//! A software-device fabric's shared memory is mapped while a context of this
//! process uses it, and released when the last one closes: the registry and
//! every segment (queues, memory regions) are unmapped, so a long-lived
//! process that opens and closes fabrics does not keep their memory.

use mlx5::device::{access, Context, Cq, CqAttr, Mr};
use mlx5::sim::fabric::Fabric;

/// Mappings of this process that lie in the fabric's directory.
fn mapped(fabric: &str) -> usize {
    let dir = format!("/mlx5sim-{fabric}/");
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .filter(|l| l.contains(&dir))
        .count()
}

/// Opens `dev` and makes a PD, an MR and a CQ on it.
fn busy_context(fabric: &str, dev: &str) -> (Context, Mr, Cq) {
    let ctx = Context::open_in(fabric, dev).expect("open the software device");
    let pd = ctx.alloc_pd().expect("pd");
    let mr = pd.alloc_mr(1 << 16, access::LOCAL_WRITE).expect("mr");
    let cq = ctx
        .create_cq(&CqAttr {
            cqe_cnt: 64,
            ..CqAttr::default()
        })
        .expect("cq");
    (ctx, mr, cq)
}

#[test]
fn the_last_context_to_close_unmaps_the_fabric() {
    let fabric = format!("lifetime-{}", std::process::id());
    assert_eq!(mapped(&fabric), 0);

    let first = busy_context(&fabric, "sim0");
    let with_one = mapped(&fabric);
    // The registry, the MR's segment and the CQ's.
    assert!(with_one >= 3, "{with_one} mappings with one context");

    let second = busy_context(&fabric, "sim1");
    assert!(mapped(&fabric) > with_one);

    // The second context still uses the fabric: the registry stays.
    drop(first);
    assert!(mapped(&fabric) > 0, "unmapped while a context is open");

    drop(second);
    assert_eq!(
        mapped(&fabric),
        0,
        "mappings left after the last context closed"
    );

    // Opening it again works, and its state is still there for others.
    let again = busy_context(&fabric, "sim0");
    assert!(mapped(&fabric) >= 3);
    drop(again);
    assert_eq!(mapped(&fabric), 0);

    Fabric::remove_if_unused(&fabric);
    assert_eq!(mapped(&fabric), 0);
}
