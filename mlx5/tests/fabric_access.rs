//! A software-device fabric is private to the user who created it: its
//! directory has mode 0700, its registry and segment files 0600 (whatever the
//! umask), and a process of another user that opens it gets
//! `FabricError::NotOwner`, naming the owner and the fabric's directory.
//!
//! The refusal test runs a copy of this test binary as uid/gid 65534
//! (`nobody`), which needs root; as another user it says so and passes.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use mlx5::device::{access, Context, CqAttr, DeviceError};
use mlx5::sim::fabric::{Fabric, FabricError};

/// The uid and gid the refusal test's child runs as.
const OTHER: u32 = 65534;

fn dir_of(name: &str) -> PathBuf {
    Path::new("/dev/shm").join(format!("mlx5sim-{name}"))
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn fabric_files_are_private_to_their_owner() {
    // A umask that takes nothing away: the modes must not depend on it (the
    // other test of this binary may create its fabric meanwhile, under the
    // same rule).
    // SAFETY: umask has no preconditions.
    let old = unsafe { libc::umask(0) };
    let name = format!("access-modes-{}", std::process::id());
    let ctx = Context::open_in(&name, "sim0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let cq = ctx.create_cq(&CqAttr::default()).unwrap();
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let dir = dir_of(&name);
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files.iter().any(|p| p.ends_with("registry")), "{files:?}");
    assert!(
        files
            .iter()
            .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("seg-"))
            .count()
            >= 2,
        "{files:?}"
    );
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    drop((cq, mr, pd, ctx));
    Fabric::remove_if_unused(&name);

    // A fabric directory left by an older build (0755) is tightened when
    // its owner opens it.
    let old_name = format!("access-old-{}", std::process::id());
    let old_dir = dir_of(&old_name);
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&old_dir)
        .unwrap();
    std::fs::set_permissions(&old_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = Fabric::open(&old_name).unwrap();
    assert_eq!(mode(&old_dir), 0o700);
    drop(f);
    Fabric::remove_if_unused(&old_name);
}

/// What the child running as another user does: open the fabric, try to
/// read its registry, and report both.
fn other_user(name: &str) {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    println!("CHILD uid={uid}");
    match Fabric::open(name) {
        Err(e @ FabricError::NotOwner { .. }) => {
            if let FabricError::NotOwner {
                owner, path, uid, ..
            } = &e
            {
                println!("REFUSED owner={owner} uid={uid} path={}", path.display());
            }
            println!("MESSAGE {e}");
        }
        Err(e) => println!("OTHER ERROR {e:?}"),
        Ok(_) => println!("OPENED"),
    }
    // Through the device API, the same error.
    match Context::open_in(name, "sim0") {
        Err(DeviceError::Fabric(FabricError::NotOwner { .. })) => println!("DEVICE REFUSED"),
        other => println!("DEVICE {other:?}"),
    }
    // And its files are out of reach.
    match std::fs::read(dir_of(name).join("registry")) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => println!("READ DENIED"),
        other => println!("READ {:?}", other.map(|v| v.len())),
    }
}

#[test]
fn another_user_is_refused_with_a_clear_error() {
    if let Ok(name) = std::env::var("MLX5_ACCESS_FABRIC") {
        return other_user(&name);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "skipped: running a child as another user (uid {OTHER}) needs root; \
             this process is not root"
        );
        return;
    }
    let name = format!("access-other-{}", std::process::id());
    let ctx = Context::open_in(&name, "sim0").unwrap();
    let _cq = ctx.create_cq(&CqAttr::default()).unwrap();
    // A copy of this binary that the other user may run (the build directory
    // need not be open to it).
    let tmp = std::env::temp_dir().join(format!("mlx5-fabric-access-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = tmp.join("fabric_access");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.args([
        "--exact",
        "another_user_is_refused_with_a_clear_error",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("MLX5_ACCESS_FABRIC", &name)
    .current_dir(&tmp);
    // SAFETY: between fork and exec only async-signal-safe calls: setgroups,
    // setgid, setuid.
    unsafe {
        cmd.pre_exec(|| {
            let g = OTHER as libc::gid_t;
            if libc::setgroups(1, &g) != 0
                || libc::setgid(OTHER as libc::gid_t) != 0
                || libc::setuid(OTHER as libc::uid_t) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = dir_of(&name);
    assert!(stdout.contains(&format!("CHILD uid={OTHER}")), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "REFUSED owner=0 uid={OTHER} path={}",
            dir.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "MESSAGE fabric {name}: {} belongs to uid 0, and this process runs as uid {OTHER}",
            dir.display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("DEVICE REFUSED"), "{stdout}");
    assert!(stdout.contains("READ DENIED"), "{stdout}");
    drop((_cq, ctx));
    Fabric::remove_if_unused(&name);
}
