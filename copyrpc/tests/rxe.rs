//! copyrpc on a real RDMA device through the verbs data path: kernel
//! soft-RoCE (`rxe0`) in the qemu guest of `scripts/rxe/run-tests.sh`, which
//! runs these with `COPYRPC_TEST_DEVICE=rxe0 --ignored`.
//!
//! The bodies are the ones the software-device tests run (tests/support):
//! echo with every byte verified, wrap, out-of-order replies, random
//! interleavings under the flow-control invariant, the READ fallback, and
//! removal with calls in flight (the peer's QP exhausting its retries, flush
//! errors on the verbs path, a neighbouring pair undisturbed), and contexts
//! that sleep when idle (`ibv_req_notify_cq` and the completion channel). Both
//! contexts share the one device (RoCE loopback); sizes are small because the
//! guest's traffic is emulated.

mod support;

use copyrpc::transport::Verbs;
use copyrpc::ContextBuilder;
use mlx5::device::Context as Device;
use mlx5::wr::DataPath;
use support::*;

const WHY: &str = "needs an RDMA device: COPYRPC_TEST_DEVICE=rxe0 in the rxe guest \
                   (bash scripts/rxe/run-tests.sh)";

fn device() -> Device {
    let name = test_device().expect(WHY);
    let dev = Device::open(&name).unwrap_or_else(|e| panic!("open {name}: {e}"));
    assert_eq!(
        DataPath::of(&dev),
        DataPath::Verbs,
        "{name} is not mlx5: the verbs data path"
    );
    dev
}

fn rxe_world(b: ContextBuilder, n: usize) -> World<Verbs> {
    let d = device();
    let w = world_on::<Verbs>((d.clone(), d), b, n);
    assert!(w.realtime);
    w
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn echo_every_byte_verified() {
    let mut w = rxe_world(ContextBuilder::new().ring_size(1 << 14), 1);
    echo_run(&mut w, 500, |i| (i as usize * 97) % 1500);
    let st = w.client.stats(w.pairs[0].0);
    assert_eq!((st.calls, st.responses), (500, 500));
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn wrap_across_ring_and_message_sizes() {
    for (ring, max_len) in [(256u64, 20usize), (512, 53), (1024, 100), (4096, 500)] {
        let mut w = rxe_world(ContextBuilder::new().ring_size(ring), 1);
        // The largest message and allowance a ring admits: C/4 - 44 bytes.
        echo_run(&mut w, 3 * ring / 32, move |i| {
            (i.wrapping_mul(0x9e37) % (max_len as u64 + 1)) as usize
        });
        assert!(w.client.stats(w.pairs[0].0).wraps > 0, "{ring}/{max_len}");
    }
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn out_of_order_replies() {
    let mut w = rxe_world(ContextBuilder::new().ring_size(1 << 14), 1);
    out_of_order(&mut w);
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn random_interleavings_keep_the_invariant() {
    for seed in 1..=3u64 {
        let ring = [256u64, 1024, 4096][(seed % 3) as usize];
        let mut w = rxe_world(ContextBuilder::new().ring_size(ring), 1);
        interleave(&mut w, seed, ring, 100);
    }
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn read_fallback_refreshes_a_stale_consumer_position() {
    let mut w = rxe_world(ContextBuilder::new().ring_size(16384), 1);
    read_fallback(&mut w);
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn many_endpoints_on_one_context() {
    let b = ContextBuilder::new()
        .ring_size(1024)
        .sq_size(16)
        .cq_size(1024)
        .srq_size(256);
    let mut w = rxe_world(b, 32);
    for (k, &(c, _)) in w.pairs.iter().enumerate() {
        for j in 0..2u64 {
            let tag = (k as u64) << 8 | j;
            w.client.call(c, &payload(tag, 40), 40, tag).unwrap();
        }
    }
    w.until_responses(64, 0);
    for (t, r) in w.log.borrow().iter() {
        assert_eq!(r.as_ref().unwrap(), &transform(&payload(*t, 40)));
    }
    for &(c, _) in &w.pairs {
        assert_eq!(w.client.stats(c).responses, 2);
    }
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn remove_with_work_in_flight() {
    let mut w = rxe_world(ContextBuilder::new().ring_size(4096), 2);
    remove_in_flight(&mut w);
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn sleepers_answer_every_call() {
    let d = device();
    support::sleep::sleepers_answer_every_call::<Verbs>(d.clone(), d, 100);
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn an_idle_context_costs_no_cpu() {
    let d = device();
    // 10% of a core: CI's rxe guest emulates its CPU (qemu TCG, no KVM),
    // where the 50 µs spin and arming the CQ through the kernel cost tens of
    // times what they do natively (2 sleeps took 25–30 ms there); the count
    // of waits is the measure that holds on any machine.
    support::sleep::an_idle_context_costs_no_cpu::<Verbs>(
        d.clone(),
        d,
        std::time::Duration::from_secs(1),
        10,
    );
}

/// Free pages of the 2 MiB pool (0 where the kernel has no such pool).
fn free_2m_pages() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn rings_in_huge_pages_carry_every_call() {
    // Two endpoints a side, four rings each (send and receive of each
    // endpoint), 64 KiB rounded up to a 2 MiB page apiece: 8 pages in all.
    let before = free_2m_pages();
    let b = ContextBuilder::new().ring_size(1 << 16).huge_pages(true);
    let mut w = rxe_world(b, 2);
    let huge = w.client.huge_page_rings() + w.server.huge_page_rings();
    eprintln!(
        "{before} free 2 MiB pages before, {} with {huge} huge rings",
        free_2m_pages()
    );
    if before >= 8 {
        assert_eq!(
            (w.client.huge_page_rings(), w.server.huge_page_rings()),
            (4, 4)
        );
        assert_eq!(free_2m_pages(), before - 8);
    } else {
        // Not enough reserved: some rings fall back to normal pages.
        assert_eq!(huge, before, "every free page used, one ring each");
    }
    echo_run(&mut w, 300, |i| (i as usize * 97) % 1500);
    assert_eq!(w.client.stats(w.pairs[0].0).responses, 300);
    drop(w);
    assert_eq!(free_2m_pages(), before, "the rings' pages went back");
}

/// A device on the verbs path has no DC transport: asking for it is a clear
/// error, before anything is created.
#[test]
#[ignore = "needs an RDMA device (COPYRPC_TEST_DEVICE)"]
fn dc_is_refused_on_the_verbs_path() {
    struct Nothing;
    impl copyrpc::transport::OnTransport for Nothing {
        type Output = ();
        fn run<T: copyrpc::transport::Transport>(self, _: Device) {
            panic!("DC ran on the verbs path");
        }
    }
    let d = device();
    let name = d.name().to_owned();
    match copyrpc::transport::run_on_device_as(d, copyrpc::transport::Wire::Dc, Nothing) {
        Err((_, e)) => {
            let m = e.to_string();
            assert!(m.contains(&name) && m.contains("no DC"), "{m}");
        }
        Ok(()) => unreachable!(),
    }
}
