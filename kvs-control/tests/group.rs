//! The control group stepped in one thread: elections, a leader's death,
//! restarts from data dirs, leases against failure detection, learners,
//! snapshots for late members, and forgetting; leases granted only for
//! what a member has caught up with, timed from when it asked.

mod support;

use std::time::Duration;

use kvs_control::{Applied, Command, Event, Founding, Group, GroupConfig, GroupError, MemberState};
use kvs_proto::{MemberId, ShardMap};
use raft::eraftpb::MessageType;
use support::{addr, Net};

fn cfg() -> GroupConfig {
    GroupConfig::for_member_timeout(Duration::from_millis(1000))
}

#[test]
fn three_members_elect_one_leader_and_apply_the_same_changes() {
    let mut net = Net::new(3, 3, cfg());
    let l = net.leader().unwrap();
    let v = net.move_slots(0..64, MemberId(1));
    net.run_until(Duration::from_secs(2), |n| {
        n.alive().all(|m| n.state(m).unwrap().map().version() == v)
    })
    .expect("every member applies the map");
    assert!(net.all_agree());
    let s = net.state(MemberId(2)).unwrap();
    assert_eq!(s.map().slots_of(MemberId(1)), 64);
    assert!((0..3).map(MemberId).all(|m| s.is_voter(m)));
    // One leader, and every member knows it.
    assert_eq!(
        net.alive()
            .filter(|&m| net.groups[m.index()].as_ref().unwrap().is_leader())
            .count(),
        1
    );
    for m in (0..3).map(MemberId) {
        assert_eq!(net.group(m).leader(), Some(l));
    }
    // Others refuse proposals and name the leader.
    let f = (0..3).map(MemberId).find(|&m| m != l).unwrap();
    match net.group(f).propose_forget(MemberId(2), false, 0) {
        Err(GroupError::NotLeader { leader }) => assert_eq!(leader, Some(l)),
        other => panic!("a follower took a proposal: {other:?}"),
    }
}

#[test]
fn the_leader_dies_a_new_one_leads_within_two_timeouts_and_the_old_one_rejoins_as_follower() {
    let mut net = Net::new(3, 3, cfg());
    let old = net.leader().unwrap();
    let before = net.state(old).unwrap().clone();
    net.kill(old);
    let took = net
        .run_until(Duration::from_secs(5), |n| n.leader().is_some())
        .expect("a new leader");
    assert!(
        took <= 2 * cfg().member_timeout,
        "a new leader after {took:?}"
    );
    let new = net.leader().unwrap();
    assert_ne!(new, old);
    // Map changes go on without the old leader.
    let v = net.move_slots(100..140, MemberId(2));
    net.run_until(Duration::from_secs(2), |n| {
        n.alive().all(|m| n.state(m).unwrap().map().version() >= v)
    })
    .expect("the map changes without the old leader");
    // The dead leader is marked failed once the timeout has passed.
    net.run_until(Duration::from_secs(3), |n| {
        n.state(new).unwrap().member_state(old) == Some(MemberState::Failed)
    })
    .expect("the old leader marked failed");
    // Restarted from its data dir, without bootstrapping or joining: the
    // same member of the same cluster, a follower, and up again.
    net.restart(old);
    assert_eq!(net.group(old).cluster_id(), before.cluster_id());
    // It resumes a state it had (up to the commit index it last kept; the
    // rest comes from the leader).
    let resumed = net.state(old).expect("a state from its data dir");
    assert_eq!(resumed.cluster_id(), before.cluster_id());
    assert!(resumed.map().version() <= before.map().version());
    net.run_until(Duration::from_secs(3), |n| {
        n.all_agree() && n.state(new).unwrap().member_state(old) == Some(MemberState::Up)
    })
    .expect("the old leader catches up and is up again");
    assert_eq!(net.leader(), Some(new));
    assert!(!net.group(old).is_leader());
    assert_eq!(net.state(old).unwrap().map().slots_of(MemberId(2)), 40);
}

