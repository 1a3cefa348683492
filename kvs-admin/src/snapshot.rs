//! `snapshot`: a member with records on disk (`durability` other than
//! `none`) has each worker copy its records to its snapshot file while it
//! serves, so its logs start again small. kvs-admin asks each member itself
//! (any member snapshots itself, the leader is not involved) and follows
//! the members' status until every worker of each has put a new snapshot
//! in place.
//!
//! The member numbers each request ([`ControlReply::SnapshotAsked`]), and
//! each worker says the last request a snapshot in place answers
//! ([`DiskStatus::answered`]): a snapshot that began after the request, or
//! was under way when it came (the worker takes no second one). A worker
//! is done once that number reaches the request's. One seen copying that
//! ends without answering failed; a snapshot count that goes back, or
//! start figures that change, mean the member restarted and lost the
//! request.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kvs_proto::control::{ControlReply, ControlRequest, DiskStatus, MemberStatus};
use kvs_proto::{MemberId, ShardMap};

use crate::admin::{unexpected, Admin, Control};
use crate::args::SnapshotArgs;
use crate::error::AdminError;
use crate::member::{status_as, unreachable};
use crate::migrate::{member_addrs, member_of};
use crate::progress::{Display, Pace};
use crate::render::{self, say};
use crate::status::DiskSum;

/// Twice a second (the workers publish their figures about once a
/// second); ten seconds of silence from a member at most.
pub const PACE: Pace = Pace {
    poll: Duration::from_millis(500),
    patience: Duration::from_secs(10),
};

/// The most copying workers a progress line names.
const MAX_COPYING: usize = 3;

/// Asks the member (every member, without one) to snapshot and says what
/// each does; unless `--no-wait`, waits until every worker of each has a
/// new snapshot in place, then says the sizes of its snapshots and logs.
/// `Ok` when every member asked did (with `--no-wait`: took the request).
pub fn snapshot<C: Control>(
    admin: &mut Admin<C>,
    a: &SnapshotArgs,
    pace: Pace,
) -> Result<(), AdminError> {
    let map = admin.map()?;
    let addrs = member_addrs(admin, &map);
    let targets = match &a.member {
        Some(r) => vec![member_of(r, &addrs)?],
        None => members_to_ask(admin, &map),
    };
    let many = targets.len() > 1;
    let mut failed: Vec<(MemberId, AdminError)> = Vec::new();
    let mut fail = |m: MemberId, e: AdminError| {
        // Said at once when there are others to wait for.
        if many {
            eprintln!("kvs-admin: {e}");
        }
        failed.push((m, e));
    };
    let mut asked = Vec::new();
    for &member in &targets {
        let addr = addrs[member.index()].1;
        match ask(admin, member, addr) {
            Ok(x) => {
                say(&asked_text(&x));
                asked.push(x);
            }
            Err(e) => fail(member, e),
        }
    }
    let mut done = Vec::new();
    if a.no_wait {
        if !asked.is_empty() {
            say(
                "not waiting: kvs-admin status shows a snapshot under way, and those taken, \
                 on each member's disk line\n",
            );
        }
        done = asked.iter().map(|x| x.member).collect();
    } else {
        let ends = wait(admin, &mut asked, pace, a.max_wait);
        for (x, end) in asked.iter().zip(ends) {
            match end {
                Ok((sum, took)) => {
                    say(&done_text(x.member, x.addr, &sum, took));
                    done.push(x.member);
                }
                Err(e) => fail(x.member, e),
            }
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    if !many {
        return Err(failed.remove(0).1);
    }
    let mut missing: Vec<MemberId> = failed.into_iter().map(|(m, _)| m).collect();
    missing.sort();
    Err(AdminError::SnapshotsIncomplete {
        done: done.len(),
        asked: targets.len(),
        missing,
    })
}

/// Every member of the map but those the contact's view of the control
/// group says were forgotten.
fn members_to_ask<C: Control>(admin: &mut Admin<C>, map: &ShardMap) -> Vec<MemberId> {
    let view = admin.status(admin.contact()).ok().and_then(|s| s.group);
    map.member_ids()
        .filter(|&id| {
            !view
                .as_ref()
                .is_some_and(|g| g.members.iter().any(|m| m.id == id && m.state == "left"))
        })
        .collect()
}

/// A member that took the request, and what to compare its figures with.
#[derive(Debug, Clone)]
struct Asked {
    member: MemberId,
    /// Where it is reached.
    addr: SocketAddr,
    /// The member's number for the request.
    ask: u64,
    /// Each worker's records on disk before the request.
    before: Vec<Option<DiskStatus>>,
    /// Workers seen with a snapshot under way since the request: one that
    /// then ends without a new snapshot failed.
    seen: Vec<bool>,
}

/// Asks the member at `addr` for its figures (whether it answers, and as
/// whom), then to snapshot.
fn ask<C: Control>(
    admin: &mut Admin<C>,
    member: MemberId,
    addr: SocketAddr,
) -> Result<Asked, AdminError> {
    const TO: &str = "snapshot it";
    let before = status_as(admin, member, addr, TO)?;
    let ask = match admin.request(addr, &ControlRequest::Snapshot) {
        Ok(ControlReply::SnapshotAsked { ask }) => ask,
        Ok(ControlReply::Error { message }) => {
            return Err(AdminError::SnapshotRefused {
                member,
                addr,
                message,
            })
        }
        Ok(other) => return Err(unexpected(addr, "snapshot", other)),
        Err(e) => return Err(unreachable(admin, member, addr, e, TO)),
    };
    Ok(Asked {
        member,
        addr,
        ask,
        before: before.workers.iter().map(|w| w.disk).collect(),
        seen: vec![false; before.workers.len()],
    })
}

/// Where one member's snapshot stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Workers whose new snapshot is in place.
    pub done: usize,
    /// Its workers.
    pub workers: usize,
    /// The workers copying: each one's number, slots copied, of how many.
    pub copying: Vec<(u16, u32, u32)>,
}

impl Progress {
    /// Whether every worker is done.
    pub fn finished(&self) -> bool {
        self.done >= self.workers
    }

    /// `3 of 4 workers done, worker 2 copying 512/1024 slots`.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} of {} worker{} done",
            self.done,
            self.workers,
            if self.workers == 1 { "" } else { "s" }
        );
        for &(w, copied, of) in self.copying.iter().take(MAX_COPYING) {
            s.push_str(&format!(", worker {w} copying {copied}/{of} slots"));
        }
        if self.copying.len() > MAX_COPYING {
            s.push_str(&format!(
                ", {} more copying",
                self.copying.len() - MAX_COPYING
            ));
        }
        s
    }
}

