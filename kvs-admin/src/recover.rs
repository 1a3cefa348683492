//! `kvs-admin unsafe-recover`: a surviving voter restores the control group
//! after a majority of the voters was lost for good.

use kvs_proto::MemberId;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kvs_proto::control::{ControlReply, ControlRequest};

use crate::admin::{unexpected, Admin, Control};
use crate::args::UnsafeRecoverArgs;
use crate::error::AdminError;
use crate::migrate::{member_addrs, member_of};
use crate::render::say;

/// What an unsafe recovery costs, said before it runs.
const WARNING: &str = "\
WARNING: unsafe recovery. Writes that only the lost members had acknowledged
may be lost, and so may configuration changes only they had committed. The
lost members must never be started again with their old data dirs: they
could elect a leader of their own from the old configuration. Wipe them, and
let the hosts join anew as new members.";

/// Checks that no member outside `lost` that answers (`addrs`: the map's
/// members, as the map has them and as reached) has committed more of the
/// control log than the contact: the recovered group starts from the
/// contact's log, and whatever a better survivor had committed beyond it
/// would be lost for no reason.
fn most_advanced<C: Control>(
    admin: &mut Admin<C>,
    addrs: &[(SocketAddr, SocketAddr)],
    lost: &[MemberId],
) -> Result<(), AdminError> {
    let contact = admin.contact();
    let mine = admin.status(contact)?;
    let Some(ours) = mine.group.as_ref() else {
        return Ok(());
    };
    for (m, &(_, at)) in (0u16..).map(MemberId).zip(addrs) {
        let left = ours.members.iter().any(|x| x.id == m && x.state == "left");
        if lost.contains(&m) || m == mine.member || left {
            continue;
        }
        // One that does not answer is lost too, or recovers from this log.
        let Ok(theirs) = admin.status(at) else {
            continue;
        };
        let Some(g) = theirs.group.filter(|g| g.cluster_id == ours.cluster_id) else {
            continue;
        };
        if g.commit > ours.commit {
            return Err(AdminError::NotMostAdvanced {
                contact,
                ours: ours.commit,
                member: m,
                addr: at,
                theirs: g.commit,
            });
        }
    }
    Ok(())
}

/// Sends the recovery to the contact, then waits (up to 10 s) until it
/// leads and has forgotten the lost members.
pub fn unsafe_recover<C: Control>(
    admin: &mut Admin<C>,
    a: &UnsafeRecoverArgs,
) -> Result<(), AdminError> {
    eprintln!("{WARNING}");
    let contact = admin.contact();
    if !a.yes {
        return Err(AdminError::Refused {
            addr: contact,
            what: "unsafe-recover",
            message: "not confirmed: run it again with --yes".into(),
        });
    }
    let map = admin.map()?;
    let addrs = member_addrs(admin, &map);
    let lost = a
        .lost
        .iter()
        .map(|r| member_of(r, &addrs))
        .collect::<Result<Vec<MemberId>, _>>()?;
    most_advanced(admin, &addrs, &lost)?;
    let answer = admin.request(
        contact,
        &ControlRequest::UnsafeRecover { lost: lost.clone() },
    )?;
    if answer != ControlReply::Ok {
        return Err(unexpected(contact, "unsafe-recover", answer));
    }
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let done = admin.status(contact).ok().and_then(|s| {
            let g = s.group?;
            let gone = lost
                .iter()
                .all(|&m| g.members.iter().any(|x| x.id == m && x.state == "left"));
            Some(g.leader == Some(s.member) && gone)
        });
        if done == Some(true) {
            say(&format!(
                "recovered: {contact} leads the control group; members {lost:?} are forgotten \
                 (kvs-admin status shows the slots they lost)\n"
            ));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(AdminError::Refused {
        addr: contact,
        what: "unsafe-recover",
        message: "accepted, but not committed within 10 s; kvs-admin status shows whether it \
                  went through"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::MemberRef;
    use crate::fake;

    /// Member 2 (`10.0.0.3:7000`) asked to recover without member 0, member
    /// 1 (reached at `10.0.0.3:7001`) having committed up to `theirs`.
    fn recover(theirs: u64) -> (Result<(), AdminError>, Vec<ControlRequest>) {
        let mut a = fake::admin("10.0.0.3:7000", move |at, req| {
            Ok(match req {
                ControlRequest::Map => fake::map_reply(&fake::map()),
                ControlRequest::Status if at.port() == 7001 => {
                    fake::status_in(MemberId(1), fake::group(1, 0, theirs))
                }
                ControlRequest::Status => {
                    let mut g = fake::group(1, 0, 10);
                    g.leader = Some(MemberId(2));
                    g.members[0].state = "left".into();
                    fake::status_in(MemberId(2), g)
                }
                _ => ControlReply::Ok,
            })
        });
        let args = UnsafeRecoverArgs {
            lost: vec![MemberRef::Id(MemberId(0))],
            yes: true,
        };
        let r = unsafe_recover(&mut a, &args);
        let asked = a.client().asked.iter().map(|(_, r)| r.clone()).collect();
        (r, asked)
    }

    #[test]
    fn a_survivor_behind_another_is_refused_and_told_which() {
        let (r, asked) = recover(12);
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                AdminError::NotMostAdvanced {
                    member: MemberId(1),
                    theirs: 12,
                    ours: 10,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("10.0.0.3:7001"), "{e}");
        assert!(!asked
            .iter()
            .any(|r| matches!(r, ControlRequest::UnsafeRecover { .. })));
        // Behind it or level with it, the contact recovers.
        let (_, asked) = recover(10);
        assert!(asked.contains(&ControlRequest::UnsafeRecover {
            lost: vec![MemberId(0)]
        }));
    }
}
