//! Eager transfers over tag matching: one buffer of at most the eager
//! threshold goes at once, with no CTS. Messages that beat their receive
//! (parked in a bounce buffer, or arriving while the receive's tag cannot
//! match yet) are delivered; a receive larger than the threshold takes an
//! eager message or a CTS transfer, whichever the sender picks; peers
//! without tag matching keep the CTS path; an eager message that fits no
//! receive is refused with its reason. Inline and deferred.

mod support;

use mlx5::device::{ExecMode, FaultPlan};
use mpib::{Comm, Config};
use support::*;

fn modes() -> Vec<ExecMode> {
    let deferred = (1..=3).map(|seed| ExecMode::Deferred {
        seed,
        faults: FaultPlan {
            delay: 100,
            rnr: 50,
            ..FaultPlan::default()
        },
    });
    std::iter::once(ExecMode::Inline).chain(deferred).collect()
}

fn eager_config() -> Config {
    Config {
        depth: 8,
        eager_max: 4096,
        ..Config::default()
    }
}

/// Tests `reqs` on `c` (driving `other` too) until all are done; returns
/// the sizes in order.
fn wait_all(c: &mut Comm, other: &mut Comm, reqs: &[mpib::Request]) -> Vec<u64> {
    let mut out = vec![None; reqs.len()];
    for _ in 0..STEPS {
        for (o, r) in out.iter_mut().zip(reqs) {
            if o.is_none() {
                *o = c.test(r).expect("test").map(|s| s.total());
            }
        }
        other.progress();
        if out.iter().all(Option::is_some) {
            return out.into_iter().map(Option::unwrap).collect();
        }
    }
    panic!("requests never completed: {out:?}");
}

/// Sends go before any receive: the messages land in bounce buffers and
/// are parked, or (the first receive's tag was appended before the NIC
/// was told of them) arrive while its tag cannot match; every one is
/// delivered to its receive, byte for byte, with no CTS written.
#[test]
fn messages_that_beat_their_receives_are_delivered() {
    for mode in modes() {
        let mut w = world("early", mode, 2, &eager_config());
        let lens = [0usize, 1, 100, 4096, 17];
        let src: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                let b = w.a.alloc_buffer(l.max(1)).unwrap();
                b.write(0, &pattern(i as u64, l)).unwrap();
                b
            })
            .collect();
        let sends: Vec<_> = src
            .iter()
            .zip(lens)
            .enumerate()
            .map(|(i, (b, l))| {
                let s = b.span(0, l as u64).unwrap();
                w.a.isend(&[s], i as u32)
                    .unwrap()
                    .expect("eager: no CTS to wait for")
            })
            .collect();
        let sent = wait_all(&mut w.a, &mut w.b, &sends);
        assert_eq!(sent, lens.map(|l| l as u64), "{mode:?}");
        let dst: Vec<_> = (0..lens.len())
            .map(|_| w.b.alloc_buffer(4096).unwrap())
            .collect();
        let recvs: Vec<_> = dst
            .iter()
            .enumerate()
            .map(|(i, d)| post_recv(&mut w.b, &mut w.a, &[d.all()], i as u32))
            .collect();
        let got = wait_all(&mut w.b, &mut w.a, &recvs);
        assert_eq!(got, lens.map(|l| l as u64), "{mode:?}");
        for (i, l) in lens.into_iter().enumerate() {
            assert_eq!(
                dst[i].to_vec(0, l).unwrap(),
                pattern(i as u64, l),
                "{mode:?}"
            );
        }
        let (a, b) = (w.a.stats(), w.b.stats());
        assert_eq!(a.eager_sends, 5, "{a:?}");
        assert_eq!((b.eager_recvs, b.unexpected), (5, 5), "{b:?}");
        assert_eq!(b.cts, [0, 0], "no CTS for receives within the threshold");
    }
}

/// A receive larger than the threshold appends its tag and writes its CTS:
/// a small message takes the tag (its CTS goes stale, and the sender's
/// later transfers into that slot are not confused by it); a large one
/// takes the CTS path and the tag is removed. Slots wrap many times.
#[test]
fn a_large_receive_takes_either_path() {
    for mode in modes() {
        let c = eager_config();
        let mut w = world("either", mode, 2, &c);
        let (a, b) = (&mut w.a, &mut w.b);
        let big = 3 * c.eager_max;
        // Enough CTS transfers to fill each rail's tag list were their tags
        // not removed.
        for k in 0..(8 * c.depth as u64) {
            let len = if k % 3 == 0 {
                big - k as usize
            } else {
                10 + k as usize
            };
            let data = pattern(k, len);
            let got = transfer(a, b, &[data], &[big], k as u32);
            assert_eq!(got.total(), len as u64, "{mode:?} transfer {k}");
        }
        let (sa, sb) = (a.stats(), b.stats());
        assert!(
            sa.eager_sends > 0 && sa.record_path + sa.fast_path > 0,
            "{sa:?}"
        );
        assert_eq!(sb.eager_recvs, sa.eager_sends, "{sb:?}");
    }
}

