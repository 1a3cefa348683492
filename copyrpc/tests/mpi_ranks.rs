//! Two MPI ranks connect with `mpi_setup::connect_all` and exchange verified
//! echoes both ways. Run under mpirun (`.ci/run` does):
//!
//! ```text
//! cargo test -p copyrpc --features mpi --test mpi_ranks --no-run
//! MLX5_SIM_FABRIC=mpi-test mpirun -np 2 -x MLX5_SIM_FABRIC target/debug/deps/mpi_ranks-<hash> --test-threads=1
//! ```
//! Outside mpirun (a single rank) the test checks that a lone rank connects to
//! nobody.
#![cfg(feature = "mpi")]

use std::cell::RefCell;
use std::rc::Rc;

use copyrpc::mpi_setup::connect_all;
use copyrpc::ContextBuilder;
use mpi::traits::{Communicator, CommunicatorCollectives};

#[test]
fn ranks_connect_and_echo() {
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    // A rank that fails must take the job down: otherwise the others wait for
    // it in a collective forever (and so would MPI_Finalize in this one).
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| connect_and_echo(&world)));
    if r.is_err() {
        eprintln!("rank {} failed; aborting the job", world.rank());
        world.abort(101);
    }
}

fn connect_and_echo(world: &mpi::topology::SimpleCommunicator) {
    let (n, me) = (world.size() as usize, world.rank() as usize);
    let fabric =
        std::env::var("MLX5_SIM_FABRIC").unwrap_or_else(|_| format!("mpi-{}", std::process::id()));
    let dev = mlx5::device::Context::open_in(&fabric, &format!("sim{me}")).unwrap();
    type Log = Rc<RefCell<Vec<(u64, Vec<u8>)>>>;
    let got: Log = Default::default();
    let g = got.clone();
    let mut ctx = ContextBuilder::new()
        .ring_size(1 << 14)
        .build(
            &dev,
            move |t: u64, r: Result<&[u8], copyrpc::CallFailed>| {
                g.borrow_mut().push((t, r.unwrap().to_vec()))
            },
        )
        .unwrap();
    let eps = connect_all(world, &mut ctx).unwrap();
    assert_eq!(eps.iter().filter(|e| e.is_some()).count(), n - 1);
    if n == 1 {
        drop(ctx);
        mlx5::sim::fabric::Fabric::remove_if_unused(&fabric);
        return;
    }
    // Every rank calls every other rank 200 times and answers everyone.
    let per = 200u64;
    let mut sent = vec![0u64; n];
    let want = per * (n as u64 - 1);
    let mut served = 0u64;
    for _ in 0..10_000_000 {
        for (r, ep) in eps.iter().enumerate() {
            let Some(ep) = *ep else { continue };
            if sent[r] < per {
                let tag = (r as u64) << 32 | sent[r];
                if ctx.call(ep, &tag.to_le_bytes(), 16, tag).is_ok() {
                    sent[r] += 1;
                }
            }
        }
        ctx.poll();
        while let Some(h) = ctx.recv() {
            let mut d = ctx.request(&h).unwrap().to_vec();
            d.extend_from_slice(&(me as u64).to_le_bytes());
            ctx.reply(h, &d).unwrap();
            served += 1;
        }
        if got.borrow().len() as u64 == want && served == want {
            break;
        }
    }
    // Keep polling until every rank is done: replies written after the last
    // poll go out with the next one, and the software NIC retries stalled
    // sends (RNR) only from this process's polls.
    let mut all_done = world.immediate_barrier();
    loop {
        ctx.poll();
        match all_done.test() {
            Ok(_) => break,
            Err(pending) => all_done = pending,
        }
    }
    assert_eq!(got.borrow().len() as u64, want);
    for (t, d) in got.borrow().iter() {
        let peer = (t >> 32) as usize;
        assert_eq!(&d[..8], &t.to_le_bytes(), "request echoed");
        assert_eq!(
            u64::from_le_bytes(d[8..16].try_into().unwrap()) as usize,
            peer,
            "answered by the rank called"
        );
    }
    assert_eq!(served, want);
}
