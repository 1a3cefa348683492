//! Tag matching on the software device: messages arriving at a TM-SRQ.
//! Eager messages that match a tag (one CQE, or two past one packet), that
//! match none (unexpected, and the sync that lets later tags match), that
//! carry no tag; rendezvous requests the NIC completes with a READ and a
//! FIN, or leaves to software; the order of matching; a tag removed before
//! and after its message. Every scenario runs with the NIC inline and
//! deferred (three seeds).

mod support;

use mlx5::device::QpState;
use mlx5::prm::{CqeOpcode, Syndrome, Tmh, TmhOpcode};
use mlx5::tm::{TagHandle, TagInfo, TmEvent};
use support::tm_world::{modes, World, BOUNCE};

/// A payload of `n` bytes that tells its bytes apart.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A `Matched` event of `tag`: its header `(tag, app_ctx)` if the CQE
/// reports the match, its length if it reports the data, and the tag's data
/// if it is the tag's last; nothing cut, no rendezvous left to software.
fn matched(
    tag: TagHandle,
    info: Option<(u64, u32)>,
    len: Option<u32>,
    data: Option<u32>,
) -> TmEvent<u32> {
    TmEvent::Matched {
        tag,
        info: info.map(|(tag, app_ctx)| TagInfo { tag, app_ctx }),
        len,
        truncated: false,
        rndv_incomplete: false,
        imm: None,
        data,
    }
}

/// The one CQE of a message that matched `tag` and landed whole.
fn whole(tag: TagHandle, id: u32, key: u64, len: u32, data: u32) -> TmEvent<u32> {
    matched(tag, Some((key, id)), Some(len), Some(data))
}

/// `e` with its `truncated` and `rndv_incomplete` flags set as given.
fn flagged(e: TmEvent<u32>, cut: bool, rndv: bool) -> TmEvent<u32> {
    match e {
        TmEvent::Matched {
            tag,
            info,
            len,
            imm,
            data,
            ..
        } => TmEvent::Matched {
            tag,
            info,
            len,
            truncated: cut,
            rndv_incomplete: rndv,
            imm,
            data,
        },
        e => e,
    }
}

/// Adds tag `key` (exact) with a buffer of `len` bytes at `at`, and waits
/// for its APPEND.
fn add(w: &mut World, key: u64, (at, len): (usize, usize), data: u32) -> TagHandle {
    let b = w.tagged_at(at, len);
    let h = w.tm.add(key, !0, &[b], data).unwrap();
    w.tm.ring_doorbell();
    assert_eq!(
        w.events(1),
        [TmEvent::Added {
            tag: h,
            sync_req: false
        }]
    );
    h
}

/// As the rdma-core test of a real NIC does: nine tags, nine eager
/// messages sent in the reverse order; each lands in its own buffer,
/// without its header, with one CQE naming its tag.
#[test]
fn eager_messages_land_in_the_buffers_of_their_tags() {
    for mode in modes() {
        let mut w = World::new("eager", mode, 16, false);
        let tags: Vec<TagHandle> = (0..9u32)
            .map(|i| add(&mut w, 0x1000 + u64::from(i), (i as usize * 1024, 1024), i))
            .collect();
        for i in (0..9u32).rev() {
            let p = pattern(100 + i as usize, i as u8);
            w.eager(0x1000 + u64::from(i), &p, i as usize * 512, i);
        }
        let ev = w.events(9);
        for (k, i) in (0..9u32).rev().enumerate() {
            let want = whole(tags[i as usize], i, 0x1000 + u64::from(i), 100 + i, i);
            assert_eq!(ev[k], want, "{mode:?}");
            let got = w.tagged.to_vec(i as usize * 1024, 100 + i as usize);
            assert_eq!(got, pattern(100 + i as usize, i as u8), "buffer {i}");
        }
        assert_eq!(
            w.sender(9)
                .iter()
                .filter(|c| c.get().is_requester())
                .count(),
            9
        );
        assert_eq!(w.tm.tags_in_use(), 0, "every tag's entry is free again");
        w.quiet();
    }
}

