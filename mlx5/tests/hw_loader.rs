//! The hardware backend's error paths, as they show on a machine without a NIC
//! (with or without rdma-core installed). With `MLX5_TEST_DEVICE` naming a real
//! device the no-device assertions are skipped.

use mlx5::hw::{list_devices, HwContext, HwError, Verbs};

fn real_device() -> Option<String> {
    std::env::var("MLX5_TEST_DEVICE").ok()
}

#[test]
fn a_missing_library_is_a_clear_error() {
    let e = Verbs::load_from("libdoesnotexist.so.1", "libmlx5.so.1").expect_err("must fail");
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

#[test]
fn auto_falls_back_to_the_software_device_with_a_notice() {
    if real_device().is_some() {
        return;
    }
    // In a child process, so that its stderr can be read.
    if std::env::var("MLX5_AUTO_CHILD").is_ok() {
        // The notice is a log event: a subscriber writes it to stderr.
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
        let c = mlx5::device::Context::open("auto").unwrap();
        assert!(c.as_sim().is_some());
        println!("OPENED {}", c.name());
        return;
    }
    let fabric = format!("auto-{}", std::process::id());
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "auto_falls_back_to_the_software_device_with_a_notice",
            "--nocapture",
        ])
        .env("MLX5_AUTO_CHILD", "1")
        .env("MLX5_SIM_FABRIC", &fabric)
        .output()
        .unwrap();
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("OPENED sim0"), "{stdout}");
    let notice: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(" WARN mlx5::device::context: "))
        .collect();
    assert_eq!(notice.len(), 1, "one notice line: {stderr}");
    assert!(
        notice[0].ends_with("using the software device sim0"),
        "{}",
        notice[0]
    );
}

#[test]
fn mlx5_info_lists_the_software_devices() {
    let fabric = format!("info-{}", std::process::id());
    // mlx5-info shows a fabric some program made; it makes none itself.
    let made = mlx5::sim::device::SimContext::open_in(&fabric, "sim0").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlx5-info"))
        .env("MLX5_SIM_FABRIC", &fabric)
        .output()
        .unwrap();
    drop(made);
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        s.contains("hca_id: sim0") && s.contains("hca_id: sim1"),
        "{s}"
    );
    assert!(
        s.contains("cqe_compression") && s.contains("blueflame") && s.contains("max_inline"),
        "{s}"
    );
    if real_device().is_none() {
        assert!(
            s.contains("hardware: "),
            "the hardware line says why there is none: {s}"
        );
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlx5-info"))
        .args(["--device", "nope", "--no-sim"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "an unknown device is an error");
}
