//! `set replicas`: the copies of each slot the cluster keeps. The control
//! group's leader takes the new count, and the servers add backups and
//! copy the slots to them, or drop backups; kvs-admin follows the group's
//! count of under-replicated slots down to 0.

use crate::render::say;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kvs_proto::control::{ControlReply, ControlRequest, GroupView};

use crate::admin::{unexpected, Admin, Control};
use crate::args::ReplicasArgs;
use crate::error::AdminError;
use crate::progress::{self, Display, Pace};
use crate::render;

/// Five times a second, for a minute of silence at most.
pub const PACE: Pace = Pace {
    poll: Duration::from_millis(200),
    patience: Duration::from_secs(60),
};

/// How long the new count may take to show in the group's view.
const COMMIT_LIMIT: Duration = Duration::from_secs(10);

/// The bar's width on a terminal.
const BAR: usize = 20;

/// Sends the new count to the leader, says what it does, and unless
/// `--no-wait` waits until every slot has that many copies.
pub fn set_replicas<C: Control>(
    admin: &mut Admin<C>,
    a: &ReplicasArgs,
    pace: Pace,
) -> Result<(), AdminError> {
    let n = a.replicas;
    let map = admin.map()?;
    let members: Vec<SocketAddr> = map.members().iter().map(|m| admin.reach(m.addr)).collect();
    let before = admin.status(admin.contact()).ok().and_then(|s| s.group);
    let (leader, answer) = admin.ask_keeper(&ControlRequest::SetReplicas { replicas: n })?;
    if answer != ControlReply::Ok {
        return Err(unexpected(leader, "set replicas", answer));
    }
    say(&set_text(leader, n, before.as_ref()));
    if a.no_wait {
        say("not waiting: kvs-admin status shows under_replicated_slots falling to 0\n");
        return Ok(());
    }
    let took = wait(admin, n, leader, &members, pace, a.max_wait)?;
    say(&done_text(n, took));
    Ok(())
}

/// What the leader took, and what it does to the slots' backups.
pub fn set_text(leader: SocketAddr, n: u8, before: Option<&GroupView>) -> String {
    let was = before.map(|g| g.replicas);
    let mut out = format!("replicas set to {n}");
    match was {
        Some(w) if w == n => out.push_str(" (it was already)"),
        Some(w) => out.push_str(&format!(" (was {w})")),
        None => {}
    }
    out.push_str(&format!(" by the leader at {leader}; "));
    let backups = n - 1;
    let plural = if backups == 1 { "" } else { "s" };
    match was {
        Some(w) if w == n => out.push_str("nothing changes"),
        _ if n == 1 => {
            out.push_str("each slot keeps its primary only: backups are dropped at once")
        }
        Some(w) if w > n => out.push_str(&format!(
            "each slot keeps {backups} backup{plural}: the others are dropped at once"
        )),
        _ => out.push_str(&format!(
            "each slot gets {backups} synchronous backup{plural} on other members, \
             copied while reads and writes go on"
        )),
    }
    out.push('\n');
    if let Some(g) = before {
        let up = up_members(g);
        if up < usize::from(n) {
            out.push_str(&format!(
                "note: only {up} member{} up, so slots get at most {up} cop{} until more \
                 members join\n",
                if up == 1 { " is" } else { "s are" },
                if up == 1 { "y" } else { "ies" }
            ));
        }
    }
    out
}

/// What the wait ended with.
pub fn done_text(n: u8, took: Duration) -> String {
    let took = render::duration(took.as_secs_f64());
    match n {
        1 => format!("every slot has 1 copy: its primary, no backups (took {took})\n"),
        n => format!(
            "every slot has {n} copies: its primary and {} ready backup{} (took {took})\n",
            n - 1,
            if n == 2 { "" } else { "s" }
        ),
    }
}

/// Members the view has up.
fn up_members(g: &GroupView) -> usize {
    g.members.iter().filter(|m| m.state == "up").count()
}

