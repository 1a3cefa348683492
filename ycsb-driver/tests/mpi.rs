//! The multi-rank driver (feature `mpi`): two ranks under `mpirun`, rank 0
//! embedding the server and loading, each rank running half of the
//! operations, and one report merged from both at rank 0. Needs Open MPI's
//! `mpirun` (`.ci/run` installs it):
//! `cargo test -p ycsb-driver --features mpi --test mpi`.
#![cfg(feature = "mpi")]

use std::process::Command;

mod support;
use support::{ok_count, output_within};

#[test]
fn two_ranks_one_merged_report() {
    let out = output_within(
        Command::new("mpirun")
            .args([
                "-np",
                "2",
                env!("CARGO_BIN_EXE_ycsb-driver"),
                "run",
                "-P",
                "workloada",
            ])
            .args(["-p", "recordcount=300", "-p", "operationcount=3001"])
            .args(["-p", "dataintegrity=true", "--depth", "4"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            // Waiting ranks yield the CPU (CI has two cores for three spinning threads).
            .env("OMPI_MCA_mpi_yield_when_idle", "1"),
        240,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One report (rank 0's), with both ranks' operations: 1501 + 1500.
    assert_eq!(
        stdout.matches("[OVERALL], RunTime(ms)").count(),
        1,
        "{stdout}"
    );
    let ok = |op: &str| ok_count(&stdout, op);
    assert_eq!(ok("READ") + ok("UPDATE"), 3001, "{stdout}");
    assert!(!stdout.contains("Return=ERROR"), "{stdout}");
    assert!(!stdout.contains("UNEXPECTED_STATE"), "{stdout}");
}