/// Where `x`'s snapshot stands by its status `now`, or how it went wrong:
/// a restart, a failed snapshot.
fn check(x: &mut Asked, now: &MemberStatus) -> Result<Progress, AdminError> {
    let member = x.member;
    let restarted = |evidence: String| AdminError::MemberRestarted { member, evidence };
    if now.workers.len() != x.before.len() {
        return Err(restarted(format!(
            "it has {} workers now, {} before",
            now.workers.len(),
            x.before.len()
        )));
    }
    let mut p = Progress {
        done: 0,
        workers: now.workers.len(),
        copying: Vec::new(),
    };
    for (w, (before, ws)) in x.before.iter().zip(&now.workers).enumerate() {
        let worker = w as u16;
        let Some(d) = ws.disk else {
            if before.is_some() {
                return Err(restarted(format!(
                    "worker {worker} reports no records on disk now"
                )));
            }
            // Nothing on disk, nothing to follow.
            p.done += 1;
            continue;
        };
        if let Some(b) = before {
            if d.snapshots < b.snapshots {
                return Err(restarted(format!(
                    "worker {worker} reports {} snapshots since its start, {} before",
                    d.snapshots, b.snapshots
                )));
            }
            // Set once, by the start.
            if (d.recovered_bytes, d.recovery_ms) != (b.recovered_bytes, b.recovery_ms) {
                return Err(restarted(format!(
                    "worker {worker} read its snapshot and logs again"
                )));
            }
        }
        match d.snapshotting {
            Some((copied, of)) => {
                x.seen[w] = true;
                p.copying.push((worker, copied, of));
            }
            None if d.answered >= x.ask => p.done += 1,
            None if x.seen[w] => return Err(AdminError::SnapshotFailed { member, worker }),
            None => {}
        }
    }
    Ok(p)
}

