//! `migrate`, `rebalance`, `cancel` and `forget`: checking the arguments
//! against the map, showing the plan, sending the request to the control
//! group's leader, and following the migration it starts.

use crate::render::say;
use std::net::SocketAddr;
use std::ops::Range;

use kvs_proto::control::{ControlReply, ControlRequest, MigrationStatus};
use kvs_proto::{MemberId, ShardMap};

use crate::admin::{self, unexpected, Admin, Control};
use crate::args::{ForgetArgs, MemberRef, MigrateArgs, SlotRange, WaitArgs};
use crate::error::AdminError;
use crate::progress::{self, Pace};
use crate::render;

/// Moves `--slots` to `--to`.
pub fn migrate<C: Control>(
    admin: &mut Admin<C>,
    a: &MigrateArgs,
    pace: Pace,
) -> Result<(), AdminError> {
    let map = admin.map()?;
    let end = check_range(a.slots, map.slots())?;
    let addrs = member_addrs(admin, &map);
    let to = member_of(&a.to, &addrs)?;
    let req = ControlRequest::Migrate {
        first: a.slots.first,
        end,
        to,
    };
    start(admin, &req, "migrate", &addrs, &a.wait, pace)
}

/// Spreads the slots evenly over the members.
pub fn rebalance<C: Control>(
    admin: &mut Admin<C>,
    w: &WaitArgs,
    pace: Pace,
) -> Result<(), AdminError> {
    let map = admin.map()?;
    let addrs = member_addrs(admin, &map);
    // Over the members the group has up, as the leader plans it.
    let up = admin.up_members(&map);
    let moves = map.rebalance_moves_among(&up);
    if moves.is_empty() {
        say(&format!(
            "nothing to move: the {} slots are spread evenly over the {} member{} (map version {})\n",
            map.slots(),
            addrs.len(),
            if addrs.len() == 1 { "" } else { "s" },
            map.version()
        ));
        return Ok(());
    }
    say(&plan_text(&map, &moves, &addrs));
    start(
        admin,
        &ControlRequest::Rebalance,
        "rebalance",
        &addrs,
        w,
        pace,
    )
}

/// Each member's address as the map has it, and as this host reaches it.
pub fn member_addrs<C: Control>(admin: &Admin<C>, map: &ShardMap) -> Vec<(SocketAddr, SocketAddr)> {
    map.members()
        .iter()
        .map(|m| (m.addr, admin.reach(m.addr)))
        .collect()
}

/// The member `r` names, among the map's (`addrs`: as the map has them, and
/// as this host reaches them).
pub fn member_of(
    r: &MemberRef,
    addrs: &[(SocketAddr, SocketAddr)],
) -> Result<MemberId, AdminError> {
    match r {
        MemberRef::Id(id) => member_by_id(*id, addrs.len()),
        MemberRef::Addr(given) => {
            let candidates = admin::resolve(given)?;
            member_by_addr(given, &candidates, addrs)
        }
    }
}