#[test]
fn a_member_cut_off_stops_serving_before_the_group_marks_it_failed_and_serves_again_after() {
    for victim_is_leader in [false, true] {
        let mut net = Net::new(3, 3, cfg());
        let l = net.leader().unwrap();
        let victim = if victim_is_leader {
            l
        } else {
            MemberId((l.0 + 1) % 3)
        };
        net.run_for(Duration::from_millis(200));
        assert!(net.alive().all(|m| {
            let now = net.now;
            net.groups[m.index()].as_ref().unwrap().lease_valid(now)
        }));
        net.cut.insert(victim);
        let cut_at = net.now;
        let lost = net
            .run_until(Duration::from_secs(5), |n| {
                !n.groups[victim.index()]
                    .as_ref()
                    .unwrap()
                    .lease_valid(n.now)
            })
            .expect("the member cut off loses its lease");
        let failed = Applied::Failed(victim);
        net.run_until(Duration::from_secs(5), |n| {
            n.alive()
                .filter(|&m| m != victim)
                .all(|m| n.applied_at(m, &failed).is_some())
        })
        .expect("the others mark it failed");
        let marked = net
            .alive()
            .filter(|&m| m != victim)
            .filter_map(|m| net.applied_at(m, &failed))
            .min()
            .unwrap()
            .duration_since(cut_at);
        assert!(
            lost < marked,
            "leader cut off: {victim_is_leader}; it served until {lost:?} after the cut, \
             and was marked failed after {marked:?}"
        );
        assert!(lost <= cfg().lease + 2 * cfg().tick * 20, "{lost:?}");
        if victim_is_leader {
            // A new leader counts the timeout from its election at the
            // earliest, whatever it heard as a follower.
            let elected = net
                .events
                .iter()
                .find(|(m, t, e)| {
                    *m != victim
                        && *t > cut_at
                        && matches!(e, Event::Leader(Some(x)) if *x != victim)
                })
                .map(|(_, t, _)| t.duration_since(cut_at))
                .expect("a new leader");
            assert!(
                marked >= elected + cfg().member_timeout,
                "elected {elected:?} after the cut, marked the old leader failed after {marked:?}"
            );
        }
        // The others still serve (a new leader, if the old one was cut).
        net.run_until(Duration::from_secs(3), |n| {
            let now = n.now;
            n.alive()
                .filter(|&m| m != victim)
                .all(|m| n.groups[m.index()].as_ref().unwrap().lease_valid(now))
        })
        .expect("the rest of the group serves");
        // Healed: it hears from the leader, is marked up, and serves.
        net.cut.clear();
        net.run_until(Duration::from_secs(3), |n| {
            n.all_agree()
                && n.groups[victim.index()]
                    .as_ref()
                    .unwrap()
                    .lease_valid(n.now)
        })
        .expect("the member serves again once the partition heals");
        assert_eq!(
            net.state(victim).unwrap().member_state(victim),
            Some(MemberState::Up)
        );
    }
}

#[test]
fn learners_follow_without_voting_and_a_late_member_is_given_a_snapshot() {
    let mut c = cfg();
    c.snapshot_every = 8;
    // Two members: the second is a learner (two voters would stop the
    // group at either one's death).
    let mut net = Net::new(2, 3, c);
    net.run_for(Duration::from_millis(500));
    let s = net.state(MemberId(0)).unwrap();
    assert!(s.is_voter(MemberId(0)) && !s.is_voter(MemberId(1)));
    // A third member: all three vote once the leader has promoted them.
    net.join();
    net.run_until(Duration::from_secs(3), |n| {
        n.all_agree()
            && (0..3)
                .map(MemberId)
                .all(|m| n.state(MemberId(0)).unwrap().is_voter(m))
    })
    .expect("three voters");
    // Enough changes that the log is compacted under a snapshot.
    for i in 0..20 {
        let v = net.move_slots(i * 4..i * 4 + 4, MemberId((i % 3) as u16));
        net.run_until(Duration::from_secs(2), |n| {
            n.alive().all(|m| n.state(m).unwrap().map().version() >= v)
        })
        .unwrap();
    }
    // A fourth member stays a learner (control_voters = 3), and is given
    // a snapshot, not the whole log.
    let late = net.join();
    net.run_for(Duration::from_millis(500));
    assert!(!net.state(MemberId(0)).unwrap().is_voter(late));
    assert!(
        net.events
            .iter()
            .any(|(m, _, e)| *m == late && matches!(e, Event::Restored { .. })),
        "the late member was given a snapshot, not the whole log"
    );
    assert!(net.all_agree());
    // With two of the three voters gone, the learner cannot make a quorum:
    // nothing commits.
    let l = net.leader().unwrap();
    let gone: Vec<MemberId> = (0..3).map(MemberId).filter(|&m| m != l).collect();
    for &m in &gone {
        net.kill(m);
    }
    net.run_for(Duration::from_secs(3));
    let before = net.state(late).unwrap().map().version();
    if net.leader().is_some() {
        let _ = net.move_slots(200..210, MemberId(2));
    }
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.state(late).unwrap().map().version(), before);
    assert_eq!(net.leader(), None, "a leader without a quorum steps down");
    // One voter back: a leader again, and the group goes on.
    net.restart(gone[0]);
    net.run_until(Duration::from_secs(5), |n| n.leader().is_some())
        .expect("a leader once a quorum is back");
}

