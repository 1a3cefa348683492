//! Two MPI ranks connect with `mpi_setup::connect_all` and move verified
//! transfers both ways at once. Run under mpirun (`.ci/run` does):
//!
//! ```text
//! cargo test -p mpib --features mpi --test mpi_ranks --no-run
//! MLX5_SIM_FABRIC=mpi-test mpirun -np 2 -x MLX5_SIM_FABRIC target/debug/deps/mpi_ranks-<hash> --test-threads=1
//! ```
//! Rank `r` takes software devices `sim{2r}` and `sim{2r+1}` as its rails.
//! Data is split across both rails by the adaptive policy; CTS entries travel
//! on both rails. Outside mpirun (a single rank) the test checks that
//! a lone rank connects to nobody.
#![cfg(feature = "mpi")]

use mlx5::device::Context;
use mpi::traits::Communicator;
use mpib::mpi_setup::connect_all;
use mpib::{Config, PolicyKind, Request};

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as u8).wrapping_mul(31) ^ (i as u8).wrapping_add((seed >> 8) as u8))
        .collect()
}

#[test]
fn ranks_connect_and_transfer() {
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        connect_and_transfer(&world)
    }));
    if r.is_err() {
        eprintln!("rank {} failed; aborting the job", world.rank());
        world.abort(101);
    }
}

fn connect_and_transfer(world: &mpi::topology::SimpleCommunicator) {
    let (n, me) = (world.size() as usize, world.rank() as usize);
    let fabric = std::env::var("MLX5_SIM_FABRIC")
        .unwrap_or_else(|_| format!("mpib-mpi-{}", std::process::id()));
    let devs: Vec<Context> = [2 * me, 2 * me + 1]
        .iter()
        .map(|d| Context::open_in(&fabric, &format!("sim{d}")).unwrap())
        .collect();
    let cfg = Config {
        policy: PolicyKind::Adaptive,
        ..Config::default()
    };
    let mut comms = connect_all(world, &devs, &cfg).unwrap();
    assert_eq!(comms.iter().filter(|c| c.is_some()).count(), n - 1);
    if n == 1 {
        drop(comms);
        drop(devs);
        mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
        return;
    }
    let peer = 1 - me;
    let comm = comms[peer].as_mut().unwrap();
    let (sbuf, rbuf) = (
        comm.alloc_buffer(1 << 16).unwrap(),
        comm.alloc_buffer(1 << 16).unwrap(),
    );
    let len = |k: u64, who: usize| 1 + (k as usize * 4099 + who * 7) % (1 << 16);
    let count = 200u64;
    let (mut sent, mut got) = (0u64, 0u64);
    let (mut s, mut r): (Option<Request>, Option<Request>) = (None, None);
    for _ in 0..50_000_000u64 {
        if r.is_none() && got < count {
            r = comm.irecv(&[rbuf.all()], got as u32).unwrap();
        }
        if s.is_none() && sent < count {
            let l = len(sent, me);
            sbuf.write(0, &pattern(sent * 2 + me as u64, l)).unwrap();
            s = comm
                .isend(&[sbuf.span(0, l as u64).unwrap()], sent as u32)
                .unwrap();
        }
        if let Some(q) = &s {
            if comm.test(q).unwrap().is_some() {
                s = None;
                sent += 1;
            }
        }
        if let Some(q) = &r {
            if let Some(sz) = comm.test(q).unwrap() {
                let l = len(got, peer);
                assert_eq!(&*sz, &[l as u32], "transfer {got}");
                assert!(
                    rbuf.to_vec(0, l).unwrap() == pattern(got * 2 + peer as u64, l),
                    "transfer {got}"
                );
                r = None;
                got += 1;
            }
        }
        comm.progress();
        if sent == count && got == count {
            break;
        }
    }
    assert_eq!((sent, got), (count, count), "rank {me}");
    eprintln!("rank {me}: {count} transfers each way verified");
}
