//! Nothing is allocated per transfer: a counting allocator watches a steady
//! stream of isend / irecv / test on registered buffers.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use mlx5::device::ExecMode;
use mpib::{Config, PolicyKind};
use support::*;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn steady_state_transfers_allocate_nothing() {
    let runs = [
        (PolicyKind::Adaptive, 0),
        (PolicyKind::Static(0.5), 0),
        (PolicyKind::Static(0.5), mpib::SUGGESTED_EAGER_MAX),
    ];
    for (policy, eager_max) in runs {
        let c = Config {
            policy,
            eager_max,
            ..Config::default()
        };
        let mut w = world("alloc", ExecMode::Inline, 2, &c);
        let src = [
            w.a.alloc_buffer(8192).unwrap(),
            w.a.alloc_buffer(8192).unwrap(),
        ];
        let dst = [
            w.b.alloc_buffer(8192).unwrap(),
            w.b.alloc_buffer(8192).unwrap(),
        ];
        let run = |w: &mut World, n: u64| {
            for k in 0..n {
                // Fast path (one buffer) and record path (two) in turn.
                let g = 1 + (k % 2) as usize;
                let rs = [dst[0].all(), dst[1].all()];
                let ss = [src[0].span(0, 4096).unwrap(), src[1].span(0, 1000).unwrap()];
                let r = w.b.irecv(&rs[..g], 1).unwrap().unwrap();
                let s = w.a.isend(&ss[..g], 1).unwrap().unwrap();
                let (mut sd, mut rd) = (false, false);
                while !(sd && rd) {
                    sd = sd || w.a.test(&s).unwrap().is_some();
                    rd = rd || w.b.test(&r).unwrap().is_some();
                }
            }
        };
        run(&mut w, 200); // warm up
        let before = allocs();
        run(&mut w, 2000);
        let n = allocs() - before;
        assert_eq!(
            n, 0,
            "{n} allocations in 2000 transfers ({policy:?}, eager up to {eager_max} B)"
        );
        // One buffer: the fast path, or eager over tag matching.
        let st = w.a.stats();
        let single = if eager_max == 0 {
            st.fast_path
        } else {
            st.eager_sends
        };
        assert!(single >= 1000 && st.record_path >= 1000, "{st:?}");
    }
}