#[test]
fn every_member_restarted_from_its_data_dir_resumes_one_cluster() {
    let mut net = Net::new(3, 3, cfg());
    let v = net.move_slots(10..20, MemberId(1));
    net.run_until(Duration::from_secs(2), |n| {
        n.alive().all(|m| n.state(m).unwrap().map().version() == v)
    })
    .unwrap();
    let before = net.state(MemberId(0)).unwrap().clone();
    for m in (0..3).map(MemberId) {
        net.kill(m);
    }
    for m in (0..3).map(MemberId) {
        net.restart(m);
        // Opened, before any message: the map its log holds as committed,
        // not its snapshot's (a member's workers start from it).
        let at_open = net.state(m).unwrap().map().version();
        assert_eq!(at_open, v, "member {m} opened at map {at_open}");
    }
    net.run_until(Duration::from_secs(5), |n| {
        n.leader().is_some() && n.all_agree()
    })
    .expect("the restarted members elect a leader");
    let after = net.state(MemberId(0)).unwrap();
    assert_eq!(after.cluster_id(), before.cluster_id());
    assert_eq!(after.map(), before.map());
    // A data dir that holds a member is never bootstrapped again.
    let map = ShardMap::single(addr(MemberId(0)), 256, 2).unwrap();
    let founding = Founding {
        control_voters: 3,
        replicas: 1,
        zone: None,
        member_timeout_ms: None,
    };
    let e = Group::bootstrap(&net.dirs[0], map, founding, cfg(), net.now).unwrap_err();
    assert!(e.to_string().contains("holds member 0"), "{e}");
}

#[test]
fn a_dead_member_is_forgotten_and_the_group_goes_on_without_it() {
    let mut net = Net::new(3, 3, cfg());
    let l = net.leader().unwrap();
    let dead = MemberId((l.0 + 1) % 3);
    // It owns slots: forgetting it is refused without force.
    let v = net.move_slots(0..32, dead);
    net.run_until(Duration::from_secs(2), |n| {
        n.alive().all(|m| n.state(m).unwrap().map().version() == v)
    })
    .unwrap();
    net.kill(dead);
    net.run_until(Duration::from_secs(3), |n| {
        n.state(l).unwrap().member_state(dead) == Some(MemberState::Failed)
    })
    .expect("marked failed");
    let e = net.group(l).propose_forget(dead, false, 0).unwrap_err();
    assert!(e.to_string().contains("owns 32 slots"), "{e}");
    net.group(l).propose_forget(dead, true, 0).unwrap();
    net.run_until(Duration::from_secs(2), |n| {
        n.state(l).unwrap().member_state(dead) == Some(MemberState::Left)
    })
    .expect("forgotten");
    assert!(net.all_agree());
    assert_eq!(net.state(l).unwrap().map().slots_of(dead), 0);
    // Two voters left: both are needed, and enough.
    let v = net.move_slots(40..50, l);
    net.run_until(Duration::from_secs(2), |n| {
        n.alive().all(|m| n.state(m).unwrap().map().version() == v)
    })
    .expect("the two remaining members commit");
    // A new member takes a new id; the forgotten one is never reused.
    let fresh = net.join();
    assert_eq!(fresh, MemberId(3));
}

#[test]
fn a_message_that_lies_or_does_not_decode_is_refused_without_harm() {
    let mut net = Net::new(2, 3, cfg());
    net.run_for(Duration::from_millis(100));
    let now = net.now;
    let l = net.leader().unwrap();
    let f = MemberId(1 - l.0);
    net.group(l).tick(now + cfg().tick * 2);
    net.group(l).poll(now).unwrap();
    let out = net.group(l).take_outgoing();
    let hb = out
        .iter()
        .find(|o| o.to == f)
        .expect("a heartbeat")
        .bytes
        .clone();
    // Claimed by the wrong sender.
    assert!(matches!(
        net.group(f).step(f, &hb, now),
        Err(GroupError::BadMessage { .. })
    ));
    // Bytes that are not a message.
    assert!(matches!(
        net.group(f).step(l, &[0xff; 40], now),
        Err(GroupError::BadMessage { .. })
    ));
    // A proposal that carries a term: raft-rs would forward it to the
    // leader and panic on the term (Raft's node ids are member ids plus 1).
    let mut p = raft::eraftpb::Message::default();
    p.set_msg_type(MessageType::MsgPropose);
    p.from = u64::from(l.0) + 1;
    p.to = u64::from(f.0) + 1;
    p.term = net.group(f).status().term;
    p.set_entries(vec![raft::eraftpb::Entry::default()].into());
    let p = protobuf::Message::write_to_bytes(&p).unwrap();
    assert!(matches!(
        net.group(f).step(l, &p, now),
        Err(GroupError::BadMessage { .. })
    ));
    // The genuine one goes through, and the group is unharmed.
    net.group(f).step(l, &hb, now).unwrap();
    let v = net.move_slots(0..8, f);
    net.run_until(Duration::from_secs(2), |n| {
        n.alive().all(|m| n.state(m).unwrap().map().version() == v)
    })
    .expect("the group goes on");
}

