//! The replica side of `status`: every run of the contact's map with its
//! primary and backups, and the slots that lack ready backups.

use std::fmt::Write as _;
use std::ops::Range;

use kvs_proto::{MemberId, ShardMap};
use serde::Serialize;

use crate::render;

/// One run of the map: consecutive slots with one primary, import source,
/// epoch and backup set (as the map encodes them; nothing merged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotRun {
    /// The first slot.
    pub first: u32,
    /// The last slot (not one past it).
    pub last: u32,
    /// The member that serves them.
    pub primary: MemberId,
    /// Its worker that owns them.
    pub worker: u16,
    /// Their backups, in the order they were added.
    pub backups: Vec<BackupView>,
}

/// One backup of a run of slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BackupView {
    /// The member holding the copy.
    pub member: MemberId,
    /// Its worker holding it.
    pub worker: u16,
    /// Whether the copy is complete (the backup may take over).
    pub ready: bool,
}

/// The map's runs, in slot order.
pub fn slot_runs(map: &ShardMap) -> Vec<SlotRun> {
    map.runs()
        .into_iter()
        .map(|r| SlotRun {
            first: r.slots.start,
            last: r.slots.end - 1,
            primary: r.owner.member,
            worker: r.owner.worker,
            backups: r
                .backups
                .iter()
                .map(|b| BackupView {
                    member: b.owner.member,
                    worker: b.owner.worker,
                    ready: b.ready,
                })
                .collect(),
        })
        .collect()
}

/// Slots with fewer than `replicas - 1` ready backups, one primary and one
/// set of backup members (and their readiness) per range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShortRange {
    /// The slots.
    pub slots: Range<u32>,
    pub primary: MemberId,
    /// Their backups' members, and whether each is ready.
    pub backups: Vec<(MemberId, bool)>,
}

/// The ranges of `runs` short of `replicas - 1` ready backups; adjacent
/// runs that differ only in workers or epoch are one range.
pub fn short_ranges(runs: &[SlotRun], replicas: u8) -> Vec<ShortRange> {
    let want = usize::from(replicas.saturating_sub(1));
    let mut out: Vec<ShortRange> = Vec::new();
    for r in runs {
        if r.backups.iter().filter(|b| b.ready).count() >= want {
            continue;
        }
        let backups: Vec<(MemberId, bool)> =
            r.backups.iter().map(|b| (b.member, b.ready)).collect();
        match out.last_mut() {
            Some(s) if s.slots.end == r.first && s.primary == r.primary && s.backups == backups => {
                s.slots.end = r.last + 1
            }
            _ => out.push(ShortRange {
                slots: r.first..r.last + 1,
                primary: r.primary,
                backups,
            }),
        }
    }
    out
}

