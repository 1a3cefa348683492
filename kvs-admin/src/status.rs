//! `status`: the contact's map and every member's figures, gathered into one
//! [`ClusterStatus`], printed as text or as JSON.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::ops::Range;

use kvs_proto::control::{
    CopyStatus, DiskStatus, GroupView, ImportStatus, MemberStatus, MigrationStatus,
    RecoveryProgress, WorkerStatus,
};
use kvs_proto::shard::Run;
use kvs_proto::{ClusterId, MemberId, ShardMap};
use serde::Serialize;

use crate::admin::{Admin, Control};
use crate::error::AdminError;
use crate::progress;
use crate::render::{self, Align, Table};

mod backups;
pub use backups::SlotRun;
mod disk;
pub use disk::DiskSum;
mod recovering;
pub use recovering::recovery_text;

/// The most slot ranges a worker's line lists.
const MAX_RANGES: usize = 8;

/// The cluster as the contact's map describes it and its members report it.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStatus {
    /// The cluster's id (none if no member answered with one).
    pub cluster_id: Option<ClusterId>,
    /// The member that leads the control group, by the most recent view
    /// among the answers.
    pub leader: Option<MemberId>,
    /// The control group's term in that view.
    pub term: Option<u64>,
    /// The member asked for the map.
    pub contact: SocketAddr,
    /// The contact's map version.
    pub map_version: u32,
    /// The cluster's slot count.
    pub slots: u32,
    /// Copies of each slot the cluster keeps (a primary and `replicas - 1`
    /// backups), by the most recent view.
    pub replicas: Option<u8>,
    /// Slots with fewer ready copies than `replicas`, by that view.
    pub under_replicated_slots: Option<u32>,
    /// Every member of the map, by id.
    pub members: Vec<MemberView>,
    /// The contact's map run by run: each run's primary and backups.
    pub slot_ranges: Vec<SlotRun>,
    /// The migration in progress or the last one, from the most recent
    /// view (none if no member answered, or none has run).
    pub migration: Option<MigrationStatus>,
}

/// One member: what the map says and what it answered.
#[derive(Debug, Clone, Serialize)]
pub struct MemberView {
    pub member: MemberId,
    /// Where it was asked.
    pub addr: SocketAddr,
    /// `"up"`, `"down"` (the group counts it up, but it did not answer
    /// here), `"failed"` (the group's leader lost touch with it),
    /// `"left"` (forgotten) or `"recovering"` (it answered that it is
    /// loading its records from its data dir, whatever the group says).
    pub state: String,
    /// Whether it votes in the control group.
    pub voter: bool,
    /// Its zone (host or rack), if it gave one.
    pub zone: Option<String>,
    /// Whether it was drained (and has not restarted since), by the most
    /// recent view: it takes no slots and no copies.
    pub drained: bool,
    /// Whether it holds its lease (serves its slots), as it says.
    pub lease: Option<bool>,
    /// Whether it answered.
    pub answered: bool,
    /// Why it did not.
    pub error: Option<String>,
    /// The map version it serves by.
    pub map_version: Option<u32>,
    /// The member id it answered as (the map's, unless something is wrong).
    pub answered_as: Option<MemberId>,
    /// Slots the contact's map gives it.
    pub map_slots: u32,
    /// Slots it holds a backup of, by the contact's map.
    pub backup_slots: u32,
    /// Slots it owns by its own count.
    pub slots: Option<u32>,
    /// Keys of the slots it is primary of.
    pub keys: Option<u64>,
    /// Keys it holds as a backup of other members' slots.
    pub backup_keys: Option<u64>,
    /// Heap bytes its records take (backup copies included).
    pub bytes: Option<u64>,
    /// Per worker (as it reports them, else as the map has them).
    pub workers: Vec<WorkerView>,
    /// Slots the map has it still importing, and from whom.
    pub importing: Vec<ImportRange>,
    /// The imports it runs as a migration's target.
    pub imports: Vec<ImportStatus>,
    /// The copies arriving at it as a new backup.
    pub copies: Vec<CopyStatus>,
    /// While it loads its records from its data dir: bytes its workers
    /// read of their total, summed (`None` once it serves, or if it did
    /// not answer).
    pub recovering: Option<RecoveryProgress>,
}

