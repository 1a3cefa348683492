//! User memory registered through the registration cache: ranges inside a
//! live registration reuse it, transfers use it on both rails, the last
//! deregistration drops it.

mod support;

use mlx5::device::ExecMode;
use mpib::Config;
use support::*;

#[test]
fn registrations_are_shared_and_carry_transfers() {
    let mut w = world("reg", ExecMode::Inline, 2, &Config::default());
    let mut src = vec![0u8; 3 * 4096 + 100];
    let mut dst = vec![0u8; 3 * 4096 + 100];
    let data = pattern(5, 10_000);
    src[50..10_050].copy_from_slice(&data);
    // SAFETY: the vectors outlive the communicators' use of them: both are
    // deregistered (or the communicators dropped) before the vectors go.
    let (rs, rs2, rd) = unsafe {
        (
            w.a.register(src.as_ptr(), src.len()).unwrap(),
            w.a.register(src.as_ptr().add(4096), 100).unwrap(),
            w.b.register(dst.as_mut_ptr(), dst.len()).unwrap(),
        )
    };
    let st = w.a.reg_stats();
    assert_eq!(
        (st.registered, st.hits, st.live),
        (1, 1, 1),
        "the sub-range reuses the registration"
    );
    assert!(
        rs.span(0, src.len() as u64 + 1).is_err(),
        "outside the region"
    );
    let r = post_recv(&mut w.b, &mut w.a, &[rd.span(7, 10_000).unwrap()], 3);
    let s = post_send(&mut w.a, &mut w.b, &[rs.span(50, 10_000).unwrap()], 3);
    let (_, got) = wait_both(&mut w.a, &s, &mut w.b, &r);
    assert_eq!(&*got, &[10_000]);
    assert_eq!(
        w.a.stats().signals,
        [1, 1],
        "both rails used the registration"
    );
    // Read the destination only now that the transfer completed.
    assert!(dst[7..10_007] == data[..]);
    assert!(dst[..7].iter().all(|&b| b == 0));
    w.a.deregister(rs).unwrap();
    assert_eq!(w.a.reg_stats().live, 1, "still referenced");
    w.a.deregister(rs2).unwrap();
    assert_eq!(w.a.reg_stats().live, 0, "dropped with its last reference");
    w.b.deregister(rd).unwrap();
    // A region of another communicator is refused.
    // SAFETY: as above.
    let other = unsafe { w.b.register(dst.as_ptr(), 10).unwrap() };
    assert!(w.a.deregister(other).is_err());
    drop(w);
    drop((src, dst));
}
