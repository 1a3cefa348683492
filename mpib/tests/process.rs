//! A peer process killed mid-transfer: the survivor's calls report a closed
//! communicator within seconds, never hang.
//!
//! The test binary runs itself again as the peer (`MPIB_CHILD_ROLE` tells the
//! child what to do); the communicators connect over TCP. Data is split 50/50
//! across both rails.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mlx5::device::{Context, ExecMode};
use mpib::conn::{connect, Listener};
use mpib::{CloseReason, Comm, Config, Error, PolicyKind};
use support::*;

const ROLE: &str = "MPIB_CHILD_ROLE";

fn cfg() -> Config {
    Config {
        policy: PolicyKind::Static(0.5),
        ..Config::default()
    }
}

fn len_of(k: u64) -> usize {
    1 + (k as usize * 7919) % 60_000
}

/// Runs in the child process only (does nothing in a normal test run): the
/// peer of the tests below, until it is killed.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let fabric = std::env::var("MPIB_FABRIC").unwrap();
    let addr = std::env::var("MPIB_ADDR").unwrap();
    let devs: Vec<Context> = ["sim2", "sim3"]
        .iter()
        .map(|d| Context::open_in(&fabric, d).unwrap())
        .collect();
    let mut comm = connect(addr.as_str(), &devs, &cfg()).unwrap();
    let buf = comm.alloc_buffer(1 << 16).unwrap();
    for k in 0u64.. {
        let r = match role.as_str() {
            "sender" => {
                let len = len_of(k);
                buf.write(0, &pattern(k, len)).unwrap();
                loop {
                    if let Some(r) = comm.isend(&[buf.span(0, len as u64).unwrap()], 0).unwrap() {
                        break r;
                    }
                    comm.progress();
                }
            }
            _ => loop {
                if let Some(r) = comm.irecv(&[buf.all()], 0).unwrap() {
                    break r;
                }
                comm.progress();
            },
        };
        while comm.test(&r).unwrap().is_none() {}
    }
}

fn spawn(role: &str, fabric: &str, addr: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env("MPIB_FABRIC", fabric)
        .env("MPIB_ADDR", addr)
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Calls `step` until it fails; panics if that takes more than 20 s.
fn fails_soon(comm: &mut Comm, mut step: impl FnMut(&mut Comm) -> Result<(), Error>) -> Error {
    let t = Instant::now();
    loop {
        if let Err(e) = step(comm) {
            eprintln!("closed after {:?}: {e}", t.elapsed());
            return e;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no error 20 s after the peer died"
        );
    }
}

fn setup(tag: &str, role: &str) -> (FabricGuard, Vec<Context>, Listener, Child) {
    let fabric = unique_name("mpib", tag);
    let g = FabricGuard(fabric.clone());
    let devs = open(&fabric, ExecMode::Inline, 2);
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let child = spawn(role, &fabric, &addr);
    (g, devs, listener, child)
}

fn dead(e: &Error) -> bool {
    matches!(
        e,
        Error::Closed(CloseReason::PeerGone | CloseReason::Transport { .. })
    )
}

#[test]
fn sender_process_killed_mid_transfer() {
    let (_g, devs, listener, mut child) = setup("kill-tx", "sender");
    let mut comm = listener.accept(&devs, &cfg()).unwrap();
    let buf = comm.alloc_buffer(1 << 16).unwrap();
    for k in 0..30u64 {
        let r = loop {
            if let Some(r) = comm.irecv(&[buf.all()], 0).unwrap() {
                break r;
            }
        };
        let s = loop {
            if let Some(s) = comm.test(&r).unwrap() {
                break s;
            }
        };
        let len = len_of(k);
        assert_eq!(&*s, &[len as u32]);
        assert_eq!(
            buf.to_vec(0, len).unwrap(),
            pattern(k, len),
            "transfer {k} across processes"
        );
    }
    // A receive is posted, so the sender is sending when it is killed.
    let mut r = comm.irecv(&[buf.all()], 0).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // The transfer may have finished before the sender died: that receive
    // completes, and a new one posted after it fails.
    let e = fails_soon(&mut comm, |c| {
        match r.take() {
            None => r = c.irecv(&[buf.all()], 0)?,
            Some(req) => {
                if c.test(&req)?.is_none() {
                    r = Some(req);
                }
            }
        }
        Ok(())
    });
    assert!(dead(&e), "{e}");
}

#[test]
fn receiver_process_killed_mid_transfer() {
    let (_g, devs, listener, mut child) = setup("kill-rx", "receiver");
    let mut comm = listener.accept(&devs, &cfg()).unwrap();
    let buf = comm.alloc_buffer(1 << 16).unwrap();
    for k in 0..30u64 {
        let len = len_of(k);
        let s = loop {
            if let Some(s) = comm.isend(&[buf.span(0, len as u64).unwrap()], 0).unwrap() {
                break s;
            }
            comm.progress();
        };
        while comm.test(&s).unwrap().is_none() {}
    }
    // Both rails carried data into the other process.
    let st = comm.stats();
    assert!(st.rail_bytes[0] > 0 && st.rail_bytes[1] > 0, "{st:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    // Sends keep going until the channel or a QP reports the death.
    let e = fails_soon(&mut comm, |c| {
        if let Some(s) = c.isend(&[buf.span(0, 1000).unwrap()], 0)? {
            while c.test(&s)?.is_none() {}
        }
        c.progress();
        Ok(())
    });
    assert!(dead(&e), "{e}");
}