/// One worker of a member.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerView {
    /// Its number.
    pub worker: u16,
    /// Slots it owns by its own count.
    pub slots: Option<u32>,
    /// The slots the map gives it, as inclusive ranges.
    pub ranges: Vec<Span>,
    /// Keys it holds.
    pub keys: Option<u64>,
    /// Heap bytes its records take.
    pub bytes: Option<u64>,
    /// Its records on disk: logs and snapshots (absent with `durability =
    /// "none"`, or when it did not answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskStatus>,
    /// While its member recovers: how far it got through its snapshot and
    /// logs (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovering: Option<RecoveryProgress>,
}

/// An inclusive range of slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    /// The first slot.
    pub first: u32,
    /// The last slot.
    pub last: u32,
}

/// Slots a member imports from another, per the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ImportRange {
    /// The first slot.
    pub first: u32,
    /// The last slot.
    pub last: u32,
    /// The member they come from.
    pub from: MemberId,
}

/// Asks the contact for the map and its figures, then every other member
/// for theirs. Only a contact that does not give its map is an error;
/// members that do not answer are recorded as such. Members the contact's
/// view of the control group marks failed or left are not asked (a host
/// that is down could hold each request for the whole timeout), so the
/// command answers within about one timeout per member that is down but
/// not yet marked failed.
pub fn gather<C: Control>(admin: &mut Admin<C>) -> Result<ClusterStatus, AdminError> {
    let map = admin.map()?;
    let mut own = admin.status(admin.contact()).ok();
    let view = own.as_ref().and_then(|s| s.group.clone());
    let statuses: Vec<(SocketAddr, Result<MemberStatus, AdminError>)> = map
        .member_ids()
        .zip(map.members())
        .map(|(id, m)| {
            let addr = admin.reach(m.addr);
            if let Some(s) = own.take_if(|s| s.member == id) {
                return (addr, Ok(s));
            }
            let state = view
                .as_ref()
                .and_then(|g| g.members.iter().find(|x| x.id == id))
                .map(|x| x.state.as_str());
            match state {
                Some("failed") => (addr, Err(AdminError::NotAsked { state: "failed" })),
                Some("left") => (addr, Err(AdminError::NotAsked { state: "left" })),
                _ => (addr, admin.status(addr)),
            }
        })
        .collect();
    Ok(assemble(admin.contact(), &map, statuses))
}

/// The status from the map and the members' answers (in member order).
pub fn assemble(
    contact: SocketAddr,
    map: &ShardMap,
    answers: Vec<(SocketAddr, Result<MemberStatus, AdminError>)>,
) -> ClusterStatus {
    let runs = map.runs();
    let view = latest_view(&answers);
    let migration = migration_in_view(&answers, view.as_ref());
    let members = (0u16..)
        .map(MemberId)
        .zip(answers)
        .map(|(i, (addr, answer))| member_view(i, addr, answer, map, &runs, view.as_ref()))
        .collect();
    ClusterStatus {
        cluster_id: view.as_ref().map(|g| g.cluster_id),
        leader: view.as_ref().and_then(|g| g.leader),
        term: view.as_ref().map(|g| g.term),
        contact,
        map_version: map.version(),
        slots: map.slots(),
        replicas: view.as_ref().map(|g| g.replicas),
        under_replicated_slots: view.as_ref().map(|g| g.under_replicated_slots),
        members,
        slot_ranges: backups::slot_runs(map),
        migration,
    }
}

/// The most recent view of the control group among the answers.
fn latest_view(answers: &[(SocketAddr, Result<MemberStatus, AdminError>)]) -> Option<GroupView> {
    answers
        .iter()
        .filter_map(|(_, a)| a.as_ref().ok())
        .filter_map(|s| s.group.clone())
        .max_by_key(|g| (g.term, g.applied))
}

/// The migration as the first answer that shares `view` (the most recent
/// view of the group) reports it.
fn migration_in_view(
    answers: &[(SocketAddr, Result<MemberStatus, AdminError>)],
    view: Option<&GroupView>,
) -> Option<MigrationStatus> {
    answers
        .iter()
        .filter_map(|(_, a)| a.as_ref().ok())
        .filter(|s| {
            s.group.as_ref().map(|g| (g.term, g.applied)) == view.map(|g| (g.term, g.applied))
        })
        .find_map(|s| s.migration.clone())
}

