//! Contexts that sleep when idle, on the software device: every call is
//! answered across sleeps on both sides (no wake-up lost), a waker ends a
//! wait, an idle context uses no CPU, and `IdlePolicy::Spin` never sleeps.
//! The same bodies run on soft-RoCE in tests/rxe.rs.

mod support;

use std::time::{Duration, Instant};

use copyrpc::transport::Mlx5;
use copyrpc::{CallFailed, ContextBuilder, IdlePolicy};
use mlx5::device::Context as Device;
use support::sleep::*;
use test_support::FabricGuard;

/// Two software devices in a fabric of the test's own, removed at the end.
fn devs(tag: &str) -> (FabricGuard, Device, Device) {
    let f = FabricGuard::unique("idle", tag);
    let a = Device::open_in(f.name(), "sim0").unwrap();
    let b = Device::open_in(f.name(), "sim1").unwrap();
    (f, a, b)
}

#[test]
fn sleepers_answer_every_call_on_the_software_device() {
    let (_f, a, b) = devs("calls");
    sleepers_answer_every_call::<Mlx5>(a, b, 400);
}

#[test]
fn an_idle_context_costs_no_cpu_on_the_software_device() {
    let (_f, a, b) = devs("cpu");
    // 2% of a core.
    an_idle_context_costs_no_cpu::<Mlx5>(a, b, Duration::from_secs(1), 50);
}

#[test]
fn a_waker_ends_a_wait_and_a_pending_wake_the_next() {
    let (_f, a, _b) = devs("waker");
    let mut ctx = ContextBuilder::new()
        .build(&a, |_: u64, _: Result<&[u8], CallFailed>| {})
        .unwrap();
    let w = ctx.waker();
    // A wake before the wait: the wait returns at once; a second wait sleeps
    // its timeout.
    w.wake();
    w.wake();
    let t = Instant::now();
    assert_eq!(ctx.wait(Duration::from_secs(30)).unwrap(), 0);
    assert!(t.elapsed() < Duration::from_secs(10));
    let t = Instant::now();
    ctx.wait(Duration::from_millis(30)).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(30), "wakes piled up");
    // A wake from another thread ends a sleep under way.
    let w2 = w.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        w2.wake();
    });
    let t = Instant::now();
    let sleeps = ctx.sleeps();
    ctx.wait(Duration::from_secs(30)).unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "the wake was lost");
    assert_eq!(ctx.sleeps(), sleeps + 1);
    th.join().unwrap();
}

#[test]
fn the_spin_policy_never_sleeps_and_wakes_still_end_its_wait() {
    let (_f, a, _b) = devs("spin");
    let mut ctx = ContextBuilder::new()
        .idle(IdlePolicy::Spin)
        .build(&a, |_: u64, _: Result<&[u8], CallFailed>| {})
        .unwrap();
    let t = Instant::now();
    assert_eq!(ctx.wait(Duration::from_millis(20)).unwrap(), 0);
    assert!(t.elapsed() >= Duration::from_millis(20));
    assert_eq!(ctx.sleeps(), 0);
    let w = ctx.waker();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        w.wake();
    });
    let t = Instant::now();
    ctx.wait(Duration::from_secs(30)).unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "the wake was lost");
    assert_eq!(ctx.sleeps(), 0);
    th.join().unwrap();
}
