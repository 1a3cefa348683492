//! Build script. With the `rdma-core-oracle` feature it compiles
//! `oracle/oracle.c` against rdma-core's `<infiniband/mlx5dv.h>` for the oracle
//! tests (`tests/oracle.rs`); without it, it does nothing, so the default build
//! needs no RDMA packages.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(mlx5_oracle_x86)");
    if std::env::var_os("CARGO_FEATURE_RDMA_CORE_ORACLE").is_some() {
        #[cfg(feature = "rdma-core-oracle")]
        oracle::build();
    }
}

#[cfg(feature = "rdma-core-oracle")]
mod oracle {
    use std::{env, fs, path::PathBuf};

    const SOURCE: &str = "oracle/oracle.c";
    const ABI_SOURCE: &str = "oracle/abi.c";
    const DC_WR_SOURCE: &str = "oracle/dc_wr.c";
    const INSTALL_HINT: &str = "the `rdma-core-oracle` feature needs rdma-core's \
        <infiniband/mlx5dv.h>; install it with `apt-get install libibverbs-dev` \
        (Debian/Ubuntu) or `dnf install rdma-core-devel` (Fedora/RHEL)";

    pub fn build() {
        println!("cargo:rerun-if-changed={SOURCE}");
        probe_header();

        cc::Build::new()
            .file(SOURCE)
            .warnings(true)
            .extra_warnings(true)
            .compile("mlx5_prm_oracle");

        // sizeof/offsetof of the hardware backend's hand-written bindings.
        println!("cargo:rerun-if-changed={ABI_SOURCE}");
        cc::Build::new()
            .file(ABI_SOURCE)
            .warnings(true)
            .compile("mlx5_abi_oracle");

        // rdma-core's own DC WQE writer (inline work-request functions only),
        // for the hardware oracle test of ours.
        println!("cargo:rerun-if-changed={DC_WR_SOURCE}");
        cc::Build::new()
            .file(DC_WR_SOURCE)
            .warnings(true)
            .extra_warnings(true)
            .compile("mlx5_dc_wr_oracle");

        // The SSE variant of the control-segment helper exists only when the
        // header is compiled with SSE3 (and needs SSSE3 for its shuffle), so it
        // gets its own object; tests/oracle.rs calls it after checking the CPU.
        let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
        if arch == "x86_64" || arch == "x86" {
            cc::Build::new()
                .file(SOURCE)
                .define("ORACLE_X86_ONLY", None)
                .flag("-mssse3")
                .warnings(true)
                .extra_warnings(true)
                .compile("mlx5_prm_oracle_x86");
            println!("cargo:rustc-cfg=mlx5_oracle_x86");
        }
    }

    /// Fails with an install hint, rather than a compiler error, when the
    /// header cannot be found.
    fn probe_header() {
        let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
        let probe = out.join("mlx5dv_probe.c");
        fs::write(&probe, "#include <infiniband/mlx5dv.h>\n").expect("write probe");
        if let Err(e) = cc::Build::new()
            .file(&probe)
            .cargo_metadata(false)
            .try_expand()
        {
            panic!("{INSTALL_HINT}\n(preprocessing `#include <infiniband/mlx5dv.h>` failed: {e})");
        }
    }
}
