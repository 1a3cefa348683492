//! What the keeper says reaches the user verbatim. Today's servers refuse
//! every migration ("migrations are being built"), which these tests rely
//! on; they give way to end-to-end migration tests once the servers move
//! slots.

mod support;
use support::Cluster;

const KEEPERS_REFUSAL: &str = "migrations are being built";

#[test]
fn a_refused_migrate_exits_1_with_the_keepers_words() {
    let c = Cluster::start("refused-migrate", 2);
    let r = c.admin(&["migrate", "--slots", "0-63", "--to", "1"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert_eq!(
        r.stderr,
        format!(
            "kvs-admin: migrate refused by {}: {KEEPERS_REFUSAL}\n",
            c.addr(0)
        )
    );
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn rebalance_shows_the_plan_before_it_asks() {
    let c = Cluster::start("refused-rebalance", 3);
    let r = c.admin(&["rebalance"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    // 256 slots over 3 members: 86, 85, 85.
    let want = format!(
        "plan (map version 3): move 170 of 256 slots\n  \
         86-170       member 0 -> member 1 ({})\n  \
         171-255      member 0 -> member 2 ({})\n\
         then: member 0 86 slots, member 1 85 slots, member 2 85 slots\n",
        c.addr(1),
        c.addr(2)
    );
    assert_eq!(r.stdout, want);
    assert_eq!(
        r.stderr,
        format!(
            "kvs-admin: rebalance refused by {}: {KEEPERS_REFUSAL}\n",
            c.addr(0)
        )
    );
}

#[test]
fn a_refused_cancel_exits_1_with_the_keepers_words() {
    let c = Cluster::start("refused-cancel", 1);
    let r = c.admin(&["cancel"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert_eq!(
        r.stderr,
        format!(
            "kvs-admin: cancel refused by {}: {KEEPERS_REFUSAL}\n",
            c.addr(0)
        )
    );
}