/// Past one packet a match completes twice: the match (header, no data),
/// then the data (no header); the tag's data comes back with the second.
#[test]
fn a_long_eager_message_completes_with_the_match_and_then_the_data() {
    for mode in modes() {
        let mut w = World::new("long", mode, 4, false);
        let h = add(&mut w, 77, (0, 16384), 5);
        let p = pattern(6000, 9);
        w.eager(77, &p, 0, 1);
        let ev = w.events(2);
        let first = matched(h, Some((77, 1)), None, None);
        let second = matched(h, None, Some(6000), Some(5));
        assert_eq!(ev, [first, second], "{mode:?}");
        assert_eq!(w.tagged.to_vec(0, 6000), p);
        w.sender(1);
        w.quiet();
    }
}

/// A message that matches nothing lands whole in an SRQ buffer and is
/// counted; a tag appended before software syncs that count does not
/// match (its APPEND says so), and matches once software syncs.
#[test]
fn an_unexpected_message_goes_to_the_srq_until_software_syncs() {
    for mode in modes() {
        let mut w = World::new("unexp", mode, 4, false);
        let p = pattern(300, 1);
        w.eager(5, &p, 0, 1);
        let ev = w.events(1);
        let TmEvent::Unexpected {
            wqe, len, sync_req, ..
        } = ev[0]
        else {
            panic!("{ev:?}");
        };
        assert_eq!((len, sync_req), (316, false));
        let at = usize::from(wqe) * BOUNCE;
        let hdr = w.bounce.to_vec(at, 16);
        let tmh = Tmh::new_unchecked(&hdr[..]);
        assert_eq!(
            (tmh.opcode(), tmh.tag(), tmh.app_ctx()),
            (Some(TmhOpcode::Eager), 5, 1)
        );
        assert_eq!(
            w.bounce.to_vec(at + 16, 300),
            p,
            "the whole message, header first"
        );
        assert_eq!(w.tm.unexpected_seen(), 1);

        // Appended while the NIC counts one unexpected message that
        // software has not reported: it will not match.
        let b = w.tagged_at(0, 1024);
        let h = w.tm.add(5, !0, &[b], 50).unwrap();
        w.tm.ring_doorbell();
        assert_eq!(
            w.events(1),
            [TmEvent::Added {
                tag: h,
                sync_req: true
            }]
        );
        w.eager(5, &p, 512, 2);
        assert!(
            matches!(w.events(1)[0], TmEvent::Unexpected { .. }),
            "{mode:?}"
        );
        assert_eq!(w.tm.unexpected_seen(), 2);

        // Software has dealt with both: the tag matches from now on.
        w.tm.sync(w.tm.unexpected_seen(), true).unwrap();
        w.tm.ring_doorbell();
        assert_eq!(w.events(1), [TmEvent::Synced]);
        w.eager(5, &p, 1024, 3);
        assert_eq!(w.events(1), [whole(h, 3, 5, 300, 50)], "{mode:?}");
        assert_eq!(w.sender(3).len(), 3);
        w.quiet();
    }
}

/// A message without a tag (and a FIN that reaches a TM-SRQ) lands whole
/// in an SRQ buffer, whatever tags are posted, and is not counted.
#[test]
fn a_message_without_a_tag_bypasses_the_list() {
    for mode in modes() {
        let mut w = World::new("notag", mode, 4, false);
        add(&mut w, 0, (0, 1024), 1);
        // A tag of mask 0 would match any tagged message.
        let b = w.tagged_at(1024, 1024);
        let any = w.tm.add(0, 0, &[b], 2).unwrap();
        w.tm.ring_doorbell();
        w.events(1);
        for (k, op) in [TmhOpcode::NoTag, TmhOpcode::Fin].into_iter().enumerate() {
            w.send((op, 9, 0), &pattern(40, 3), k * 512, k as u32);
            let ev = w.events(1);
            assert!(
                matches!(ev[0], TmEvent::NoTag { len: 56, .. }),
                "{op:?} {mode:?}: {ev:?}"
            );
        }
        // Too short for a header: no tag either.
        w.src.write(2048, &[1, 2, 3]);
        let s = support::tm_world::sge(&w.src, 2048, 3);
        w.sq.send(mlx5::sq::Payload::Sges(&[s]))
            .unwrap()
            .post(Some(9));
        w.sq.ring_doorbell();
        assert!(matches!(w.events(1)[0], TmEvent::NoTag { len: 3, .. }));
        assert_eq!(w.tm.unexpected_seen(), 0);
        assert_eq!(w.tm.tags_in_use(), 2);
        assert!(w.tm.remove(any).is_ok(), "the wildcard is still posted");
        w.sender(3);
        w.quiet();
    }
}