/// Member `id` (at `addr`) as the map, the group's `view` and its `answer`
/// describe it.
fn member_view(
    id: MemberId,
    addr: SocketAddr,
    answer: Result<MemberStatus, AdminError>,
    map: &ShardMap,
    runs: &[Run],
    view: Option<&GroupView>,
) -> MemberView {
    let in_view = view.and_then(|g| g.members.iter().find(|m| m.id == id));
    let mut v = MemberView {
        member: id,
        addr,
        state: in_view.map_or("up", |m| m.state.as_str()).to_string(),
        voter: in_view.is_some_and(|m| m.voter),
        zone: in_view.and_then(|m| m.zone.clone()),
        drained: in_view.is_some_and(|m| m.drained),
        lease: None,
        answered: false,
        error: None,
        map_version: None,
        answered_as: None,
        map_slots: map.slots_of(id),
        backup_slots: map.backup_slots_of(id),
        slots: None,
        keys: None,
        backup_keys: None,
        bytes: None,
        workers: Vec::new(),
        importing: importing(runs, id),
        imports: Vec::new(),
        copies: Vec::new(),
        recovering: None,
    };
    match answer {
        Ok(s) => add_answer(&mut v, s, runs),
        // A forgotten member is not expected to answer.
        Err(_) if v.state == "left" => {}
        Err(e) => {
            let map_workers = map.members().get(id.index()).map_or(0, |m| m.workers);
            add_silence(&mut v, &e, map_workers, runs);
        }
    }
    v
}

/// The slots of member `id`'s worker `w` by the map's `runs`, merged into
/// spans.
fn worker_spans(runs: &[Run], id: MemberId, w: u16) -> Vec<Span> {
    let r: Vec<Range<u32>> = runs
        .iter()
        .filter(|r| r.owner.member == id && r.owner.worker == w)
        .map(|r| r.slots.clone())
        .collect();
    render::merge(&r)
        .into_iter()
        .map(|r| Span {
            first: r.start,
            last: r.end - 1,
        })
        .collect()
}

/// The slot ranges member `id` imports, by the map's `runs`.
fn importing(runs: &[Run], id: MemberId) -> Vec<ImportRange> {
    runs.iter()
        .filter(|r| r.owner.member == id)
        .filter_map(|r| {
            r.from.map(|from| ImportRange {
                first: r.slots.start,
                last: r.slots.end - 1,
                from,
            })
        })
        .collect()
}

/// Fills `v` with its member's answer `s`: its figures, and per worker
/// its slots (the ranges by the map's `runs`), keys and bytes; or, while
/// it recovers, how far each worker got (no keys are loaded yet).
fn add_answer(v: &mut MemberView, s: MemberStatus, runs: &[Run]) {
    let id = v.member;
    v.answered = true;
    let recovering = s.recovering;
    v.lease = s.group.as_ref().map(|g| g.lease);
    v.map_version = Some(s.map_version);
    v.answered_as = Some(s.member);
    v.slots = Some(s.workers.iter().map(|w| w.slots).sum());
    v.keys = Some(s.workers.iter().map(primary_keys).sum());
    v.backup_keys = Some(s.workers.iter().map(|w| w.backup_keys).sum());
    v.bytes = Some(s.workers.iter().map(|w| w.bytes).sum());
    v.workers = s
        .workers
        .iter()
        .enumerate()
        .map(|(w, ws)| WorkerView {
            worker: w as u16,
            slots: Some(ws.slots),
            ranges: worker_spans(runs, id, w as u16),
            keys: Some(primary_keys(ws)),
            bytes: Some(ws.bytes),
            disk: ws.disk,
            recovering: ws.recovering,
        })
        .collect();
    v.imports = s.imports;
    v.copies = s.copies;
    if recovering {
        v.state = "recovering".into();
        v.recovering = Some(RecoveryProgress::sum(
            s.workers.iter().filter_map(|w| w.recovering),
        ));
        (v.keys, v.backup_keys, v.bytes) = (None, None, None);
        for w in &mut v.workers {
            (w.keys, w.bytes) = (None, None);
        }
    }
}