/// Removes a member for good, then waits (up to 10 s) until the contact
/// has applied it.
pub fn forget<C: Control>(admin: &mut Admin<C>, f: &ForgetArgs) -> Result<(), AdminError> {
    let map = admin.map()?;
    let addrs = member_addrs(admin, &map);
    let member = member_of(&f.member, &addrs)?;
    let req = ControlRequest::Forget {
        member,
        force: f.force,
    };
    let (leader, answer) = ask_until_taken(admin, &req, FORGET_PATIENCE)?;
    if answer != ControlReply::Ok {
        return Err(unexpected(leader, "forget", answer));
    }
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(10) {
        let gone = admin
            .status(leader)
            .ok()
            .and_then(|s| s.group)
            .and_then(|g| g.members.into_iter().find(|m| m.id == member))
            .is_some_and(|m| m.state == "left");
        if gone {
            say(&format!(
                "member {member} ({}) is forgotten: it is no longer a member, and its id \
                 will not be used again\n",
                addrs[member.index()].0
            ));
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Err(AdminError::Refused {
        addr: leader,
        what: "forget",
        message: "accepted, but not committed within 10 s; kvs-admin status shows whether it \
                  went through"
            .into(),
    })
}

/// How long `forget` asks again while another membership change holds it
/// up (each takes milliseconds to commit; the voters' reshuffle after a
/// failure takes two).
const FORGET_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// `req` to the keeper, asked again every 100 ms while the answer is
/// `NotYet` (another membership change is being committed), for at most
/// `patience`; then the reason, as a refusal.
fn ask_until_taken<C: Control>(
    admin: &mut Admin<C>,
    req: &ControlRequest,
    patience: std::time::Duration,
) -> Result<(SocketAddr, ControlReply), AdminError> {
    let t = std::time::Instant::now();
    loop {
        match admin.ask_keeper(req)? {
            (addr, ControlReply::NotYet { message }) => {
                if t.elapsed() >= patience {
                    return Err(AdminError::Refused {
                        addr,
                        what: "forget",
                        message: format!("{message} (still, after {patience:?})"),
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            taken => return Ok(taken),
        }
    }
}

/// Sets the control group's member timeout to `ms` milliseconds.
pub fn set_member_timeout<C: Control>(admin: &mut Admin<C>, ms: u64) -> Result<(), AdminError> {
    let req = ControlRequest::SetMemberTimeout { ms };
    let (keeper, answer) = admin.ask_keeper(&req)?;
    match answer {
        ControlReply::Ok => {
            say(&format!(
                "member_timeout_ms = {ms} proposed by the leader at {keeper}: every member \
                 times its lease and the leader its failure marks by it once the change is \
                 applied\n"
            ));
            Ok(())
        }
        other => Err(unexpected(keeper, "set member-timeout", other)),
    }
}

/// Stops the migration in progress.
pub fn cancel<C: Control>(admin: &mut Admin<C>) -> Result<(), AdminError> {
    let (keeper, answer) = admin.ask_keeper(&ControlRequest::Cancel)?;
    match answer {
        ControlReply::Ok => {
            say(&format!(
                "cancel committed by the leader at {keeper}: the slots being pulled now finish \
                 moving, the rest stay where they are (kvs-admin status shows the end)\n"
            ));
            Ok(())
        }
        other => Err(unexpected(keeper, "cancel", other)),
    }
}

/// Sends `req` to the keeper, prints what started, and unless `--no-wait`
/// follows it to its end.
fn start<C: Control>(
    admin: &mut Admin<C>,
    req: &ControlRequest,
    what: &'static str,
    addrs: &[(SocketAddr, SocketAddr)],
    w: &WaitArgs,
    pace: Pace,
) -> Result<(), AdminError> {
    let (keeper, answer) = admin.ask_keeper(req)?;
    let started = match answer {
        ControlReply::Started(m) => m,
        other => return Err(unexpected(keeper, what, other)),
    };
    say(&started_text(keeper, &started, addrs));
    if w.no_wait {
        say("not waiting: kvs-admin status follows it, kvs-admin cancel stops it\n");
        return Ok(());
    }
    eprintln!(
        "following the migration; the servers run it, so stopping kvs-admin (Ctrl-C) \
         does not stop it (kvs-admin cancel does)"
    );
    let end = if started.finished {
        started
    } else {
        let others: Vec<SocketAddr> = addrs.iter().map(|&(_, reach)| reach).collect();
        progress::follow(admin, keeper, &others, pace)?
    };
    progress::outcome(&end)?;
    say(&format!(
        "migration finished: {}\n",
        progress::summary(&end, 20)
    ));
    Ok(())
}

/// `end` of `Migrate` for `range`, if the cluster has those slots.
pub fn check_range(range: SlotRange, slots: u32) -> Result<u32, AdminError> {
    if range.end() > u64::from(slots) {
        return Err(AdminError::SlotsOutOfBounds { range, slots });
    }
    // end() <= slots, a u32.
    Ok(range.end() as u32)
}

/// The member with id `id` of a cluster of `members`.
pub fn member_by_id(id: MemberId, members: usize) -> Result<MemberId, AdminError> {
    if id.index() < members {
        Ok(id)
    } else {
        Err(AdminError::NoMember { id, members })
    }
}

/// The member at one of `candidates` (the addresses `given` resolves to),
/// matching either the map's address of a member or where it is reached
/// (`addrs`: per member, both).
pub fn member_by_addr(
    given: &str,
    candidates: &[SocketAddr],
    addrs: &[(SocketAddr, SocketAddr)],
) -> Result<MemberId, AdminError> {
    addrs
        .iter()
        .position(|(raw, reached)| candidates.iter().any(|c| c == raw || c == reached))
        .map(|i| MemberId(i as u16))
        .ok_or_else(|| AdminError::UnknownServer {
            given: given.to_string(),
        })
}

/// The rebalance plan: each move split by the member the slots leave.
pub fn plan_text(
    map: &ShardMap,
    moves: &[(Range<u32>, MemberId)],
    addrs: &[(SocketAddr, SocketAddr)],
) -> String {
    let total: u32 = moves.iter().map(|(r, _)| r.end - r.start).sum();
    let mut out = format!(
        "plan (map version {}): move {total} of {} slots\n",
        map.version(),
        map.slots()
    );
    for (r, to) in moves {
        for (part, from) in by_owner(map, r.clone()) {
            out.push_str(&format!(
                "  {:<12} member {from} -> member {to}{}\n",
                render::slot_range(&part),
                at(addrs, *to)
            ));
        }
    }
    out.push_str("then:");
    let after: Vec<String> = (0..addrs.len() as u16)
        .map(MemberId)
        .map(|m| {
            let gain: u32 = moves
                .iter()
                .filter(|(_, t)| *t == m)
                .map(|(r, _)| r.end - r.start)
                .sum();
            let loss: u32 = moves
                .iter()
                .flat_map(|(r, _)| by_owner(map, r.clone()))
                .filter(|(_, f)| *f == m)
                .map(|(r, _)| r.end - r.start)
                .sum();
            format!(
                " member {m} {} slots",
                (map.slots_of(m) + gain).saturating_sub(loss)
            )
        })
        .collect();
    out.push_str(&after.join(","));
    out.push('\n');
    out
}

/// `r` split into runs with one owning member.
fn by_owner(map: &ShardMap, r: Range<u32>) -> Vec<(Range<u32>, MemberId)> {
    let mut out: Vec<(Range<u32>, MemberId)> = Vec::new();
    for s in r {
        let m = map.owner_of_slot(s).member;
        match out.last_mut() {
            Some((p, o)) if *o == m && p.end == s => p.end = s + 1,
            _ => out.push((s..s + 1, m)),
        }
    }
    out
}

/// ` (address)` of member `m`, if known.
fn at(addrs: &[(SocketAddr, SocketAddr)], m: MemberId) -> String {
    addrs
        .get(m.index())
        .map_or(String::new(), |(_, a)| format!(" ({a})"))
}

/// What the keeper says it started.
fn started_text(
    keeper: SocketAddr,
    m: &MigrationStatus,
    addrs: &[(SocketAddr, SocketAddr)],
) -> String {
    let mut out = format!(
        "migration started at the keeper {keeper}: {} slot{} in {} move{}\n",
        m.slots_total,
        if m.slots_total == 1 { "" } else { "s" },
        m.moves.len(),
        if m.moves.len() == 1 { "" } else { "s" }
    );
    for &(first, end, to) in &m.moves {
        out.push_str(&format!(
            "  {} -> member {to}{}\n",
            render::slot_range(&(first..end)),
            at(addrs, to)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{self, requests, Fake};
    use kvs_proto::Member;

    use crate::fake::QUICK;
    const CONTACT: &str = "10.0.0.1:7001";
    const KEEPER: &str = "10.0.0.1:7000";

    /// The cluster of [`fake::map`] reached through member 1: keeper-only
    /// requests there get `Keeper` (with the unspecified IP); the keeper
    /// answers them with `start` and its status with `progress` in turn
    /// (the last one repeated).
    fn cluster(map: ShardMap, start: ControlReply, progress: Vec<MigrationStatus>) -> Admin<Fake> {
        let mut progress = progress.into_iter();
        let mut last = None;
        fake::admin(CONTACT, move |at, req| {
            let keeper = at == fake::addr(KEEPER);
            Ok(match req {
                ControlRequest::Map => fake::map_reply(&map),
                ControlRequest::Status if keeper => {
                    if let Some(m) = progress.next() {
                        last = Some(m);
                    }
                    fake::status(MemberId(0), last.clone())
                }
                ControlRequest::Status => fake::status(MemberId(1), None),
                _ if !keeper => ControlReply::Keeper {
                    addr: fake::addr("0.0.0.0:7000"),
                },
                ControlRequest::Cancel => ControlReply::Ok,
                _ => start.clone(),
            })
        })
    }

    fn args(slots: &str, to: &str, no_wait: bool) -> MigrateArgs {
        MigrateArgs {
            slots: slots.parse().unwrap(),
            to: to.parse().unwrap(),
            wait: WaitArgs { no_wait },
        }
    }

    #[test]
    fn a_migration_goes_to_the_keeper_and_is_followed_to_its_end() {
        let started = ControlReply::Started(fake::migration(0, 64, false));
        let mut a = cluster(
            fake::map(),
            started,
            vec![
                fake::migration(16, 64, false),
                fake::migration(64, 64, true),
            ],
        );
        migrate(&mut a, &args("0-63", "1", false), QUICK).unwrap();
        let m = ControlRequest::Migrate {
            first: 0,
            end: 64,
            to: MemberId(1),
        };
        assert_eq!(
            requests(&a),
            [
                (CONTACT.to_string(), ControlRequest::Map),
                (CONTACT.to_string(), m.clone()),
                (KEEPER.to_string(), m),
                (KEEPER.to_string(), ControlRequest::Status),
                (KEEPER.to_string(), ControlRequest::Status),
            ]
        );
        // --to by address: the map's member 1 is at 0.0.0.0:7001, reached
        // at the contact's IP.
        let started = ControlReply::Started(fake::migration(0, 1, false));
        let mut a = cluster(fake::map(), started, vec![]);
        migrate(&mut a, &args("17", "10.0.0.1:7001", true), QUICK).unwrap();
        assert_eq!(
            requests(&a)[1].1,
            ControlRequest::Migrate {
                first: 17,
                end: 18,
                to: MemberId(1)
            }
        );
        // --no-wait: nothing asked after the start.
        assert_eq!(requests(&a).len(), 3);
    }

    #[test]
    fn a_migration_that_is_cancelled_or_fails_is_an_error_with_the_reason() {
        let mut cancelled = fake::migration(16, 64, true);
        cancelled.cancelled = true;
        let started = ControlReply::Started(fake::migration(0, 64, false));
        let mut a = cluster(fake::map(), started.clone(), vec![cancelled]);
        let e = migrate(&mut a, &args("0-63", "2", false), QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "migration cancelled after 16 of 64 slots moved"
        );
        let mut failed = fake::migration(16, 64, true);
        failed.error = Some("member 2 stopped answering".into());
        let mut a = cluster(fake::map(), started, vec![failed]);
        let e = rebalance(&mut a, &WaitArgs { no_wait: false }, QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "migration failed after 16 of 64 slots: member 2 stopped answering"
        );
    }

    #[test]
    fn the_keepers_refusal_reaches_the_user_verbatim() {
        let no = ControlReply::error("a migration is already running");
        let mut a = cluster(fake::map(), no, vec![]);
        let e = migrate(&mut a, &args("0-63", "1", false), QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "migrate refused by 10.0.0.1:7000: a migration is already running"
        );
        let e = rebalance(&mut a, &WaitArgs { no_wait: false }, QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rebalance refused by 10.0.0.1:7000: a migration is already running"
        );
        let mut a = cluster(fake::map(), ControlReply::Ok, vec![]);
        let e = migrate(&mut a, &args("0-63", "1", false), QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "10.0.0.1:7000: unexpected answer to migrate: Ok"
        );
    }

    #[test]
    fn arguments_are_checked_against_the_map_before_anything_is_sent() {
        for (slots, to, want) in [
            (
                "0-9999",
                "1",
                "slot range 0-9999 out of bounds: the cluster has 64 slots (0-63)",
            ),
            (
                "64",
                "1",
                "slot range 64 out of bounds: the cluster has 64 slots (0-63)",
            ),
            ("0-9", "3", "no member 3: the cluster has members 0-2"),
            (
                "0-9",
                "10.0.0.9:7000",
                "unknown server 10.0.0.9:7000: no member of the cluster is at that address",
            ),
        ] {
            let started = ControlReply::Started(fake::migration(0, 1, false));
            let mut a = cluster(fake::map(), started, vec![]);
            let e = migrate(&mut a, &args(slots, to, false), QUICK).unwrap_err();
            assert_eq!(e.to_string(), want);
            assert_eq!(requests(&a), [(CONTACT.to_string(), ControlRequest::Map)]);
        }
    }

    #[test]
    fn rebalance_sends_only_when_there_is_something_to_move() {
        let started = ControlReply::Started(fake::migration(0, 42, false));
        let mut a = cluster(
            fake::map(),
            started.clone(),
            vec![fake::migration(42, 42, true)],
        );
        rebalance(&mut a, &WaitArgs { no_wait: false }, QUICK).unwrap();
        assert!(requests(&a).contains(&(KEEPER.to_string(), ControlRequest::Rebalance)));
        let one = ShardMap::single(fake::addr(KEEPER), 64, 2).unwrap();
        let mut a = cluster(one, started, vec![]);
        rebalance(&mut a, &WaitArgs { no_wait: false }, QUICK).unwrap();
        assert_eq!(requests(&a)[0], (CONTACT.to_string(), ControlRequest::Map));
        assert!(requests(&a)
            .iter()
            .all(|(_, r)| *r != ControlRequest::Rebalance));
    }

    #[test]
    fn cancel_goes_to_the_keeper() {
        let mut a = cluster(fake::map(), ControlReply::Ok, vec![]);
        cancel(&mut a).unwrap();
        assert_eq!(
            requests(&a)[1],
            (KEEPER.to_string(), ControlRequest::Cancel)
        );
        let mut a = fake::admin(KEEPER, |_, _| {
            Ok(ControlReply::error("no migration is running"))
        });
        assert_eq!(
            cancel(&mut a).unwrap_err().to_string(),
            "cancel refused by 10.0.0.1:7000: no migration is running"
        );
    }

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_are_checked_against_the_slot_count() {
        let r = |s: &str| s.parse::<SlotRange>().unwrap();
        assert_eq!(check_range(r("0-1023"), 1024).unwrap(), 1024);
        assert_eq!(check_range(r("17"), 1024).unwrap(), 18);
        assert_eq!(
            check_range(r("0-9999"), 1024).unwrap_err().to_string(),
            "slot range 0-9999 out of bounds: the cluster has 1024 slots (0-1023)"
        );
        assert!(check_range(r("1024"), 1024).is_err());
        assert!(check_range(r("0-4294967295"), 1024).is_err());
    }

    #[test]
    fn to_names_a_member_by_id_or_address() {
        assert_eq!(member_by_id(MemberId(2), 3).unwrap(), MemberId(2));
        assert_eq!(
            member_by_id(MemberId(7), 3).unwrap_err().to_string(),
            "no member 7: the cluster has members 0-2"
        );
        let addrs = [
            (a("10.0.0.1:7000"), a("10.0.0.1:7000")),
            (a("0.0.0.0:7001"), a("10.0.0.1:7001")),
            (a("10.0.0.2:7000"), a("10.0.0.2:7000")),
        ];
        assert_eq!(
            member_by_addr("x", &[a("10.0.0.2:7000")], &addrs).unwrap(),
            MemberId(2)
        );
        // Where it is reached, or the map's own address.
        assert_eq!(
            member_by_addr("x", &[a("10.0.0.1:7001")], &addrs).unwrap(),
            MemberId(1)
        );
        assert_eq!(
            member_by_addr("x", &[a("0.0.0.0:7001")], &addrs).unwrap(),
            MemberId(1)
        );
        // Any of the addresses a name resolves to.
        assert_eq!(
            member_by_addr("x", &[a("[::1]:7000"), a("10.0.0.1:7000")], &addrs).unwrap(),
            MemberId(0)
        );
        assert_eq!(
            member_by_addr("10.0.0.9:7000", &[a("10.0.0.9:7000")], &addrs)
                .unwrap_err()
                .to_string(),
            "unknown server 10.0.0.9:7000: no member of the cluster is at that address"
        );
    }

    #[test]
    fn the_plan_names_sources_targets_and_the_outcome() {
        let mut map = ShardMap::single(a("10.0.0.1:7000"), 12, 1).unwrap();
        for p in [7001, 7002] {
            map.add_member(Member {
                addr: a(&format!("10.0.0.1:{p}")),
                workers: 1,
                bulk_port: 0,
            })
            .unwrap();
        }
        let moves = map.rebalance_moves();
        let addrs: Vec<_> = map.members().iter().map(|m| (m.addr, m.addr)).collect();
        let t = plan_text(&map, &moves, &addrs);
        assert_eq!(
            t,
            "plan (map version 1): move 8 of 12 slots\n  \
             4-7          member 0 -> member 1 (10.0.0.1:7001)\n  \
             8-11         member 0 -> member 2 (10.0.0.1:7002)\n\
             then: member 0 4 slots, member 1 4 slots, member 2 4 slots\n"
        );
        let m = MigrationStatus {
            moves: vec![(4, 8, MemberId(1)), (8, 12, MemberId(2))],
            slots_total: 8,
            slots_done: 0,
            slots_moving: 0,
            records: 0,
            bytes: 0,
            seconds: 0.0,
            started_ms: 0,
            finished: false,
            cancelled: false,
            error: None,
            stalled: None,
        };
        assert_eq!(
            started_text(a("10.0.0.1:7000"), &m, &addrs),
            "migration started at the keeper 10.0.0.1:7000: 8 slots in 2 moves\n  \
             4-7 -> member 1 (10.0.0.1:7001)\n  8-11 -> member 2 (10.0.0.1:7002)\n"
        );
    }

    #[test]
    fn forget_asks_again_while_another_membership_change_holds_it_up() {
        let busy = |n: u32| {
            let mut left = n;
            fake::admin(KEEPER, move |_, req| {
                Ok(match req {
                    ControlRequest::Map => fake::map_reply(&fake::map()),
                    ControlRequest::Forget { .. } if left > 0 => {
                        left -= 1;
                        ControlReply::NotYet {
                            message: "another membership change is being committed".into(),
                        }
                    }
                    ControlRequest::Forget { .. } => ControlReply::Ok,
                    _ => {
                        let mut g = fake::group(1, 0, 9);
                        g.members[2].state = "left".into();
                        fake::status_in(MemberId(0), g)
                    }
                })
            })
        };
        let f = ForgetArgs {
            member: "2".parse().unwrap(),
            force: false,
        };
        let mut a = busy(2);
        forget(&mut a, &f).unwrap();
        let asked = requests(&a)
            .iter()
            .filter(|(_, r)| matches!(r, ControlRequest::Forget { .. }))
            .count();
        assert_eq!(asked, 3);
        // Held up for longer than its patience: the reason, as a refusal.
        let mut a = busy(u32::MAX);
        let req = ControlRequest::Forget {
            member: MemberId(2),
            force: false,
        };
        let e = ask_until_taken(&mut a, &req, std::time::Duration::ZERO);
        assert!(
            matches!(e, Err(AdminError::Refused { message, .. }) if message.contains("another"))
        );
    }
}