/// Matching takes the earliest appended tag that agrees with the message
/// on its mask: two exact tags alike take two messages in order, and a
/// wildcard appended later takes only what the exact ones leave.
#[test]
fn the_earliest_appended_matching_tag_wins() {
    for mode in modes() {
        let mut w = World::new("order", mode, 8, false);
        let a = add(&mut w, 7, (0, 256), 1);
        let b = add(&mut w, 7, (256, 256), 2);
        let b2 = w.tagged_at(512, 256);
        let wild = w.tm.add(0x700, 0xff00, &[b2], 3).unwrap();
        w.tm.ring_doorbell();
        w.events(1);
        w.eager(7, &[1; 8], 0, 10);
        w.eager(7, &[2; 8], 64, 11);
        w.eager(0x7ab, &[3; 8], 128, 12);
        w.eager(7, &[4; 8], 192, 13);
        let ev = w.events(4);
        assert_eq!(ev[0], whole(a, 10, 7, 8, 1), "{mode:?}");
        assert_eq!(ev[1], whole(b, 11, 7, 8, 2));
        // 0x7ab agrees with 0x700 on 0xff00.
        assert_eq!(ev[2], whole(wild, 12, 0x7ab, 8, 3));
        assert!(matches!(ev[3], TmEvent::Unexpected { .. }), "{ev:?}");
        assert_eq!(w.tagged.to_vec(256, 8), [2; 8]);
        w.sender(4);
        w.quiet();
    }
}

/// A tag removed before its message: the REMOVE succeeds and the message
/// goes unexpected. Removed after: the message took it, the REMOVE fails,
/// and the tag's data comes back once both CQEs are in.
#[test]
fn a_remove_before_the_message_wins_and_after_it_fails() {
    for mode in modes() {
        let mut w = World::new("remove", mode, 4, false);
        let h = add(&mut w, 3, (0, 256), 1);
        w.tm.remove(h).unwrap();
        w.tm.ring_doorbell();
        let removed = TmEvent::Removed {
            tag: h,
            removed: true,
            data: Some(1),
            sync_req: false,
        };
        assert_eq!(w.events(1), [removed]);
        w.eager(3, &[9; 16], 0, 1);
        assert!(
            matches!(w.events(1)[0], TmEvent::Unexpected { .. }),
            "{mode:?}"
        );

        w.tm.sync(w.tm.unexpected_seen(), false).unwrap();
        let h = add(&mut w, 4, (0, 256), 2);
        w.eager(4, &[8; 16], 64, 2);
        // The message is in (its SEND completed) before the REMOVE goes.
        assert_eq!(w.sender(2).len(), 2);
        w.tm.remove(h).unwrap();
        w.tm.ring_doorbell();
        let first = w.events(2);
        let matched = matched(h, Some((4, 2)), Some(16), None);
        let late = TmEvent::Removed {
            tag: h,
            removed: false,
            data: Some(2),
            sync_req: false,
        };
        assert_eq!(first, [matched, late], "{mode:?}");
        assert_eq!(w.tm.tags_in_use(), 0);
        w.quiet();
    }
}

/// An eager payload longer than its buffer fills the buffer and no more;
/// the CQE reports the whole length, so software sees it was cut.
#[test]
fn an_eager_message_longer_than_its_buffer_is_cut_to_it() {
    for mode in modes() {
        let mut w = World::new("cut", mode, 4, false);
        w.tagged.write(0, &[0xee; 128]);
        let h = add(&mut w, 1, (0, 64), 1);
        let p = pattern(100, 4);
        w.eager(1, &p, 0, 1);
        let ev = w.events(1);
        let want = flagged(matched(h, Some((1, 1)), Some(100), Some(1)), true, false);
        assert_eq!(ev, [want], "{mode:?}");
        assert_eq!(w.tagged.to_vec(0, 64), p[..64]);
        assert_eq!(
            w.tagged.to_vec(64, 64),
            [0xee; 64],
            "nothing past the buffer"
        );
        let s = w.sender(1);
        assert!(!s[0].get().is_error(), "the sender's SEND completes");
        w.quiet();
    }
}

