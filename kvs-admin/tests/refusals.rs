//! What the keeper says reaches the user verbatim, and migrations run by
//! kvs-admin end as the servers end them: to completion, or refused.

mod support;
use support::Cluster;

#[test]
fn a_refused_migrate_exits_1_with_the_keepers_words() {
    let c = Cluster::start("refused-migrate", 2);
    // Member 0 owns them already.
    let r = c.admin(&["migrate", "--slots", "0-63", "--to", "0"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert_eq!(
        r.stderr,
        format!(
            "kvs-admin: migrate refused by {}: nothing to move: the target already owns those slots\n",
            c.addr(0)
        )
    );
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn rebalance_shows_the_plan_then_moves_the_slots() {
    let c = Cluster::start("rebalance", 3);
    let r = c.admin(&["rebalance"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
    // 256 slots over 3 members: 86, 85, 85.
    let want = format!(
        "plan (map version 3): move 170 of 256 slots\n  \
         86-170       member 0 -> member 1 ({})\n  \
         171-255      member 0 -> member 2 ({})\n\
         then: member 0 86 slots, member 1 85 slots, member 2 85 slots\n",
        c.addr(1),
        c.addr(2)
    );
    assert!(r.stdout.starts_with(&want), "{}", r.stdout);
    let st = c.admin(&["status", "--json"]);
    let j: serde_json::Value = serde_json::from_str(&st.stdout).unwrap();
    for (m, n) in [(0, 86), (1, 85), (2, 85)] {
        assert_eq!(j["members"][m]["slots"], n, "{}", st.stdout);
    }
    // Balanced now: nothing to do.
    let r = c.admin(&["rebalance"]);
    assert_eq!(r.code(), Some(0), "{r:?}");
}

#[test]
fn a_refused_cancel_exits_1_with_the_keepers_words() {
    let c = Cluster::start("refused-cancel", 1);
    let r = c.admin(&["cancel"]);
    assert_eq!(r.code(), Some(1), "{r:?}");
    assert_eq!(
        r.stderr,
        format!(
            "kvs-admin: cancel refused by {}: no migration is running\n",
            c.addr(0)
        )
    );
}