#[test]
fn a_member_killed_and_restarted_again_and_again_is_marked_each_time() {
    let mut net = Net::new(3, 3, cfg());
    for i in 0..10 {
        let l = net.leader().unwrap();
        let victim = MemberId((l.0 + 1 + (i % 2) as u16) % 3);
        net.kill(victim);
        net.run_until(Duration::from_secs(3), |n| {
            n.state(l).unwrap().member_state(victim) == Some(MemberState::Failed)
        })
        .unwrap_or_else(|| panic!("round {i}: member {victim} never marked failed"));
        net.restart(victim);
        net.run_until(Duration::from_secs(3), |n| {
            n.state(l).unwrap().member_state(victim) == Some(MemberState::Up) && n.all_agree()
        })
        .unwrap_or_else(|| panic!("round {i}: member {victim} never marked up"));
    }
}

/// About what a control connection carries in one request: its 1 MiB ring
/// less the room kept for answers.
const CONTROL_RING_MESSAGE: usize = 256 << 10;

/// Proposes a map of the net's slots owned alternately by members 0 and
/// 1, one run per slot: with 16 384 slots its entry, and a snapshot of
/// the state holding it, are over 1 MiB.
fn propose_a_map_of_one_run_per_slot(net: &mut Net) -> ShardMap {
    let l = net.leader().unwrap();
    let mut m = net.state(l).unwrap().map().clone();
    for s in (1..m.slots()).step_by(2) {
        m.assign(s..s + 1, MemberId(1), None).unwrap();
    }
    m.set_version(m.version() + 1);
    let mut b = Vec::new();
    m.encode(&mut b);
    net.group(l).propose(&Command::Map { map: b }).unwrap();
    net.run_until(Duration::from_secs(2), |n| {
        n.state(l).unwrap().map().version() == m.version()
    })
    .expect("the leader applies the map");
    let snapshot = net.state(l).unwrap().encode().len();
    assert!(snapshot > 1 << 20, "a snapshot of {snapshot} bytes");
    m
}

#[test]
fn a_snapshot_larger_than_a_control_connection_carries_reaches_a_new_member() {
    let mut net = Net::with_slots(2, 1, cfg(), 1 << 14);
    net.max_message = Some(CONTROL_RING_MESSAGE);
    // The learner is gone: only a snapshot brings the map to anyone.
    net.kill(MemberId(1));
    propose_a_map_of_one_run_per_slot(&mut net);
    let late = net.join();
    assert!(net
        .events
        .iter()
        .any(|(w, _, e)| *w == late && matches!(e, Event::Restored { .. })));
    assert!(net.all_agree());
}

#[test]
fn an_entry_larger_than_a_control_connection_carries_reaches_a_follower() {
    let mut net = Net::with_slots(2, 1, cfg(), 1 << 14);
    net.max_message = Some(CONTROL_RING_MESSAGE);
    let m = propose_a_map_of_one_run_per_slot(&mut net);
    net.run_until(Duration::from_secs(2), |n| {
        n.state(MemberId(1)).unwrap().map().version() == m.version()
    })
    .expect("the follower applies the map");
    assert_eq!(net.state(MemberId(1)).unwrap().map(), &m);
}

/// A snapshot lost on the way (here one of its fragments) is sent again:
/// after `member_timeout` when the loss went unnoticed (a peer's full
/// queue drops messages without a word), at once when the transport
/// reports the peer unreachable.
#[test]
fn a_snapshot_lost_on_the_way_is_sent_again() {
    for report_lost in [false, true] {
        let mut net = Net::with_slots(2, 1, cfg(), 1 << 14);
        net.max_message = Some(CONTROL_RING_MESSAGE);
        net.kill(MemberId(1));
        propose_a_map_of_one_run_per_slot(&mut net);
        let mut fragments = 0;
        net.lose = Some(Box::new(move |_, to, b: &[u8]| {
            if to == MemberId(2) && b.first() == Some(&0) {
                fragments += 1;
            }
            fragments == 3
        }));
        net.report_lost = report_lost;
        let start = net.now;
        let late = net.join();
        assert!(net.all_agree());
        assert!(net.state(late).is_some());
        if report_lost {
            let took = net.now.duration_since(start);
            assert!(took < net.cfg.member_timeout, "{took:?}");
        }
    }
}