/// Asks each member of `asked` for its status until every worker of it
/// has a new snapshot in place (at most `limit` in all), showing the wait
/// on stderr; how each ended: its disk figures then and how long it
/// took, or why not.
fn wait<C: Control>(
    admin: &mut Admin<C>,
    asked: &mut [Asked],
    pace: Pace,
    limit: Duration,
) -> Vec<Result<(DiskSum, Duration), AdminError>> {
    let start = Instant::now();
    let mut d = Display::new();
    let mut ends: Vec<Option<Result<(DiskSum, Duration), AdminError>>> =
        asked.iter().map(|_| None).collect();
    let mut last_ok = vec![start; asked.len()];
    let mut last: Vec<String> = asked
        .iter()
        .map(|x| {
            let n = x.before.len();
            format!("0 of {n} worker{} done", if n == 1 { "" } else { "s" })
        })
        .collect();
    loop {
        let t = Instant::now();
        let pending: Vec<usize> = (0..asked.len()).filter(|&i| ends[i].is_none()).collect();
        if pending.is_empty() {
            break;
        }
        if t - start >= limit {
            let waited = render::duration(limit.as_secs_f64());
            for i in pending {
                ends[i] = Some(Err(AdminError::SnapshotSlow {
                    member: asked[i].member,
                    progress: last[i].clone(),
                    waited: waited.clone(),
                }));
            }
            break;
        }
        let mut parts = Vec::new();
        for i in pending {
            let x = &mut asked[i];
            match admin.status(x.addr) {
                Ok(s) => {
                    last_ok[i] = Instant::now();
                    match check(x, &s) {
                        Ok(p) if p.finished() => {
                            let sum = DiskSum::of(s.workers.iter().filter_map(|w| w.disk.as_ref()))
                                .unwrap_or_default();
                            ends[i] = Some(Ok((sum, start.elapsed())));
                        }
                        Ok(p) => {
                            last[i] = p.text();
                            parts.push(format!("member {}: {}", x.member, last[i]));
                        }
                        Err(e) => ends[i] = Some(Err(e)),
                    }
                }
                Err(e) if last_ok[i].elapsed() >= pace.patience => {
                    ends[i] = Some(Err(AdminError::LostSnapshot {
                        member: x.member,
                        last: e.to_string(),
                    }));
                }
                Err(e) => parts.push(format!("member {} not answering: {e}", x.member)),
            }
        }
        if parts.is_empty() {
            continue;
        }
        let line = format!(
            "snapshot: {} ({})",
            parts.join("; "),
            render::duration(start.elapsed().as_secs_f64())
        );
        d.line(&line, &line, false);
        std::thread::sleep(pace.poll.saturating_sub(t.elapsed()));
    }
    d.done();
    ends.into_iter()
        .map(|e| e.expect("every member's wait ended"))
        .collect()
}

/// What the member took.
fn asked_text(x: &Asked) -> String {
    let n = x.before.len();
    format!(
        "member {} ({}) is snapshotting: {} copies its records to its snapshot file while \
         it serves\n",
        x.member,
        x.addr,
        if n == 1 {
            "its worker".to_string()
        } else {
            format!("each of its {n} workers")
        }
    )
}

