//! The recovery side of `status`: a member that restarted from its data
//! dir answers while its workers load their snapshots and replay their
//! logs, saying how far each got; it serves nothing until they are done.

use kvs_proto::control::RecoveryProgress;

use super::MemberView;
use crate::render;

/// `1.20 GiB of 3.40 GiB (35%)`; `files not counted yet` before the
/// workers have counted what they are to read.
pub fn recovery_text(p: &RecoveryProgress) -> String {
    if p.total == 0 {
        return "files not counted yet".to_string();
    }
    format!(
        "{} of {} ({}%)",
        render::bytes(p.read),
        render::bytes(p.total),
        p.percent()
    )
}

/// A worker's share read: `35%`, or `-` before it counted its files.
fn share(p: &RecoveryProgress) -> String {
    if p.total == 0 {
        return "-".to_string();
    }
    format!("{}%", p.percent())
}

/// A member's line of `status` while it recovers: `  recovering: …`, the
/// workers' sum and, with more than one, each one's share; empty for a
/// member that does not.
pub fn line(m: &MemberView) -> String {
    let Some(sum) = &m.recovering else {
        return String::new();
    };
    let mut out = format!("  recovering: {}", recovery_text(sum));
    if m.workers.len() > 1 {
        let each: Vec<String> = m
            .workers
            .iter()
            .filter_map(|w| w.recovering.map(|p| format!("{} {}", w.worker, share(&p))))
            .collect();
        out.push_str(&format!(" (by worker: {})", each.join(", ")));
    }
    out.push('\n');
    out
}

/// The warning for a member that recovers; none for one that does not.
pub fn warning(m: &MemberView) -> Option<String> {
    m.recovering.as_ref().map(|p| {
        format!(
            "member {} ({}) is recovering its records from its data dir: {}; it serves none \
             of its slots until they are loaded",
            m.member,
            m.addr,
            recovery_text(p)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake;
    use crate::status::gather;
    use kvs_proto::control::{ControlReply, ControlRequest, MemberStatus, WorkerStatus};
    use kvs_proto::MemberId;

    const GIB: u64 = 1 << 30;

    /// Member `member`'s answer while its workers recover, each `(read,
    /// total)`.
    fn recovering(member: MemberId, workers: &[(u64, u64)]) -> ControlReply {
        let ControlReply::Status(s) = fake::status(member, None) else {
            unreachable!("a status")
        };
        ControlReply::Status(MemberStatus {
            workers: workers
                .iter()
                .map(|&(read, total)| WorkerStatus {
                    slots: 16,
                    recovering: Some(RecoveryProgress { read, total }),
                    ..WorkerStatus::default()
                })
                .collect(),
            recovering: true,
            ..s
        })
    }

    #[test]
    fn a_recovering_member_shows_how_far_it_got_instead_of_silence() {
        // Member 1 recovers (two workers, one done); member 0 serves and
        // member 2 is silent.
        let mut a = fake::admin("10.0.0.1:7000", |at, req| {
            Ok(match (req, at.to_string().as_str()) {
                (ControlRequest::Map, _) => fake::map_reply(&fake::map()),
                (_, "10.0.0.1:7000") => fake::status(MemberId(0), None),
                (_, "10.0.0.1:7001") => {
                    recovering(MemberId(1), &[(GIB, 4 * GIB), (GIB / 2, GIB / 2)])
                }
                _ => {
                    return Err(kvs_client::ControlError::Timeout {
                        addr: at,
                        after: std::time::Duration::from_secs(1),
                    })
                }
            })
        });
        let s = gather(&mut a).unwrap();
        let one = &s.members[1];
        assert_eq!(one.state, "recovering");
        assert!(one.answered && one.error.is_none());
        assert_eq!((one.keys, one.bytes), (None, None), "none loaded yet");
        assert_eq!(
            one.recovering,
            Some(RecoveryProgress {
                read: GIB + GIB / 2,
                total: 4 * GIB + GIB / 2
            })
        );
        assert_eq!(s.members[0].recovering, None);
        assert_eq!(s.members[2].state, "down");

        let text = s.text();
        assert!(
            text.contains(
                "\n  recovering: 1.50 GiB of 4.50 GiB (33%) (by worker: 0 25%, 1 100%)\n"
            ),
            "{text}"
        );
        assert_eq!(text.matches("recovering:").count(), 1, "{text}");
        let section = text.find("\nmember 1 (10.0.0.1:7001)").unwrap();
        assert!(text.find("  recovering: ").unwrap() > section, "{text}");
        assert!(
            text.contains(
                "warning: member 1 (10.0.0.1:7001) is recovering its records from its data dir: \
                 1.50 GiB of 4.50 GiB (33%); it serves none of its slots until they are loaded"
            ),
            "{text}"
        );
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("1 ") && l.contains("10.0.0.1:7001"))
            .unwrap();
        assert!(row.contains("recovering"), "{row}");

        let j: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(j["members"][1]["state"], "recovering");
        assert_eq!(
            j["members"][1]["recovering"],
            serde_json::json!({"read": GIB + GIB / 2, "total": 4 * GIB + GIB / 2})
        );
        assert_eq!(
            j["members"][1]["workers"][1]["recovering"],
            serde_json::json!({"read": GIB / 2, "total": GIB / 2})
        );
        assert_eq!(j["members"][0]["recovering"], serde_json::Value::Null);
        let w = j["members"][0]["workers"][0].as_object().unwrap();
        assert!(!w.contains_key("recovering"), "{w:?}");
    }

    #[test]
    fn a_recovering_contact_gives_its_map_and_its_progress() {
        let mut a = fake::admin("10.0.0.1:7000", |at, req| {
            Ok(match (req, at.to_string().as_str()) {
                (ControlRequest::Map, _) => fake::map_reply(&fake::map()),
                (_, "10.0.0.1:7000") => recovering(MemberId(0), &[(0, 0), (10, 100)]),
                (_, _) => fake::status(MemberId(1), None),
            })
        });
        let s = gather(&mut a).unwrap();
        assert_eq!(s.members[0].state, "recovering");
        // A worker that has not counted its files yet: no share, and no
        // division by zero.
        assert!(
            s.text()
                .contains("\n  recovering: 10 B of 100 B (10%) (by worker: 0 -, 1 10%)\n"),
            "{}",
            s.text()
        );
        assert_eq!(
            recovery_text(&RecoveryProgress::default()),
            "files not counted yet"
        );
    }
}