/// The heartbeat interval, at which members renew their leases.
fn heartbeat() -> Duration {
    cfg().tick * cfg().heartbeat_ticks as u32
}

#[test]
fn a_follower_paused_past_its_failure_gets_no_lease_from_the_heartbeats_that_queued_for_it() {
    let mut net = Net::new(3, 3, cfg());
    let l = net.leader().unwrap();
    let f = MemberId((l.0 + 1) % 3);
    let other = MemberId(3 - l.0 - f.0);
    net.run_for(Duration::from_millis(200));
    assert!(net.leased(f));
    // Paused: the others go on, mark it failed and apply that.
    net.paused.insert(f);
    let failed = Applied::Failed(f);
    net.run_until(Duration::from_secs(3), |n| {
        n.applied_at(l, &failed).is_some() && n.applied_at(other, &failed).is_some()
    })
    .expect("the leader marks the paused member failed");
    net.run_for(cfg().tick * 5);
    // Resumed: it reads the clock and processes what queued for it before
    // the entry that marked it failed (heartbeats of the current term).
    let stale = net
        .held_for(f)
        .position(|h| h.carries_entries())
        .expect("the leader sent it the mark");
    let heartbeats = net
        .held_for(f)
        .take(stale)
        .filter(|h| h.message().get_msg_type() == MessageType::MsgHeartbeat)
        .count();
    assert!(heartbeats > 0, "heartbeats queued before the mark");
    net.paused.remove(&f);
    let now = net.now;
    net.group(f).tick(now);
    net.group(f).poll(now).unwrap();
    net.release(f, stale);
    assert_eq!(
        net.state(f).unwrap().member_state(f),
        Some(MemberState::Up),
        "it has not applied its failure yet"
    );
    assert!(
        !net.leased(f),
        "a member resumed after it was marked failed holds a lease from {heartbeats} stale \
         heartbeats (expiry {:?} after now)",
        net.group(f)
            .lease_expiry()
            .map(|t| t.saturating_duration_since(now))
    );
    // The rest arrives: it applies its failure, is marked up again, and
    // only then serves.
    let rest = net.held_for(f).count();
    net.release(f, rest);
    net.run_until(Duration::from_secs(3), |n| {
        assert!(
            !n.leased(f) || n.applied_at(f, &Applied::Up(f)).is_some(),
            "a lease before the member applied that it is up again"
        );
        n.leased(f)
    })
    .expect("it serves again once marked up");
}

#[test]
fn a_follower_holds_no_lease_until_it_has_applied_what_the_leader_had_committed() {
    let mut net = Net::new(3, 3, cfg());
    let l = net.leader().unwrap();
    let f = MemberId((l.0 + 1) % 3);
    net.run_for(Duration::from_millis(200));
    assert!(net.leased(f));
    // Entries do not reach it; heartbeats and everything else do.
    net.hold = Some(Box::new(move |_, to, m| {
        to == f
            && match m.get_msg_type() {
                MessageType::MsgAppend => !m.entries.is_empty(),
                MessageType::MsgSnapshot => true,
                _ => false,
            }
    }));
    let v = net.move_slots(0..8, MemberId((l.0 + 2) % 3));
    net.run_until(Duration::from_secs(1), |n| {
        n.state(l).unwrap().map().version() == v
    })
    .expect("the leader commits without it");
    let behind = net.group(f).status().applied;
    assert!(behind < net.group(l).status().commit);
    // Its old lease runs out, and it gets none while it lacks the entry.
    let start = net.now;
    while net.now < start + cfg().lease + 2 * heartbeat() {
        net.step();
        let old = net.now >= start + cfg().lease;
        assert!(
            !(old && net.leased(f)),
            "{:?} after the leader committed entry {} it lacks, it holds a lease",
            net.now - start,
            behind + 1
        );
    }
    assert_eq!(net.group(f).status().applied, behind);
    // The entries arrive: the lease the leader already confirmed holds as
    // soon as they are applied, without another round.
    net.hold = None;
    let n = net.held_for(f).count();
    net.release(f, n);
    assert_eq!(net.state(f).unwrap().map().version(), v);
    assert!(
        net.leased(f),
        "applied up to the confirmed index, it serves"
    );
}

