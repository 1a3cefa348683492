//! `drain`: a member empties itself without stopping. It stops serving, and
//! the control group moves each slot it is primary of to the slot's ready
//! backup and drops the copies it holds; it takes none until it restarts.
//! kvs-admin asks the member itself (any member drains itself, the leader
//! is not involved) and follows the member's status until it says drained.

use crate::render::say;
use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus};

use crate::admin::{unexpected, Admin, Control};
use crate::args::DrainArgs;
use crate::error::AdminError;
use crate::member::{status_as, unreachable};
use crate::migrate::{member_addrs, member_of};
use crate::progress::{Display, Pace};
use crate::render;

/// Five times a second; ten seconds of silence from the member at most.
pub const PACE: Pace = Pace {
    poll: Duration::from_millis(200),
    patience: Duration::from_secs(10),
};

/// Sends the drain to the member, says what it does, and unless
/// `--no-wait` waits until the member reports it drained; then says how
/// many slots stayed with it.
pub fn drain<C: Control>(
    admin: &mut Admin<C>,
    a: &DrainArgs,
    pace: Pace,
) -> Result<(), AdminError> {
    let map = admin.map()?;
    let addrs = member_addrs(admin, &map);
    let member = member_of(&a.member, &addrs)?;
    let addr = addrs[member.index()].1;
    // The member itself first: whether it answers, and as whom.
    let before = status_as(admin, member, addr, "drain it")?;
    match admin.request(addr, &ControlRequest::Drain) {
        Ok(ControlReply::Ok) => {}
        Ok(other) => return Err(unexpected(addr, "drain", other)),
        Err(e) => return Err(unreachable(admin, member, addr, e, "drain it")),
    }
    say(&draining_text(member, addr, &before, map.slots_of(member)));
    if a.no_wait {
        say(&format!(
            "not waiting: kvs-admin status shows member {member} drained once the control \
             group has applied it\n"
        ));
        return Ok(());
    }
    wait(admin, member, addr, pace, a.max_wait)?;
    // Its own map is at least as new as the entry that drained it.
    let left = match admin.map_of(addr) {
        Ok(m) => m.slots_of(member),
        Err(_) => admin.map()?.slots_of(member),
    };
    say(&done_text(member, left));
    Ok(())
}

/// What the member took, what it does, and what cannot move: `before` is
/// its status before the drain, `slots` the slots the contact's map gives
/// it.
pub fn draining_text(
    member: MemberId,
    addr: SocketAddr,
    before: &MemberStatus,
    slots: u32,
) -> String {
    let mut out = format!(
        "member {member} ({addr}) is draining: it stopped serving, and the control group moves \
         each slot it is primary of to the slot's ready backup and drops the copies it holds\n"
    );
    if before.drained {
        out.push_str(&format!(
            "note: member {member} was drained already (it has not restarted since)\n"
        ));
    }
    if before.group.as_ref().is_some_and(|g| g.replicas == 1) {
        out.push_str(&format!(
            "warning: replicas is 1, so no slot has a backup and nothing can move: the {slots} \
             slot{} of member {member} stay{} with it (it serves them again once the drain is \
             applied); kvs-admin set replicas 2 first gives every slot a backup\n",
            if slots == 1 { "" } else { "s" },
            if slots == 1 { "s" } else { "" },
        ));
    }
    out
}

/// What the drain ended with: `left`, the slots still the member's.
pub fn done_text(member: MemberId, left: u32) -> String {
    let stay = if left == 1 {
        "1 slot had no ready backup and stays with it (it serves it)".to_string()
    } else {
        format!("{left} slots had no ready backup and stay with it (it serves them)")
    };
    format!("member {member} drained: its slots moved to their ready backups; {stay}\n")
}