/// The under-replicated ranges for people, one indented line each, at most
/// `max` of them and then how many more there are.
pub fn short_text(ranges: &[ShortRange], max: usize) -> String {
    let mut out = String::new();
    for s in ranges.iter().take(max) {
        let backups = if s.backups.is_empty() {
            "no backup".to_string()
        } else {
            let each: Vec<String> = s
                .backups
                .iter()
                .map(|&(m, ready)| {
                    format!("member {m} ({})", if ready { "ready" } else { "copying" })
                })
                .collect();
            format!(
                "backup{} {}",
                if each.len() == 1 { "" } else { "s" },
                each.join(", ")
            )
        };
        let _ = writeln!(
            out,
            "  {:<11} primary member {}, {backups}",
            render::slot_range(&s.slots),
            s.primary
        );
    }
    if ranges.len() > max {
        let _ = writeln!(out, "  … ({} more ranges)", ranges.len() - max);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::Member;

    /// 16 slots: 0-7 at member 0 (backed up on member 1, 0-3 ready),
    /// 8-15 at member 1 (no backups); member 2 backs up 0-1.
    fn map() -> ShardMap {
        let a = |p: u16| std::net::SocketAddr::from(([10, 0, 0, 1], p));
        let mut m = ShardMap::single(a(7000), 16, 2).unwrap();
        for p in [7001, 7002] {
            m.add_member(Member {
                addr: a(p),
                workers: 2,
                bulk_port: 0,
            })
            .unwrap();
        }
        m.assign(8..16, MemberId(1), None).unwrap();
        m.set_version(2);
        m.add_backup(0..8, MemberId(1)).unwrap();
        m.add_backup(0..2, MemberId(2)).unwrap();
        m.set_version(3);
        m.set_backup_ready(0..4, MemberId(1)).unwrap();
        m.set_version(4);
        m
    }

    #[test]
    fn runs_carry_their_backups_and_short_ranges_merge_by_member() {
        let runs = slot_runs(&map());
        assert_eq!(runs[0].first, 0);
        assert_eq!(runs[0].primary, MemberId(0));
        assert_eq!(
            runs[0].backups,
            [
                BackupView {
                    member: MemberId(1),
                    worker: 0,
                    ready: true
                },
                BackupView {
                    member: MemberId(2),
                    worker: 0,
                    ready: false
                }
            ]
        );
        assert_eq!(runs.last().unwrap().last, 15);
        assert!(runs.last().unwrap().backups.is_empty());
        assert_eq!(runs.iter().filter(|r| r.primary == MemberId(1)).count(), 2);
        // Every slot is in exactly one run.
        let covered: u32 = runs.iter().map(|r| r.last - r.first + 1).sum();
        assert_eq!(covered, 16);

        // Two copies: slots 4-15 lack a ready backup (8-15 lie on both
        // workers of member 1, yet are one range).
        let short = short_ranges(&runs, 2);
        let slots: Vec<Range<u32>> = short.iter().map(|s| s.slots.clone()).collect();
        assert_eq!(slots, [4..8, 8..16]);
        assert_eq!(short[0].backups, [(MemberId(1), false)]);
        // Three copies: 0-1 have one ready of two.
        let short = short_ranges(&runs, 3);
        assert_eq!(short[0].slots, 0..2);
        assert_eq!(
            short[0].backups,
            [(MemberId(1), true), (MemberId(2), false)]
        );
        assert!(short_ranges(&runs, 1).is_empty());

        let text = short_text(&short_ranges(&runs, 3), 8);
        assert_eq!(
            text,
            "  0-1         primary member 0, backups member 1 (ready), member 2 (copying)\n  \
             2-3         primary member 0, backup member 1 (ready)\n  \
             4-7         primary member 0, backup member 1 (copying)\n  \
             8-15        primary member 1, no backup\n"
        );
        let text = short_text(&short_ranges(&runs, 3), 1);
        assert!(text.ends_with("  … (3 more ranges)\n"), "{text}");
    }

    #[test]
    fn status_reports_replicas_backups_and_zones_from_the_newest_view() {
        use crate::fake;
        use kvs_proto::control::ControlRequest;
        // fake::map's 64 slots at member 0, backed up on member 1: 0-31
        // ready, 32-63 still copying.
        let mut m = fake::map();
        m.add_backup(0..64, MemberId(1)).unwrap();
        m.set_version(4);
        m.set_backup_ready(0..32, MemberId(1)).unwrap();
        m.set_version(5);
        let mut newest = fake::group(2, 32, 9);
        newest.members[2].zone = Some("rack-c".into());
        let mut a = fake::admin("10.0.0.1:7000", move |at, req| {
            Ok(match (req, at.to_string().as_str()) {
                (ControlRequest::Map, _) => fake::map_reply(&m),
                // The contact lags: it has not applied `set replicas` yet.
                (_, "10.0.0.1:7000") => fake::status_in(MemberId(0), fake::group(1, 0, 5)),
                (_, "10.0.0.1:7001") => fake::status_in(MemberId(1), newest.clone()),
                _ => fake::status_in(MemberId(2), newest.clone()),
            })
        });
        let s = crate::status::gather(&mut a).unwrap();
        assert_eq!((s.replicas, s.under_replicated_slots), (Some(2), Some(32)));
        let j: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(j["replicas"], 2);
        assert_eq!(j["under_replicated_slots"], 32);
        assert_eq!(
            j["slot_ranges"][0],
            serde_json::json!({
                "first": 0, "last": 31, "primary": 0, "worker": 0,
                "backups": [{ "member": 1, "worker": 0, "ready": true }]
            })
        );
        let ranges = j["slot_ranges"].as_array().unwrap();
        assert_eq!(ranges.last().unwrap()["last"], 63);
        assert_eq!(ranges.last().unwrap()["backups"][0]["ready"], false);
        assert_eq!(j["members"][1]["backup_slots"], 64);
        assert_eq!(j["members"][0]["backup_slots"], 0);
        assert_eq!(j["members"][2]["zone"], "rack-c");
        assert_eq!(j["members"][0]["zone"], serde_json::Value::Null);

        let text = s.text();
        assert!(
            text.contains("\nreplicas 2, under-replicated slots 32\n  32-63       primary member 0, backup member 1 (copying)\n"),
            "{text}"
        );
        assert!(
            text.contains("member 0 (10.0.0.1:7000), leader, backs up 0 slots\n"),
            "{text}"
        );
        assert!(
            text.contains("member 1 (10.0.0.1:7001), backs up 64 slots (0 keys)\n"),
            "{text}"
        );
        assert!(
            text.contains("member 2 (10.0.0.3:7000), zone rack-c, backs up 0 slots\n"),
            "{text}"
        );

        // No member gives a view: the figures are unknown, not zero.
        let mut a = fake::admin("10.0.0.1:7000", |_, req| {
            Ok(match req {
                ControlRequest::Map => fake::map_reply(&fake::map()),
                _ => fake::status(MemberId(0), None),
            })
        });
        let s = crate::status::gather(&mut a).unwrap();
        let j: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(j["replicas"], serde_json::Value::Null);
        assert_eq!(j["under_replicated_slots"], serde_json::Value::Null);
        assert_eq!(j["slot_ranges"].as_array().unwrap().len(), 2);
        assert!(!s.text().contains("replicas"), "{}", s.text());
    }
}