#[test]
fn the_leader_answers_no_lease_request_of_a_member_it_is_marking_failed() {
    let mut net = Net::new(3, 3, cfg());
    let l = net.leader().unwrap();
    let f = MemberId((l.0 + 1) % 3);
    let o = MemberId(3 - l.0 - f.0);
    net.run_for(Duration::from_millis(200));
    // Paused, and entries reach no one: the leader proposes the mark but
    // cannot commit it.
    net.paused.insert(f);
    net.hold = Some(Box::new(move |from, _, m| {
        from == l && m.get_msg_type() == MessageType::MsgAppend && !m.entries.is_empty()
    }));
    net.run_until(Duration::from_secs(3), |n| {
        n.held_for(o).any(|h| h.carries_entries())
    })
    .expect("the leader proposes the mark");
    // Resumed, what was sent to it lost: it asks for its lease while the
    // mark is in flight. An answer now would name an index before the mark.
    net.held.retain(|h| h.to != f);
    net.paused.remove(&f);
    let asked = net.now;
    while net.now < asked + 3 * heartbeat() {
        net.step();
        assert_eq!(net.state(f).unwrap().member_state(f), Some(MemberState::Up));
        assert!(
            !net.leased(f),
            "{:?} after it asked, with its mark in flight, it holds a lease",
            net.now - asked
        );
    }
    // The mark commits: it learns it failed, is marked up, and only then
    // serves.
    net.hold = None;
    let n = net.held_for(o).count();
    net.release(o, n);
    net.run_until(Duration::from_secs(3), |n| {
        assert!(
            !n.leased(f) || n.applied_at(f, &Applied::Up(f)).is_some(),
            "a lease before the member applied that it is up again"
        );
        n.leased(f)
    })
    .expect("it serves again once marked up");
    assert!(net.applied_at(f, &Applied::Failed(f)).is_some());
}

#[test]
fn the_leaders_lease_is_timed_from_when_it_sent_not_from_replies_processed_late() {
    let mut net = Net::new(3, 3, cfg());
    let l = net.leader().unwrap();
    net.run_for(Duration::from_millis(200));
    assert!(net.leased(l));
    // It sends for a heartbeat interval, then is paused: the replies to
    // what it sent wait for it.
    net.deaf.insert(l);
    net.run_for(heartbeat() + cfg().tick);
    let last_send = net.now;
    net.deaf.remove(&l);
    net.paused.insert(l);
    net.run_for(cfg().lease + cfg().tick);
    // Resumed: it processes the replies, sent before it paused.
    net.paused.remove(&l);
    let replies = net.held_for(l).take_while(|h| h.sent <= last_send).count();
    assert!(replies > 0);
    net.release(l, replies);
    let expiry = net.group(l).lease_expiry();
    assert!(
        expiry.is_none_or(|t| t <= last_send + cfg().lease),
        "its lease runs {:?} past its last send plus the lease",
        expiry.map(|t| t - (last_send + cfg().lease))
    );
    assert!(!net.leased(l));
}

#[test]
fn members_keep_their_leases_while_all_is_well_and_lose_them_a_lease_after_a_cut() {
    let mut net = Net::new(3, 3, cfg());
    net.run_for(Duration::from_millis(200));
    // Regular ticking, with a change now and then: no member is ever
    // without a lease.
    let start = net.now;
    let mut i: u32 = 0;
    while net.now < start + Duration::from_secs(4) {
        if i % 25 == 0 {
            let to = MemberId((i / 25 % 3) as u16);
            // Slots 0..32 change hands, four at a time.
            net.move_slots(i / 25 * 4..i / 25 * 4 + 4, to);
        }
        net.step();
        i += 1;
        for m in (0..3).map(MemberId) {
            assert!(
                net.leased(m),
                "member {m} lost its lease {:?} into regular ticking",
                net.now - start
            );
        }
    }
    // Cut off, a member (a follower, then the leader) serves until a lease
    // after its last request that was answered, which came before the cut.
    for victim_is_leader in [false, true] {
        let l = net.leader().unwrap();
        let victim = if victim_is_leader {
            l
        } else {
            MemberId((l.0 + 1) % 3)
        };
        let cut_at = net.now;
        let expiry = net.group(victim).lease_expiry().unwrap();
        assert!(expiry <= cut_at + cfg().lease, "{:?}", expiry - cut_at);
        assert!(
            expiry + heartbeat() + cfg().tick >= cut_at + cfg().lease,
            "renewed every heartbeat: {:?}",
            cut_at + cfg().lease - expiry
        );
        net.cut.insert(victim);
        let lost = net
            .run_until(Duration::from_secs(2), |n| !n.leased(victim))
            .expect("the member cut off loses its lease");
        assert!(lost <= cfg().lease, "leader: {victim_is_leader}: {lost:?}");
        net.cut.clear();
        net.run_until(Duration::from_secs(5), |n| {
            n.all_agree() && n.alive().all(|m| n.leased(m))
        })
        .expect("all serve again once healed");
    }
}

