//! `kvs-admin unsafe-recover`: a surviving voter restores the control group
//! after a majority of the voters was lost for good.

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
        .collect::<Result<Vec<u16>, _>>()?;
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