/// A rendezvous request the buffer can hold: the match, the NIC's READ of
/// the sender's data, the data's CQE, and the FIN into the sender's RQ
/// (the request's header with opcode FIN).
#[test]
fn a_rendezvous_is_read_by_the_nic_and_answered_with_a_fin() {
    for mode in modes() {
        let mut w = World::new("rndv", mode, 4, true);
        w.post_fin_receives(4);
        let h = add(&mut w, 0xabc, (4096, 20000), 6);
        let data = pattern(20000, 7);
        w.src.write(8192, &data);
        w.rndv(0xabc, (8192, 20000), 0, 42);
        let ev = w.events(2);
        let first = matched(h, Some((0xabc, 42)), None, None);
        let second = matched(h, None, Some(20000), Some(6));
        assert_eq!(ev, [first, second], "{mode:?}");
        assert_eq!(w.tagged.to_vec(4096, 20000), data);
        let s = w.sender(2);
        let fin = s.iter().find(|c| !c.get().is_requester()).expect("a FIN");
        assert_eq!(fin.get().opcode(), Some(CqeOpcode::RespSend));
        assert_eq!(fin.get().byte_cnt(), 16);
        let hdr = w.fins.to_vec(0, 16);
        let t = Tmh::new_unchecked(&hdr[..]);
        assert_eq!(
            (t.opcode(), t.tag(), t.app_ctx()),
            (Some(TmhOpcode::Fin), 0xabc, 42)
        );
        assert!(s
            .iter()
            .any(|c| c.get().is_requester() && !c.get().is_error()));
        w.quiet();
    }
}

/// A FIN that finds no receive at the sender waits for one: the request
/// completes once a receive is posted, and the receiver's side completes
/// once, not again.
#[test]
fn a_fin_waits_for_a_receive_at_the_sender() {
    for mode in modes() {
        let mut w = World::new("fin-rnr", mode, 4, true);
        let h = add(&mut w, 1, (0, 4096), 1);
        w.src.write(8192, &[5; 4096]);
        w.rndv(1, (8192, 4096), 0, 1);
        let ev = w.events(2);
        assert!(matches!(ev[1], TmEvent::Matched { tag, data: Some(1), .. } if tag == h));
        // (Deferred: each progress runs the scheduler's whole step budget
        // while the request waits on RNR.)
        for _ in 0..3 {
            w.rx.progress();
            w.tx.progress();
        }
        assert_eq!(
            w.scq
                .poll(usize::MAX, |c| panic!("early {:02x?}", c.bytes())),
            0
        );
        w.post_fin_receives(1);
        let s = w.sender(2);
        assert!(s.iter().all(|c| !c.get().is_error()), "{mode:?}");
        assert_eq!(w.tagged.to_vec(0, 4096), [5; 4096]);
        assert_eq!(w.tm.tags_in_use(), 0);
        w.quiet();
    }
}

/// A rendezvous longer than the buffer is left to software: one CQE, the
/// request itself (header, `Rvh`) in the buffer, no READ, no FIN.
#[test]
fn a_rendezvous_larger_than_the_buffer_is_left_to_software() {
    for mode in modes() {
        let mut w = World::new("rndv-sw", mode, 4, true);
        w.post_fin_receives(1);
        let h = add(&mut w, 2, (0, 64), 3);
        w.rndv(2, (8192, 10000), 0, 8);
        let want = flagged(matched(h, Some((2, 8)), Some(32), Some(3)), false, true);
        assert_eq!(w.events(1), [want], "{mode:?}");
        let req = w.tagged.to_vec(0, 32);
        assert_eq!(
            Tmh::new_unchecked(&req[..16]).opcode(),
            Some(TmhOpcode::Rndv)
        );
        let s = w.sender(1);
        assert!(s[0].get().is_requester(), "no FIN");
        w.quiet();
    }
}

/// A rendezvous from a sender whose QP does not allow remote reads fails
/// the request before the tag is consumed.
#[test]
fn a_rendezvous_the_sender_cannot_be_read_for_fails_it() {
    for mode in modes() {
        let mut w = World::new("rndv-acc", mode, 4, false);
        add(&mut w, 2, (0, 8192), 3);
        w.rndv(2, (8192, 4096), 0, 8);
        let s = w.sender(1);
        assert_eq!(
            s[0].get().err_cqe().syndrome(),
            Some(Syndrome::RemoteAccess),
            "{mode:?}"
        );
        assert_eq!(w.sqp.state(), QpState::Err);
        assert_eq!(w.tm.tags_in_use(), 1, "the tag was not consumed");
    }
}