/// A member that joins but whose process starts late (a loaded machine) is
/// not marked failed: its silence counts from the join, with a grace of a
/// few timeouts, and ends with its first word.
#[test]
fn a_member_that_starts_late_after_its_join_is_not_marked_failed() {
    let mut net = Net::new(1, 3, cfg());
    let l = net.leader().unwrap();
    let late = cfg().member_timeout * 2;
    let a = net.join_late(late);
    let b = net.join_late(cfg().member_timeout / 2);
    net.run_for(cfg().member_timeout * 3);
    for m in [a, b] {
        assert_eq!(
            net.applied_at(l, &Applied::Failed(m)),
            None,
            "member {m}, started {late:?} after its join, was marked failed"
        );
    }
    // One that never starts is marked, after the grace.
    let c = net.join_late(Duration::ZERO);
    net.kill(c);
    net.run_until(cfg().member_timeout * 5, |n| {
        n.applied_at(l, &Applied::Failed(c)).is_some()
    })
    .expect("a joiner that never speaks is marked failed");
}

/// A leader that did not run for a while (stopped, or a machine too loaded
/// to schedule it) does not take the stall for its members' silence: with
/// no other voter to replace it, it resumes and marks nobody failed.
#[test]
fn a_leader_that_stalled_marks_nobody_failed_for_its_own_stall() {
    let mut net = Net::new(3, 1, cfg());
    let l = net.leader().unwrap();
    net.run_for(Duration::from_millis(200));
    net.paused.insert(l);
    net.run_for(cfg().member_timeout * 3);
    // Resumed, it ticks before it reads what queued for it.
    net.paused.remove(&l);
    net.run_for(cfg().member_timeout / 2);
    for m in net.alive().filter(|&m| m != l).collect::<Vec<_>>() {
        assert_eq!(
            net.applied_at(l, &Applied::Failed(m)),
            None,
            "member {m} was marked failed for the leader's own stall"
        );
    }
}
#[test]
fn a_failed_voter_is_replaced_by_a_learner_so_a_second_failure_keeps_the_quorum() {
    // Five members, three of them voters: members 3 and 4 are learners.
    let mut net = Net::new(5, 3, cfg());
    let l = net.leader().unwrap();
    let voters = |n: &Net, at: MemberId| -> Vec<MemberId> {
        let s = n.state(at).unwrap();
        s.live_members().filter(|&m| s.is_voter(m)).collect()
    };
    assert_eq!(voters(&net, l).len(), 3);
    let first = voters(&net, l).into_iter().find(|&v| v != l).unwrap();
    net.kill(first);
    // Marked failed, then swapped for a learner that is up.
    net.run_until(Duration::from_secs(5), |n| {
        let v = voters(n, l);
        n.all_agree() && v.len() == 3 && !v.contains(&first)
    })
    .expect("the failed voter is replaced by a learner");
    let s = net.state(l).unwrap();
    assert_eq!(s.member_state(first), Some(MemberState::Failed));
    assert!(!s.is_voter(first), "the failed voter is a learner now");
    // The second failure: the leader itself. The two voters left elect a
    // leader, and every member that is up holds a lease again.
    net.kill(l);
    net.run_until(Duration::from_secs(5), |n| {
        n.leader().is_some_and(|nl| {
            let s = n.state(nl).unwrap();
            s.member_state(l) == Some(MemberState::Failed)
        })
    })
    .expect("a new leader, which marks the old one failed");
    let nl = net.leader().unwrap();
    let v = net.move_slots(0..16, nl);
    net.run_until(Duration::from_secs(2), |n| {
        n.alive().all(|m| n.state(m).unwrap().map().version() >= v)
    })
    .expect("the group commits with two of its three voters");
    net.run_for(Duration::from_millis(200));
    let now = net.now;
    for m in net.alive().collect::<Vec<_>>() {
        assert!(net.group(m).lease_valid(now), "member {m} holds a lease");
    }
}