/// Fills `v` for a member that did not answer (`e`): an up member is down,
/// and its `map_workers` workers show only the map's ranges.
fn add_silence(v: &mut MemberView, e: &AdminError, map_workers: u16, runs: &[Run]) {
    if v.state == "up" {
        v.state = "down".into();
    }
    v.error = Some(e.to_string());
    v.workers = (0..map_workers)
        .map(|w| WorkerView {
            worker: w,
            slots: None,
            ranges: worker_spans(runs, v.member, w),
            keys: None,
            bytes: None,
            disk: None,
            recovering: None,
        })
        .collect();
}

impl ClusterStatus {
    /// The members that need an operator's eye: not answering, on another
    /// map version than the contact, or answering as another member.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.leader.is_none() && self.cluster_id.is_some() {
            w.push("the control group has no leader: no map can change (is a majority of its voters up?)".into());
        }
        for m in &self.members {
            if m.state == "left" {
                continue;
            }
            if let Some(e) = &m.error {
                w.push(format!(
                    "member {} ({}) did not answer: {e}",
                    m.member, m.addr
                ));
            }
            if m.state == "failed" {
                w.push(format!(
                    "member {} ({}) is marked failed: its slots are unavailable until it \
                     returns, or it is forgotten (kvs-admin forget {} --force loses their records)",
                    m.member, m.addr, m.member
                ));
            }
            w.extend(recovering::warning(m));
            if m.lease == Some(false) {
                w.push(format!(
                    "member {} ({}) holds no lease: it serves none of its slots now",
                    m.member, m.addr
                ));
            }
            if let Some(v) = m.map_version.filter(|&v| v != self.map_version) {
                w.push(format!(
                    "member {} ({}) serves map version {v}, the contact has {}",
                    m.member, m.addr, self.map_version
                ));
            }
            if let Some(a) = m.answered_as.filter(|&a| a != m.member) {
                w.push(format!(
                    "member {} ({}) answered as member {a}",
                    m.member, m.addr
                ));
            }
        }
        w
    }

    /// The status for people.
    pub fn text(&self) -> String {
        let mut out = self.summary_text();
        out.push('\n');
        out.push_str(&self.members_table());
        for m in self.members.iter().filter(|m| m.state != "left") {
            out.push('\n');
            out.push_str(&self.member_text(m));
        }
        if let Some(mig) = &self.migration {
            out.push('\n');
            out.push_str(&migration_text(mig, &self.members));
        }
        out.push_str(&self.imports_text());
        out
    }

    /// The cluster's line, the control group's, the replicas' and the
    /// warnings.
    fn summary_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "cluster {}: map version {}, {} slots, {} member{} (asked {})",
            self.cluster_id.map_or("?".into(), |c| c.to_string()),
            self.map_version,
            self.slots,
            self.members.len(),
            if self.members.len() == 1 { "" } else { "s" },
            self.contact
        );
        let _ = writeln!(
            out,
            "control group: {}",
            match (self.leader, self.term) {
                (Some(l), Some(t)) => format!("member {l} leads (term {t})"),
                _ => "no leader".to_string(),
            }
        );
        out.push_str(&self.replicas_text());
        for w in self.warnings() {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }

    /// The table of the members, one row each.
    fn members_table(&self) -> String {
        let mut t = Table::new(&[
            ("MEMBER", Align::Right),
            ("ADDRESS", Align::Left),
            ("MAP", Align::Right),
            ("WORKERS", Align::Right),
            ("SLOTS", Align::Right),
            ("KEYS", Align::Right),
            ("BYTES", Align::Right),
            ("STATE", Align::Left),
            ("", Align::Left),
        ]);
        for m in &self.members {
            let mut note = Vec::new();
            if self.leader == Some(m.member) {
                note.push("leader");
            } else if m.voter {
                note.push("voter");
            }
            if m.drained {
                note.push("drained");
            }
            if m.lease == Some(false) {
                note.push("no lease");
            }
            let note = note.join(", ");
            t.row(vec![
                m.member.to_string(),
                m.addr.to_string(),
                opt(m.map_version),
                m.workers.len().to_string(),
                m.slots.unwrap_or(m.map_slots).to_string(),
                opt(m.keys),
                m.bytes.map_or("-".to_string(), render::bytes),
                m.state.clone(),
                note,
            ]);
        }
        t.render("")
    }

    /// Member `m`'s section: its head line, its workers' table, its
    /// records on disk and the ranges it imports.
    fn member_text(&self, m: &MemberView) -> String {
        let mut out = String::new();
        let mut head = format!("member {} ({})", m.member, m.addr);
        if self.leader == Some(m.member) {
            head.push_str(", leader");
        }
        if let Some(z) = &m.zone {
            let _ = write!(head, ", zone {z}");
        }
        if m.drained {
            head.push_str(", drained");
        }
        if self.replicas.is_some_and(|r| r > 1) || m.backup_slots > 0 {
            let _ = write!(
                head,
                ", backs up {} slot{}",
                m.backup_slots,
                if m.backup_slots == 1 { "" } else { "s" }
            );
            if let Some(k) = m.backup_keys.filter(|_| m.backup_slots > 0) {
                let _ = write!(head, " ({k} keys)");
            }
        }
        let _ = writeln!(out, "{head}");
        out.push_str(&workers_table(&m.workers));
        out.push_str(&disk::line(&m.workers));
        out.push_str(&recovering::line(m));
        for i in &m.importing {
            let _ = writeln!(
                out,
                "  importing {} from member {}",
                render::slot_range(&(i.first..i.last + 1)),
                i.from
            );
        }
        out
    }

    /// The imports the targets report, as a table after a blank line;
    /// nothing without any.
    fn imports_text(&self) -> String {
        let imports: Vec<(MemberId, &ImportStatus)> = self
            .members
            .iter()
            .flat_map(|m| m.imports.iter().map(move |i| (m.member, i)))
            .collect();
        if imports.is_empty() {
            return String::new();
        }
        let mut out = String::from("\nimports at targets\n");
        let mut t = Table::new(&[
            ("TARGET", Align::Right),
            ("FROM", Align::Right),
            ("SLOTS", Align::Right),
            ("RECORDS", Align::Right),
            ("BYTES", Align::Right),
            ("RATE", Align::Right),
            ("ELAPSED", Align::Right),
            ("RETRIES", Align::Right),
        ]);
        for (target, i) in imports {
            t.row(vec![
                target.to_string(),
                i.from.to_string(),
                i.slots.to_string(),
                i.records.to_string(),
                render::bytes(i.bytes),
                render::rate(i.bytes, i.seconds),
                render::duration(i.seconds),
                i.retries.to_string(),
            ]);
        }
        out.push_str(&t.render("  "));
        out
    }

    /// `replicas N, under-replicated slots M`, and while M > 0 the ranges
    /// short of ready backups (by the contact's map); nothing without a
    /// view of the control group.
    fn replicas_text(&self) -> String {
        let (Some(r), Some(under)) = (self.replicas, self.under_replicated_slots) else {
            return String::new();
        };
        let mut out = format!("replicas {r}, under-replicated slots {under}\n");
        if under > 0 {
            let short = backups::short_ranges(&self.slot_ranges, r);
            out.push_str(&backups::short_text(&short, MAX_RANGES));
        }
        let copies: Vec<(MemberId, &CopyStatus)> = self
            .members
            .iter()
            .flat_map(|m| m.copies.iter().map(move |c| (m.member, c)))
            .collect();
        if !copies.is_empty() {
            out.push_str("copies to new backups\n");
            let mut t = Table::new(&[
                ("BACKUP", Align::Right),
                ("FROM", Align::Right),
                ("SLOTS", Align::Left),
                ("DONE", Align::Right),
                ("BYTES", Align::Right),
                ("RATE", Align::Right),
                ("ELAPSED", Align::Right),
            ]);
            for (backup, c) in copies {
                let done = (c.bytes as f64 / c.total_bytes.max(1) as f64).min(1.0);
                t.row(vec![
                    backup.to_string(),
                    c.from.to_string(),
                    render::slot_range(&(c.first..c.end)),
                    format!("{:.0}%", done * 100.0),
                    format!(
                        "{} of {}",
                        render::bytes(c.bytes),
                        render::bytes(c.total_bytes)
                    ),
                    render::rate(c.bytes, c.seconds),
                    render::duration(c.seconds),
                ]);
            }
            out.push_str(&t.render("  "));
        }
        out
    }

    /// The status as one JSON document.
    pub fn json(&self) -> String {
        // Plain data (strings, numbers, options and vectors of them) always
        // serializes.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// A member's workers as a table (indented under its head line): each
/// one's slots (in parentheses: the map's count, when it did not answer),
/// ranges, keys and bytes.
fn workers_table(workers: &[WorkerView]) -> String {
    let mut t = Table::new(&[
        ("WORKER", Align::Right),
        ("SLOTS", Align::Right),
        ("RANGES", Align::Left),
        ("KEYS", Align::Right),
        ("BYTES", Align::Right),
    ]);
    for w in workers {
        let ranges: Vec<Range<u32>> = w.ranges.iter().map(|s| s.first..s.last + 1).collect();
        t.row(vec![
            w.worker.to_string(),
            w.slots
                .map_or_else(|| format!("({})", spans_len(&w.ranges)), |s| s.to_string()),
            render::slot_ranges(&ranges, MAX_RANGES),
            opt(w.keys),
            w.bytes.map_or("-".to_string(), render::bytes),
        ]);
    }
    t.render("  ")
}

/// The keys of the slots a worker is primary of (it reports its backup
/// copies among its keys, and apart).
fn primary_keys(w: &WorkerStatus) -> u64 {
    w.keys.saturating_sub(w.backup_keys)
}

/// The migration for people: its state, a progress bar, what moved
/// and what is left.
fn migration_text(m: &MigrationStatus, members: &[MemberView]) -> String {
    let state = if let Some(e) = &m.error {
        format!("failed: {e}")
    } else if m.cancelled {
        if m.finished {
            "cancelled".to_string()
        } else {
            "cancelling".to_string()
        }
    } else if m.finished {
        "finished".to_string()
    } else {
        "running".to_string()
    };
    let mut out = format!("migration: {state}\n");
    let _ = writeln!(out, "  {}", progress::summary(m, 30));
    if let Some(why) = m.stalled.as_ref().filter(|_| !m.finished) {
        let _ = writeln!(out, "  stalled: {why}");
    }
    if !m.finished && !m.moves.is_empty() {
        out.push_str("  moves to run (the first one now):\n");
        for &(first, end, to) in &m.moves {
            let addr = members
                .get(to.index())
                .map_or(String::new(), |v| format!(" ({})", v.addr));
            let _ = writeln!(
                out,
                "    {} -> member {to}{addr}",
                render::slot_range(&(first..end))
            );
        }
    }
    out
}

/// How many slots inclusive spans cover.
fn spans_len(s: &[Span]) -> u64 {
    s.iter()
        .map(|s| u64::from(s.last) - u64::from(s.first) + 1)
        .sum()
}

/// A figure, or `-` if unknown.
fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake;
    use kvs_client::ControlError;
    use kvs_proto::control::ControlRequest;

    #[test]
    fn every_member_is_asked_where_the_map_says_and_silent_ones_do_not_stop_it() {
        let mut a = fake::admin("10.0.0.1:7000", |addr, req| match req {
            ControlRequest::Map => Ok(fake::map_reply(&fake::map())),
            _ if addr == fake::addr("10.0.0.3:7000") => Err(ControlError::Timeout {
                addr,
                after: std::time::Duration::from_secs(1),
            }),
            _ => Ok(fake::status(MemberId(u16::from(addr.port() == 7001)), None)),
        });
        let s = gather(&mut a).unwrap();
        let asked: Vec<String> = a
            .client()
            .asked
            .iter()
            .map(|(a, _)| a.to_string())
            .collect();
        assert_eq!(
            asked,
            [
                "10.0.0.1:7000",
                "10.0.0.1:7000",
                "10.0.0.1:7001",
                "10.0.0.3:7000"
            ]
        );
        assert_eq!(
            s.members.iter().map(|m| m.answered).collect::<Vec<_>>(),
            [true, true, false]
        );
        assert_eq!(
            s.members[2].error.as_deref(),
            Some("10.0.0.3:7000: no answer within 1s")
        );
        // A contact that does not give its map is the error.
        let mut a = fake::admin("10.0.0.1:7000", |addr, _| {
            Err(ControlError::Server {
                addr,
                message: "malformed answer: short".into(),
            })
        });
        assert_eq!(
            gather(&mut a).unwrap_err().to_string(),
            "10.0.0.1:7000: malformed answer: short"
        );
    }
    use kvs_proto::Member;

    fn map() -> ShardMap {
        let mut m = ShardMap::single("10.0.0.1:7000".parse().unwrap(), 64, 2).unwrap();
        m.add_member(Member {
            addr: "0.0.0.0:7001".parse().unwrap(),
            workers: 1,
            bulk_port: 0,
        })
        .unwrap();
        m.add_member(Member {
            addr: "10.0.0.3:7000".parse().unwrap(),
            workers: 1,
            bulk_port: 0,
        })
        .unwrap();
        m.assign(0..8, MemberId(1), Some(MemberId(0))).unwrap();
        m.set_version(4);
        m
    }

    fn st(member: MemberId, version: u32, workers: &[(u32, u64, u64)]) -> MemberStatus {
        MemberStatus {
            member,
            map_version: version,
            workers: workers
                .iter()
                .map(|&(slots, keys, bytes)| WorkerStatus {
                    slots,
                    keys,
                    backup_keys: 0,
                    bytes,
                    disk: None,
                    recovering: None,
                })
                .collect(),
            imports: Vec::new(),
            migration: None,
            held: (0, 0),
            copies: Vec::new(),
            bulk_served: (0, 0),
            group: None,
            drained: false,
            recovering: false,
        }
    }

    #[test]
    fn the_status_puts_the_map_beside_the_answers_and_flags_the_odd_ones() {
        let contact: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let mut keeper = st(MemberId(0), 4, &[(24, 100, 2048), (32, 50, 1024)]);
        let member = |id: MemberId, state: &str| kvs_proto::control::GroupMember {
            id,
            addr: map().members()[id.index()].addr,
            state: state.into(),
            voter: true,
            zone: (id == MemberId(1)).then(|| "rack-b".to_string()),
            drained: false,
        };
        keeper.group = Some(GroupView {
            cluster_id: ClusterId::from_bytes([0xab; 16]),
            leader: Some(MemberId(0)),
            term: 2,
            commit: 9,
            applied: 9,
            lease: true,
            replicas: 1,
            under_replicated_slots: 0,
            members: vec![
                member(MemberId(0), "up"),
                member(MemberId(1), "up"),
                member(MemberId(2), "up"),
            ],
        });
        keeper.migration = Some(MigrationStatus {
            moves: vec![(0, 8, MemberId(1))],
            slots_total: 8,
            slots_done: 2,
            slots_moving: 6,
            records: 10,
            bytes: 4_000_000,
            seconds: 2.0,
            started_ms: 0,
            finished: false,
            cancelled: false,
            error: None,
            stalled: Some("waiting for member 1, the chunk's target, marked failed".into()),
        });
        let mut one = st(MemberId(1), 3, &[(8, 5, 100)]);
        // Two of its five keys are backup copies of member 0's slots.
        one.workers[0].backup_keys = 2;
        one.copies.push(CopyStatus {
            from: MemberId(0),
            first: 8,
            end: 16,
            records: 3,
            bytes: 1_000_000,
            total_bytes: 4_000_000,
            seconds: 0.5,
        });
        one.imports.push(ImportStatus {
            from: MemberId(0),
            slots: 6,
            records: 7,
            bytes: 3_000_000,
            seconds: 1.5,
            retries: 1,
        });
        let s = assemble(
            contact,
            &map(),
            vec![
                (contact, Ok(keeper)),
                ("10.0.0.1:7001".parse().unwrap(), Ok(one)),
                (
                    "10.0.0.3:7000".parse().unwrap(),
                    Err(AdminError::KeeperLoop("x".into())),
                ),
            ],
        );
        assert_eq!((s.map_version, s.slots, s.members.len()), (4, 64, 3));
        assert_eq!(s.members[0].slots, Some(56));
        assert_eq!(s.members[0].keys, Some(150));
        assert_eq!(
            s.members[0].workers[0].ranges,
            [Span { first: 8, last: 31 }]
        );
        assert_eq!(
            s.members[1].importing,
            [ImportRange {
                first: 0,
                last: 7,
                from: MemberId(0)
            }]
        );
        assert!(!s.members[2].answered);
        assert_eq!(s.members[2].workers.len(), 1);
        assert!(s.migration.is_some());
        let w = s.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("member 1 (10.0.0.1:7001) serves map version 3, the contact has 4"));
        assert!(w[1].contains("member 2 (10.0.0.3:7000) did not answer: no keeper found: x"));

        let text = s.text();
        assert!(
            text.starts_with(&format!(
                "cluster {}: map version 4, 64 slots, 3 members (asked 10.0.0.1:7000)\n\
                 control group: member 0 leads (term 2)",
                "ab".repeat(16)
            )),
            "{text}"
        );
        assert!(
            text.contains("member 0 (10.0.0.1:7000), leader\n"),
            "{text}"
        );
        assert!(
            text.contains("member 1 (10.0.0.1:7001), zone rack-b\n"),
            "{text}"
        );
        assert!(
            text.contains("\nreplicas 1, under-replicated slots 0\n"),
            "{text}"
        );
        assert!(text.contains("  importing 0-7 from member 0"), "{text}");
        assert!(text.contains("migration: running"), "{text}");
        assert!(
            text.contains("  stalled: waiting for member 1, the chunk's target, marked failed\n"),
            "{text}"
        );
        assert!(text.contains("0-7 -> member 1 (10.0.0.1:7001)"), "{text}");
        assert!(text.contains("2/8 slots"), "{text}");
        assert!(text.contains("imports at targets"), "{text}");
        assert!(text.contains("copies to new backups"), "{text}");
        assert!(text.contains("977 KiB of 3.81 MiB"), "{text}");
        assert!(text.contains("25%"), "{text}");
        assert!(text.contains("2.00 MB/s"), "{text}");
        assert!(text.contains("down"), "{text}");

        let j: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(j["cluster_id"], "ab".repeat(16));
        assert_eq!(j["leader"], 0);
        assert_eq!(j["members"][0]["state"], "up");
        assert_eq!(j["members"][0]["voter"], true);
        assert_eq!(j["members"][1]["zone"], "rack-b");
        assert_eq!(j["replicas"], 1);
        assert_eq!(j["under_replicated_slots"], 0);
        assert_eq!(j["members"][2]["state"], "down");
        assert_eq!(j["map_version"], 4);
        assert_eq!(j["members"][0]["slots"], 56);
        assert_eq!(j["members"][0]["workers"][1]["ranges"][0]["first"], 32);
        assert_eq!(j["members"][2]["answered"], false);
        assert_eq!(j["members"][2]["keys"], serde_json::Value::Null);
        assert_eq!(j["migration"]["slots_done"], 2);
        assert_eq!(j["members"][1]["drained"], false);
        assert_eq!(j["members"][1]["copies"][0]["total_bytes"], 4_000_000);
        assert_eq!(j["members"][1]["keys"], 3, "keys it serves");
        assert_eq!(j["members"][1]["backup_keys"], 2);
        assert_eq!(j["members"][1]["workers"][0]["keys"], 3);
    }

    #[test]
    fn drained_members_are_shown_by_the_newest_view() {
        let contact: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let view = |applied: u64, drained: bool| {
            let mut g = fake::group(2, 0, applied);
            g.members[1].drained = drained;
            g
        };
        // Member 1's own view is older: the contact's newer one counts.
        let mut zero = st(MemberId(0), 4, &[(56, 0, 0), (0, 0, 0)]);
        zero.group = Some(view(9, true));
        let mut one = st(MemberId(1), 4, &[(8, 0, 0)]);
        one.group = Some(view(8, false));
        let two = st(MemberId(2), 4, &[(0, 0, 0)]);
        let s = assemble(
            contact,
            &map(),
            vec![
                (contact, Ok(zero)),
                ("10.0.0.1:7001".parse().unwrap(), Ok(one)),
                ("10.0.0.3:7000".parse().unwrap(), Ok(two)),
            ],
        );
        assert_eq!(
            s.members.iter().map(|m| m.drained).collect::<Vec<_>>(),
            [false, true, false]
        );
        let text = s.text();
        assert!(
            text.contains("\nmember 1 (10.0.0.1:7001), drained, backs up 0 slots\n"),
            "{text}"
        );
        assert!(
            text.contains("\nmember 0 (10.0.0.1:7000), leader, backs up 0 slots\n"),
            "{text}"
        );
        assert!(
            !text.contains("member 2 (10.0.0.3:7000), drained"),
            "{text}"
        );
        let j: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(j["members"][0]["drained"], false);
        assert_eq!(j["members"][1]["drained"], true);
        assert_eq!(j["members"][2]["drained"], false);
    }
}