/// Where the wait stands, view after view of the control group.
#[derive(Debug)]
struct Waiting {
    /// The copies asked for.
    n: u8,
    /// The newest view's `(term, applied)`: an older one (a member that
    /// lags) is passed over.
    newest: Option<(u64, u64)>,
    /// Whether a view has shown `n` yet.
    taken: bool,
    /// The most slots short of copies since then (the progress's total).
    most: u32,
    /// Whether the members the group marks failed were named.
    told_failed: bool,
}

/// What a view says of the wait.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Every slot has `n` copies.
    Done,
    /// Not yet: slots short of copies (`None` until the view has `n`).
    Short(Option<u32>),
    /// Older than one seen already.
    Stale,
}

impl Waiting {
    fn new(n: u8) -> Waiting {
        Waiting {
            n,
            newest: None,
            taken: false,
            most: 0,
            told_failed: false,
        }
    }

    /// Takes in a view; an error ends the wait.
    fn see(&mut self, g: &GroupView) -> Result<Seen, AdminError> {
        let at = (g.term, g.applied);
        if self.newest.is_some_and(|n| at < n) {
            return Ok(Seen::Stale);
        }
        self.newest = Some(at);
        if g.replicas != self.n {
            if self.taken {
                return Err(AdminError::ReplicasChanged {
                    wanted: self.n,
                    now: g.replicas,
                });
            }
            return Ok(Seen::Short(None));
        }
        self.taken = true;
        let under = g.under_replicated_slots;
        if under == 0 {
            return Ok(Seen::Done);
        }
        let up = up_members(g);
        if up < usize::from(self.n) {
            return Err(AdminError::TooFewMembers {
                replicas: self.n,
                up,
                under,
            });
        }
        self.most = self.most.max(under);
        Ok(Seen::Short(Some(under)))
    }

    /// The members the group marks failed, once: slots they serve get no
    /// backups until they return or are forgotten.
    fn failed_note(&mut self, g: &GroupView) -> Option<String> {
        let failed: Vec<String> = g
            .members
            .iter()
            .filter(|m| m.state == "failed")
            .map(|m| m.id.to_string())
            .collect();
        if failed.is_empty() || self.told_failed {
            return None;
        }
        self.told_failed = true;
        Some(format!(
            "note: the control group marks member{} {} failed: slots {} serve{} get no \
             backups until {} return{} or {} forgotten",
            if failed.len() == 1 { "" } else { "s" },
            failed.join(", "),
            if failed.len() == 1 { "it" } else { "they" },
            if failed.len() == 1 { "s" } else { "" },
            if failed.len() == 1 { "it" } else { "they" },
            if failed.len() == 1 { "s" } else { "" },
            if failed.len() == 1 { "is" } else { "are" },
        ))
    }

    /// The progress lines: redrawn on a terminal, and plain.
    fn lines(&self, under: Option<u32>, elapsed: Duration) -> (String, String) {
        let elapsed = render::duration(elapsed.as_secs_f64());
        let Some(under) = under else {
            let s = format!(
                "replicas {}: waiting for the leader to apply it, {elapsed}",
                self.n
            );
            return (s.clone(), s);
        };
        let (done, total) = (u64::from(self.most - under), u64::from(self.most));
        let tty = format!(
            "{} {:>3}% {under} slots under-replicated, {elapsed}",
            progress::bar(done, total, BAR),
            progress::percent(done, total)
        );
        let plain = format!(
            "replicas {}: {under} slots under-replicated ({}% copied), {elapsed} elapsed",
            self.n,
            progress::percent(done, total)
        );
        (tty, plain)
    }
}