/// A peer without eager transfers (threshold 0): both sides keep the CTS
/// path for everything.
#[test]
fn a_peer_without_eager_keeps_the_cts_path() {
    let name = unique_name("mpib", "noeager");
    let _g = FabricGuard(name.clone());
    let devs = open(&name, ExecMode::Inline, 4);
    let a = mpib::PendingComm::new(&devs[..2], &eager_config()).unwrap();
    let off = Config {
        eager_max: 0,
        ..eager_config()
    };
    let b = mpib::PendingComm::new(&devs[2..], &off).unwrap();
    let (ia, ib) = (a.info().clone(), b.info().clone());
    assert!(ib.rails.iter().all(|r| r.eager_qp.is_none()));
    let mut a = a.connect(&ib).unwrap();
    let mut b = b.connect(&ia).unwrap();
    for k in 0..10u64 {
        let got = transfer(&mut a, &mut b, &[pattern(k, 100)], &[100], k as u32);
        assert_eq!(got.total(), 100);
    }
    assert_eq!(a.stats().eager_sends, 0);
    assert_eq!(a.stats().fast_path, 10);
}

/// A CTS transfer tried before its receive, in a slot whose earlier uses
/// were eager (no CTS ever written there): it waits for its CTS, as when
/// the slot's last entry is the one `depth` positions back.
#[test]
fn a_cts_transfer_in_a_slot_used_only_eagerly_waits_for_its_cts() {
    for mode in modes() {
        let c = eager_config();
        let mut w = world("wait", mode, 2, &c);
        let (a, b) = (&mut w.a, &mut w.b);
        // Every slot used once, eagerly: no CTS entry anywhere.
        for k in 0..c.depth as u64 {
            let got = transfer(a, b, &[pattern(k, 64)], &[64], k as u32);
            assert_eq!(got.total(), 64);
        }
        assert_eq!(b.stats().cts, [0, 0]);
        // Two buffers: the CTS path. Its receive is not posted yet.
        let src = [a.alloc_buffer(100).unwrap(), a.alloc_buffer(100).unwrap()];
        src[0].write(0, &pattern(90, 100)).unwrap();
        src[1].write(0, &pattern(91, 100)).unwrap();
        let spans = [src[0].all(), src[1].all()];
        let tag = c.depth as u32;
        for _ in 0..100 {
            assert!(
                a.isend(&spans, tag).unwrap().is_none(),
                "{mode:?}: sent without a CTS"
            );
            a.progress();
            b.progress();
        }
        let dst = [b.alloc_buffer(100).unwrap(), b.alloc_buffer(100).unwrap()];
        let r = post_recv(b, a, &[dst[0].all(), dst[1].all()], tag);
        let s = post_send(a, b, &spans, tag);
        let (sent, got) = wait_both(a, &s, b, &r);
        assert_eq!((sent.total(), got.total()), (200, 200));
        assert_eq!(dst[1].to_vec(0, 100).unwrap(), pattern(91, 100));
    }
}

/// An eager message that fits no receive closes the receiver's
/// communicator with the reason: a tag other than the receive's, or more
/// bytes than its buffer, whether it came before its receive or matched
/// its tag.
#[test]
fn an_eager_message_that_fits_no_receive_is_refused() {
    use mpib::{CloseReason, Error, ProtocolError};
    // (sent bytes, its tag, receive buffer, receive's tag, receive first)
    let cases = [
        (64, 5, 64, 7, true, "its tag is not the receive's"),
        (64, 5, 64, 7, false, "its tag is not the receive's"),
        (
            1000,
            1,
            100,
            1,
            true,
            "more bytes than the receive's buffer",
        ),
        (
            1000,
            1,
            100,
            1,
            false,
            "more bytes than the receive's buffer",
        ),
    ];
    for (k, (len, stag, posted, rtag, recv_first, why)) in cases.into_iter().enumerate() {
        let mut w = world(&format!("bad{k}"), ExecMode::Inline, 1, &eager_config());
        let src = w.a.alloc_buffer(len).unwrap();
        let dst = w.b.alloc_buffer(posted).unwrap();
        let r = if recv_first {
            Some(w.b.irecv(&[dst.all()], rtag).unwrap().unwrap())
        } else {
            None
        };
        let s = w.a.isend(&[src.all()], stag).unwrap().unwrap();
        // The message came first: it is refused when its receive comes.
        let r = match r {
            Some(r) => Ok(r),
            None => {
                wait_all(&mut w.a, &mut w.b, &[s]);
                w.b.progress();
                w.b.irecv(&[dst.all()], rtag).map(Option::unwrap)
            }
        };
        let mut err = None;
        match r {
            Err(e) => err = Some(e),
            Ok(r) => {
                for _ in 0..STEPS {
                    w.a.progress();
                    match w.b.test(&r) {
                        Ok(None) => continue,
                        Ok(Some(sz)) => panic!("case {k}: completed with {sz:?}"),
                        Err(e) => {
                            err = Some(e);
                            break;
                        }
                    }
                }
            }
        }
        match err {
            Some(Error::Closed(CloseReason::Protocol(ProtocolError::Eager { why: w, .. }))) => {
                assert_eq!(w, why, "case {k}")
            }
            other => panic!("case {k}: {other:?}"),
        }
    }
}