#[test]
fn a_member_started_with_another_member_timeout_uses_the_groups() {
    // The group was founded with member_timeout = 1 s: leases of 400 ms.
    let mut net = Net::new(3, 3, cfg());
    let own = GroupConfig::for_member_timeout(Duration::from_millis(3000));
    let group_lease = net.cfg.lease;
    let lease_left = |net: &mut Net, m: MemberId| {
        let now = net.now;
        net.group(m).lease_expiry().expect("a lease") - now
    };
    // A member that joins with 3 s of its own.
    let j = net.join_with(own);
    net.run_for(Duration::from_millis(500));
    let left = lease_left(&mut net, j);
    assert!(
        left <= group_lease,
        "a lease of {left:?} left: the group's is {group_lease:?}, its own {:?}",
        own.lease
    );
    // A follower restarted with 3 s of its own.
    let l = net.leader().unwrap();
    let f = (0..3).map(MemberId).find(|&m| m != l).unwrap();
    net.kill(f);
    net.restart_with(f, own);
    net.run_for(Duration::from_millis(500));
    let left = lease_left(&mut net, f);
    assert!(left <= group_lease, "{left:?} left after a restart");
    // Both time by the group's value, and said so.
    for m in [j, f] {
        assert_eq!(net.group(m).config().member_timeout, cfg().member_timeout);
        assert_eq!(net.group(m).config().lease, group_lease);
        assert!(net.events.iter().any(|(who, _, e)| *who == m
            && *e
                == Event::Timing {
                    group: cfg().member_timeout,
                    configured: own.member_timeout
                }));
    }
    assert_eq!(
        net.state(l).unwrap().member_timeout(),
        Some(cfg().member_timeout)
    );
    // The group changes it: every member takes the new value up.
    let e = net
        .group(l)
        .propose_member_timeout(Duration::from_millis(50));
    assert!(e.unwrap_err().to_string().contains("200..=60000"));
    net.group(l)
        .propose_member_timeout(Duration::from_millis(2000))
        .unwrap();
    let new_lease = GroupConfig::for_member_timeout(Duration::from_millis(2000)).lease;
    net.run_until(Duration::from_secs(2), |n| {
        n.alive()
            .all(|m| n.groups[m.index()].as_ref().unwrap().config().lease == new_lease)
    })
    .expect("every member takes the group's new timing up");
    let l = net.leader().unwrap();
    assert_eq!(
        net.state(l).unwrap().member_timeout(),
        Some(Duration::from_millis(2000))
    );
}

#[test]
fn a_survivor_recovers_the_group_after_a_majority_of_voters_is_lost_for_good() {
    // Three voters and a learner; two voters die for good.
    let mut net = Net::new(4, 3, cfg());
    let l = net.leader().unwrap();
    let survivor = (0..3).map(MemberId).find(|&m| m != l).unwrap();
    let lost: Vec<MemberId> = (0..3).map(MemberId).filter(|&m| m != survivor).collect();
    let learner = MemberId(3);
    let v = net.move_slots(0..64, lost[0]);
    net.run_until(Duration::from_secs(2), |n| {
        n.alive().all(|m| n.state(m).unwrap().map().version() >= v)
    })
    .unwrap();
    let held: u32 = lost
        .iter()
        .map(|&m| net.state(l).unwrap().map().slots_of(m))
        .sum();
    for &m in &lost {
        net.kill(m);
    }
    net.run_for(Duration::from_secs(3));
    assert_eq!(net.leader(), None, "no quorum, no leader");
    let now = net.now;
    assert!(!net.group(survivor).lease_valid(now));
    // Refused on a learner, and for a member that is the one recovering.
    let e = net.group(learner).unsafe_recover(&lost, 0).unwrap_err();
    assert!(e.to_string().contains("does not vote"), "{e}");
    let e = net
        .group(survivor)
        .unsafe_recover(&[survivor], 0)
        .unwrap_err();
    assert!(e.to_string().contains("not lost"), "{e}");
    // The survivor forces a configuration of its own, leads, and commits.
    net.group(survivor).unsafe_recover(&lost, 0).unwrap();
    net.run_until(Duration::from_secs(3), |n| {
        n.leader() == Some(survivor)
            && n.all_agree()
            && lost
                .iter()
                .all(|&m| n.state(survivor).unwrap().member_state(m) == Some(MemberState::Left))
    })
    .expect("the survivor leads a group without the lost members");
    let s = net.state(survivor).unwrap();
    assert_eq!(
        s.map().slots_of(lost[0]),
        0,
        "the lost member's slots went out"
    );
    assert!(net.events.iter().any(|(m, _, e)| *m == learner
        && matches!(e, Event::Applied(_, Applied::Recovered { lost_slots, .. })
                if *lost_slots == held)));
    // It serves, and so does the learner (two members: still one voter).
    assert!(!net.state(survivor).unwrap().is_voter(learner));
    let v = net.move_slots(64..80, learner);
    net.run_until(Duration::from_secs(2), |n| {
        n.alive().all(|m| n.state(m).unwrap().map().version() >= v)
    })
    .expect("the recovered group commits");
    let now = net.now;
    assert!(net.group(survivor).lease_valid(now));
    assert!(net.group(learner).lease_valid(now));
    // Lasting: both restarted from their data dirs, they lead again.
    net.kill(survivor);
    net.kill(learner);
    net.restart(survivor);
    net.restart(learner);
    net.run_until(Duration::from_secs(5), |n| {
        n.leader().is_some() && n.all_agree()
    })
    .expect("the recovered group resumes after a restart");
}
