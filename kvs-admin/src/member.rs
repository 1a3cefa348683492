//! Asking one member about itself: its status, checked to come from the
//! member the operator named, and the error to show when it cannot be
//! reached.

use std::net::SocketAddr;

use kvs_proto::control::MemberStatus;
use kvs_proto::MemberId;

use crate::admin::{Admin, Control};
use crate::error::AdminError;

/// Member `member`'s status, asked of it at `addr` before kvs-admin asks
/// it `to` do something: an error if it does not answer
/// ([`unreachable()`]), or answers as another member (nothing is sent).
pub fn status_as<C: Control>(
    admin: &mut Admin<C>,
    member: MemberId,
    addr: SocketAddr,
    to: &'static str,
) -> Result<MemberStatus, AdminError> {
    let s = match admin.status(addr) {
        Ok(s) => s,
        Err(e) => return Err(unreachable(admin, member, addr, e, to)),
    };
    if s.member != member {
        return Err(AdminError::Unexpected {
            addr,
            what: "status",
            got: format!(
                "it answers as member {}, not {member}: nothing sent",
                s.member
            ),
        });
    }
    Ok(s)
}

/// A failure to reach the member to do `to` ("drain it"), as the error
/// the operator reads: with the control group's standing of it (from the
/// contact's view) when that is not "up". Other errors pass unchanged.
pub fn unreachable<C: Control>(
    admin: &mut Admin<C>,
    member: MemberId,
    addr: SocketAddr,
    e: AdminError,
    to: &'static str,
) -> AdminError {
    let AdminError::Control(e) = e else {
        return e;
    };
    let mut why = e.to_string();
    if addr != admin.contact() {
        let state = admin
            .status(admin.contact())
            .ok()
            .and_then(|s| s.group)
            .and_then(|g| g.members.into_iter().find(|m| m.id == member))
            .map(|m| m.state)
            .filter(|s| s != "up");
        if let Some(s) = state {
            why.push_str(&format!("; the control group marks it {s}"));
        }
    }
    AdminError::MemberUnreachable { member, to, why }
}
