//! The hardware backend's error paths, as they show on a machine without a NIC
//! (with or without rdma-core installed). With `MLX5_TEST_DEVICE` naming a real
//! device the no-device assertions are skipped.

use mlx5::hw::{list_devices, HwContext, HwError, Verbs};

fn real_device() -> Option<String> {
    std::env::var("MLX5_TEST_DEVICE").ok()
}

#[test]
fn a_missing_library_is_a_clear_error() {
    let e = Verbs::load_from("libdoesnotexist.so.1", "libmlx5.so.1")
        .err()
        .expect("must fail");
    match &e {
        HwError::LibraryMissing { lib, reason } => {
            assert_eq!(lib, "libdoesnotexist.so.1");
            assert!(!reason.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("libdoesnotexist.so.1") && msg.contains("apt-get install"),
        "{msg}"
    );
}

#[test]
fn a_library_without_the_verbs_is_a_clear_error() {
    // libc loads but has no ibv_get_device_list.
    match Verbs::load_from("libc.so.6", "libc.so.6").err() {
        Some(HwError::SymbolMissing { symbol, .. }) => assert_eq!(symbol, "ibv_get_device_list"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_device_here() {
    if real_device().is_some() {
        return;
    }
    match list_devices() {
        // rdma-core installed (CI), no NIC, no kernel RDMA.
        Err(HwError::NoDevice) => {}
        // A fresh machine with only the Rust toolchain.
        Err(HwError::LibraryMissing { .. }) => {}
        other => panic!("expected no device on this machine, got {other:?}"),
    }
}

#[test]
fn an_unknown_device_name() {
    let e = HwContext::open("mlx5_does_not_exist").expect_err("must fail");
    match (&e, real_device()) {
        (HwError::UnknownDevice { name, present }, Some(_)) => {
            assert_eq!(name, "mlx5_does_not_exist");
            assert!(!present.is_empty());
        }
        (HwError::NoDevice | HwError::LibraryMissing { .. }, None) => {}
        other => panic!("{other:?}"),
    }
    assert!(!e.to_string().is_empty());
}
