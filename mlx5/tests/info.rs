//! `mlx5-info` looks and creates nothing: listing devices, or printing its
//! help, leaves no fabric behind; a fabric that exists is shown.

use std::path::Path;
use std::process::Command;

fn info(fabric: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mlx5-info"))
        .args(args)
        .env("MLX5_SIM_FABRIC", fabric)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn listing_devices_creates_no_fabric() {
    let fabric = format!("info-{}", std::process::id());
    let dir = format!("/dev/shm/mlx5sim-{fabric}");
    for args in [&[][..], &["--help"][..], &["--device", "sim3"][..]] {
        let out = info(&fabric, args);
        assert!(
            !Path::new(&dir).exists(),
            "mlx5-info {args:?} created {dir}"
        );
        if args.is_empty() {
            assert!(out.contains("not created yet"), "{out}");
        }
    }
    // Once a program has made the fabric, its devices are shown.
    let ctx = mlx5::sim::device::SimContext::open_in(&fabric, "sim0").unwrap();
    let out = info(&fabric, &["--device", "sim1"]);
    assert!(out.contains("hca_id: sim1"), "{out}");
    assert!(
        out.contains("tag_matching:    255 tags, 32768 outstanding ops, 1 SGE"),
        "{out}"
    );
    drop(ctx);
    mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
}