/// What a member's snapshot ended with: `sum`, its workers' disk figures
/// then, `took` after the wait began.
pub fn done_text(member: MemberId, addr: SocketAddr, sum: &DiskSum, took: Duration) -> String {
    format!(
        "member {member} ({addr}): {} in place after {}: snapshots {}, logs {}\n",
        if sum.workers == 1 {
            "its snapshot".to_string()
        } else {
            format!("the snapshots of its {} workers", sum.workers)
        },
        render::duration(took.as_secs_f64()),
        render::bytes(sum.snapshot_bytes),
        render::bytes(sum.log_bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{self, requests, Fake, QUICK};
    use kvs_client::ControlError;
    use kvs_proto::control::WorkerStatus;

    /// Member 0, the contact (two workers).
    const CONTACT: &str = "10.0.0.1:7000";
    /// Member 1 (`0.0.0.0:7001` in the map), reached at the contact's IP.
    const ONE: &str = "10.0.0.1:7001";
    /// Member 2.
    const TWO: &str = "10.0.0.3:7000";

    /// How a member of the fake cluster behaves.
    #[derive(Debug, Clone, Copy)]
    struct Plays {
        /// Its records are on disk (else it refuses).
        durable: bool,
        /// It answers at all.
        answers: bool,
        /// Status answers after the request during which a worker copies
        /// (worker `w` copies `w` more).
        copying: usize,
        /// It restarts after the second status answer following the
        /// request.
        restarts: bool,
        /// Its snapshots fail.
        fails: bool,
        /// It stops answering after the request.
        goes_silent: bool,
    }

    const FINE: Plays = Plays {
        durable: true,
        answers: true,
        copying: 2,
        restarts: false,
        fails: false,
        goes_silent: false,
    };

    /// Snapshots each worker took before the request.
    const BEFORE: u64 = 2;
    /// The member's number for the request (the ones before were
    /// answered).
    const ASK: u64 = 5;

    /// Worker `w`'s disk figures after `n` status answers since the
    /// request (none before it).
    fn disk(p: Plays, w: usize, n: Option<usize>) -> DiskStatus {
        let mut d = DiskStatus {
            log_bytes: 50_000,
            snapshot_bytes: 200_000,
            snapshots: BEFORE,
            snapshotting: None,
            recovered_bytes: 240_000,
            recovery_ms: 15,
            disk_full: false,
            answered: ASK - 1,
        };
        let Some(n) = n else { return d };
        if p.restarts && n >= 2 {
            // A new process: no snapshot since its start.
            d.snapshots = 0;
            return d;
        }
        let copying = if p.fails { 1 } else { p.copying + w };
        if n <= copying {
            d.snapshotting = Some(((n as u32 * 8).min(31), 32));
        } else if !p.fails {
            d.snapshots += 1;
            d.answered = ASK;
            d.log_bytes = 1000;
            d.snapshot_bytes = 1 << 20;
        }
        d
    }

    /// The three members of [`fake::map`] playing `plays`, reached through
    /// member 0; member `left`, if any, forgotten in the contact's view.
    fn cluster(plays: [Plays; 3], left: Option<usize>) -> Admin<Fake> {
        let mut polls: [Option<usize>; 3] = [None; 3];
        fake::admin(CONTACT, move |at, req| {
            let i = match at.to_string().as_str() {
                CONTACT => 0,
                ONE => 1,
                _ => 2,
            };
            let p = plays[i];
            let silent = !p.answers || (p.goes_silent && polls[i].is_some());
            if silent {
                return Err(ControlError::Timeout {
                    addr: at,
                    after: Duration::from_secs(1),
                });
            }
            Ok(match req {
                ControlRequest::Map => fake::map_reply(&fake::map()),
                ControlRequest::Status => {
                    if let Some(n) = polls[i].as_mut() {
                        *n += 1;
                    }
                    let workers = if i == 0 { 2 } else { 1 };
                    let mut view = fake::group(1, 0, 5);
                    if let Some(l) = left {
                        view.members[l].state = "left".into();
                    }
                    let ControlReply::Status(s) = fake::status_in(MemberId(i as u16), view) else {
                        unreachable!()
                    };
                    ControlReply::Status(MemberStatus {
                        workers: (0..workers)
                            .map(|w| WorkerStatus {
                                slots: 32,
                                disk: p.durable.then(|| disk(p, w, polls[i])),
                                ..WorkerStatus::default()
                            })
                            .collect(),
                        ..s
                    })
                }
                ControlRequest::Snapshot if !p.durable => ControlReply::error(format!(
                    "member {i} keeps its records in memory only (durability = \"none\"): \
                     there is nothing to snapshot"
                )),
                ControlRequest::Snapshot => {
                    polls[i] = Some(0);
                    ControlReply::SnapshotAsked { ask: ASK }
                }
                _ => ControlReply::error("not asked here"),
            })
        })
    }

    fn args(member: Option<&str>, no_wait: bool) -> SnapshotArgs {
        SnapshotArgs {
            member: member.map(|m| m.parse().unwrap()),
            wait: !no_wait,
            no_wait,
            max_wait: Duration::from_secs(60),
        }
    }

    /// Where the snapshot requests went.
    fn snapshots_asked(a: &Admin<Fake>) -> Vec<String> {
        requests(a)
            .into_iter()
            .filter(|(_, r)| *r == ControlRequest::Snapshot)
            .map(|(at, _)| at)
            .collect()
    }

    #[test]
    fn one_member_is_asked_itself_and_followed_until_its_snapshot_is_in_place() {
        let mut a = cluster([FINE; 3], None);
        snapshot(&mut a, &args(Some("1"), false), QUICK).unwrap();
        let at_one = |r: ControlRequest| (ONE.to_string(), r);
        assert_eq!(
            requests(&a),
            [
                (CONTACT.to_string(), ControlRequest::Map),
                at_one(ControlRequest::Status),
                at_one(ControlRequest::Snapshot),
                // Copying twice, then in place.
                at_one(ControlRequest::Status),
                at_one(ControlRequest::Status),
                at_one(ControlRequest::Status),
            ]
        );
        // By address, --no-wait: nothing asked once it took the request.
        let mut a = cluster([FINE; 3], None);
        snapshot(&mut a, &args(Some(TWO), true), QUICK).unwrap();
        assert_eq!(requests(&a).len(), 3);
        assert_eq!(snapshots_asked(&a), [TWO]);
        // A member the cluster lacks: nothing sent.
        let mut a = cluster([FINE; 3], None);
        let e = snapshot(&mut a, &args(Some("7"), false), QUICK).unwrap_err();
        assert_eq!(e.to_string(), "no member 7: the cluster has members 0-2");
        assert_eq!(requests(&a).len(), 1);
    }

    #[test]
    fn without_a_member_every_member_but_forgotten_ones_is_asked() {
        let mut a = cluster([FINE; 3], None);
        snapshot(&mut a, &args(None, false), QUICK).unwrap();
        assert_eq!(snapshots_asked(&a), [CONTACT, ONE, TWO]);
        // Member 0's second worker copies once more than its first: it is
        // followed until both are done.
        let polls_of = |a: &Admin<Fake>, at: &str| {
            let r = requests(a);
            let after = r
                .iter()
                .position(|(x, q)| x == at && *q == ControlRequest::Snapshot)
                .unwrap();
            r[after..]
                .iter()
                .filter(|(x, q)| x == at && *q == ControlRequest::Status)
                .count()
        };
        assert_eq!(polls_of(&a, CONTACT), 4);
        assert_eq!(polls_of(&a, ONE), 3);
        // Member 2 was forgotten: not asked.
        let mut a = cluster([FINE; 3], Some(2));
        snapshot(&mut a, &args(None, true), QUICK).unwrap();
        assert_eq!(snapshots_asked(&a), [CONTACT, ONE]);
        assert!(requests(&a).iter().all(|(at, _)| at != TWO));
    }

    #[test]
    fn a_member_with_its_records_in_memory_only_refuses_in_its_words() {
        let memory = Plays {
            durable: false,
            ..FINE
        };
        let mut a = cluster([FINE, memory, FINE], None);
        let e = snapshot(&mut a, &args(Some("1"), false), QUICK).unwrap_err();
        assert!(matches!(e, AdminError::SnapshotRefused { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "member 1 (10.0.0.1:7001) refused the snapshot: member 1 keeps its records in \
             memory only (durability = \"none\"): there is nothing to snapshot"
        );
        // Asked of all: the others still snapshot, and the command fails
        // naming the one that did not.
        let mut a = cluster([FINE, memory, FINE], None);
        let e = snapshot(&mut a, &args(None, false), QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "2 of 3 members snapshotted; not member 1 (said above)"
        );
        assert_eq!(snapshots_asked(&a), [CONTACT, ONE, TWO]);
        let polls = requests(&a)
            .iter()
            .filter(|(at, r)| at == TWO && *r == ControlRequest::Status)
            .count();
        assert_eq!(polls, 1 + 3, "before, then until done");
    }

    #[test]
    fn a_member_that_does_not_answer_is_named_with_the_reason() {
        let silent = Plays {
            answers: false,
            ..FINE
        };
        let mut a = cluster([FINE, FINE, silent], None);
        let e = snapshot(&mut a, &args(Some("2"), false), QUICK).unwrap_err();
        assert!(matches!(e, AdminError::MemberUnreachable { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "cannot reach member 2 to snapshot it: 10.0.0.3:7000: no answer within 1s"
        );
        assert!(snapshots_asked(&a).is_empty());
        let mut a = cluster([FINE, silent, silent], None);
        let e = snapshot(&mut a, &args(None, true), QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "1 of 3 members snapshotted; not members 1, 2 (said above)"
        );
        // One that stops answering during the wait, past the patience.
        let gone = Plays {
            goes_silent: true,
            ..FINE
        };
        let mut a = cluster([FINE, gone, FINE], None);
        let pace = Pace {
            poll: Duration::ZERO,
            patience: Duration::from_millis(20),
        };
        let e = snapshot(&mut a, &args(Some("1"), false), pace).unwrap_err();
        assert_eq!(
            e.to_string(),
            "lost member 1 while waiting for its snapshot: 10.0.0.1:7001: no answer within 1s; \
             kvs-admin status shows its snapshots once it answers again"
        );
        // Something else answers at its address: nothing sent.
        let mut a = fake::admin(CONTACT, |_, req| {
            Ok(match req {
                ControlRequest::Map => fake::map_reply(&fake::map()),
                _ => fake::status(MemberId(2), None),
            })
        });
        let e = snapshot(&mut a, &args(Some("1"), false), QUICK).unwrap_err();
        assert!(
            e.to_string()
                .contains("it answers as member 2, not 1: nothing sent"),
            "{e}"
        );
        assert!(snapshots_asked(&a).is_empty());
    }

    /// An [`Asked`] of member 1 with `n` workers at their [`disk`] before
    /// the request.
    fn asked(n: usize) -> Asked {
        Asked {
            member: MemberId(1),
            addr: fake::addr(ONE),
            ask: ASK,
            before: (0..n).map(|w| Some(disk(FINE, w, None))).collect(),
            seen: vec![false; n],
        }
    }

    /// Member 1's status with `disks`.
    fn status_with(disks: &[DiskStatus]) -> MemberStatus {
        let ControlReply::Status(s) = fake::status(MemberId(1), None) else {
            unreachable!()
        };
        MemberStatus {
            workers: disks
                .iter()
                .map(|&d| WorkerStatus {
                    disk: Some(d),
                    ..WorkerStatus::default()
                })
                .collect(),
            ..s
        }
    }

    #[test]
    fn the_wait_shows_each_workers_progress_and_ends_with_the_sizes() {
        let mut x = asked(4);
        let before = disk(FINE, 0, None);
        let copying = |c: u32, of: u32| DiskStatus {
            snapshotting: Some((c, of)),
            ..before
        };
        let done = DiskStatus {
            snapshots: BEFORE + 1,
            answered: ASK,
            log_bytes: 512,
            snapshot_bytes: 3 << 20,
            ..before
        };
        // A snapshot that ended just before the request (the figures read
        // before it were a second old) answers none of it.
        let earlier = DiskStatus {
            answered: ASK - 1,
            ..done
        };
        let p = check(&mut x, &status_with(&[earlier; 4])).unwrap();
        assert_eq!(p.done, 0);
        // Not begun yet: the figures before.
        let p = check(&mut x, &status_with(&[before; 4])).unwrap();
        assert_eq!(p.text(), "0 of 4 workers done");
        let p = check(
            &mut x,
            &status_with(&[done, done, copying(512, 1024), done]),
        )
        .unwrap();
        assert!(!p.finished());
        assert_eq!(
            p.text(),
            "3 of 4 workers done, worker 2 copying 512/1024 slots"
        );
        let p = check(&mut x, &status_with(&[copying(1, 2); 4])).unwrap();
        assert_eq!(
            p.text(),
            "0 of 4 workers done, worker 0 copying 1/2 slots, worker 1 copying 1/2 slots, \
             worker 2 copying 1/2 slots, 1 more copying"
        );
        let p = check(&mut x, &status_with(&[done; 4])).unwrap();
        assert!(p.finished());
        // A snapshot under way (taken before the request) that ends counts.
        let mut x = asked(1);
        assert_eq!(
            check(&mut x, &status_with(&[copying(0, 8)])).unwrap().done,
            0
        );
        assert_eq!(check(&mut x, &status_with(&[done])).unwrap().done, 1);
        assert_eq!(
            Progress {
                done: 0,
                workers: 1,
                copying: vec![(0, 3, 8)]
            }
            .text(),
            "0 of 1 worker done, worker 0 copying 3/8 slots"
        );

        // The summary: the sums of the figures that said done.
        let sum = DiskSum::of(&[done, done]).unwrap();
        assert_eq!(
            done_text(
                MemberId(1),
                fake::addr(ONE),
                &sum,
                Duration::from_millis(1500)
            ),
            "member 1 (10.0.0.1:7001): the snapshots of its 2 workers in place after 1.5s: \
             snapshots 6.00 MiB, logs 1.00 KiB\n"
        );
        let sum = DiskSum::of(&[done]).unwrap();
        assert!(
            done_text(MemberId(1), fake::addr(ONE), &sum, Duration::ZERO)
                .starts_with("member 1 (10.0.0.1:7001): its snapshot in place after 0.0s: "),
        );
        // Through the fake: every member's worker ends with the figures
        // of `disk` after its snapshot.
        let mut a = cluster([FINE; 3], None);
        let mut xs = vec![
            ask(&mut a, MemberId(0), fake::addr(CONTACT)).unwrap(),
            ask(&mut a, MemberId(1), fake::addr(ONE)).unwrap(),
        ];
        assert_eq!(
            asked_text(&xs[0]),
            "member 0 (10.0.0.1:7000) is snapshotting: each of its 2 workers copies its \
             records to its snapshot file while it serves\n"
        );
        assert!(asked_text(&xs[1]).contains(": its worker copies its records"));
        let ends = wait(&mut a, &mut xs, QUICK, Duration::from_secs(60));
        let sums: Vec<DiskSum> = ends.into_iter().map(|e| e.unwrap().0).collect();
        assert_eq!(
            sums.iter()
                .map(|s| (s.workers, s.snapshots, s.snapshot_bytes, s.log_bytes))
                .collect::<Vec<_>>(),
            [
                (2, 2 * (BEFORE + 1), 2 << 20, 2000),
                (1, BEFORE + 1, 1 << 20, 1000)
            ]
        );
    }

    #[test]
    fn a_restart_a_failure_or_the_limit_ends_the_wait_with_a_reason() {
        // The counter goes back: a restart.
        let restarts = Plays {
            restarts: true,
            ..FINE
        };
        let mut a = cluster([FINE, restarts, FINE], None);
        let e = snapshot(&mut a, &args(Some("1"), false), QUICK).unwrap_err();
        assert!(matches!(e, AdminError::MemberRestarted { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "member 1 restarted while kvs-admin waited for its snapshot (worker 0 reports 0 \
             snapshots since its start, 2 before): the request went with the old process; \
             kvs-admin snapshot 1 asks the new one"
        );
        // Start figures that change, another worker count: a restart too.
        let mut x = asked(1);
        let again = DiskStatus {
            recovery_ms: 99,
            ..disk(FINE, 0, None)
        };
        let e = check(&mut x, &status_with(&[again])).unwrap_err();
        assert!(
            e.to_string()
                .contains("(worker 0 read its snapshot and logs again)"),
            "{e}"
        );
        let e = check(&mut x, &status_with(&[again, again])).unwrap_err();
        assert!(
            e.to_string().contains("(it has 2 workers now, 1 before)"),
            "{e}"
        );

        // A snapshot seen under way that ends with no new one: failed.
        let fails = Plays {
            fails: true,
            ..FINE
        };
        let mut a = cluster([fails, FINE, FINE], None);
        let e = snapshot(&mut a, &args(Some("0"), false), QUICK).unwrap_err();
        assert!(
            matches!(e, AdminError::SnapshotFailed { worker: 0, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string().starts_with(
                "member 0: the snapshot of worker 0 ended without being put in place (it \
                 failed: the member's log says why"
            ),
            "{e}"
        );

        // Not done within --max-wait: where it stood.
        let slow = Plays {
            copying: usize::MAX,
            ..FINE
        };
        let mut a = cluster([FINE, slow, FINE], None);
        let quick = SnapshotArgs {
            max_wait: Duration::from_millis(30),
            ..args(Some("1"), false)
        };
        let e = snapshot(&mut a, &quick, QUICK).unwrap_err();
        assert!(matches!(e, AdminError::SnapshotSlow { .. }), "{e:?}");
        let s = e.to_string();
        assert!(
            s.starts_with("member 1 has not finished its snapshot after 0.0s (0 of 1 worker done, worker 0 copying "),
            "{s}"
        );
        assert!(
            s.contains("it carries on, and kvs-admin status shows it"),
            "{s}"
        );
    }
}
