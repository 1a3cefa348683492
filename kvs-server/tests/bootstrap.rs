//! Bootstrapping is explicit. With a data dir, a new cluster starts only
//! with `--bootstrap`: an empty data dir without it or `--join` is refused
//! (it may be a member whose data dir was lost, which must not come back as
//! a second cluster at its old address), and `--bootstrap` with `--join` is
//! refused. A data dir that holds a member resumes it, with `--bootstrap` or
//! without.

use test_support::FabricGuard;

mod support;
use support::{run_server, temp_dir, ServerProcess};

/// The flags of a member on `fabric` at `listen` with data dir `dir`, then
/// `extra`.
fn member_args<'a>(
    fabric: &'a str,
    listen: &'a str,
    dir: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "--listen",
        listen,
        "--device",
        "sim1",
        "--fabric",
        fabric,
        "--workers",
        "1",
        "--stats-interval",
        "0",
        "--data-dir",
        dir,
    ];
    args.extend_from_slice(extra);
    args
}

/// The cluster id in a server's "member N of cluster ID, map version V"
/// line.
fn cluster_id(printed: &str) -> String {
    let line = printed
        .lines()
        .find(|l| l.starts_with("kvs-server: member ") && l.contains(" of cluster "))
        .unwrap_or_else(|| panic!("no cluster line in: {printed}"));
    let id = line.split(" of cluster ").nth(1).unwrap();
    id.split(',').next().unwrap().trim().to_string()
}

/// Checks that the refusal of an empty data dir `dir` says what to do.
fn says_bootstrap_or_join(out: &str, dir: &str) {
    for what in [dir, "--bootstrap", "--join", "lost"] {
        assert!(out.contains(what), "no {what:?} in: {out}");
    }
}

#[test]
fn an_empty_data_dir_needs_bootstrap_or_join() {
    let fabric = FabricGuard::unique("kvs-bootstrap", "empty");
    let dir = temp_dir("bootstrap-empty");
    let d = dir.to_str().unwrap();
    let (status, out) = run_server(&member_args(fabric.name(), "127.0.0.1:0", d, &[]));
    assert!(!status.success(), "{out}");
    says_bootstrap_or_join(&out, d);
    // Nothing was written: the dir can still bootstrap or join.
    assert!(std::fs::read_dir(&*dir).unwrap().next().is_none());
    // The same from the config file's keys.
    let cfg = dir.join("kvs.toml");
    support::write_file(&cfg, &format!("data_dir = \"{d}/m\"\n"), 0o600);
    let (status, out) = run_server(&[
        "--config",
        cfg.to_str().unwrap(),
        "--device",
        "sim1",
        "--fabric",
        fabric.name(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(!status.success(), "{out}");
    says_bootstrap_or_join(&out, &format!("{d}/m"));
}

#[test]
fn a_member_whose_data_dir_was_lost_does_not_found_a_second_cluster() {
    let fabric = FabricGuard::unique("kvs-bootstrap", "lost");
    let dir = temp_dir("bootstrap-lost");
    let d = dir.to_str().unwrap();
    let first = ServerProcess::start(&member_args(
        fabric.name(),
        "127.0.0.1:0",
        d,
        &["--bootstrap"],
    ));
    let addr = first.addr.to_string();
    drop(first.output());
    // The disk is replaced: the data dir is there again, empty.
    std::fs::remove_dir_all(&*dir).unwrap();
    std::fs::create_dir_all(&*dir).unwrap();
    // Restarted with the flags a unit file gives every restart (no
    // --bootstrap, no --join), at its old address.
    let (status, out) = run_server(&member_args(fabric.name(), &addr, d, &[]));
    assert!(!status.success(), "it started: {out}");
    assert!(!out.contains("started cluster"), "{out}");
    says_bootstrap_or_join(&out, d);
    assert!(std::fs::read_dir(&*dir).unwrap().next().is_none());
}

#[test]
fn a_bootstrapped_member_resumes_its_cluster_with_or_without_bootstrap() {
    let fabric = FabricGuard::unique("kvs-bootstrap", "resume");
    let dir = temp_dir("bootstrap-resume");
    let d = dir.to_str().unwrap();
    let first = ServerProcess::start(&member_args(
        fabric.name(),
        "127.0.0.1:0",
        d,
        &["--bootstrap"],
    ));
    let addr = first.addr.to_string();
    let out = first.output();
    assert!(out.contains("started cluster"), "{out}");
    let id = cluster_id(&out);
    // A restart without --bootstrap resumes the same member.
    let again = ServerProcess::start(&member_args(fabric.name(), &addr, d, &[]));
    let out = again.output();
    assert_eq!(cluster_id(&out), id, "{out}");
    assert!(out.contains("resuming member 0"), "{out}");
    // With --bootstrap still given: ignored, and said so.
    let again = ServerProcess::start(&member_args(fabric.name(), &addr, d, &["--bootstrap"]));
    let out = again.output();
    assert_eq!(cluster_id(&out), id, "{out}");
    assert!(out.contains("bootstrap is ignored"), "{out}");
}

#[test]
fn bootstrap_and_join_together_are_refused() {
    let fabric = FabricGuard::unique("kvs-bootstrap", "both");
    let dir = temp_dir("bootstrap-both");
    let d = dir.to_str().unwrap();
    let both = ["--bootstrap", "--join", "127.0.0.1:9"];
    let (status, out) = run_server(&member_args(fabric.name(), "127.0.0.1:0", d, &both));
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("bootstrap") && out.contains("join") && out.contains("not both"),
        "{out}"
    );
    assert!(std::fs::read_dir(&*dir).unwrap().next().is_none());
}