/// Asks for the control group's view until it keeps `n` copies of every
/// slot (at most `limit`), showing the progress on stderr; returns how long
/// it took. The leader is asked first, and while it does not answer the
/// other `members` in turn; the newest view (highest term, then applied)
/// counts, so a member that lags cannot end the wait early (the next one
/// is asked instead).
fn wait<C: Control>(
    admin: &mut Admin<C>,
    n: u8,
    leader: SocketAddr,
    members: &[SocketAddr],
    pace: Pace,
    limit: Duration,
) -> Result<Duration, AdminError> {
    let start = Instant::now();
    let asked: Vec<SocketAddr> = std::iter::once(leader)
        .chain(members.iter().copied().filter(|&a| a != leader))
        .collect();
    let (mut at, mut last_ok) = (0, Instant::now());
    let mut w = Waiting::new(n);
    let mut d = Display::new();
    let mut under = None;
    loop {
        let t = Instant::now();
        // Not applied in time, or not all copied within the limit.
        if !w.taken && t - start >= COMMIT_LIMIT.min(limit) {
            d.done();
            return Err(AdminError::Refused {
                addr: leader,
                what: "set replicas",
                message: format!(
                    "accepted, but not applied within {}; kvs-admin status shows whether it \
                     went through",
                    render::duration(COMMIT_LIMIT.min(limit).as_secs_f64())
                ),
            });
        }
        if t - start >= limit {
            d.done();
            return Err(AdminError::ReplicationSlow {
                under: under.unwrap_or(0),
                waited: render::duration(limit.as_secs_f64()),
            });
        }
        let addr = asked[at];
        match admin.status(addr).map(|s| s.group) {
            Ok(Some(g)) => {
                last_ok = Instant::now();
                let seen = w.see(&g).inspect_err(|_| d.done())?;
                match seen {
                    Seen::Done => {
                        d.done();
                        return Ok(start.elapsed());
                    }
                    // It lags (maybe cut off): the next member.
                    Seen::Stale => at = (at + 1) % asked.len(),
                    Seen::Short(u) => {
                        under = u.or(under);
                        if let Some(note) = w.failed_note(&g) {
                            d.done();
                            eprintln!("{note}");
                        }
                        let (tty, plain) = w.lines(u, start.elapsed());
                        d.line(&tty, &plain, false);
                    }
                }
            }
            trouble => {
                let e = match trouble {
                    Err(e) => e.to_string(),
                    Ok(_) => format!("{addr}: gives no view of the control group"),
                };
                if last_ok.elapsed() >= pace.patience {
                    d.done();
                    return Err(AdminError::LostCluster { last: e });
                }
                let line = format!("{addr} not answering: {e}");
                d.line(&line, &line, false);
                // The next member, at once: this one may have died.
                at = (at + 1) % asked.len();
                continue;
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
    use kvs_proto::MemberId;

    use crate::fake::QUICK;
    const CONTACT: &str = "10.0.0.1:7001";
    const LEADER: &str = "10.0.0.1:7000";

    /// The cluster of [`fake::map`] reached through member 1, which has
    /// applied up to index 5 with one copy: `SetReplicas` there gets
    /// `Keeper` (with the unspecified IP); the leader answers it with
    /// `answer`, and `Status` with `views` in turn (the last repeated).
    fn cluster(answer: ControlReply, views: Vec<GroupView>) -> Admin<Fake> {
        let mut views = views.into_iter();
        let mut last = fake::group(1, 0, 5);
        fake::admin(CONTACT, move |at, req| {
            let leader = at == fake::addr(LEADER);
            Ok(match req {
                ControlRequest::Map => fake::map_reply(&fake::map()),
                ControlRequest::Status if leader => {
                    if let Some(v) = views.next() {
                        last = v;
                    }
                    fake::status_in(MemberId(0), last.clone())
                }
                ControlRequest::Status => fake::status_in(MemberId(1), fake::group(1, 0, 5)),
                _ if !leader => ControlReply::Keeper {
                    addr: fake::addr("0.0.0.0:7000"),
                },
                _ => answer.clone(),
            })
        })
    }

    fn args(n: u8, no_wait: bool) -> ReplicasArgs {
        ReplicasArgs {
            replicas: n,
            wait: !no_wait,
            no_wait,
            max_wait: Duration::from_secs(600),
        }
    }

    #[test]
    fn the_count_goes_to_the_leader_and_the_wait_ends_at_zero_under_replicated() {
        let views = vec![
            // Not applied yet: the old count, nothing short.
            fake::group(1, 0, 5),
            fake::group(2, 64, 6),
            fake::group(2, 32, 7),
            fake::group(2, 0, 8),
        ];
        let mut a = cluster(ControlReply::Ok, views);
        set_replicas(&mut a, &args(2, false), QUICK).unwrap();
        let set = ControlRequest::SetReplicas { replicas: 2 };
        let status = (LEADER.to_string(), ControlRequest::Status);
        assert_eq!(
            requests(&a),
            [
                (CONTACT.to_string(), ControlRequest::Map),
                (CONTACT.to_string(), ControlRequest::Status),
                (CONTACT.to_string(), set.clone()),
                (LEADER.to_string(), set),
                status.clone(),
                status.clone(),
                status.clone(),
                status,
            ]
        );
        // --no-wait: nothing asked after the leader took it.
        let mut a = cluster(ControlReply::Ok, vec![fake::group(2, 64, 6)]);
        set_replicas(&mut a, &args(3, true), QUICK).unwrap();
        assert_eq!(requests(&a).len(), 4);
        assert_eq!(
            requests(&a)[3],
            (
                LEADER.to_string(),
                ControlRequest::SetReplicas { replicas: 3 }
            )
        );
    }

    #[test]
    fn a_refusal_reaches_the_user_verbatim_and_nothing_is_awaited() {
        let no = ControlReply::error("not the leader's to say");
        let mut a = cluster(no, vec![]);
        let e = set_replicas(&mut a, &args(2, false), QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "set replicas refused by 10.0.0.1:7000: not the leader's to say"
        );
        assert_eq!(requests(&a).len(), 4);
        let mut a = cluster(ControlReply::Started(fake::migration(0, 1, false)), vec![]);
        let e = set_replicas(&mut a, &args(2, false), QUICK).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("10.0.0.1:7000: unexpected answer to set replicas: Started"),
            "{e}"
        );
    }

    #[test]
    fn the_wait_ends_with_a_reason_when_the_copies_cannot_all_be_made() {
        // Two members up of three: three copies cannot be.
        let mut short = fake::group(3, 64, 6);
        short.members[2].state = "failed".into();
        let mut a = cluster(ControlReply::Ok, vec![short]);
        let e = set_replicas(&mut a, &args(3, false), QUICK).unwrap_err();
        assert_eq!(
            e.to_string(),
            "replicas is 3, but only 2 members are up: 64 slots stay under-replicated until \
             more members join (kvs-admin status shows them)"
        );
        // Someone else sets another count meanwhile.
        let views = vec![fake::group(2, 64, 6), fake::group(3, 64, 7)];
        let mut a = cluster(ControlReply::Ok, views);
        let e = set_replicas(&mut a, &args(2, false), QUICK).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("replicas changed to 3 while waiting for 2 to be reached"),
            "{e}"
        );
        // Copies still short at the limit.
        let mut a = cluster(ControlReply::Ok, vec![fake::group(2, 7, 6)]);
        let quick = ReplicasArgs {
            max_wait: Duration::from_millis(30),
            ..args(2, false)
        };
        let e = set_replicas(&mut a, &quick, QUICK).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("7 slots still under-replicated after 0.0s; the servers carry on"),
            "{e}"
        );
        // The count never shows in a view.
        let mut a = cluster(ControlReply::Ok, vec![fake::group(1, 0, 5)]);
        let e = set_replicas(&mut a, &quick, QUICK).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "set replicas refused by 10.0.0.1:7000: accepted, but not applied within"
            ),
            "{e}"
        );
    }

    #[test]
    fn the_wait_asks_the_others_when_the_leader_is_silent_and_skips_stale_views() {
        let leader = fake::addr(LEADER);
        let others = [fake::addr("10.0.0.1:7001"), fake::addr("10.0.0.3:7000")];
        // The leader answers once, then dies; member 1 lags behind it (its
        // view would say done); member 2 has the newest.
        let mut n = 0;
        let mut a = fake::admin(CONTACT, move |at, _| {
            n += 1;
            match at.to_string().as_str() {
                LEADER if n == 1 => Ok(fake::status_in(MemberId(0), fake::group(2, 64, 6))),
                LEADER => Err(ControlError::Timeout {
                    addr: at,
                    after: Duration::from_secs(1),
                }),
                CONTACT => Ok(fake::status_in(MemberId(1), fake::group(1, 0, 5))),
                _ => Ok(fake::status_in(MemberId(2), fake::group(2, 0, 9))),
            }
        });
        let members = [leader, others[0], others[1]];
        let took = wait(&mut a, 2, leader, &members, QUICK, Duration::from_secs(60));
        assert!(took.is_ok(), "{took:?}");
        let at: Vec<String> = requests(&a).into_iter().map(|(at, _)| at).collect();
        assert_eq!(at, [LEADER, LEADER, CONTACT, "10.0.0.3:7000"]);
        // Nobody answers for longer than the patience.
        let mut a = fake::admin(CONTACT, |addr, _| {
            Err(ControlError::Timeout {
                addr,
                after: Duration::from_secs(1),
            })
        });
        let pace = Pace {
            poll: Duration::ZERO,
            patience: Duration::from_millis(20),
        };
        let e = wait(&mut a, 2, leader, &members, pace, Duration::from_secs(60)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("lost the cluster while waiting for the copies: 10.0.0."),
            "{e}"
        );
    }

    #[test]
    fn what_was_done_is_said_plainly() {
        let leader = fake::addr(LEADER);
        assert_eq!(
            set_text(leader, 2, Some(&fake::group(1, 0, 5))),
            "replicas set to 2 (was 1) by the leader at 10.0.0.1:7000; each slot gets 1 \
             synchronous backup on other members, copied while reads and writes go on\n"
        );
        assert_eq!(
            set_text(leader, 1, Some(&fake::group(3, 0, 5))),
            "replicas set to 1 (was 3) by the leader at 10.0.0.1:7000; each slot keeps its \
             primary only: backups are dropped at once\n"
        );
        assert_eq!(
            set_text(leader, 2, Some(&fake::group(3, 0, 5))),
            "replicas set to 2 (was 3) by the leader at 10.0.0.1:7000; each slot keeps 1 \
             backup: the others are dropped at once\n"
        );
        assert!(set_text(leader, 2, Some(&fake::group(2, 0, 5))).contains("nothing changes"));
        let mut two_up = fake::group(1, 0, 5);
        two_up.members[2].state = "left".into();
        assert!(set_text(leader, 3, Some(&two_up)).ends_with(
            "\nnote: only 2 members are up, so slots get at most 2 copies until more members \
             join\n"
        ));
        assert!(set_text(leader, 3, None).starts_with(
            "replicas set to 3 by the leader at 10.0.0.1:7000; each slot gets 2 synchronous \
             backups"
        ));
        let s = Duration::from_secs(3);
        assert_eq!(
            done_text(2, s),
            "every slot has 2 copies: its primary and 1 ready backup (took 3.0s)\n"
        );
        assert_eq!(
            done_text(1, s),
            "every slot has 1 copy: its primary, no backups (took 3.0s)\n"
        );
    }

    #[test]
    fn progress_counts_down_from_the_most_slots_short() {
        let mut w = Waiting::new(2);
        assert_eq!(w.see(&fake::group(1, 0, 5)).unwrap(), Seen::Short(None));
        assert_eq!(
            w.see(&fake::group(2, 64, 6)).unwrap(),
            Seen::Short(Some(64))
        );
        assert_eq!(w.see(&fake::group(2, 0, 5)).unwrap(), Seen::Stale);
        assert_eq!(
            w.see(&fake::group(2, 16, 7)).unwrap(),
            Seen::Short(Some(16))
        );
        let (tty, plain) = w.lines(Some(16), Duration::from_secs(2));
        assert_eq!(
            tty,
            "[###############-----]  75% 16 slots under-replicated, 2.0s"
        );
        assert_eq!(
            plain,
            "replicas 2: 16 slots under-replicated (75% copied), 2.0s elapsed"
        );
        assert_eq!(w.see(&fake::group(2, 0, 8)).unwrap(), Seen::Done);
        let mut g = fake::group(2, 3, 9);
        g.members[1].state = "failed".into();
        assert!(w
            .failed_note(&g)
            .unwrap()
            .contains("member 1 failed: slots it serves"));
        assert_eq!(w.failed_note(&g), None);
    }
}
