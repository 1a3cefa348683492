//! Memory regions in 2 MiB huge pages ([`Pd::alloc_mr_huge`]).
//!
//! On the software device huge pages do not apply: the region is an ordinary
//! one and says so. On a real device (`MLX5_TEST_DEVICE`; kernel soft-RoCE in
//! the qemu guest of `scripts/rxe/run-tests.sh`, which reserves 2 MiB pages
//! before it runs this) each region takes its pages from the pool while the
//! pool has them, the pool's free count drops by as many, and once it is
//! empty the next region is in normal pages, registered and usable all the
//! same; dropping the regions gives the pages back.

use mlx5::device::{access, Context, Mr, Pd};

/// Free pages of the 2 MiB pool (0 where the kernel has no such pool).
fn free_2m_pages() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// A region is memory this process can use, whatever backs it.
fn usable(mr: &Mr, len: usize) {
    assert_eq!(mr.len(), len);
    assert_ne!(mr.lkey(), 0);
    assert_eq!(mr.to_vec(len - 8, 8), [0; 8], "zeroed");
    mr.write(len - 5, b"pages");
    assert_eq!(&mr.to_vec(len - 5, 5), b"pages");
}

const RW: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;

#[test]
fn the_software_device_allocates_as_usual_and_reports_not_huge() {
    let fabric = format!("huge-{}", std::process::id());
    let ctx = Context::open_in(&fabric, "sim0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr_huge(1 << 20, RW).unwrap();
    usable(&mr, 1 << 20);
    assert!(!mr.is_huge());
    assert!(!pd.alloc_mr(4096, RW).unwrap().is_huge());
    assert!(format!("{mr:?}").contains("huge: false"), "{mr:?}");
    drop((mr, pd, ctx));
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
}

/// Most huge regions the real-device test takes before it stops looking for
/// the pool's end.
const MAX_HUGE: usize = 64;

#[test]
#[ignore = "needs MLX5_TEST_DEVICE naming an RDMA device"]
fn huge_regions_use_the_pool_then_fall_back_to_normal_pages() {
    let dev = std::env::var("MLX5_TEST_DEVICE").expect("MLX5_TEST_DEVICE");
    let ctx = Context::open(&dev).unwrap();
    let pd: Pd = ctx.alloc_pd().unwrap();
    let before = free_2m_pages();
    eprintln!("{dev}: {before} free 2 MiB pages before");

    // A region of less than a page takes a whole page; one of 3 MiB two.
    let mut held = Vec::new();
    let mut pages = 0;
    while pages < before.min(MAX_HUGE) {
        let len = if pages + 2 <= before && held.len() == 1 {
            3 << 20
        } else {
            1 << 20
        };
        let mr = pd.alloc_mr_huge(len, RW).unwrap();
        assert!(mr.is_huge(), "region {} of {before} free pages", held.len());
        usable(&mr, len);
        pages += len.div_ceil(2 << 20);
        assert_eq!(free_2m_pages(), before - pages, "the pool gave its pages");
        held.push(mr);
    }
    if before <= MAX_HUGE {
        // The pool is empty: normal pages, registered and usable as well.
        let mr = pd.alloc_mr_huge(1 << 20, RW).unwrap();
        assert!(!mr.is_huge(), "no free page left");
        usable(&mr, 1 << 20);
        assert_eq!(free_2m_pages(), 0);
        held.push(mr);
    }
    // Without asking, normal pages.
    assert!(!pd.alloc_mr(1 << 20, RW).unwrap().is_huge());
    eprintln!(
        "{dev}: {} huge regions ({pages} pages), {} free 2 MiB pages while held",
        held.iter().filter(|m| m.is_huge()).count(),
        free_2m_pages()
    );
    drop(held);
    assert_eq!(
        free_2m_pages(),
        before,
        "dropped regions give their pages back"
    );
}
