//! Who is at the other end of a worker's connection, decided once at
//! setup from the token its hello presented ([`crate::serving::setup::admit`]) and
//! carried by its endpoint's tag ([`copyrpc::Context::set_tag`]), so that
//! every request it sends carries it without a look-up.
//!
//! A worker serves data operations to both roles; replication messages
//! (a primary's writes and copies to its backups, which can empty a
//! backup's copy of a slot) only to members. A member is a connection set
//! up with the cluster token, or any connection of a server that has no
//! tokens at all: with no secret there is nothing to tell a member from a
//! client by, and such a server listens on loopback only unless told
//! otherwise (`allow_unauthenticated`).

/// A worker connection's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A client's: data operations only.
    Client,
    /// A member's or kvs-admin's: data operations and replication.
    Member,
}

impl Role {
    /// The endpoint tag that carries it (an untagged endpoint's tag, 0,
    /// is a client's: the lesser role).
    pub(crate) fn tag(self) -> u32 {
        match self {
            Role::Client => 0,
            Role::Member => 1,
        }
    }

    /// The role an endpoint's tag carries.
    #[inline]
    pub(crate) fn of_tag(tag: u32) -> Role {
        if tag == 1 {
            Role::Member
        } else {
            Role::Client
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_carry_roles_and_an_untagged_endpoint_is_a_client() {
        for r in [Role::Client, Role::Member] {
            assert_eq!(Role::of_tag(r.tag()), r);
        }
        assert_eq!(Role::of_tag(0), Role::Client);
        assert_eq!(Role::of_tag(7), Role::Client);
    }
}