/// Asks the member for its status until it says drained (at most `limit`),
/// showing the wait on stderr; returns how long it took.
fn wait<C: Control>(
    admin: &mut Admin<C>,
    member: MemberId,
    addr: SocketAddr,
    pace: Pace,
    limit: Duration,
) -> Result<Duration, AdminError> {
    let start = Instant::now();
    let mut last_ok = Instant::now();
    let mut d = Display::new();
    loop {
        let t = Instant::now();
        if t - start >= limit {
            d.done();
            return Err(AdminError::DrainSlow {
                member,
                waited: render::duration(limit.as_secs_f64()),
            });
        }
        match admin.status(addr) {
            Ok(s) if s.drained => {
                d.done();
                return Ok(start.elapsed());
            }
            Ok(_) => {
                last_ok = Instant::now();
                let line = format!(
                    "draining member {member}: waiting for the control group to apply it, {}",
                    render::duration(start.elapsed().as_secs_f64())
                );
                d.line(&line, &line, false);
            }
            Err(e) => {
                if last_ok.elapsed() >= pace.patience {
                    d.done();
                    return Err(AdminError::LostMember {
                        member,
                        last: e.to_string(),
                    });
                }
                let line = format!("member {member} not answering: {e}");
                d.line(&line, &line, false);
            }
        }
        std::thread::sleep(pace.poll.saturating_sub(t.elapsed()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{self, requests, Fake};
    use kvs_client::ControlError;
    use kvs_proto::ShardMap;

    use crate::fake::QUICK;
    /// Member 0, the contact.
    const CONTACT: &str = "10.0.0.1:7000";
    /// Member 1 (`0.0.0.0:7001` in the map), reached at the contact's IP.
    const MEMBER: &str = "10.0.0.1:7001";

    /// [`fake::map`] with slots 0-15 at member 1, and those that had no
    /// ready backup (`left` of them) after its drain.
    fn maps(left: u32) -> (ShardMap, ShardMap) {
        let mut before = fake::map();
        before.assign(0..16, MemberId(1), None).unwrap();
        before.set_version(4);
        let mut after = fake::map();
        if left > 0 {
            after.assign(0..left, MemberId(1), None).unwrap();
        }
        after.set_version(5);
        (before, after)
    }

    /// `reply` (a status) with `drained` set.
    fn drained(reply: ControlReply, drained: bool) -> ControlReply {
        match reply {
            ControlReply::Status(s) => ControlReply::Status(MemberStatus { drained, ..s }),
            other => other,
        }
    }

    /// The cluster of [`maps`] reached through member 0, keeping
    /// `replicas` copies. Member 1 answers `Drain` with `answer`, and says
    /// drained once asked for its status `polls` times after it; its map
    /// is then the drained one.
    fn cluster(replicas: u8, answer: ControlReply, polls: usize, left: u32) -> Admin<Fake> {
        let (before, after) = maps(left);
        let mut asked_drain = false;
        let mut n = 0;
        fake::admin(CONTACT, move |at, req| {
            let member = at == fake::addr(MEMBER);
            let view = fake::group(replicas, 0, 5);
            Ok(match req {
                ControlRequest::Map if member && asked_drain && n > polls => {
                    fake::map_reply(&after)
                }
                ControlRequest::Map => fake::map_reply(&before),
                ControlRequest::Status if member => {
                    if asked_drain {
                        n += 1;
                    }
                    drained(fake::status_in(MemberId(1), view), asked_drain && n > polls)
                }
                ControlRequest::Status => fake::status_in(MemberId(0), view),
                ControlRequest::Drain if member => {
                    asked_drain = true;
                    answer.clone()
                }
                _ => ControlReply::error("not asked here"),
            })
        })
    }

    fn args(member: &str, no_wait: bool) -> DrainArgs {
        DrainArgs {
            member: member.parse().unwrap(),
            wait: !no_wait,
            no_wait,
            max_wait: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_drain_goes_to_the_member_itself_and_the_wait_ends_when_it_says_drained() {
        let mut a = cluster(2, ControlReply::Ok, 2, 3);
        drain(&mut a, &args("1", false), QUICK).unwrap();
        let at_member = |r: ControlRequest| (MEMBER.to_string(), r);
        assert_eq!(
            requests(&a),
            [
                (CONTACT.to_string(), ControlRequest::Map),
                at_member(ControlRequest::Status),
                at_member(ControlRequest::Drain),
                at_member(ControlRequest::Status),
                at_member(ControlRequest::Status),
                at_member(ControlRequest::Status),
                at_member(ControlRequest::Map),
            ]
        );
        // By address, --no-wait: nothing asked after the member took it.
        let mut a = cluster(2, ControlReply::Ok, 2, 3);
        drain(&mut a, &args(MEMBER, true), QUICK).unwrap();
        assert_eq!(requests(&a).len(), 3);
        assert_eq!(requests(&a)[2], (MEMBER.to_string(), ControlRequest::Drain));
        // The map's own address of it names it too.
        let mut a = cluster(2, ControlReply::Ok, 0, 0);
        drain(&mut a, &args("0.0.0.0:7001", true), QUICK).unwrap();
        assert_eq!(requests(&a)[2], (MEMBER.to_string(), ControlRequest::Drain));
    }

    #[test]
    fn a_member_the_cluster_lacks_is_refused_before_anything_is_sent() {
        for (given, want) in [
            ("7", "no member 7: the cluster has members 0-2"),
            (
                "10.0.0.9:7000",
                "unknown server 10.0.0.9:7000: no member of the cluster is at that address",
            ),
        ] {
            let mut a = cluster(2, ControlReply::Ok, 0, 0);
            let e = drain(&mut a, &args(given, false), QUICK).unwrap_err();
            assert_eq!(e.to_string(), want);
            assert_eq!(requests(&a), [(CONTACT.to_string(), ControlRequest::Map)]);
        }
    }

    #[test]
    fn a_member_that_cannot_be_reached_or_refuses_is_an_error_with_the_reason() {
        // Silent, and the contact's view marks it failed.
        let mut a = fake::admin(CONTACT, |at, req| {
            if at == fake::addr(MEMBER) {
                return Err(ControlError::Timeout {
                    addr: at,
                    after: Duration::from_secs(1),
                });
            }
            let mut view = fake::group(2, 0, 5);
            view.members[1].state = "failed".into();
            Ok(match req {
                ControlRequest::Map => fake::map_reply(&fake::map()),
                _ => fake::status_in(MemberId(0), view),
            })
        });
        let e = drain(&mut a, &args("1", false), QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot reach member 1 to drain it: 10.0.0.1:7001: no answer within 1s; the \
             control group marks it failed"
        );
        assert!(requests(&a)
            .iter()
            .all(|(_, r)| *r != ControlRequest::Drain));
        // It refuses: verbatim.
        let mut a = cluster(2, ControlReply::error("not now"), 0, 0);
        let e = drain(&mut a, &args("1", false), QUICK).unwrap_err();
        assert_eq!(e.to_string(), "drain refused by 10.0.0.1:7001: not now");
        // Something else answers at its address.
        let mut a = fake::admin(CONTACT, |_, req| {
            Ok(match req {
                ControlRequest::Map => fake::map_reply(&fake::map()),
                _ => fake::status(MemberId(2), None),
            })
        });
        let e = drain(&mut a, &args("1", false), QUICK).unwrap_err();
        assert!(
            e.to_string()
                .contains("it answers as member 2, not 1: nothing sent"),
            "{e}"
        );
    }

    #[test]
    fn the_wait_ends_with_a_reason_when_the_drain_is_not_applied() {
        // Never drained within the limit.
        let mut a = cluster(2, ControlReply::Ok, usize::MAX, 0);
        let quick = DrainArgs {
            max_wait: Duration::from_millis(30),
            ..args("1", false)
        };
        let e = drain(&mut a, &quick, QUICK).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("member 1 is not drained after 0.0s: it serves nothing until"),
            "{e}"
        );
        // It stops answering for longer than the patience.
        let mut after_drain = false;
        let mut a = fake::admin(CONTACT, move |at, req| match req {
            ControlRequest::Map => Ok(fake::map_reply(&fake::map())),
            ControlRequest::Drain => {
                after_drain = true;
                Ok(ControlReply::Ok)
            }
            _ if after_drain => Err(ControlError::Timeout {
                addr: at,
                after: Duration::from_secs(1),
            }),
            _ => Ok(fake::status_in(MemberId(1), fake::group(2, 0, 5))),
        });
        let pace = Pace {
            poll: Duration::ZERO,
            patience: Duration::from_millis(20),
        };
        let e = drain(&mut a, &args("1", false), pace).unwrap_err();
        assert_eq!(
            e.to_string(),
            "lost member 1 while waiting for its drain: 10.0.0.1:7001: no answer within 1s; \
             kvs-admin status shows whether it was drained"
        );
    }

    #[test]
    fn what_the_drain_does_is_said_plainly() {
        let addr = fake::addr(MEMBER);
        let st = |replicas: u8, was: bool| match drained(
            fake::status_in(MemberId(1), fake::group(replicas, 0, 5)),
            was,
        ) {
            ControlReply::Status(s) => s,
            _ => unreachable!(),
        };
        let head = "member 1 (10.0.0.1:7001) is draining: it stopped serving, and the control \
                    group moves each slot it is primary of to the slot's ready backup and drops \
                    the copies it holds\n";
        assert_eq!(draining_text(MemberId(1), addr, &st(2, false), 16), head);
        assert_eq!(
            draining_text(MemberId(1), addr, &st(2, true), 16),
            format!("{head}note: member 1 was drained already (it has not restarted since)\n")
        );
        assert_eq!(
            draining_text(MemberId(1), addr, &st(1, false), 16),
            format!(
                "{head}warning: replicas is 1, so no slot has a backup and nothing can move: \
                 the 16 slots of member 1 stay with it (it serves them again once the drain \
                 is applied); kvs-admin set replicas 2 first gives every slot a backup\n"
            )
        );
        assert!(draining_text(MemberId(1), addr, &st(1, false), 1)
            .contains("the 1 slot of member 1 stays"));
        assert_eq!(
            done_text(MemberId(1), 0),
            "member 1 drained: its slots moved to their ready backups; 0 slots had no ready \
             backup and stay with it (it serves them)\n"
        );
        assert!(done_text(MemberId(1), 1)
            .ends_with("; 1 slot had no ready backup and stays with it (it serves it)\n"));
    }
}
